"""Measuring two drafts on the same prompts at a given concurrency (the I/O half of the paired level).

Each prompt's figures come from vLLM's per-request metrics in its response
(``metrics.speculative_decoding``, servers started with ``--per-request-spec-decode-metrics
summary``), which stay attributable to their prompt when several requests are in flight.
They are never taken on trust:

- one request at a time, the /metrics counters are read (settled) around each request and
  must move by exactly what the response says; without per-request metrics the counters'
  move is the sample, bounded by what the answer can explain
  (:class:`qualify.serving.counters.RequestBound`);
- under load, the counters' move over the whole run must equal the sum of the responses'
  figures: anything else is another client's traffic or a miscount, and the run is not used;
- under load on a server whose responses carry no per-request metrics (a launcher that cannot
  pass the flag), the prompts go in consecutive batches of ``concurrency`` requests, the counters
  read (settled) around each batch: a batch is the sample, both drafts get the same batches in
  the same order, and the figure is a run-level ratio with an interval over the batches (no
  per-category figure at that concurrency: those come from the one-at-a-time run);
- every sample must satisfy the counting identities
  (:func:`qualify.serving.counters.identity_findings`).

A prompt that fails any of these is a failure line naming the prompt, never a sample.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.core import Evidence
from qualify.errors import CounterError, CountersMissing, ServerUnavailable, ServingError, UsageError
from qualify.profile import PairedSpec
from qualify.serving import client as cl
from qualify.serving.acceptance_stats import Bootstrap
from qualify.serving.counters import (
    PER_REQUEST_FLAG,
    CounterDelta,
    add,
    counter_delta,
    delta_from_response,
    identity_findings,
    mismatch,
    unexplained_by_request,
)
from qualify.serving.paired import ConcurrencyRun, PairedDecision, PairedSample, paired_evidence
from qualify.serving.prompt_sets import Prompt, load_entry, set_identity

NO_PER_REQUEST = (f"the response carries no per-request speculative-decoding metrics, which requests in flight "
                  f"together need (start vLLM with {' '.join(PER_REQUEST_FLAG)})")


@dataclass
class DraftRun:
    """One draft's requests at one concurrency: a counter delta per prompt measured, a line per prompt that failed."""

    concurrency: int
    deltas: dict[str, CounterDelta] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    source_of_figures: str = "response"  # "response", "counters" or "counters per batch"
    # Batch id -> the prompts it held, where the figures are per batch (no per-request metrics under load).
    batches: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"concurrency": self.concurrency, "measured": len(self.deltas), "failures": list(self.failures),
               "wall_s": self.wall_s, "figures_from": self.source_of_figures}
        if self.batches:
            out["batches"] = {bid: list(ids) for bid, ids in self.batches.items()}
        return out


@dataclass(frozen=True)
class Request:
    """What the two drafts are asked: the same requests, the same sampling."""

    model: str
    max_tokens: int
    temperature: float
    timeout_s: float
    proposal_length: int
    full_block: bool


def _checked(delta: CounterDelta, req: Request, p: Prompt, completion_tokens: Any) -> str | None:
    problems = identity_findings(delta, proposal_length=req.proposal_length, full_block=req.full_block)
    excess = unexplained_by_request(delta, completion_tokens, req.proposal_length)
    if excess:
        problems.append(excess)
    return f"prompt {p.id}: " + "; ".join(problems) if problems else None


