"""Tests for qualify.util.redact: secrets by value and by shape, env display, the logging filter."""

from __future__ import annotations

import io
import logging

import pytest

from qualify.util.redact import MASK, RedactingFilter, install_log_redaction, is_secret_name, redact, redact_env

TOKEN = "hf_RedactTestTokenAbcdefghijklmnop012345"


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("AWS_SECRET_ACCESS_KEY", True), ("OPENAI_API_KEY", True),
    ("DB_PASSWORD", True), ("GH_AUTH_TOKEN", True),
    # The serving contract's own variables are not secrets, whatever words they contain.
    ("MAX_NUM_BATCHED_TOKENS", False), ("NUM_SPECULATIVE_TOKENS", False), ("DFLASH_KV_CACHE_DTYPE", False),
    ("AUTHOR", False), ("PATH", False),
])
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_values_of_secret_variables_are_masked_wherever_they_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "s3cr3t-value-of-no-known-shape")
    text = "connecting with s3cr3t-value-of-no-known-shape to the hub"
    assert redact(text) == f"connecting with {MASK} to the hub"
    assert redact("plain text, nothing secret") == "plain text, nothing secret"


def test_credential_shapes_are_masked_without_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert TOKEN not in redact(f"token={TOKEN}")
    assert redact("Authorization: Bearer abc.def.ghi") == f"Authorization: Bearer {MASK}"
    assert redact("https://user:pa55@hub.example/x") == f"https://{MASK}@hub.example/x"
    assert redact("hf_short") == "hf_short"  # too short to be a token; left alone


def test_redact_env_masks_secret_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    shown = redact_env({"HF_TOKEN": TOKEN, "MAX_NUM_BATCHED_TOKENS": "4096", "EMPTY_TOKEN": "",
                        "NOTE": f"uses {TOKEN}"})
    assert shown == {"HF_TOKEN": MASK, "MAX_NUM_BATCHED_TOKENS": "4096", "EMPTY_TOKEN": "", "NOTE": f"uses {MASK}"}


def test_the_logging_filter_redacts_records_from_any_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    stream = io.StringIO()
    logger = logging.getLogger("qualify-test-redact")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        install_log_redaction(logger)
        install_log_redaction(logger)  # idempotent
        assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
        logging.getLogger("qualify-test-redact").warning("request headers: %s", {"authorization": f"Bearer {TOKEN}"})
    finally:
        logger.removeHandler(handler)
    assert TOKEN not in stream.getvalue() and MASK in stream.getvalue()
