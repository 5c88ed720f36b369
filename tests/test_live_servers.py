"""tests/live_servers.py, the session's pool of vLLM servers, on stand-in servers (no vLLM needed).

The stand-in is a python that answers /v1/models with the served name it was launched with, as a
vLLM server does once ready; ``/die`` makes it exit (a test that broke its server), and a draft
folder named ``unloadable`` makes it exit before it is ready (a server that cannot start).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from qualify.runtime.vllm_cpu import STAMP_NAME
from tests.live_servers import Launch, LiveServers

pytestmark = pytest.mark.slow  # a second or so per start: the readiness poll's interval

STANDIN = r"""
import argparse, http.server, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--port", type=int)
p.add_argument("--served-model-name")
p.add_argument("--speculative-config")
args, _ = p.parse_known_args()
if args.speculative_config and json.loads(args.speculative_config)["model"].endswith("unloadable"):
    print("ValueError: cannot load the draft", flush=True)
    sys.exit(3)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/die":
            os._exit(1)
        body = json.dumps({"data": [{"id": args.served_model_name}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
"""


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / STAMP_NAME).write_text("")
    (tmp_path / "standin.py").write_text(STANDIN)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'standin.py'} \"$@\"\n")
    python.chmod(0o755)
    monkeypatch.setenv("QUALIFY_VLLM_VENV", str(venv))
    p = LiveServers(tmp_path / "logs", max_live=2, target=tmp_path / "target")
    yield p
    p.close()


def answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/models", timeout=5):
            return True
    except (urllib.error.URLError, OSError):
        return False


def kill(endpoint: str) -> None:
    root = endpoint.removesuffix("/v1")
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(f"{root}/die", timeout=5)


def test_the_same_launch_is_one_server_and_another_launch_another(pool: LiveServers, tmp_path: Path) -> None:
    draft = tmp_path / "good"
    first = pool.get({"good": Launch("fixture", draft)})["good"]
    again = pool.get({"paired-good": Launch("fixture", draft), "none": Launch("fixture", None)})
    assert again["paired-good"] == first and again["none"].endpoint != first.endpoint
    assert [s["name"] for s in pool.starts] == ["good", "none"]
    other = pool.get({"dflash": Launch("fixture", draft, method="dflash")})["dflash"]
    assert other.endpoint not in (first.endpoint, again["none"].endpoint)
    assert '"method": "dflash"' in " ".join(other.plan.argv())
    assert pool.handed_out == 4


def test_a_server_a_test_broke_is_replaced_by_a_fresh_one_with_its_own_log(pool: LiveServers, tmp_path: Path) -> None:
    launch = {"good": Launch("fixture", tmp_path / "good")}
    first = pool.get(launch)["good"]
    kill(first.endpoint)
    fresh = pool.get(launch)["good"]
    assert fresh.endpoint != first.endpoint and fresh.log_path != first.log_path
    assert answers(fresh.endpoint) and len(pool.starts) == 2


def test_beyond_max_live_the_least_recently_used_idle_server_is_stopped(pool: LiveServers, tmp_path: Path) -> None:
    a = pool.get({"a": Launch("fixture", tmp_path / "a")})["a"]
    b = pool.get({"b": Launch("fixture", tmp_path / "b")})["b"]
    assert pool.get({"a": Launch("fixture", tmp_path / "a")})["a"] == a  # a is now the more recently used
    c = pool.get({"c": Launch("fixture", tmp_path / "c")})["c"]
    assert answers(a.endpoint) and answers(c.endpoint) and not answers(b.endpoint)
    pool.close()
    assert not answers(a.endpoint) and not answers(c.endpoint)


def test_a_failed_start_fails_the_test_and_every_later_request_at_once(pool: LiveServers, tmp_path: Path) -> None:
    launch = {"broken": Launch("fixture", tmp_path / "unloadable")}
    with pytest.raises(pytest.fail.Exception, match=r"(?s)did not start.*cannot load the draft"):
        pool.get(launch)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)failed to start earlier in this session.*cannot load"):
        pool.get(launch)
    assert pool.starts == []


def test_without_the_vllm_venv_the_request_fails_naming_the_setup_script(pool: LiveServers, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUALIFY_VLLM_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(pytest.fail.Exception, match=r"scripts/setup-vllm-cpu\.sh"):
        pool.get({"good": Launch("fixture", tmp_path / "good")})
