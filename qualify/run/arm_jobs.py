"""What each level measures on each arm: declared once, from the profile, for the levels a run performs.

The decision of each level (paired, losslessness, throughput, speedup) reads these jobs'
results (:mod:`qualify.run.arms`); the jobs only measure. Every job of an arm runs while
that arm serves, in this order, so all arms see the same prompts in the same order.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from qualify.errors import ServingError
from qualify.profile import Profile
from qualify.run.arms import ArmJob
from qualify.runtime.companions import CHECKPOINT, CHECKPOINT_PUBLISHED, REFERENCE, REFERENCE_PUBLISHED, SOURCE
from qualify.serving import client as serving
from qualify.serving import divergence as dv
from qualify.serving import paired_measure as pm
from qualify.serving import prompt_sets as ps


def paired_request(profile: Profile) -> pm.Request:
    """The paired level's request and counting rules (both arms are measured with these)."""
    spec = profile.paired
    assert spec is not None
    return pm.Request(model=profile.served_model_name, max_tokens=spec.max_tokens, temperature=spec.temperature,
                      timeout_s=spec.request_timeout_s, proposal_length=profile.proposal_length,
                      full_block=spec.full_block)


def arm_jobs(profile: Profile, levels: Collection[str]) -> list[ArmJob]:
    """The jobs of the run's levels on the arms it can serve, in the order they run on an arm.

    A level whose profile table is missing has no job (its check is skipped with the reason);
    a level whose other arm this run cannot serve keeps its jobs, and its check fails naming
    the arm that did not serve.

    Args:
        profile: the run's profile.
        levels: the levels the run performs.

    Raises:
        UsageError: a prompt set the profile names is missing or malformed.
    """
    model = profile.served_model_name
    jobs: list[ArmJob] = []
    # Read (and verified against their digests) once, for every level that sends them.
    sets = (pm.load_sets(profile.paired)
            if profile.paired is not None and not {"paired", "speedup"}.isdisjoint(levels) else None)
    if "paired" in levels and profile.paired is not None and sets is not None:
        spec, req = profile.paired, paired_request(profile)

        def paired(client: Any, url: str) -> dict[int, pm.DraftRun]:
            return pm.measure_side(client, url, sets, spec, req)

        jobs += [ArmJob("paired", CHECKPOINT, paired), ArmJob("paired", SOURCE, paired)]
    acceptance = profile.acceptance
    prompts = (ps.load_prompts(acceptance.prompts, sha256=acceptance.prompts_sha256).prompts
               if acceptance is not None and not {"losslessness", "throughput"}.isdisjoint(levels) else ())
    lossless = profile.losslessness
    if "losslessness" in levels and lossless is not None and acceptance is not None:
        timeout = acceptance.request_timeout_s
        # The checkpoint's arm serves before the reference's: its outputs are kept here, so that the
        # reference arm looks each divergence up while it serves.
        speculative: dict[str, serving.Completion] = {}

        def greedy(client: Any, url: str) -> dv.GreedyRun:
            out, failures = serving.greedy_outputs(client, model, prompts, max_tokens=lossless.max_tokens,
                                                   timeout_s=timeout)
            speculative.clear()
            speculative.update(out)
            return dv.GreedyRun(out, tuple(failures))

        def greedy_and_lookups(client: Any, url: str) -> dv.GreedyRun:
            out, failures = serving.greedy_outputs(client, model, prompts, max_tokens=lossless.max_tokens,
                                                   timeout_s=timeout)
            try:
                version: dict[str, Any] = serving.fetch_version(url)
            except ServingError as exc:
                version = {"error": str(exc)}
            return dv.GreedyRun(out, tuple(failures),
                                dv.look_up_divergences(client, model, speculative, out, timeout_s=timeout), version)

        jobs += [ArmJob("losslessness", CHECKPOINT, greedy), ArmJob("losslessness", REFERENCE, greedy_and_lookups)]
    throughput = profile.throughput
    if "throughput" in levels and throughput is not None and acceptance is not None:

        def streamed(client: Any, url: str) -> dict[str, Any]:
            return serving.measure_throughput(
                client, model, prompts, max_tokens=throughput.max_tokens, temperature=throughput.temperature,
                concurrency=throughput.concurrency, timeout_s=throughput.request_timeout_s, rounds=throughput.rounds)

        jobs.append(ArmJob("throughput", CHECKPOINT, streamed))
    speedup = profile.speedup
    if "speedup" in levels and speedup is not None and profile.paired is not None and sets is not None:
        concurrencies = profile.paired.concurrency
        speed_prompts = [p for _, p in sets.prompts][: speedup.prompts]

        def timed(client: Any, url: str) -> dict[int, dict[str, Any]]:
            return {c: serving.measure_throughput(client, model, speed_prompts, max_tokens=speedup.max_tokens,
                                                  temperature=0.0, concurrency=c, timeout_s=speedup.request_timeout_s,
                                                  rounds=speedup.rounds)
                    for c in concurrencies}

        jobs += [ArmJob("speedup", CHECKPOINT, timed), ArmJob("speedup", REFERENCE, timed)]
        if speedup.as_published and profile.runtime.qualification_overrides:
            jobs += [ArmJob("speedup", CHECKPOINT_PUBLISHED, timed), ArmJob("speedup", REFERENCE_PUBLISHED, timed)]
    return jobs


__all__ = ["arm_jobs", "paired_request"]
