"""Tests for qualify.serving.vllm_server's launch plan: the vLLM command line follows the profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.profile import load_profile
from qualify.serving.vllm_server import ServerPlan, plan_for_profile


def test_plan_follows_the_profile(tmp_path: Path) -> None:
    profile = load_profile("fixture")
    plan = plan_for_profile(profile, python=Path("/venv/bin/python"), model=tmp_path / "t", draft=tmp_path / "d",
                            port=8123)
    argv = plan.argv()
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in argv
    assert argv[argv.index("--served-model-name") + 1] == "dflash2-tiny-target"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": str(tmp_path / "d"), "num_speculative_tokens": 7}
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert plan.endpoint == "http://127.0.0.1:8123/v1"
    alone = plan_for_profile(profile, python=Path("/p"), model=tmp_path / "t", draft=None, port=1)
    assert "--speculative-config" not in alone.argv() and alone.speculative_config is None
    assert isinstance(plan, ServerPlan)


def test_plan_with_dflash_and_the_cpu_plugin(tmp_path: Path) -> None:
    from qualify.runtime.vllm_cpu_plugin import PLUGIN_DIR

    profile = load_profile("fixture")
    plan = plan_for_profile(profile, python=Path("/p"), model=tmp_path / "t", draft=tmp_path / "d", port=1,
                            method="dflash")
    spec = json.loads(plan.argv()[plan.argv().index("--speculative-config") + 1])
    assert spec["method"] == "dflash" and spec["model"] == str(tmp_path / "d")
    # The plugin reaches the server's processes through PYTHONPATH (its entry point), and nothing else does.
    assert plan.env["PYTHONPATH"] == str(PLUGIN_DIR)
    assert (PLUGIN_DIR / "qualify_vllm_cpu-0.32.0.dist-info" / "entry_points.txt").read_text().count(
        "qualify_vllm_cpu = qualify_vllm_cpu:register") == 1



@pytest.mark.slow
def test_a_server_whose_port_was_taken_before_it_bound_ends_naming_the_port(tmp_path: Path) -> None:
    """The port is held (bound, not listening: the start's check finds it free) and the server's own bind fails
    for real, as vLLM's does: a harness fault naming the port, never the draft's failure."""
    import os
    import socket
    import stat
    import sys

    import pytest

    from qualify.errors import ExitCode, PortInUse, exit_code_for
    from qualify.serving.vllm_server import VLLMServer
    from qualify.util.ports import free_port, release_port

    # In place of vLLM's interpreter: binds the --port it is given, as the API server does, with its errors.
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"import socket, sys; s = socket.socket(); "
                      "s.bind(('127.0.0.1', int(sys.argv[sys.argv.index('--port') + 1])))\" \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    port = free_port()
    try:
        with socket.socket() as held:
            held.bind(("127.0.0.1", port))
            server = VLLMServer(ServerPlan(python=python, model=tmp_path, served_model_name="m", port=port,
                                           env=dict(os.environ)), tmp_path / "vllm.log", ready_timeout_s=60)
            server.start()
            with pytest.raises(PortInUse) as info:
                server.wait_ready()
            server.stop()
    finally:
        release_port(port)
    assert f"could not bind 127.0.0.1:{port}" in str(info.value) and info.value.port == port
    assert exit_code_for(info.value) is ExitCode.HARNESS
    assert "Address already in use" in (tmp_path / "vllm.log").read_text()
