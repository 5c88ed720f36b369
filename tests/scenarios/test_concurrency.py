"""Two runs at the same time (issue "Reliability"): own run folder, own container names, and ports that
cannot be confused with the other run's server."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from qualify import errors
from qualify.errors import HarnessError
from qualify.profile import load_profile
from qualify.report.model import read_json
from qualify.runtime import container as c
from qualify.runtime import labels
from qualify.runtime import plan as plans
from qualify.serving.vllm_server import ServerPlan, VLLMServer
from qualify.util.ports import free_port
from tests.fault_server import MODEL, fault_server, serving_profile
from tests.helpers import FIXTURE, REPO, TRACEBACK

DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


@pytest.mark.slow
def test_two_runs_started_together_get_their_own_folders(tmp_path: Path) -> None:
    reports = tmp_path / "reports"  # the same --report-dir for both
    argv = [sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--levels", "format",
            "--report-dir", str(reports)]
    procs = [subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, out + err
        assert TRACEBACK not in err
    folders = sorted(path.parent for path in reports.glob("*/report.json"))
    assert len(folders) == 2, folders
    runs = [read_json(f / "report.json") for f in folders]
    assert runs[0].run_id != runs[1].run_id
    assert [f.name for f in folders] == sorted(r.run_id for r in runs)  # each folder is its run's id
    for f in folders:
        assert (f / "report.md").is_file()
    # Each run printed its own folder.
    printed = {re.search(r"report: (\S+)", out).group(1) for out, _ in results}  # type: ignore[union-attr]
    assert printed == {str(f / "report.json") for f in folders}


def test_run_ids_started_in_the_same_second_differ() -> None:
    from qualify.util.identifiers import new_run_id

    # 24 random bits after a one-second stamp: two runs collide once in 16.7 million (and then the
    # second is refused by make_run_dir, below); 50 ids collide with probability 7e-5.
    ids = [new_run_id("fixture") for _ in range(50)]
    assert len(set(ids)) == len(ids)
    assert len({i.split("-")[0] for i in ids}) <= 2  # the time stamp alone would not tell them apart
    assert all(re.fullmatch(r"\d{8}T\d{6}Z-fixture-[0-9a-f]{6}", i) for i in ids)


def test_a_run_folder_is_never_shared(tmp_path: Path) -> None:
    from qualify.run.runner import make_run_dir
    from qualify.util.identifiers import new_run_id

    run_id = new_run_id("fixture")
    make_run_dir(tmp_path, run_id)
    with pytest.raises(HarnessError, match="run folder already exists; refusing to overwrite another run"):
        make_run_dir(tmp_path, run_id)


def test_a_run_whose_id_clashes_draws_another_and_gets_its_own_folder(tmp_path: Path, monkeypatch) -> None:
    from qualify.run import runner

    run = runner.new_run(load_profile("fixture"), None, None, ["format"])
    taken = run.run_id
    other = runner.make_run_dir(tmp_path, taken)  # another run holds this id's folder
    (other / "report.json").write_text("the other run's")
    fresh = iter([taken, taken, "20990101T000000Z-fixture-abcdef"])  # two more clashes, then a free id
    monkeypatch.setattr(runner, "new_run_id", lambda name: next(fresh))
    path = runner.claim_run_dir(tmp_path, run)
    assert path == tmp_path / "20990101T000000Z-fixture-abcdef" and path.is_dir()
    assert run.run_id == path.name  # the run's id names its folder
    assert (other / "report.json").read_text() == "the other run's"  # untouched

    monkeypatch.setattr(runner, "new_run_id", lambda name: taken)  # every draw clashes: give up, say why
    run.run_id = taken
    with pytest.raises(errors.RunFolderExists, match="refusing to overwrite another run"):
        runner.claim_run_dir(tmp_path, run)


def test_concurrent_launch_plans_get_their_own_container_names() -> None:
    profile = load_profile("fixture")
    first, second = plans.build_plan(profile), plans.build_plan(profile)
    assert first.run_id != second.run_id
    assert first.name != second.name
    for plan in (first, second):
        assert DOCKER_NAME.fullmatch(plan.name) and plan.name == f"qualify-{plan.run_id}"
        plan_labels = dict(plan.labels)
        assert plan_labels[labels.LABEL_RUN] == plan.run_id  # teardown removes this run's containers only
        assert plan_labels[labels.LABEL_OWNER] == labels.owner_id()
    # The port, though, is the profile's: a second run of the same profile wants the same one.
    assert first.port == second.port == 8000


def test_a_second_run_on_a_fixed_port_is_refused_not_answered_by_the_first(tmp_path: Path) -> None:
    """With host networking, the first run's server would answer the second run's readiness probes."""
    with fault_server() as first_runs_server:
        profile = load_profile(serving_profile(tmp_path / "p.toml", endpoint=first_runs_server.endpoint))
        plan = plans.build_plan(profile)
        assert plan.port == first_runs_server.port
        with pytest.raises(errors.PortInUse) as info:
            c.ensure_port_free(plan.host, plan.port)
        assert f"127.0.0.1:{plan.port} is already in use" in str(info.value)
        assert "not to the runtime under test" in str(info.value)
        assert first_runs_server.requests == []  # refused before any request reached the other server
    c.ensure_port_free(plan.host, plan.port)  # once it is gone, the port is free again


def test_free_port_gives_a_port_nothing_listens_on() -> None:
    ports = {free_port() for _ in range(20)}
    for port in ports:
        c.ensure_port_free("127.0.0.1", port)
    assert len(ports) > 1  # not one fixed port for every run


def test_a_local_server_whose_port_was_taken_meanwhile_is_refused(tmp_path: Path) -> None:
    fake_python = tmp_path / "python"  # stands in for the vLLM venv's python: starts, never serves
    fake_python.write_text("#!/bin/sh\nexec sleep 30\n")
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IXUSR)
    with fault_server() as other_runs_server:
        plan = ServerPlan(python=fake_python, model=tmp_path, served_model_name=MODEL, port=other_runs_server.port)
        server = VLLMServer(plan, tmp_path / "server.log", ready_timeout_s=5)
        try:
            with pytest.raises(HarnessError, match="already in use by another server"):
                server.start()
            assert server.process is None  # nothing was launched
            assert other_runs_server.requests == []  # and nothing asked of the other run's server
        finally:
            server.stop()


def test_a_server_that_lost_the_race_for_its_port_is_not_measured(tmp_path: Path, monkeypatch) -> None:
    """The port was free when checked and taken before our server bound it: whoever answers is not ours."""
    import qualify.serving.vllm_server as vs

    fake_python = tmp_path / "python"  # never binds the port: the other run's server holds it
    fake_python.write_text("#!/bin/sh\nexec sleep 30\n")
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IXUSR)
    with fault_server() as other_runs_server:
        plan = ServerPlan(python=fake_python, model=tmp_path, served_model_name=MODEL, port=other_runs_server.port)
        server = VLLMServer(plan, tmp_path / "server.log", ready_timeout_s=5)
        monkeypatch.setattr(vs, "in_use", lambda host, port: False)  # the race: free at the check
        try:
            server.start()
            with pytest.raises(HarnessError, match="in use by a process this run did not start"):
                server.wait_ready()
        finally:
            server.stop()


def test_a_port_held_by_the_session_we_started_counts_as_ours(tmp_path: Path) -> None:
    """The positive case of the ownership check, on a real listening child process in its own session."""
    from qualify.util import ports

    port = free_port()
    code = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
            "print('up', flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        assert ports.in_use("127.0.0.1", port)
        assert ports.listening_inodes(port)  # /proc shows the listening socket
        assert ports.session_listens(child.pid, port) is True
        import os

        assert ports.session_listens(os.getsid(0), port) is False  # our own session does not hold it
    finally:
        child.kill()
        child.wait()
    assert ports.session_listens(child.pid, port) is False  # nobody listens any more
    assert not ports.in_use("127.0.0.1", port)


def test_without_proc_the_ownership_is_unknown_not_assumed(tmp_path: Path) -> None:
    from qualify.util import ports

    assert ports.listening_inodes(8000, proc=tmp_path) is None
    assert ports.session_listens(1, 8000, proc=tmp_path) is None


def test_a_port_held_from_another_pid_namespace_is_not_the_containers(tmp_path: Path) -> None:
    """The runtime container's ownership check: a listener counts only from inside the container's PID namespace."""
    import os
    import shutil

    from qualify.util import ports

    code = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
            "print('up', flush=True); time.sleep(30)")
    here_port, there_port = free_port(), free_port()
    here = subprocess.Popen([sys.executable, "-c", code, str(here_port)], stdout=subprocess.PIPE, text=True)
    # A listener in a PID namespace of its own, as a container's server is (root, as CI runs).
    unshare = shutil.which("unshare")
    assert unshare is not None and os.geteuid() == 0, "needs unshare(1) and root, as the CI machine has"
    there = subprocess.Popen([unshare, "--pid", "--fork", sys.executable, "-c", code, str(there_port)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert here.stdout is not None and here.stdout.readline().strip() == "up"
        assert there.stdout is not None and there.stdout.readline().strip() == "up"
        assert ports.namespace_listens(os.getpid(), here_port) is True  # our namespace holds it
        assert ports.namespace_listens(os.getpid(), there_port) is False  # held from another namespace
        assert ports.namespace_listens(os.getpid(), free_port()) is False  # nobody listens
        assert ports.namespace_listens(2**22 + 7, here_port) is None  # no such process: cannot tell
    finally:
        for p in (here, there):
            p.kill()
            p.wait()