def _one_at_a_time(client: Any, endpoint: str, prompts: Sequence[Prompt], req: Request, run: DraftRun) -> None:
    for i, p in enumerate(prompts):
        try:
            before = cl.settled_counters(endpoint, req.model, timeout_s=req.timeout_s)
            c = cl.complete(client, req.model, p, max_tokens=req.max_tokens, temperature=req.temperature,
                            timeout_s=req.timeout_s)
            after = cl.settled_counters(endpoint, req.model, timeout_s=req.timeout_s)
            delta = counter_delta(before, after)
            if c.spec_decoding is not None:
                disagreements = mismatch(delta, delta_from_response(c.spec_decoding, f"prompt {p.id}"))
                if disagreements:
                    run.failures.append(f"prompt {p.id}: the counters and the response disagree: "
                                        + "; ".join(disagreements))
                    continue
            else:
                run.source_of_figures = "counters"
        except CountersMissing as exc:
            run.failures.append(f"prompt {p.id}: {exc}")
            break
        except CounterError as exc:
            run.failures.append(f"prompt {p.id}: {exc}")
            continue
        except ServerUnavailable as exc:
            run.failures.append(f"prompt {p.id}: {exc}; {len(prompts) - i - 1} further prompt(s) not asked")
            break
        except ServingError as exc:
            run.failures.append(str(exc))
            continue
        problem = _checked(delta, req, p, c.completion_tokens)
        if problem:
            run.failures.append(problem)
            continue
        run.deltas[p.id] = delta


def _in_flight(client: Any, endpoint: str, prompts: Sequence[Prompt], req: Request, run: DraftRun) -> None:
    lock = threading.Lock()
    answered: dict[str, CounterDelta] = {}
    rejected: set[str] = set()
    errored: list[str] = []

    def one(p: Prompt) -> None:
        try:
            c = cl.complete(client, req.model, p, max_tokens=req.max_tokens, temperature=req.temperature,
                            timeout_s=req.timeout_s)
            if c.spec_decoding is None:
                raise CounterError(f"prompt {p.id}: {NO_PER_REQUEST}")
            delta = delta_from_response(c.spec_decoding, f"prompt {p.id}")
        except (CounterError, ServingError) as exc:
            with lock:
                errored.append(p.id)
                run.failures.append(str(exc) if str(exc).startswith("prompt ") else f"prompt {p.id}: {exc}")
            return
        problem = _checked(delta, req, p, c.completion_tokens)
        with lock:
            answered[p.id] = delta
            if problem:
                rejected.add(p.id)
                run.failures.append(problem)

    try:
        before = cl.settled_counters(endpoint, req.model, timeout_s=req.timeout_s)
    except (CounterError, ServingError) as exc:
        run.failures.append(f"the counters could not be read before the run: {exc}")
        return
    with ThreadPoolExecutor(max_workers=run.concurrency) as pool:
        list(pool.map(one, prompts))
    try:
        after = cl.settled_counters(endpoint, req.model, timeout_s=req.timeout_s)
        total = counter_delta(before, after)
    except (CounterError, ServingError) as exc:
        run.failures.append(f"the counters could not be read after the run: {exc}")
        return
    if errored:
        # A failed request may have moved the counters without a response to say by how much:
        # the run's totals cannot be checked, and the failures already fail the level.
        run.failures.append(f"over the run at concurrency {run.concurrency}: {len(errored)} request(s) failed, so the "
                            "counters could not be checked against the responses")
        return
    disagreements = mismatch(total, add(answered.values()))
    if disagreements:
        # The run's counters must be the sum of its requests: anything else is another client's
        # traffic (or a miscount), and no per-prompt figure of this run can be trusted.
        run.failures.append(f"over the run at concurrency {run.concurrency}, the counters and the responses' "
                            "per-request metrics disagree (another client on the server?): " + "; ".join(disagreements))
        return
    run.deltas.update({pid: d for pid, d in answered.items() if pid not in rejected})


def measure_draft(client: Any, endpoint: str, prompts: Sequence[Prompt], req: Request, concurrency: int) -> DraftRun:
    """Every prompt on one server with ``concurrency`` requests in flight; a delta per prompt, checked.

    Args:
        client: an ``openai.OpenAI`` client for ``endpoint``.
        endpoint: the server's API root (``http://host:port/v1``); /metrics is beside it.
        prompts: the prompts, in order.
        req: the model name, the sampling and the counting rules.
        concurrency: requests in flight; 1 measures each prompt alone.
    """
    run = DraftRun(concurrency)
    started = time.perf_counter()
    if concurrency == 1:
        _one_at_a_time(client, endpoint, prompts, req, run)
    elif prompts and not _reports_per_request(client, prompts[0], req):
        _in_batches(client, endpoint, prompts, req, run)
    else:
        _in_flight(client, endpoint, prompts, req, run)
    run.wall_s = time.perf_counter() - started
    return run


