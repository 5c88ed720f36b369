"""Keep secrets (Hugging Face tokens above all) out of logs, reports and printed commands.

Everything the harness writes that may carry text it did not compose itself -- the
runtime container's log, a printed ``docker run`` line, error messages from the hub
client -- goes through :func:`redact` first. Two nets, because either alone leaks:

- the *values* of secret-looking environment variables of this process (``HF_TOKEN``,
  ``*_TOKEN``, ``*_SECRET``, ...), wherever they appear, whatever their shape;
- *shapes* of well-known credentials (``hf_...`` user tokens, ``Authorization: Bearer``
  headers, the user-info of a URL -- ``http://user:TOKEN@host`` or ``http://TOKEN@host`` -- and
  secret-named query parameters such as ``?api_key=...``), for secrets that came from
  somewhere other than our environment.

The harness never sends a credential in a URL: an endpoint that carries one is refused
(:func:`url_credentials` says where it is), and the API key of a protected endpoint comes
from the environment variable :data:`API_KEY_ENV`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping

MASK = "***REDACTED***"

#: Environment variable names whose values are secrets: a name component (between underscores) that is
#: TOKEN, SECRET, ... -- HF_TOKEN and AWS_SECRET_ACCESS_KEY are, the contract's NUM_SPECULATIVE_TOKENS is not.
_SECRET_NAME = re.compile(
    r"(?i)(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?|AUTH)(?:_|$)")
# A value this short is not a plausible secret, and masking it would garble ordinary text ("1", "main").
_MIN_SECRET_LEN = 6
# Hugging Face user access tokens: "hf_" and 34 letters today; anything of 20+ is treated as one.
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+")
# scheme://user:password@ or scheme://token@ -- any user-info of a URL may be a credential.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#'\"<>]+@")
#: Query parameter names whose values are credentials (compared case-insensitively, "-" as "_").
SECRET_QUERY_KEYS = ("api_key", "apikey", "key", "token", "access_token", "auth", "auth_token", "secret",
                     "client_secret", "password", "passwd", "pwd", "sig", "signature", "x_api_key", "hf_token")
_URL_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:" + "|".join(k.replace("_", "[_-]?") for k in SECRET_QUERY_KEYS) + r")=)[^&;#\s'\"<>]+")

#: The environment variable that holds the API key of an endpoint started with ``--api-key``
#: (sent as ``Authorization: Bearer``, never in the URL, never recorded).
API_KEY_ENV = "QUALIFY_API_KEY"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret (its value must never be shown)."""
    return bool(_SECRET_NAME.search(name))


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of secret-named variables in ``environ`` (default: this process), longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= _MIN_SECRET_LEN}
    # Longest first, so a secret containing another is masked whole.
    return sorted(values, key=len, reverse=True)


def _masker(extra_secrets: Iterable[str] = ()) -> Callable[[str], str]:
    # The environment's secrets are read once per masker: a report of tens of thousands of strings would
    # otherwise scan every variable of the process once per string.
    secrets = sorted({s for s in (*secret_values(), *extra_secrets) if s and len(s) >= _MIN_SECRET_LEN},
                     key=len, reverse=True)

    def mask(text: str) -> str:
        if not text:
            return text
        for secret in secrets:
            text = text.replace(secret, MASK)
        text = _HF_TOKEN.sub(MASK, text)
        text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
        text = _URL_QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)
        return _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)

    return mask


def redact(text: str, extra_secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and every credential-shaped string masked."""
    return _masker(extra_secrets)(text) if text else text


def url_credentials(url: str) -> list[str]:
    """Where ``url`` carries a credential: "user-info" and/or each secret-named query parameter.

    Args:
        url: any URL (it is only parsed, never fetched).
    """
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    out = ["user-info (user:password@ or token@)"] if "@" in parts.netloc else []
    keys = {k.lower().replace("-", "_") for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
    out += [f"query parameter {k!r}" for k in sorted(keys) if k in SECRET_QUERY_KEYS]
    return out


def redact_data(value: object) -> object:
    """A copy of a JSON-like value with every string redacted (keys too): what a report may store."""
    mask = _masker()

    def walk(item: object) -> object:
        if isinstance(item, str):
            return mask(item)
        if isinstance(item, dict):
            return {mask(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return item

    return walk(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` for display: secret-named variables masked, every other value redacted as text."""
    return {k: (MASK if is_secret_name(k) and v else redact(v)) for k, v in env.items()}


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's rendered message before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Attach a :class:`RedactingFilter` to ``logger``'s handlers (default: the root logger's), once each.

    A filter on a handler sees records from every logger that propagates to it, which a
    filter on a logger does not.
    """
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
