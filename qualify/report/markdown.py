"""Human-readable renderings of a :class:`~qualify.report.model.Run` (pure: text in, text out)."""

from __future__ import annotations

from typing import Any

from qualify.core import LEVEL_TITLES, LEVELS, Status
from qualify.report.card import (
    checkpoint_conditions,
    exercised_note,
    join_words,
    ran_runtime_levels,
    reproducibility_note,
    source_identity_note,
    source_lines,
    stand_in_levels,
    stand_in_note,
    status_head,
)
from qualify.report.conditions import run_runtime_conditions, runtime_conditions
from qualify.report.model import Check, LevelResult, Run
from qualify.report.near_ties import near_tie_items, tolerance_words
from qualify.report.target import target_revision_note, target_revision_record
from qualify.util.escape import escape_lines, escape_markdown, markdown_code
from qualify.util.redact import redact

# checkpoint_conditions lives in qualify.report.card, runtime_conditions in qualify.report.conditions (the card
# and report.md share them); they stay importable from here for callers that knew them here.
__all__ = ["chart_files", "checkpoint_conditions", "condition_lines", "paired_lines", "render_markdown",
           "runtime_conditions", "speedup_callout", "summary_lines", "validation_status"]

_MARK = {
    Status.PASSED: "passed",
    Status.FAILED: "**FAILED**",
    Status.SKIPPED: "skipped",
    Status.ERROR: "**ERROR**",
    Status.NOT_RUN: "not run",
}


def condition_lines(run: Run) -> list[str]:
    lines = checkpoint_conditions(run)
    if ran_runtime_levels(run):
        lines += run_runtime_conditions(run)
    return lines


def validation_status(run: Run) -> str:
    """A "Validation status" paragraph in the seed's style, claiming exactly the levels that passed."""
    required = [lvl for lvl in run.levels if lvl.required]
    passed = [lvl.title for lvl in required if lvl.status is Status.PASSED]
    not_passed = [f"{lvl.title} ({lvl.status})" for lvl in required if lvl.status is not Status.PASSED]
    out = [status_head(run, passed, not_passed)]
    out.extend(condition_lines(run))
    for note in (reproducibility_note(run), target_revision_note(run.environment, ran_runtime_levels(run)),
                 source_identity_note(run), exercised_note(run), stand_in_note(run)):
        if note:
            out += ["", note]
    ran = {lvl.name for lvl in run.levels}
    conditions = run.profile.get("conditions") or {}
    not_qualified = [str(x) for x in conditions.get("not_qualified") or []]
    # A measured level is in the report with its figures, but it qualifies nothing.
    measured = {lvl.name for lvl in run.levels if not lvl.required}
    stand_in = set(stand_in_levels(run))
    not_qualified += [LEVEL_TITLES[n] + (" (stand-in plumbing)" if n in measured and n in stand_in
                                         else " (measured only)" if n in measured else "") for n in LEVELS
                      if (n not in ran or n in measured) and LEVEL_TITLES[n] not in not_qualified]
    if not_qualified:
        out.append("")
        out.append(f"Not qualified by this run: {join_words(not_qualified)}.")
    return "\n".join(out)


def _finding_lines(check: Check) -> list[str]:
    if check.evidence is None:
        return []
    lines = [f"  - {escape_markdown(f)}" for f in check.evidence.findings]
    total = check.evidence.findings_total or len(check.evidence.findings)
    if total > len(check.evidence.findings):
        lines.append(f"  - ... and {total - len(check.evidence.findings)} more (see report.json)")
    return lines


CHART_KEY = "position_chart_svg"


def chart_file(check: Check) -> str | None:
    """The file name a check's chart is written to beside report.md, if the check drew one."""
    if check.evidence and isinstance(check.evidence.measured.get(CHART_KEY), str):
        return f"{check.id}.svg"
    return None


CHARTS_KEY = "charts_svg"


def chart_files(check: Check) -> dict[str, str]:
    """File name -> SVG text of every chart a check drew (its ``charts_svg``), written beside report.md."""
    charts = check.evidence.measured.get(CHARTS_KEY) if check.evidence else None
    if not isinstance(charts, dict):
        return {}
    return {f"{check.id}.{name}.svg": svg for name, svg in sorted(charts.items())
            if isinstance(name, str) and name.replace("-", "").isalnum() and isinstance(svg, str)}


