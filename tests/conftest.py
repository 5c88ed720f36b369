"""Fixtures shared by the harness's own tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers import FIXTURE
from tests.live_runs import RUN_FIXTURES, SessionRuns, needed
from tests.live_servers import LiveServers

# Property tests run the same examples on every run and have no per-example deadline: a loaded
# 2-core CI machine must not turn a timing into a failure, and the harness's own verdict must not flicker.
settings.register_profile("qualify", deadline=None, derandomize=True)
settings.load_profile("qualify")

POOL = pytest.StashKey[LiveServers]()
#: The last collected test that uses the pool: its servers are stopped after it, not at the session's end.
LAST_USER = pytest.StashKey[str]()


@pytest.fixture
def fixture_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the shipped fixture: (checkpoint_dir, source_dir)."""
    dest = tmp_path / "fx"
    shutil.copytree(FIXTURE, dest)
    return dest / "mxfp8", dest / "source"


@pytest.fixture(scope="session")
def live_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServers]:
    """The session's real vLLM CPU servers, each launch started once (tests/live_servers.py)."""
    pool = LiveServers(tmp_path_factory.mktemp("vllm-logs"))
    request.config.stash[POOL] = pool
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def session_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionRuns]:
    """The session's shared ``qualify run``s (tests/live_runs.py); each stopped at the session's end if still going."""
    runs = SessionRuns(tmp_path_factory.mktemp("qualify-runs"))
    try:
        yield runs
    finally:
        runs.close()


@pytest.fixture(scope="session", autouse=True)
def _shared_runs_started(request: pytest.FixtureRequest) -> None:
    # Started before the first test: the unit tests use one core, and the runs fill the other while they go on.
    names = needed(request.session.items)
    if names:
        runs: SessionRuns = request.getfixturevalue("session_runs")
        runs.start(names)


#: What mutation testing writes into its copy while it runs (its state, bytecode): never the harness's code.
MUTATION_COPY_IGNORES = "__pycache__/\n*.pyc\n*.meta\nmutmut-stats.json\n.pytest_cache/\n.hypothesis/\n"


def pytest_configure(config: pytest.Config) -> None:
    _commit_the_mutation_copy()


def _commit_the_mutation_copy() -> None:
    """Mutation testing (``make mutation``) runs these tests in its own copy of the tree (``mutants/``), with the
    mutated modules in place of the committed ones. The gate knows the checks of its own commit only, and a
    copy that no commit holds has none: every release would be refused there, mutant or not. So the copy is
    committed once, as it stands, in a repository of its own, and the gate's tests read that commit as they
    read the checkout's elsewhere. Nothing of this runs outside mutation testing."""
    if "MUTANT_UNDER_TEST" not in os.environ:
        return
    import qualify

    root = Path(qualify.__file__).resolve().parents[1]
    if root.name != "mutants" or (root / ".git").exists():
        return
    (root / ".gitignore").write_text(MUTATION_COPY_IGNORES)
    git = ["git", "-C", str(root), "-c", "user.name=mutation", "-c", "user.email=mutation@localhost",
           "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the mutation copy"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=120)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A server start is a minute of CPU: only tests marked slow and serving may ask for one (the pool's, or
    # a shared qualify run's, tests/live_runs.py), so that `make test-fast` (-m "not slow") never starts a server.
    serving = {"live_servers", *RUN_FIXTURES}
    wrong = [item.nodeid for item in items if serving & set(getattr(item, "fixturenames", ()))
             and not (item.get_closest_marker("slow") and item.get_closest_marker("serving"))]
    if wrong:
        raise pytest.UsageError("tests that use live vLLM servers must be marked slow and serving: " + ", ".join(wrong))
    # Each module whole and in its order, three groups: those that serve from the pool first (their servers
    # start beside the shared runs, which start with the session), the rest, and the modules that read the
    # shared runs last (by then the runs are done): the one-core unit tests fill what the servers leave.
    readers = {item.path for item in items if RUN_FIXTURES.keys() & set(getattr(item, "fixturenames", ()))}
    pooled = {item.path for item in items if "live_servers" in getattr(item, "fixturenames", ())} - readers
    items[:] = ([i for i in items if i.path in pooled] + [i for i in items if i.path not in pooled | readers]
                + [i for i in items if i.path in readers])
    # A reader that asks the pool again (make test-variants) starts what it needs anew.
    users = [item.nodeid for item in items
             if item.path in pooled and "live_servers" in getattr(item, "fixturenames", ())]
    if users:
        config.stash[LAST_USER] = users[-1]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # The rest of the session runs without idle servers holding memory (a later request would start them again).
    pool = item.config.stash.get(POOL, None)
    if pool is not None and item.nodeid == item.config.stash.get(LAST_USER, None):
        pool.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    pool = config.stash.get(POOL, None)
    if pool is not None:
        terminalreporter.write_line(pool.summary())
