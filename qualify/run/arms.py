"""The run's arms, each measured while it serves, through one interface whatever serves them.

Three levels compare the checkpoint's server with another: paired (the source draft it was
converted from), losslessness and speedup (the target alone). A release run on four GPUs
cannot hold two such servers at once, so each level's measurement is split by arm: every
job of the checkpoint's arm runs while it serves, then that arm is stopped, the source
draft's started and measured, stopped, the target alone started and measured -- the same
prompts in the same order on each. The levels then decide from what each arm gave.

Where the arms are served (containers this run starts, one after another or side by side;
local processes; endpoints the caller gives) is the :class:`ArmServers` a run hands in; this
module only says what runs on which arm, and in which order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from qualify import errors
from qualify.runtime.companions import ARMS, CHECKPOINT


@dataclass(frozen=True)
class ArmJob:
    """What one level measures on one arm.

    Attributes:
        level: the level whose decision reads the result.
        arm: ``checkpoint``, ``source`` or ``reference``.
        measure: called with an OpenAI client and the arm's endpoint while the arm serves.
    """

    level: str
    arm: str
    measure: Callable[[Any, str], Any]


@dataclass
class ArmResult:
    """One job's outcome: its value, or why there is none (the arm did not serve, or the job failed)."""

    value: Any = None
    error: str | None = None
    endpoint: str | None = None


class ArmServers(Protocol):
    """How a run reaches its arms: the one interface every way of serving them implements."""

    def endpoint(self, arm: str) -> str:
        """The arm's API root once it serves (started now where it is started one after another).

        Raises:
            RuntimeNotStarted: it cannot serve, with the reason.
        """
        ...

    def done(self, arm: str) -> None:
        """Every job of the arm has run: it may be stopped (where arms run one after another)."""
        ...


@dataclass
class GivenArms:
    """Arms served by callables: an endpoint each (a given URL, a local process, a container), and a stop.

    Attributes:
        endpoints: arm -> a callable that returns its endpoint once it serves.
        stop: called with an arm once its jobs are done (nothing, for servers left running).
    """

    endpoints: Mapping[str, Callable[[], str]]
    stop: Callable[[str], None] = field(default=lambda arm: None)

    def endpoint(self, arm: str) -> str:
        if arm not in self.endpoints:
            raise errors.RuntimeNotStarted(f"no {arm} server in this run")
        return self.endpoints[arm]()

    def done(self, arm: str) -> None:
        self.stop(arm)


class Arms:
    """Runs every job of each arm while it serves, arm after arm, once per run; the levels read the results.

    Args:
        servers: how the arms are reached.
        jobs: every job of the run (the levels it performs), in the order they run on an arm.
        make_client: an OpenAI client for an endpoint.
    """

    def __init__(self, servers: ArmServers, jobs: Sequence[ArmJob], make_client: Callable[[str], Any]) -> None:
        unknown = sorted({job.arm for job in jobs} - set(ARMS))
        if unknown:
            raise errors.HarnessError(f"unknown arm(s) {', '.join(unknown)} (known: {', '.join(ARMS)})")
        self.servers = servers
        self.jobs = tuple(jobs)
        self.make_client = make_client
        self.order: list[str] = []
        self._results: dict[tuple[str, str], ArmResult] | None = None

    def arms(self) -> tuple[str, ...]:
        """The arms this run measures, in the order they are served."""
        wanted = {job.arm for job in self.jobs}
        return tuple(arm for arm in ARMS if arm in wanted)

    def results(self, level: str) -> dict[str, ArmResult]:
        """``level``'s result on each of its arms (every arm is measured on the first call)."""
        if self._results is None:
            self._results = self._run()
        return {arm: res for (lvl, arm), res in self._results.items() if lvl == level}

    def _run(self) -> dict[tuple[str, str], ArmResult]:
        out: dict[tuple[str, str], ArmResult] = {}
        for arm in self.arms():
            jobs = [job for job in self.jobs if job.arm == arm]
            try:
                url = self.servers.endpoint(arm)
            except errors.QualifyError as exc:
                for job in jobs:
                    out[(job.level, arm)] = ArmResult(error=f"the {arm} arm did not serve: {exc}")
                self.servers.done(arm)
                continue
            self.order.append(arm)
            client = self.make_client(url)
            try:
                for job in jobs:
                    try:
                        out[(job.level, arm)] = ArmResult(job.measure(client, url), endpoint=url)
                    except errors.ServingError as exc:
                        out[(job.level, arm)] = ArmResult(error=f"on the {arm} arm ({url}): {exc}", endpoint=url)
            finally:
                self.servers.done(arm)
        return out


def required(results: Mapping[str, ArmResult], arms: Sequence[str]) -> dict[str, Any]:
    """Each arm's value, or the error of the first that has none.

    Raises:
        RuntimeNotStarted: an arm gave no value (its reason).
    """
    for arm in arms:
        res = results.get(arm)
        if res is None:
            raise errors.RuntimeNotStarted(f"the {arm} arm was not measured in this run")
        if res.error is not None:
            raise errors.RuntimeNotStarted(res.error)
    return {arm: results[arm].value for arm in arms}


__all__ = ["CHECKPOINT", "ArmJob", "ArmResult", "ArmServers", "Arms", "GivenArms", "required"]
