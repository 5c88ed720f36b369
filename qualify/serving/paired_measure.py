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
from qualify.serving.prompt_sets import Prompt, load_prompt_set, set_identity

NO_PER_REQUEST = (f"the response carries no per-request speculative-decoding metrics, which requests in flight "
                  f"together need (start vLLM with {' '.join(PER_REQUEST_FLAG)})")


@dataclass
class DraftRun:
    """One draft's requests at one concurrency: a counter delta per prompt measured, a line per prompt that failed."""

    concurrency: int
    deltas: dict[str, CounterDelta] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    source_of_figures: str = "response"  # "response" or "counters"

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "measured": len(self.deltas), "failures": list(self.failures),
                "wall_s": self.wall_s, "figures_from": self.source_of_figures}


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
    else:
        _in_flight(client, endpoint, prompts, req, run)
    run.wall_s = time.perf_counter() - started
    return run


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
    """Every ``[[paired.prompt_sets]]`` file, strictly (a missing or malformed file is a UsageError naming it).

    Raises:
        UsageError: a file is missing or malformed, or two sets have the same name.
    """
    prompts: list[tuple[str, Prompt]] = []
    identities = []
    names: dict[str, Path] = {}
    pairs: list[tuple[str, str]] = []
    for item in spec.prompt_sets:
        full = load_prompt_set(item.path, item.format, name=item.name)
        ps = load_prompt_set(item.path, item.format, name=item.name, limit=item.limit) if item.limit else full
        if ps.name in names:
            raise UsageError(f"$.paired.prompt_sets: two sets are called {ps.name!r} ({names[ps.name]} and "
                             f"{item.path}); give one a 'name'")
        names[ps.name] = item.path
        identities.append(set_identity(ps, item.format, total=len(full.prompts)))
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


def measure_paired(
    candidate: tuple[Any, str], source: tuple[Any, str], sets: LoadedSets, spec: PairedSpec, req: Request,
) -> list[ConcurrencyRun]:
    """Both drafts at every concurrency of the profile; the candidate first, then the source, on the same prompts.

    Args:
        candidate: (client, endpoint) of the server with the checkpoint as its speculator.
        source: (client, endpoint) of the server with the source draft, same target and settings.
        sets: the loaded prompt sets.
        spec: the profile's ``[paired]``.
        req: the model name, sampling and counting rules.
    """
    unique_ids(sets.prompts)
    prompts = [p for _, p in sets.prompts]
    out = []
    for concurrency in spec.concurrency:
        cand = measure_draft(candidate[0], candidate[1], prompts, req, concurrency)
        src = measure_draft(source[0], source[1], prompts, req, concurrency)
        paired = pair(sets.prompts, src, cand)
        out.append(ConcurrencyRun(concurrency, paired.samples, paired.failures,
                                  {"candidate": cand.to_dict(), "source": src.to_dict()}))
    return out


def paired_level(
    candidate: tuple[Any, str], source: tuple[Any, str], spec: PairedSpec, req: Request, *,
    extra_measured: dict[str, Any] | None = None,
) -> tuple[Evidence, list[PairedDecision]]:
    """The paired level from end to end: load the sets, measure both drafts at every concurrency, decide.

    Raises:
        UsageError: a prompt set is missing or malformed.
    """
    sets = load_sets(spec)
    runs = measure_paired(candidate, source, sets, spec, req)
    boot = Bootstrap(spec.bootstrap_resamples, spec.confidence, spec.bootstrap_seed)
    extra = {"prompt_sets": list(sets.identities),
             "requests": {"max_tokens": req.max_tokens, "temperature": req.temperature,
                          "proposal_length": req.proposal_length, "full_block": req.full_block},
             "endpoints": {"candidate": candidate[1], "source": source[1]}, **(extra_measured or {})}
    return paired_evidence(runs, margin=spec.margin, boot=boot, expected_categories=sets.categories,
                           min_prompts=spec.min_prompts, extra_measured=extra)


__all__ = ["NO_PER_REQUEST", "DraftRun", "LoadedSets", "PairedRun", "Request", "load_sets", "measure_draft",
           "measure_paired", "pair", "paired_level"]
