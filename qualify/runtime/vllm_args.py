"""What a vLLM 0.32 command line asks for: the settings ``qualify preflight`` compares, read from the argv the
launcher hands to vLLM the way vLLM's ``FlexibleArgumentParser`` reads it.

Standard library only, and it imports nothing of this package: the preflight mounts this file into the
runtime container beside the recording stand-in (``runtimes/preflight/vllm_standin.py``), which reads the
draft's repository and revision with it before any of vLLM (or torch) is imported. The harness reads the
same record with the same function, so the container and the report cannot disagree on what an argument
means.

The forms read are vLLM 0.32's (``vllm/utils/argparse_utils.py``, ``vllm/engine/arg_utils.py``): ``--x=v``
and ``--x v``; underscores in a name read as dashes (up to its first dot); the short aliases ``-tp``,
``-dcp``, ``-sc``, ``-cc``, ``-ac``; dotted keys (``--speculative-config.model X``), merged into one JSON
value given after the others, so they replace an earlier JSON value; ``--spec-method``, ``--spec-model``
and ``--spec-tokens`` merged into the speculative config; ``vllm serve MODEL`` and ``--model`` moved to
the positional. The last occurrence of an option wins (argparse). A setting not given is vLLM's default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

ALIASES = {"-tp": "--tensor-parallel-size", "-dcp": "--decode-context-parallel-size", "-sc": "--speculative-config",
           "-cc": "--compilation-config", "-ac": "--attention-config", "-q": "--quantization",
           "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size", "-ep": "--enable-expert-parallel"}
#: Options whose value vLLM reads as JSON (a dict).
JSON_OPTIONS = ("--speculative-config", "--compilation-config", "--attention-config", "--kernel-config")
#: Options that take no value (store_true, or argparse's --x/--no-x), among those a launcher passes.
FLAGS = frozenset({"--enforce-eager", "--no-enforce-eager", "--trust-remote-code", "--no-trust-remote-code",
                   "--disable-log-stats", "--enable-prefix-caching", "--no-enable-prefix-caching",
                   "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--enable-expert-parallel",
                   "--disable-custom-all-reduce", "--async-scheduling", "--no-async-scheduling",
                   "--enable-log-requests", "--disable-log-requests", "--headless", "--enable-auto-tool-choice",
                   "--disable-uvicorn-access-log", "--skip-tokenizer-init", "--disable-sliding-window",
                   "--disable-cascade-attn", "--enable-sleep-mode", "--help"})
#: Options that take one value or more (nargs="+").
MANY = frozenset({"--served-model-name"})
#: vLLM's defaults for the settings compared (``vllm serve --help`` of 0.32).
DEFAULT_PORT = 8000
#: The ``-m`` modules and console script names that start vLLM's OpenAI-compatible server.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"


def command_args(orig_argv: Sequence[str], argv: Sequence[str]) -> tuple[str, list[str]]:
    """How vLLM was entered, and the arguments its parser reads.

    ``orig_argv`` is the interpreter's whole command line (``sys.orig_argv``), ``argv`` the script's
    (``sys.argv``, as seen while ``vllm`` is first imported). Returns ``(entry, args)``: ``entry`` is the
    module run with ``-m``, ``vllm`` for the console script, or ``unknown: <argv0>`` where vLLM was
    imported by another program (its arguments are then that program's).
    """
    orig = list(orig_argv)
    if "-m" in orig[1:]:
        i = orig.index("-m", 1)
        if i + 1 < len(orig):
            return orig[i + 1], orig[i + 2:]
    if argv and os.path.basename(argv[0]) == "vllm":
        return "vllm", list(argv[1:])
    return f"unknown: {argv[0] if argv else '(no argv)'}", list(argv[1:])


def _normalise(token: str) -> str:
    if token.startswith("--"):
        key, eq, value = token.partition("=")
        head, dot, rest = key[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + rest + eq + value
    for alias, full in ALIASES.items():
        if token == alias or token.startswith((alias + ".", alias + "=")):
            return full + token[len(alias):]
    return token


def _takes_value(option: str) -> bool:
    return option not in FLAGS and not option.startswith("--no-")


def _is_value(token: str) -> bool:
    if not token.startswith("-"):
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def _merge(into: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        nxt = into.get(key)
        if not isinstance(nxt, dict):
            nxt = into[key] = {}
        into = nxt
    into[keys[-1]] = value


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def options(args: Sequence[str]) -> tuple[str | None, dict[str, Any], list[str]]:
    """``(positional model, option -> value, problems)`` of a vLLM argv (without the program).

    A flag's value is True; a JSON option's value is its dict (dotted keys merged in); the last
    occurrence wins. ``problems`` names what vLLM would refuse or this reader cannot read.
    """
    tokens = list(args)
    problems: list[str] = []
    model: str | None = None
    if tokens and tokens[0] == "serve":
        tokens = tokens[1:]
        if tokens and not tokens[0].startswith("-"):
            model = tokens.pop(0)
    found: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(tokens):
        token = _normalise(tokens[i])
        i += 1
        if not token.startswith("-"):
            problems.append(f"an argument no option takes: {token!r}")
            continue
        name, eq, value = token.partition("=")
        given: Any = value if eq else True
        if not eq and name in MANY:
            values = []
            while i < len(tokens) and _is_value(tokens[i]):
                values.append(tokens[i])
                i += 1
            given = values or True
        elif not eq and _takes_value(name.partition(".")[0]) and i < len(tokens) and _is_value(tokens[i]):
            given, i = tokens[i], i + 1
        if "." in name:
            base, *keys = name.split(".")
            _merge(dotted.setdefault(base, {}), keys, _json_or_text(given) if isinstance(given, str) else given)
            continue
        if name.startswith("--no-") and given is True:
            found[name.replace("--no-", "--", 1)] = False
            continue
        found[name] = given
    for name in JSON_OPTIONS:
        if isinstance(found.get(name), str):
            try:
                found[name] = json.loads(found[name])
            except ValueError as exc:
                problems.append(f"{name} is not JSON ({exc}): {found[name]!r}")
    # vLLM appends the dotted keys as one JSON value after the rest: it replaces a value given before.
    found.update(dotted)
    if "--model" in found:
        if model is not None:
            problems.append(f"a positional model {model!r} and --model {found['--model']!r}")
        model = str(found.pop("--model"))
    return model, found, problems


def _int(value: Any, default: int) -> int | str:
    if value is None or value is True:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def speculative_config(found: dict[str, Any]) -> dict[str, Any] | None:
    """The speculative config vLLM builds from ``--speculative-config`` and the ``--spec-*`` shortcuts."""
    spec = found.get("--speculative-config")
    out = dict(spec) if isinstance(spec, dict) else ({"(not a dict)": spec} if spec not in (None, True) else None)
    for option, key in (("--spec-method", "method"), ("--spec-model", "model"),
                        ("--spec-tokens", "num_speculative_tokens")):
        if option in found:
            out = out if out is not None else {}
            out[key] = found[option]
    if out is None:
        return None
    return {str(k).replace("-", "_"): v for k, v in out.items()}


def resolve(args: Sequence[str]) -> dict[str, Any]:
    """The settings a vLLM argv resolves to: model, served names, host and port, parallelism, CUDA graph mode,
    KV cache dtype, backends and the speculative config (None: none), with vLLM's defaults where not given."""
    model, found, problems = options(args)
    compilation = found.get("--compilation-config")
    compilation = compilation if isinstance(compilation, dict) else {}
    attention = found.get("--attention-config")
    attention = attention if isinstance(attention, dict) else {}
    eager = found.get("--enforce-eager") is True
    mode = compilation.get("cudagraph_mode")
    served = found.get("--served-model-name")
    backend = found.get("--attention-backend", attention.get("backend"))
    return {
        "model": model,
        "revision": found.get("--revision"),
        "served_model_name": [served] if isinstance(served, str) else list(served) if isinstance(served, list) else [],
        "host": found.get("--host"),
        "port": _int(found.get("--port"), DEFAULT_PORT),
        "tensor_parallel_size": _int(found.get("--tensor-parallel-size"), 1),
        "decode_context_parallel_size": _int(found.get("--decode-context-parallel-size"), 1),
        "kv_cache_dtype": str(found.get("--kv-cache-dtype") or "auto"),
        "enforce_eager": eager,
        # --enforce-eager captures no CUDA graph whatever the compilation config says.
        "cudagraph_mode": "NONE" if eager else (str(mode).upper() if mode is not None else None),
        "attention_backend": str(backend).upper() if backend is not None else None,
        "moe_backend": _lower_dashless(found.get("--moe-backend")),
        "linear_backend": _lower_dashless(found.get("--linear-backend")),
        "speculative_config": speculative_config(found),
        "problems": problems,
    }


def _lower_dashless(value: Any) -> str | None:
    # vLLM reads these backends with type=lambda s: s.lower().replace("-", "_").
    return None if value is None or value is True else str(value).lower().replace("-", "_")


__all__ = ["API_SERVER_MODULE", "CLI_MODULE", "command_args", "options", "resolve", "speculative_config"]