def _reports_per_request(client: Any, probe: Prompt, req: Request) -> bool:
    """Whether the server's responses carry per-request speculative-decoding metrics (one request, not counted).

    Both drafts are probed alike, so the request changes nothing between them.
    """
    try:
        c = cl.complete(client, req.model, probe, max_tokens=min(req.max_tokens, 16), temperature=req.temperature,
                        timeout_s=req.timeout_s)
    except ServingError:
        return True  # the run itself will name the failure, request by request
    return c.spec_decoding is not None


def _in_batches(client: Any, endpoint: str, prompts: Sequence[Prompt], req: Request, run: DraftRun) -> None:
    """Consecutive batches of ``run.concurrency`` prompts, all in flight together; the counters' move per batch."""
    run.source_of_figures = "counters per batch"
    size = run.concurrency
    for start in range(0, len(prompts), size):
        batch = tuple(prompts[start:start + size])
        bid = f"batch-{start // size + 1:03d}"
        run.batches[bid] = tuple(p.id for p in batch)
        try:
            before = cl.settled_counters(endpoint, req.model, timeout_s=req.timeout_s)
            with ThreadPoolExecutor(max_workers=size) as pool:
                done = list(pool.map(lambda p: cl.complete(client, req.model, p, max_tokens=req.max_tokens,
                                                           temperature=req.temperature, timeout_s=req.timeout_s),
                                     batch))
            after = cl.settled_counters(endpoint, req.model, timeout_s=req.timeout_s)
            delta = counter_delta(before, after)
        except CountersMissing as exc:
            run.failures.append(f"{bid}: {exc}")
            return
        except (CounterError, ServingError) as exc:
            run.failures.append(f"{bid} ({', '.join(run.batches[bid])}): {exc}")
            continue
        problems = identity_findings(delta, proposal_length=req.proposal_length, full_block=req.full_block)
        tokens = [c.completion_tokens for c in done if isinstance(c.completion_tokens, int)
                  and not isinstance(c.completion_tokens, bool)]
        if len(tokens) == len(done):
            # Each request's bound, summed: drafts <= sum(T - 1), drafts + accepted <= sum(T - 1 + k), which is
            # one request's bound for T' = sum(T) - n + 1 tokens at proposal length n * k.
            n = len(tokens)
            excess = unexplained_by_request(delta, sum(tokens) - n + 1, n * req.proposal_length)
            if excess:
                problems.append(excess)
        if problems:
            run.failures.append(f"{bid}: " + "; ".join(problems))
            continue
        run.deltas[bid] = delta


@dataclass
class PairedRun:
    """Both drafts at one concurrency, and the prompts paired from them."""

    concurrency: int
    source: DraftRun
    candidate: DraftRun
    samples: list[PairedSample]
    failures: list[str]


def pair(prompts: Sequence[tuple[str, Prompt]], source: DraftRun, candidate: DraftRun) -> PairedRun:
    """The prompts measured with both drafts, as paired samples; every other prompt is a failure line.

    Args:
        prompts: (prompt set name, prompt) in order.
        source: the source draft's run.
        candidate: the candidate's run at the same concurrency.
    """
    failures = [f"source draft: {f}" for f in source.failures] + [f"candidate: {f}" for f in candidate.failures]
    samples = []
    for set_name, p in prompts:
        s, c = source.deltas.get(p.id), candidate.deltas.get(p.id)
        if s is not None and c is not None:
            samples.append(PairedSample(p.id, set_name, p.category, s, c))
        else:
            missing = " and ".join(w for w, d in (("the source draft", s), ("the candidate", c)) if d is None)
            failures.append(f"prompt {p.id}: not measured with {missing}: it cannot be paired")
    return PairedRun(candidate.concurrency, source, candidate, samples, failures)




