"""Reading a vLLM 0.32 command line as vLLM's FlexibleArgumentParser reads it (the forms launchers use)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from qualify.runtime import vllm_args
from qualify.runtime.vllm_args import command_args, options, resolve

SPEC = {"method": "dflash", "model": "org/draft", "revision": "a" * 40, "num_speculative_tokens": 7}


def test_the_entry_is_the_module_run_with_dash_m_or_the_console_script() -> None:
    assert command_args(["/venv/bin/python", "-u", "-m", "vllm.entrypoints.openai.api_server", "--port", "9"],
                        ["-m", "--port", "9"]) == ("vllm.entrypoints.openai.api_server", ["--port", "9"])
    assert command_args(["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"],
                        ["/usr/local/bin/vllm", "serve", "m"]) == ("vllm", ["serve", "m"])
    entry, args = command_args(["python3", "/launch.py", "--x"], ["/launch.py", "--x"])
    assert entry == "unknown: /launch.py" and args == ["--x"]


def test_serve_takes_the_model_positionally_and_moves_model_there() -> None:
    assert resolve(["serve", "/models/t", "--port", "8001"])["model"] == "/models/t"
    assert resolve(["serve", "-tp", "2", "--model", "/models/t"])["model"] == "/models/t"
    assert resolve(["--model=/models/t"])["model"] == "/models/t"
    both = resolve(["serve", "/a", "--model", "/b"])
    assert any("positional model" in p for p in both["problems"])


def test_aliases_underscores_equals_and_the_last_occurrence() -> None:
    got = resolve(["--model", "m", "-tp", "2", "--tensor_parallel_size=4", "-dcp", "2", "--port=8005",
                   "--served_model_name", "a", "b", "--kv-cache-dtype", "fp8"])
    assert got["tensor_parallel_size"] == 4  # the last one wins, whatever its spelling
    assert got["decode_context_parallel_size"] == 2
    assert got["port"] == 8005 and got["served_model_name"] == ["a", "b"] and got["kv_cache_dtype"] == "fp8"


def test_defaults_where_nothing_is_given() -> None:
    got = resolve(["--model", "m"])
    assert (got["port"], got["tensor_parallel_size"], got["decode_context_parallel_size"]) == (8000, 1, 1)
    assert got["kv_cache_dtype"] == "auto" and got["cudagraph_mode"] is None and got["speculative_config"] is None
    assert got["served_model_name"] == []


def test_speculative_config_json_dotted_and_shortcuts() -> None:
    assert resolve(["-sc", json.dumps(SPEC)])["speculative_config"] == SPEC
    dotted = resolve(["--speculative-config", json.dumps(SPEC), "--speculative_config.model", "/draft",
                      "--speculative-config.num_speculative_tokens", "3"])["speculative_config"]
    # vLLM appends the dotted keys as one JSON value after the rest: the earlier JSON is replaced, not merged.
    assert dotted == {"model": "/draft", "num_speculative_tokens": 3}
    short = resolve(["--spec-method", "dflash", "--spec-model", "/d", "--spec-tokens", "5"])["speculative_config"]
    assert short == {"method": "dflash", "model": "/d", "num_speculative_tokens": "5"}
    dashed = resolve(["-sc", '{"num-speculative-tokens": 2}'])["speculative_config"]
    assert dashed == {"num_speculative_tokens": 2}


def test_a_speculative_config_that_is_not_json_is_a_problem() -> None:
    got = resolve(["--speculative-config", "{method: dflash}"])
    assert any("--speculative-config is not JSON" in p for p in got["problems"])


def test_cuda_graph_mode_from_the_compilation_config_and_enforce_eager() -> None:
    assert resolve(["-cc", '{"cudagraph_mode": "full"}'])["cudagraph_mode"] == "FULL"
    assert resolve(["--compilation-config.cudagraph_mode", "PIECEWISE"])["cudagraph_mode"] == "PIECEWISE"
    assert resolve(["-cc", '{"cudagraph_mode": "FULL"}', "--enforce-eager"])["cudagraph_mode"] == "NONE"
    assert resolve(["--enforce-eager", "--no-enforce-eager"])["cudagraph_mode"] is None


def test_backends_as_vllm_normalises_them() -> None:
    got = resolve(["--attention-backend", "flash_attn", "--moe-backend", "B12X", "--linear-backend", "Flash-Infer"])
    assert (got["attention_backend"], got["moe_backend"], got["linear_backend"]) == ("FLASH_ATTN", "b12x",
                                                                                     "flash_infer")
    assert resolve(["-ac", '{"backend": "TRITON_ATTN"}'])["attention_backend"] == "TRITON_ATTN"


def test_a_stray_argument_is_named() -> None:
    _, found, problems = options(["--enforce-eager", "stray", "--port", "1"])
    assert found["--enforce-eager"] is True and found["--port"] == "1"
    assert problems == ["an argument no option takes: 'stray'"]


def test_it_imports_nothing_but_the_standard_library() -> None:
    # The stand-in imports this file inside the runtime image, where this package is not installed.
    tree = ast.parse(Path(vllm_args.__file__).read_text(encoding="utf-8"))
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert modules <= {"__future__", "json", "os", "collections.abc", "typing"}