def _pct(x: object) -> str:
    return f"{x:+.2%}" if isinstance(x, (int, float)) and x == x else "n/a"


def _num(x: object, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and x == x else "n/a"


def paired_lines(check: Check) -> list[str]:
    """The paired comparison as a reader wants it: both drafts, the difference with its interval, the margin."""
    m = check.evidence.measured if check.evidence else {}
    margin = (check.evidence.expected if check.evidence else {}).get("margin")
    levels = m.get("concurrency")
    if not isinstance(levels, dict) or not isinstance(margin, (int, float)):
        return []
    conf = (m.get("bootstrap") or {}).get("confidence", 0.95)
    out = [f"Checkpoint against its source draft (paired by prompt; {round(conf * 100)}% intervals; passes only if "
           f"the lower bound is above -{margin:.1%}):", "",
           "| concurrency | figure | source draft | checkpoint | difference (relative) | interval | verdict |",
           "|---|---|---|---|---|---|---|"]
    for c, d in levels.items():
        overall = d.get("overall") or {}
        for figure, fmt in (("acceptance_rate", ".3f"), ("mean_acceptance_length", ".2f")):
            src = ((overall.get("source") or {}).get(figure) or {}).get("estimate")
            cand = ((overall.get("candidate") or {}).get(figure) or {}).get("estimate")
            rel = ((overall.get("difference") or {}).get(figure) or {}).get("relative") or {}
            ok = isinstance(rel.get("low"), (int, float)) and rel["low"] > -margin
            out.append(f"| {escape_markdown(c)} | {figure.replace('_', ' ')} | {_num(src, fmt)} | {_num(cand, fmt)} | "
                       f"{_pct(rel.get('estimate'))} | [{_pct(rel.get('low'))}, {_pct(rel.get('high'))}] | "
                       f"{'within margin' if ok else '**not shown within margin**'} |")
    out.append("")
    for c, d in levels.items():
        losers = d.get("biggest_losses") or []
        if not losers and d.get("overall"):
            out.append(f"- No prompt lost acceptance against the source draft at concurrency {escape_markdown(c)}")
        if losers:
            rows = ", ".join(f"{markdown_code(r.get('prompt'))} ({escape_markdown(r.get('category'))}, "
                             f"{_num(r.get('source_acceptance_rate'), '.2f')} -> "
                             f"{_num(r.get('candidate_acceptance_rate'), '.2f')})" for r in losers)
            out.append(f"- Prompts that lost the most at concurrency {escape_markdown(c)}: {rows}")
    sets = m.get("prompt_sets") or []
    for ps in sets:
        if isinstance(ps, dict):
            used = f", {escape_markdown(ps['used'])}" if ps.get("used") else ""
            out.append(f"- Prompt set {markdown_code(ps.get('name'))} ({escape_markdown(ps.get('format'))}, "
                       f"{ps.get('prompts')} prompts{used}): sha256 {markdown_code(ps.get('sha256'))}")
    template = m.get("chat_template")
    if isinstance(template, dict):
        out.append(f"- Chat template: sha256 {markdown_code(template.get('sha256'))}"
                   + (f" ({escape_markdown(template['note'])})" if template.get("note") else ""))
    engine = m.get("engine_settings")
    if isinstance(engine, dict):
        # The comparison is fair only if both arms ran the same engine: say whether that was seen or assumed.
        given = [str(g) for g in engine["logs_given_by"]] if isinstance(engine.get("logs_given_by"), list) else []
        # A log file handed in is taken on the caller's word: say so beside the verification.
        taken = (f"; {' and '.join(given)} named the log file{'s' if len(given) > 1 else ''}, taken on the caller's "
                 "word, not read from a server this run started" if given else "")
        if engine.get("verified") is True and not engine.get("findings"):
            out.append("- Engine settings: both arms' logged vLLM engine configurations are identical but for the "
                       f"draft model (verified from their logs{escape_markdown(taken)})")
        elif engine.get("verified") is True:
            out.append("- Engine settings: **the arms ran different engine configurations** (see the findings)")
        else:
            out.append("- Engine settings: **not verified**, so the comparison is not shown to be fair and the "
                       f"level does not pass ({escape_markdown(engine.get('why') or 'their logs were not available')})")
    return [*out, *operating_lines(m.get("operating_characteristic")), ""]


def operating_lines(oc: object) -> list[str]:
    """The level's error rates by design at the spread this run measured (docs/operating-characteristic.md)."""
    if not isinstance(oc, dict):
        return []
    if oc.get("computed") is not True:
        return [f"- Error rates by design: not computed ({escape_markdown(oc.get('why') or 'no measured spread')})"]
    out = [f"- Error rates by design at the per-prompt spread this run measured ({_num(oc.get('spread'), '.2%')}; the "
           f"profile's pilot {_num(oc.get('pilot_spread'), '.2%')}), {oc.get('trials')} simulated runs each:"]
    for t in oc.get("targets") or []:
        if isinstance(t, dict):
            out.append(f"  - {escape_markdown(t.get('scenario'))}: the level right {_num(t.get('right'), '.2%')} "
                       f"(95% bound {_num(t.get('right_95_bound'), '.2%')}), wanted >= {_num(t.get('wanted'), '.0%')}: "
                       f"{'met' if t.get('met') is True else '**not met**'}")
    return out


def speedup_callout(run: Run) -> list[str]:
    """"Acceptance without speedup": a draft that is accepted but makes decoding no faster, said out loud."""
    accepted = [lvl.name for lvl in run.levels if lvl.name in ("acceptance", "paired") and lvl.status is Status.PASSED]
    out = []
    for lvl in run.levels:
        for c in lvl.checks:
            slow = c.evidence.measured.get("no_speedup_at") if c.evidence and lvl.name == "speedup" else None
            if slow:
                rows = (c.evidence.measured.get("concurrency") or {}) if c.evidence else {}
                figures = ", ".join(f"{_num((rows.get(str(k)) or {}).get('speedup'), '.2f')}x at concurrency {k}"
                                    for k in slow)
                passed = f" although {join_words(accepted)} passed" if accepted else ""
                out.append(f"**Acceptance without speedup**: the speculator made decoding no faster ({figures})"
                           f"{passed}; accepted drafts cost more than they save on this runtime.")
    return [*out, ""] if out else []


def _level_section(level: LevelResult) -> list[str]:
    out = [f"### {level.title} (`{level.name}`): {_MARK[level.status]}", ""]
    if not level.checks:
        out.append(f"No check ran: {escape_markdown(level.reason or 'not run')}.")
        out.append("")
        return out
    out.append("| check | status | what was checked | time |")
    out.append("|---|---|---|---|")
    for c in level.checks:
        what = escape_markdown(c.message or c.title)
        out.append(f"| {markdown_code(c.id)} | {_MARK[c.status]} | {what} | {c.duration_s:.2f} s |")
    out.append("")
    for c in level.checks:
        if c.status in (Status.FAILED, Status.ERROR):
            out.append(f"{markdown_code(c.id)} {c.status}: {escape_markdown(c.message)}")
            out.extend(_finding_lines(c))
            out.append("")
    for c in level.checks:
        if level.name == "paired":
            out += paired_lines(c)
        if level.name == "losslessness":
            out += _near_tie_lines(c)
        for file in chart_files(c):
            out += [f"![{escape_markdown(file)}]({file})", ""]
        name = chart_file(c)
        if name:
            out += [f"Per-position draft acceptance (`{c.id}`, bars with their confidence intervals):", "",
                    f"![per-position acceptance]({name})", ""]
    return out


def _near_tie_lines(c: Check) -> list[str]:
    """The divergences the losslessness check judged near-ties, each with both log-probabilities in the target."""
    items = near_tie_items(c)
    if not items:
        return []
    return [f"Near-ties ({markdown_code(c.id)}: divergences whose two tokens lie close together in the target "
            f"alone's distribution{tolerance_words(c)}, listed, not failed):", "", *[f"- {item}" for item in items], ""]


def _local_server_lines(local: object) -> list[str]:
    """Where the serving levels ran when the harness started local servers: a reader must see what was served."""
    if not isinstance(local, dict):
        return []
    out = ["## Serving runtime", "", f"- {escape_markdown(local.get('note', ''))}"]
    if local.get("exercised"):
        out.append(f"- Exercised: {escape_markdown(str(local['exercised']))}")
    if local.get("method"):
        out.append(f"- Speculative method: {markdown_code(local.get('method'))}; the served draft "
                   f"{'is' if local.get('draft_is_checkpoint') else 'is not'} the checkpoint under test")
    stated = local.get("plugin")
    plugin: dict[str, Any] = stated if isinstance(stated, dict) else {}
    for change in plugin.get("changes") or []:
        out.append(f"- vLLM CPU plugin (vLLM {escape_markdown(str(plugin.get('vllm_version')))}): "
                   f"{escape_markdown(str(change))}")
    for what in ("target", "draft", "source_draft"):
        ident = local.get(what) or {}
        if what == "source_draft" and not ident:
            continue
        out.append(f"- Served {what.replace('_', ' ')}: {markdown_code(ident.get('path'))} "
                   f"(content revision {markdown_code(ident.get('revision'))})")
    for name, server in (local.get("servers") or {}).items():
        ready = server.get("ready_s")
        endpoint = escape_markdown(redact(str(server.get("plan", {}).get("endpoint"))))
        active = {True: ", plugin active", False: ", plugin not active"}.get(server.get("plugin_active"), "")
        # A container's name and ID, where the server ran in one (the load level's, or one beside it).
        cid, image = str(server.get("container_id"))[:12], server.get("image_id")
        where = (f" in container {markdown_code(server['container'])} (ID {markdown_code(cid)}, image "
                 f"{markdown_code(image)})" if server.get("container") else "")
        out.append(f"- {markdown_code(name)} server{where}: {endpoint}, ready after "
                   f"{ready:.1f} s{active}, log {markdown_code(server.get('log'))}" if isinstance(ready, (int, float))
                   else f"- {markdown_code(name)} server{where}: not ready, log {markdown_code(server.get('log'))}")
        if server.get("error"):
            out.append(f"  - {escape_markdown(redact(str(server['error'])))}")
    return [*out, ""]


def render_markdown(run: Run) -> str:
    ck = run.checkpoint
    out = [
        f"# Qualification report {markdown_code(run.run_id)}",
        "",
        f"**Verdict: {run.verdict}**" if run.reached_verdict else
        f"**Verdict: none**: a harness fault kept the run from one (report.json records \"{run.verdict}\", so "
        "nothing ships on it); the cause is under the checks that ended in an error",
        "",
    ]
    target_note = target_revision_note(run.environment, ran_runtime_levels(run))
    if target_note:
        # Beside the verdict, not only in the status paragraph: it is why a release gate refuses this run.
        out += [f"> {target_note}", ""]
    out += [
        "## Validation status",
        "",
        validation_status(run),
        "",
        "## Levels",
        "",
        "| level | required | status | checks |",
        "|---|---|---|---|",
    ]
    for lvl in run.levels:
        counts = {s: sum(1 for c in lvl.checks if c.status is s) for s in Status}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
        kind = "yes" if lvl.required else "no (stand-in)" if lvl.name in stand_in_levels(run) else "no (measured)"
        out.append(f"| {escape_markdown(lvl.title)} | {kind} | "
                   f"{_MARK[lvl.status]} | {summary} |")
    out.append("")
    out += speedup_callout(run)
    for lvl in run.levels:
        out.extend(_level_section(lvl))
    out += _local_server_lines(run.environment.get("local_server"))
    out += ["## Checkpoint", "", f"- Path: {markdown_code(ck.get('path'))}"]
    if ck.get("manifest_sha256"):
        out.append(f"- Manifest sha256: {markdown_code(ck['manifest_sha256'])}")
    for key in ("repo", "revision"):
        if ck.get(key):
            out.append(f"- {key.capitalize()}: {markdown_code(ck[key])}")
    if ck.get("revision") and "revision_verified_by" in ck:
        # A revision the run did not compare with the bytes is a claim, and the gate treats it as one.
        how = ck.get("revision_verification") or ck.get("revision_verified_by") or "only claimed"
        verdict = f"verified ({ck['revision_verified_by']})" if ck.get("revision_verified_by") else "not verified"
        out.append(f"- Revision {verdict}: {escape_markdown(how)}")
    src = run.source
    if src.get("path"):
        out.append(f"- Source path: {markdown_code(src['path'])}")
    out += source_lines(run, pinned=(run.profile.get("conditions") or {}).get("source") or {})
    files = ck.get("files") or []
    if files:
        out += ["", "| file | size | sha256 |", "|---|---|---|"]
        out += [f"| {markdown_code(f['path'])} | {f['size']} | {markdown_code(f['sha256'])} |" for f in files]
    env = run.environment
    out += [
        "",
        "## Run",
        "",
        f"- Harness: qualify {run.harness_version}",
        f"- Profile: {markdown_code(run.profile.get('name'))} (sha256 {markdown_code(run.profile.get('sha256'))})",
        f"- Started: {escape_markdown(run.started_at)}; finished: {escape_markdown(run.finished_at)}",
        f"- Command: {markdown_code(redact(' '.join(run.command)))}" if run.command else "- Command: (library call)",
        f"- Python {escape_markdown(env.get('python'))} on {escape_markdown(env.get('platform'))}",
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items()),
    ]
    if run.errors:
        out += ["", "## Harness errors", ""] + [f"- {escape_markdown(e)}" for e in run.errors]
    return redact("\n".join(out) + "\n")


