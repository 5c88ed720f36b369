"""The model card's "Validation status" section, written from a report alone.

A card that is written by hand can say more than was shown; this one can only say
what the report's passed checks recorded. Every clause below has a condition, and
when the condition does not hold the clause is left out, never softened.

Status words (the seed card's, not the level titles): ``structure`` -> "checkpoint
structure"; ``format`` *and* ``reproduction`` passed -> "exact format reproduction"
(the seed's one phrase for both; either alone is named by what it showed, so a card
never claims the format was reproduced exactly when the format level failed);
``load`` -> "loading"; ``smoke`` -> "smoke inference"; other levels by their titles.

What the runtime showed is read from the passed checks of passed levels; a failed level
proves nothing, even where one of its checks passed. The contract, for the load and smoke
suites' authors:

- **Log evidence** (the layout :func:`qualify.runtime.log_evidence.check_log_evidence` writes):
  a check's ``measured["items"]`` maps each profile ``[[evidence]]`` name to the record
  of what matched, ``{"line": str, "matches": int, "gb": [number, ...]}`` (``gb`` only
  for items with ``expected_gb``), or to ``None`` when nothing matched; its
  ``expected[name]`` holds the item's ``description`` and, for a line no source at hand
  prints, ``unverified``. The card claims each item whose line was found, in the words of
  its description and nothing else, so a card never states a line no passing evidence
  showed (no "detected ModelOpt MXFP8" unless an item showing it passed):

  - an item with ``unverified`` is claimed too (its line was in the log), marked as the
    model card's wording, which no source at hand prints;
  - a size item (``gb``): the size its description states is replaced by the size as the
    line printed it, number and unit ("1.20 GB of draft weights loaded" is claimed as
    "1.20 GiB of draft weights loaded" when vLLM printed GiB); the item is left out unless
    its ``gb`` values are one finite, non-negative number that the line prints with a unit;
  - ``speculative_request_completed`` (smoke): its claim is the word "speculative" in the
    request sentence below, whose token count is the request's, not its description's;
  - an item the report gives no description for is not claimed: there are no words for it;
  - ``modelopt_mxfp8_detected`` (load), when its line says ModelOpt MXFP8, adds the
    support sentence ("unsupported in vLLM builds that do not contain ... ModelOpt MXFP8").

- **Engine settings** (the layout :func:`qualify.serving.engine_config.engine_settings_evidence` writes): a
  passed load check's ``measured["engine_settings"]`` maps each setting the launch set (tensor and
  decode-context parallelism, the attention backends, the speculative method and tokens, the KV cache
  dtypes, the CUDA graph mode) to its record, whose ``status`` is ``agrees`` only when the runtime's log
  printed the launch's value. A condition of the card is claimed only when every setting that shows it
  agrees (:data:`SHOWN_BY`); the rest are listed after :data:`NOT_SHOWN_HEAD`, "set, not shown by the
  runtime" (with "not applied by the runtime's launcher" where its launcher said so). Without the record,
  nothing the launch set is claimed.

- **The smoke request**: a passed smoke check records ``measured["completion_tokens"]``
  (int > 0), or ``measured["completions"]``, a list of
  :meth:`qualify.serving.client.Completion.to_dict` records that all have the same
  ``completion_tokens``. The card writes "completed a <N>-token speculative request"
  (without "speculative" when no ``speculative_request_completed`` evidence passed).

Pure functions: a :class:`~qualify.report.model.Run` in, text out. :mod:`qualify.report.markdown`
shares the condition lines and the status head with this module.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from qualify.core import LEVEL_TITLES, SOURCE_NOT_VERIFIED, Status, Verdict
from qualify.report.conditions import passed_measured, run_runtime_conditions
from qualify.report.model import Check, Run
from qualify.report.near_ties import near_tie_note
from qualify.report.target import target_revision_note
from qualify.util.escape import escape_markdown

#: Levels that need the runtime; their conditions (target, image, GPUs, backends) only apply to them.
RUNTIME_LEVELS = ("load", "smoke", "acceptance", "paired", "losslessness", "throughput", "speedup")

#: The seed card's words for a level that passed.
CARD_WORDS: dict[str, str] = {
    **LEVEL_TITLES,
    # Said only when the format level did not also pass; with it, both are "exact format reproduction".
    "reproduction": "bit-exact reproduction from the source",
}
FORMAT_REPRODUCTION_WORDS = "exact format reproduction"

# Names of the profile's [[evidence]] items the card reads beyond their descriptions (see the module docstring).
QUANTIZATION_ITEM = "modelopt_mxfp8_detected"
SPECULATIVE_ITEM = "speculative_request_completed"

# What the card may say was detected, and the text a matched line must hold to say it.
_QUANTIZATION_WORDS = ((re.compile(r"(?i)\bmodelopt[\s_-]*mxfp8\b"), "ModelOpt MXFP8"),)
_SIZE = re.compile(r"\b(\d+(?:\.\d+)?)\s*(GiB|GB)\b")

#: Said of a claimed item whose line no source at hand prints (``unverified`` in the profile).
CARD_WORDING_NOTE = "the model card's wording; no source at hand prints this line"
#: What the list of claimed evidence items follows.
EVIDENCE_HEAD = "The runtime's log showed (each line found by a passed check):"

# The integration the support sentence names besides the detected quantization: what
# this harness qualifies (DFlash 2 drafts served by vLLM), not something a report measures.
SPECULATOR_WORDS = "DFlash 2"
RUNTIME_FAMILY = "vLLM"

_LAYOUT_WORDS = {"row-major-unswizzled": "row-major and unswizzled"}


# -- words ------------------------------------------------------------------------------


def join_words(items: list[str]) -> str:
    """"a", "a and b", "a, b, and c" (the seed's serial comma)."""
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def indefinite_article(n: int) -> str:
    """ "a" or "an" before a number read aloud: an 8-token, an 11-token, an 18-token, a 32-token."""
    digits = str(n)
    # 11 and 18 (and 11_000, 18_000_000, ...) are read "eleven", "eighteen" when their group has two digits.
    two_digit_lead = len(digits) % 3 == 2 and digits[:2] in ("11", "18")
    return "an" if digits.startswith("8") or two_digit_lead else "a"


# -- conditions -------------------------------------------------------------------------


def passed_check(run: Run, check_id: str) -> Check | None:
    """The check with this id if it, and its required level, passed; None otherwise.

    A failed level proves nothing, and a level recorded as measured only (a stand-in's
    plumbing, say) claims nothing.
    """
    for lvl in run.levels:
        if lvl.status is not Status.PASSED or not lvl.required:
            continue
        for c in lvl.checks:
            if c.id == check_id and c.status is Status.PASSED and c.evidence is not None:
                return c
    return None


def measured(run: Run, check_id: str, key: str) -> Any:
    c = passed_check(run, check_id)
    return c.evidence.measured.get(key) if c and c.evidence else None


def checkpoint_conditions(run: Run) -> list[str]:
    """What the checkpoint levels' verdict is about: which files, from which source, in which format."""
    c = run.profile.get("conditions") or {}
    ck, src = run.checkpoint, c.get("source") or {}
    lines = []
    what = ck.get("repo") or ck.get("path")
    if what:
        manifest = (f" (conversion_manifest.json sha256 {escape_markdown(ck['manifest_sha256'])})"
                    if ck.get("manifest_sha256") else "")
        lines.append(f"- Checkpoint: {escape_markdown(what)}{manifest}")
    lines += source_lines(run, pinned=src)
    f = c.get("format") or {}
    if f:
        excluded = ", ".join(escape_markdown(m) for m in f.get("excluded_modules") or []) or "none"
        lines.append(
            f"- Format: {f.get('element_dtype')} weights, biased E8M0 scales stored as {f.get('scale_dtype')}, "
            f"1x{f.get('block_size')} blocks along the input dimension, "
            f"{_LAYOUT_WORDS.get(str(f.get('scale_layout')), f.get('scale_layout'))} scales, excluded: {excluded}"
        )
    recipe = measured(run, "reproduction.quantized_tensors", "recipe")
    if recipe:
        lines.append(f"- Reproduced with the reference quantizer's '{escape_markdown(recipe)}' scale recipe")
    return lines


def source_identity(run: Run) -> dict[str, Any] | None:
    """The report's ``source.identity`` record, or None when no check read the source."""
    ident = run.source.get("identity")
    return ident if isinstance(ident, dict) else None


def source_lines(run: Run, *, pinned: dict[str, Any]) -> list[str]:
    """The source as this run proved it: the repository and revision verified, never merely the profile's pin.

    ``pinned`` is the profile's ``{"repo", "revision"}``. Without a verified identity the line says
    "source identity not verified"; a manifest naming another source than the verified one is said too.
    """
    ident = source_identity(run)
    e = escape_markdown  # the manifest's names come from the checkpoint: never raw into Markdown
    want = f"{e(pinned.get('repo'))} at {e(pinned.get('revision'))}" if pinned.get("repo") else None
    if ident is None:
        if run.source.get("path"):
            return [f"- Source: {SOURCE_NOT_VERIFIED}" + (f" (the profile pins {want})" if want else "")]
        return [f"- Source: {want}, pinned by the profile; not read by this run"] if want else []
    if ident.get("status") == "verified":
        lines = [f"- Source: {e(ident.get('repo'))} at immutable revision {e(ident.get('revision'))} "
                 f"(identity verified by {e(ident.get('method'))})"]
    elif ident.get("status") == "trusted":
        lines = [f"- Source: {SOURCE_NOT_VERIFIED}; the local folder was trusted on --trust-local-source"
                 + (f" as {want}" if want else "")]
    else:
        lines = [f"- Source: {SOURCE_NOT_VERIFIED}" + (f" (the profile pins {want})" if want else "")]
    named = (ident.get("manifest_repo"), ident.get("manifest_revision"))
    proven = (ident.get("repo"), ident.get("revision")) if ident.get("status") == "verified" else None
    if named[0] is not None and named != (proven or (pinned.get("repo"), pinned.get("revision"))):
        lines.append(f"- The manifest names source {e(named[0])} at {e(named[1])}, which is not the "
                     + ("verified source" if proven else "profile's pinned source"))
    return lines


def source_identity_note(run: Run) -> str | None:
    """Say so when the run went on with a source folder no proof established (--trust-local-source)."""
    ident = source_identity(run)
    if ident is None or ident.get("status") != "trusted":
        return None
    head = SOURCE_NOT_VERIFIED[:1].upper() + SOURCE_NOT_VERIFIED[1:]
    return (f"{head}: the source folder was trusted on --trust-local-source without proof that it is the pinned "
            "revision; prove it (profile digests, a hub cache snapshot or the hub) for a release.")


def ran_runtime_levels(run: Run) -> bool:
    """Whether the run's verdict speaks for a runtime: a runtime level it requires was recorded."""
    return any(lvl.name in RUNTIME_LEVELS and lvl.required for lvl in run.levels)


def stand_in_levels(run: Run) -> list[str]:
    """The levels the run's profile ran on a stand-in (qualify.profile.stand_in_levels), as the report recorded."""
    found = (run.profile.get("conditions") or {}).get("stand_in_levels")
    return [str(x) for x in found] if isinstance(found, list) else []


def stand_in_note(run: Run) -> str | None:
    """Say which recorded levels ran on a stand-in: their results test the harness, never the checkpoint."""
    ran = [lvl for lvl in run.levels if lvl.name in stand_in_levels(run) and lvl.checks]
    if not ran:
        return None
    # The two kinds of stand-in qualify.profile.stand_in_levels knows: the stand-in image, a local server's draft.
    parts = ["loading ran on the stand-in image, whose entrypoint prints load evidence"
             for lvl in ran if lvl.name == "load"]
    served = [lvl.title for lvl in ran if lvl.name != "load"]
    if served:
        parts.append(f"{join_words(served)} ran against local servers serving another draft than this checkpoint")
    return (f"Stand-in plumbing, not qualification: {'; '.join(parts)}. These show that the harness's runtime and "
            "serving paths work, not that a runtime loads or serves this checkpoint.")


# -- status -----------------------------------------------------------------------------


def status_head(run: Run, claimed: list[str], not_passed: list[str]) -> str:
    """The "Status:" sentence: ``claimed`` are the words for what passed, ``not_passed`` for what did not.

    Shared by report.md and the card, so both say "qualified" under exactly the same rule:
    the run's derived verdict.
    """
    if run.verdict is Verdict.QUALIFIED:
        return f"Status: qualified for {join_words(claimed)} under the following conditions:"
    head = "Status: not qualified."
    if run.interrupted:
        head += f" The run was interrupted ({escape_markdown(run.interrupted)}) before it finished."
    if run.errors:
        head += " The harness reported errors: " + "; ".join(escape_markdown(e) for e in run.errors) + "."
    if not_passed:
        head += f" Not passed: {join_words(not_passed)}."
    if claimed:
        head += f" Passed, but not sufficient for a release: {join_words(claimed)}."
    return head + " Conditions of this run:"


def card_words(run: Run) -> list[str]:
    """The seed's words for the levels that passed, in run order."""
    passed = [lvl.name for lvl in run.levels if lvl.required and lvl.status is Status.PASSED]
    words = []
    for name in passed:
        if {"format", "reproduction"} <= set(passed) and name in ("format", "reproduction"):
            if FORMAT_REPRODUCTION_WORDS not in words:
                words.append(FORMAT_REPRODUCTION_WORDS)
            continue
        words.append(CARD_WORDS.get(name, name))
    return words


def _not_passed_words(run: Run) -> list[str]:
    return [f"{CARD_WORDS.get(lvl.name, lvl.name)} ({lvl.status})" for lvl in run.levels
            if lvl.required and lvl.status is not Status.PASSED]


# -- runtime facts ----------------------------------------------------------------------


def evidence_item(run: Run, level: str, name: str) -> dict[str, Any] | None:
    """The record of evidence item ``name`` found by a passed check of the passed ``level``."""
    for m in passed_measured(run, level):
        items = m.get("items")
        record = items.get(name) if isinstance(items, dict) else None
        if isinstance(record, dict) and isinstance(record.get("line"), str) and record["line"].strip():
            return record
    return None


def _line(run: Run, level: str, name: str) -> str | None:
    record = evidence_item(run, level, name)
    return record["line"] if record else None


def detected_quantization(run: Run) -> str | None:
    line = _line(run, "load", QUANTIZATION_ITEM)
    if line is None:
        return None
    return next((words for pattern, words in _QUANTIZATION_WORDS if pattern.search(line)), None)


@dataclass(frozen=True)
class ShownItem:
    """One evidence item a passed check found, as the card claims it."""

    name: str
    level: str
    claim: str  # Markdown: the item's description, escaped, with a size as the log printed it
    card_wording: bool  # the profile marks its line unverified against source: the model card's wording


def _is_number(value: Any) -> bool:
    # bool is an int to Python, never a size or a count to a reader.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def printed_size(record: dict[str, Any]) -> str | None:
    """The size a size item's line printed ("1.20 GiB"), or None when it cannot be stated exactly.

    Every ``gb`` value must be the same finite, non-negative number (a log that printed two sizes
    says neither), and the line must print that number with its unit: 1.20 GiB is never 1.20 GB.
    """
    values = record.get("gb")
    values = values if isinstance(values, list) else [values]
    if not values or not all(_is_number(v) and v >= 0 for v in values) or len(set(values)) != 1:
        return None
    return next((f"{m.group(1)} {m.group(2)}" for m in _SIZE.finditer(record["line"])
                 if float(m.group(1)) == float(values[0])), None)


def _claim(description: str, size: str | None) -> str:
    """``description`` as Markdown, its stated size (or, stating none, an added one) being ``size``."""
    if size is None:
        return escape_markdown(description)
    stated = _SIZE.search(description)
    if stated is None:
        return f"{escape_markdown(description)} ({size})"
    # The size is digits and a unit; the text around it is escaped where it stands, so a description
    # that opens with the size ("1.20 GB of ...") is not taken for an ordered-list marker and escaped.
    before, after = description[:stated.start()], description[stated.end():]
    return (escape_markdown(before) if before else "") + size + escape_markdown(after)


def shown_items(run: Run, level: str) -> list[ShownItem]:
    """The evidence items of ``level`` a passed check of the passed level found, in the order it recorded them.

    An item is claimed by its recorded description; one without a description, or a size item whose size
    cannot be stated exactly (:func:`printed_size`), is not claimed at all.
    """
    out: list[ShownItem] = []
    for lvl in run.levels:
        if lvl.name != level or lvl.status is not Status.PASSED or not lvl.required:
            continue
        for c in lvl.checks:
            if c.status is not Status.PASSED or c.evidence is None:
                continue
            items = c.evidence.measured.get("items")
            for name, record in (items.items() if isinstance(items, dict) else ()):
                if any(x.name == name for x in out):
                    continue
                spec = c.evidence.expected.get(name)
                if not (isinstance(record, dict) and isinstance(record.get("line"), str) and record["line"].strip()
                        and isinstance(spec, dict)):
                    continue
                description = spec.get("description")
                if not isinstance(description, str) or not description.strip():
                    continue
                size = None
                if "gb" in record or "gb" in spec:
                    size = printed_size(record)
                    if size is None:
                        continue
                out.append(ShownItem(str(name), level, _claim(description.strip(), size),
                                     bool(spec.get("unverified"))))
    return out


def evidence_lines(run: Run) -> list[str]:
    """The card's list of what the runtime's log showed: one line per claimed item, load then smoke.

    The smoke evidence that the speculator drafted is said by the request sentence instead
    (:func:`request_clause`), with the token count the request returned.
    """
    shown = [x for level in ("load", "smoke") for x in shown_items(run, level)
             if not (x.level == "smoke" and x.name == SPECULATIVE_ITEM)]
    return [f"- {x.claim}" + (f" ({CARD_WORDING_NOTE})" if x.card_wording else "") for x in shown]


def completed_tokens(run: Run) -> int | None:
    """The token count of the smoke request, from the first passed smoke check that records one."""
    for m in passed_measured(run, "smoke"):
        value = m.get("completion_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        completions = m.get("completions")
        if isinstance(completions, list) and completions:
            counts = {x.get("completion_tokens") if isinstance(x, dict) else None for x in completions}
            n = next(iter(counts)) if len(counts) == 1 else None
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                return n
    return None


def request_clause(run: Run) -> str | None:
    tokens = completed_tokens(run)
    if tokens is None:
        return None
    speculative = " speculative" if evidence_item(run, "smoke", SPECULATIVE_ITEM) else ""
    return f"completed {indefinite_article(tokens)} {tokens}-token{speculative} request"


def runtime_facts(run: Run) -> list[str]:
    """The clauses of "The runtime ..." after the evidence list: the smoke request, where one was recorded."""
    return [c for c in (request_clause(run),) if c]


def not_qualified_sentence(run: Run, *, after_smoke: bool) -> str | None:
    items = [str(x) for x in (run.profile.get("conditions") or {}).get("not_qualified") or []]
    if not items:
        return None
    text = join_words(items)
    verb = "is" if len(items) == 1 else "are"
    by = " by that smoke test" if after_smoke else ""
    return f"{text[:1].upper()}{text[1:]} {verb} not qualified{by}."


def support_sentence(run: Run) -> str | None:
    """Which runtime builds the checkpoint needs: said only once loading passed and the quantization was detected."""
    quantization = detected_quantization(run)
    if not quantization:
        return None
    return (f"The checkpoint is unsupported in {RUNTIME_FAMILY} builds that do not contain the {SPECULATOR_WORDS} "
            f"and {quantization} integration used by the qualified runtime.")


@dataclass(frozen=True)
class AttestationCitation:
    """A verified attestation of the run, as the card cites it (the caller verified it first)."""

    file: str  # its file name, e.g. attestation.intoto.jsonl
    sha256: str  # hex sha256 of the attestation file
    key_fingerprint: str  # the signing key's keyid (securesystemslib's default: sha256 of its canonical JSON)


def attestation_sentence(citation: AttestationCitation) -> str:
    """The card's one sentence that lets a reader check the claim against the signed statement."""
    return (f"Signed attestation: `{citation.file}` (sha256 `{citation.sha256}`), an in-toto test-result statement "
            f"of this run over every checkpoint file, signed with the EC P-256 key `{citation.key_fingerprint}` (the "
            "SHA-256 of its DER public key); `qualify gate --attestation FILE --verify-key KEY --checkpoint DIR` "
            "verifies it.")


def validation_status_section(run: Run, *, heading: str | None = "## Validation status",
                              attestation: AttestationCitation | None = None) -> str:
    """The card's section: status, conditions, what the runtime showed, what was not qualified.

    Args:
        run: the report.
        heading: the section's heading, or None for none.
        attestation: a verified attestation of this very report, cited last; None cites none.
    """
    out = []
    if heading:
        out += [heading, ""]
    out.append(status_head(run, card_words(run), _not_passed_words(run)))
    conditions = run_runtime_conditions(run) if ran_runtime_levels(run) else checkpoint_conditions(run)
    if conditions:
        out += ["", *conditions]
    shown = evidence_lines(run)
    if shown:
        out += ["", EVIDENCE_HEAD, "", *shown]
    facts = runtime_facts(run)
    after_smoke = completed_tokens(run) is not None
    paragraph = []
    if facts:
        paragraph.append(f"The runtime {join_words(facts)}.")
    for note in (reproducibility_note(run), target_revision_note(run.environment, ran_runtime_levels(run)),
                 exercised_note(run), source_identity_note(run), stand_in_note(run),
                 near_tie_note(passed_check(run, "losslessness.greedy_identical"))):
        if note:
            paragraph.append(note)
    nq = not_qualified_sentence(run, after_smoke=after_smoke)
    if nq:
        paragraph.append(nq)
    if paragraph:
        out += ["", " ".join(paragraph)]
    support = support_sentence(run)
    if support:
        out += ["", support]
    if attestation is not None:
        out += ["", attestation_sentence(attestation)]
    return "\n".join(out) + "\n"



def exercised_note(run: Run) -> str | None:
    """What the serving levels exercised of the draft, where a local runtime serves less than the profile's runtime."""
    local = run.environment.get("local_server")
    if not isinstance(local, dict) or not local.get("exercised"):
        return None
    text = escape_markdown(str(local["exercised"])).rstrip(".")
    return f"Serving runtime: {text}."


def reproducibility_note(run: Run) -> str | None:
    """Say so when the runtime ran from a moving tag or revision (allowed with --allow-unpinned)."""
    runtime = run.environment.get("runtime") or {}
    if runtime.get("reproducible") is not False:
        return None
    unpinned = (runtime.get("plan") or {}).get("unpinned") or []
    what = f" ({'; '.join(escape_markdown(u) for u in unpinned)})" if unpinned else ""
    return (f"Not reproducible: the runtime was launched from a moving image tag or revision{what}, "
            "allowed with --allow-unpinned; pin the image digest and every revision for a release.")
