"""A credential in an endpoint URL never reaches a report, the terminal or a log, and is never sent in a URL."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qualify.core import Evidence, Status
from qualify.report.markdown import render_markdown, summary_lines
from qualify.report.model import Check, LevelResult, Run, write_json
from qualify.serving import client
from qualify.util.redact import API_KEY_ENV, MASK, redact, url_credentials
from tests.helpers import FIXTURE, REPO

SECRET = "s3cr3tTOKENvalue"

URLS = [
    f"http://user:{SECRET}@127.0.0.1:9/v1",
    f"http://{SECRET}@127.0.0.1:9/v1",
    f"https://user:{SECRET}@host.example/v1",
    f"http://user:p@ss{SECRET}@127.0.0.1:9/v1",  # an '@' inside the password
    f"http://127.0.0.1:9/v1?api_key={SECRET}",
    f"http://127.0.0.1:9/v1?x=1&access-token={SECRET}",
    f"http://127.0.0.1:9/v1?token={SECRET}#frag",
    f"http://127.0.0.1:9/v1?KEY={SECRET}",
]


@pytest.mark.parametrize("url", URLS)
def test_redact_masks_every_credential_in_a_url(url):
    shown = redact(f"GET {url} failed")
    assert SECRET not in shown and MASK in shown
    assert url_credentials(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://host/v1?model=x", "http://h/v1?monkey=1"])
def test_plain_urls_are_left_alone(url):
    assert redact(url) == url and url_credentials(url) == []


@pytest.mark.parametrize("url", URLS)
def test_an_endpoint_with_a_credential_is_refused_without_showing_it(url):
    with pytest.raises(client.UsageError) as info:
        client.check_endpoint(url)
    text = str(info.value)
    assert SECRET not in text
    if "?" in url and "@" not in url.split("?")[0]:
        assert "query parameter" in text
    assert API_KEY_ENV in text


def test_the_api_key_comes_from_the_environment_and_goes_in_a_header(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, SECRET)
    c = client.make_client("http://127.0.0.1:9/v1")
    assert c.api_key == SECRET and SECRET not in str(c.base_url)
    monkeypatch.delenv(API_KEY_ENV)
    assert client.make_client("http://127.0.0.1:9/v1").api_key == "EMPTY"


def test_a_credential_in_a_message_is_redacted_in_every_output(tmp_path):
    url = f"http://user:{SECRET}@10.0.0.1:8000/v1"
    ev = Evidence("the server answers")
    ev.add(f"POST {url}/completions: connection refused")
    run = Run(run_id="r", harness_version="0", started_at="t", command=["qualify", "run", "--endpoint", url],
              profile={"name": "fixture", "sha256": "0" * 64, "conditions": {}},
              levels=[LevelResult("smoke", checks=[Check("smoke.x", "smoke", "t", Status.FAILED, ev.failure_text(),
                                                         ev)])],
              errors=[f"cannot reach {url}?api_key={SECRET}"])
    write_json(run, tmp_path / "report.json")
    assert SECRET not in (tmp_path / "report.json").read_text()
    assert SECRET not in render_markdown(run)
    assert SECRET not in "\n".join(summary_lines(run))


@pytest.mark.parametrize("url", [URLS[0], URLS[4]])
def test_the_cli_never_prints_or_records_an_endpoint_credential(tmp_path, url):
    proc = subprocess.run(
        [sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--levels", "smoke",
         "--endpoint", url, "--report-dir", str(tmp_path / "r")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert "carries a credential in its URL" in proc.stderr
    for path in (tmp_path / "r").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace")


def test_report_json_keeps_names_exact_while_redacting(tmp_path):
    ev = Evidence("x")
    ev.add("odd", tensor="layers.0\nverdict: qualified")
    run = Run(run_id="r", harness_version="0", started_at="t",
              profile={"name": "fixture", "sha256": "0" * 64, "conditions": {}},
              levels=[LevelResult("structure", checks=[Check("structure.x", "structure", "t", Status.FAILED,
                                                             "m", ev)])])
    write_json(run, tmp_path / "report.json")
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["levels"][0]["checks"][0]["evidence"]["findings"][0]["tensor"] == "layers.0\nverdict: qualified"


@pytest.mark.parametrize("url", URLS)
def test_no_request_is_made_to_a_url_with_a_credential(url):
    """Whatever the URL came from (a profile, a fixture), the client and /metrics fetcher refuse it."""
    for call in (lambda: client.make_client(url), lambda: client.fetch_text(url + "/metrics", timeout_s=0.1)):
        with pytest.raises(client.UsageError) as info:
            call()
        assert SECRET not in str(info.value) and "carries a credential" in str(info.value)