def summary_lines(run: Run, *, findings_per_check: int = 5) -> list[str]:
    """One line per level, the failed checks under it with their first findings, then the verdict.

    Every line is escaped for a terminal (:func:`~qualify.util.escape.escape_terminal`): a name
    or message from the checkpoint can neither start a line of its own nor move the cursor.
    """
    lines = []
    for lvl in run.levels:
        n = len(lvl.checks)
        lines.append(f"{lvl.name:<13} {lvl.status!s:<8} {n} check{'s' if n != 1 else ''}"
                     + (f" ({lvl.reason})" if not lvl.checks and lvl.reason else "")
                     + (" (stand-in: plumbing, qualifies nothing)"
                        if not lvl.required and lvl.name in stand_in_levels(run) else ""))
        for c in lvl.checks:
            if c.status in (Status.FAILED, Status.ERROR):
                rule = c.evidence.summary if c.evidence and c.message == c.evidence.summary else None
                lines.append(f"  {c.status!s} {c.id} (rule: {rule})" if rule else f"  {c.status!s} {c.id}: {c.message}")
                shown = c.evidence.findings[:findings_per_check] if c.evidence else []
                lines.extend(f"    - {f}" for f in shown)
                total = (c.evidence.findings_total or 0) if c.evidence else 0
                if total > len(shown):
                    lines.append(f"    - ... {total - len(shown)} more in the report")
        # Grouped by their own reason: a broken input, or an earlier level that did not pass.
        not_run: dict[str, list[str]] = {}
        for c in lvl.checks:
            if c.status is Status.NOT_RUN:
                not_run.setdefault(c.message.removeprefix("not run: ") or "no reason recorded", []).append(c.id)
        lines.extend(f"  not run ({reason}): {', '.join(ids)}" for reason, ids in not_run.items())
    if run.interrupted:
        lines.append(f"interrupted: {run.interrupted}")
    note = source_identity_note(run)
    if note:  # a verdict reached on a source no proof established says so where it is read first
        lines.append(f"source: {note}")
    if target_revision_note(run.environment, ran_runtime_levels(run)):
        reason = target_revision_record(run.environment)["reason"]
        lines.append(f"target: target revision not enforced ({reason})")
    lines.append(f"verdict: {run.verdict}" if run.reached_verdict else
                 "verdict: none: a harness fault kept the run from one (the cause below; exit 3)")
    return escape_lines([redact(line) for line in lines])