# -- the level ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedSets:
    """The prompt sets of ``[paired]``, loaded, with their identities for the report."""

    prompts: tuple[tuple[str, Prompt], ...]  # (set name, prompt) in order
    identities: tuple[dict[str, Any], ...]
    categories: tuple[str, ...]  # group labels, as qualify.serving.paired.group_label makes them


def load_sets(spec: PairedSpec) -> LoadedSets:
    """Every ``[[paired.prompt_sets]]`` entry, strictly: the shipped set or file it names, checked against the
    sha256 the profile states (a missing, changed or malformed file is a UsageError naming it).

    Raises:
        UsageError: a file is missing, changed or malformed, or two sets have the same name.
    """
    prompts: list[tuple[str, Prompt]] = []
    identities = []
    names: dict[str, Path] = {}
    pairs: list[tuple[str, str]] = []
    for item in spec.prompt_sets:
        ps, total = load_entry(item)
        if ps.name in names:
            raise UsageError(f"$.paired.prompt_sets: two sets are called {ps.name!r} ({names[ps.name]} and "
                             f"{ps.path}); give one a 'name'")
        names[ps.name] = ps.path
        identities.append(set_identity(ps, item.format, total=total))
        prompts += [(ps.name, p) for p in ps.prompts]
        pairs += [(ps.name, c) for c in ps.categories]
    sets = len(names)
    labels = tuple(c if sets <= 1 else f"{s}/{c}" for s, c in pairs)
    return LoadedSets(tuple(prompts), tuple(identities), labels)


def unique_ids(prompts: Sequence[tuple[str, Prompt]]) -> None:
    """Prompt ids must be unique across sets: a sample is paired by its id.

    Raises:
        UsageError: an id occurs in two sets.
    """
    seen: dict[str, str] = {}
    for set_name, p in prompts:
        if p.id in seen:
            raise UsageError(f"$.paired.prompt_sets: prompt id {p.id!r} is in both {seen[p.id]!r} and {set_name!r}")
        seen[p.id] = set_name


def measure_side(client: Any, endpoint: str, sets: LoadedSets, spec: PairedSpec, req: Request) -> dict[int, DraftRun]:
    """One draft's server at every concurrency of the profile, the prompts in the sets' order.

    Both arms are measured by this same function, each while its server is the one serving,
    so they see the same prompts in the same order.

    Args:
        client: an ``openai.OpenAI`` client for ``endpoint``.
        endpoint: the server's API root.
        sets: the loaded prompt sets.
        spec: the profile's ``[paired]``.
        req: the model name, sampling and counting rules.
    """
    unique_ids(sets.prompts)
    prompts = [p for _, p in sets.prompts]
    return {concurrency: measure_draft(client, endpoint, prompts, req, concurrency) for concurrency in spec.concurrency}


def paired_runs(sets: LoadedSets, spec: PairedSpec, candidate: dict[int, DraftRun],
                source: dict[int, DraftRun]) -> list[ConcurrencyRun]:
    """Both drafts' runs paired by prompt at every concurrency of the profile (a missing run pairs nothing)."""
    out = []
    for concurrency in spec.concurrency:
        cand = candidate.get(concurrency) or _not_run(concurrency, "the candidate")
        src = source.get(concurrency) or _not_run(concurrency, "the source draft")
        measured = {"candidate": cand.to_dict(), "source": src.to_dict()}
        if cand.batches or src.batches:
            out.append(_paired_batches(concurrency, cand, src, spec, measured))
            continue
        paired = pair(sets.prompts, src, cand)
        out.append(ConcurrencyRun(concurrency, paired.samples, paired.failures, measured))
    return out


def _paired_batches(concurrency: int, cand: DraftRun, src: DraftRun, spec: PairedSpec,
                    measured: dict[str, Any]) -> ConcurrencyRun:
    """Both drafts' batches paired by batch: a run-level ratio, with an interval over the batches."""
    failures = [f"source draft: {f}" for f in src.failures] + [f"candidate: {f}" for f in cand.failures]
    if cand.batches != src.batches:
        failures.append("the two drafts were not measured on the same batches (one reports per-request metrics, "
                        "the other does not, or the prompts differ): the batches cannot be paired")
        return ConcurrencyRun(concurrency, [], failures, measured, per_category=False, min_prompts=2)
    samples = []
    for bid in cand.batches:
        s, c = src.deltas.get(bid), cand.deltas.get(bid)
        if s is not None and c is not None:
            samples.append(PairedSample(bid, "all", "batch", s, c))
        else:
            failures.append(f"{bid}: not measured with both drafts: it cannot be paired")
    covered = sum(len(cand.batches[s.prompt_id]) for s in samples)
    if covered < spec.min_prompts:
        failures.append(f"the paired batches cover {covered} prompts, fewer than the profile's min_prompts "
                        f"{spec.min_prompts}")
    measured["method"] = (f"run-level: no per-request metrics in the responses, so prompts went in batches of "
                          f"{concurrency}, the /metrics counters read around each; {len(samples)} batches paired, "
                          f"{covered} prompts; the interval is over batches; per-category figures come from "
                          "concurrency 1")
    return ConcurrencyRun(concurrency, samples, failures, measured, per_category=False, min_prompts=2)


def _not_run(concurrency: int, who: str) -> DraftRun:
    run = DraftRun(concurrency)
    run.failures.append(f"{who} was not measured at concurrency {concurrency}")
    return run


def paired_decision(
    sets: LoadedSets, spec: PairedSpec, req: Request, candidate: dict[int, DraftRun], source: dict[int, DraftRun],
    *, endpoints: dict[str, str], extra_measured: dict[str, Any] | None = None,
) -> tuple[Evidence, list[PairedDecision]]:
    """The paired level's decision from both drafts' measured runs.

    Args:
        sets: the loaded prompt sets.
        spec: the profile's ``[paired]``.
        req: the request and counting rules both sides were measured with.
        candidate: the checkpoint's runs by concurrency.
        source: the source draft's runs by concurrency.
        endpoints: where each side was served (``candidate``, ``source``).
        extra_measured: what else the evidence records.
    """
    runs = paired_runs(sets, spec, candidate, source)
    boot = Bootstrap(spec.bootstrap_resamples, spec.confidence, spec.bootstrap_seed)
    extra = {"prompt_sets": list(sets.identities),
             "requests": {"max_tokens": req.max_tokens, "temperature": req.temperature,
                          "proposal_length": req.proposal_length, "full_block": req.full_block},
             "endpoints": endpoints, **(extra_measured or {})}
    return paired_evidence(runs, margin=spec.margin, boot=boot, expected_categories=sets.categories,
                           min_prompts=spec.min_prompts, extra_measured=extra, category_margin=spec.category_margin)


def paired_level(
    candidate: tuple[Any, str], source: tuple[Any, str], spec: PairedSpec, req: Request, *,
    extra_measured: dict[str, Any] | None = None,
) -> tuple[Evidence, list[PairedDecision]]:
    """The paired level from end to end with both servers up: load the sets, measure each side, decide.

    Raises:
        UsageError: a prompt set is missing or malformed.
    """
    sets = load_sets(spec)
    cand = measure_side(candidate[0], candidate[1], sets, spec, req)
    src = measure_side(source[0], source[1], sets, spec, req)
    return paired_decision(sets, spec, req, cand, src, endpoints={"candidate": candidate[1], "source": source[1]},
                           extra_measured=extra_measured)


__all__ = ["NO_PER_REQUEST", "DraftRun", "LoadedSets", "PairedRun", "Request", "load_sets", "measure_draft",
           "measure_side", "pair", "paired_decision", "paired_level", "paired_runs"]
