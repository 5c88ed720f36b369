"""What the runtime's draft model class reads from a checkpoint: config keys, tensor shapes, unquantized modules.

vLLM builds a draft from ``config.json``'s ``architectures`` (or, for a checkpoint in the
``speculators`` format, from ``speculators_model_type``). Its DFlash classes read a few
``dflash_config`` keys with ``int(config[key])`` and no default, so a checkpoint without
one fails to load with a ``KeyError``; and they build some modules with
``quant_config=None``, so a checkpoint that quantizes one fails with "There is no module
or parameter named '<module>.weight_scale'". The contracts below are read from vLLM 0.32.0
(``model_executor/models/qwen3_dflash.py``, ``qwen3_dflash2.py``,
``transformers_utils/configs/speculators/algos.py``, ``v1/spec_decode/llm_base_proposer.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from qualify.checkpoint.quant_config import MODEL_CONFIG, is_excluded, module_of
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.core import Evidence
from qualify.mxfp8.constants import ELEMENT_DTYPE

#: Dtypes a module built unquantized may be stored in (vLLM copies them into the model dtype).
FLOAT_DTYPES = ("BF16", "F16", "F32")


@dataclass(frozen=True)
class DraftModelContract:
    """What one draft architecture's runtime model class needs from the checkpoint."""

    architecture: str
    runtime_class: str  # where the contract was read, for the findings
    required_keys: tuple[str, ...]  # dflash_config keys read as int(...) with no default
    unquantized_modules: tuple[str, ...] = ()  # modules built with quant_config=None
    grouped_convolutions: bool = False  # per-layer attention_conv / mlp_conv (DFlash 2)
    candidate_selector: bool = False  # the low-rank candidate head (DFlash 2)


DFLASH = DraftModelContract(
    "DFlashDraftModel", "vLLM 0.32 qwen3_dflash.DFlashQwen3ForCausalLM", ("mask_token_id",))
DFLASH2 = DraftModelContract(
    "DFlash2DraftModel", "vLLM 0.32 qwen3_dflash2.DFlash2Qwen3ForCausalLM",
    ("mask_token_id", "conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"),
    unquantized_modules=("candidate_selector.hidden_projection",),
    grouped_convolutions=True, candidate_selector=True)
CONTRACTS: dict[str, DraftModelContract] = {c.architecture: c for c in (DFLASH, DFLASH2)}
#: speculators_model_type -> the architecture vLLM's speculators config transform gives the draft.
SPECULATORS_ARCHITECTURES = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}
#: Plain causal LMs (used as drafts by draft_model speculation): vLLM reads only their standard
#: config, whose agreement with the tensor shapes ``format.check_model_config`` verifies.
STANDARD_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})

_LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.")
_CONVS = ("attention_conv", "mlp_conv")


def contract_for(config: dict[str, Any]) -> DraftModelContract | None:
    """The draft contract of ``config`` (a ``config.json`` object), or None for an architecture with none."""
    arch = SPECULATORS_ARCHITECTURES.get(str(config.get("speculators_model_type")))
    archs = [arch] if arch else [a for a in config.get("architectures") or [] if isinstance(a, str)]
    return next((CONTRACTS[a] for a in archs if a in CONTRACTS), None)


def unquantized_modules_for(config: dict[str, Any]) -> tuple[str, ...]:
    """Modules the runtime builds unquantized for this config's architecture (a conversion must exclude them)."""
    contract = contract_for(config)
    return contract.unquantized_modules if contract else ()


def runtime_draft_config(config: dict[str, Any]) -> dict[str, Any]:
    """The ``dflash_config`` the runtime's model class reads.

    A ``speculators``-format config keeps the keys at its top level, and vLLM copies them
    in; otherwise it is ``config.json``'s ``dflash_config`` as written.
    """
    if str(config.get("speculators_model_type")) in SPECULATORS_ARCHITECTURES:
        keys = ("mask_token_id", *DFLASH2.required_keys)
        return {k: config[k] for k in keys if config.get(k) is not None}
    draft = config.get("dflash_config")
    return dict(draft) if isinstance(draft, dict) else {}


def model_config(config: dict[str, Any]) -> dict[str, Any]:
    """The model dimensions' config: a ``speculators`` config's ``transformer_layer_config``, as vLLM builds it."""
    if str(config.get("speculators_model_type")) in SPECULATORS_ARCHITECTURES:
        inner = config.get("transformer_layer_config")
        return inner if isinstance(inner, dict) else {}
    return config


def _positive_int(value: Any) -> bool:
    # int() would truncate 16.5 or accept "16"; a JSON integer is what the key means.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_zero(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def check_draft_model(ckpt: Checkpoint, config: dict[str, Any]) -> Evidence:
    """The config has every key the runtime's draft model class reads, the tensors its shapes, and the
    modules it builds unquantized are stored unquantized.

    An architecture with no known contract is a finding (nothing says the runtime can build
    it), except the plain causal LMs whose standard config ``check_model_config`` covers.
    """
    ev = Evidence("the config has every key the runtime's draft model class reads with no default, the "
                  "draft-specific tensors have the shapes it builds, and the modules it builds unquantized "
                  "are stored unquantized")
    archs = config.get("architectures")
    contract = contract_for(config)
    ev.measured["architectures"] = archs if isinstance(archs, list) else None
    if contract is None:
        names = [a for a in archs or [] if isinstance(a, str)] if isinstance(archs, list) else []
        if names and all(a in STANDARD_ARCHITECTURES for a in names):
            ev.measured["contract"] = "standard causal LM: only its standard config is read"
            return ev
        ev.add(f"architectures {names or archs!r} name no draft model this harness knows the runtime's contract "
               f"for ({', '.join(sorted(CONTRACTS))}, or a plain {', '.join(sorted(STANDARD_ARCHITECTURES))}): "
               "nothing shows the runtime can build it", file=MODEL_CONFIG)
        return ev
    ev.measured["contract"] = contract.runtime_class
    ev.expected.update(required_keys=list(contract.required_keys),
                       unquantized_modules=list(contract.unquantized_modules))
    draft = runtime_draft_config(config)
    values: dict[str, int] = {}
    for key in contract.required_keys:
        if key not in draft:
            ev.add(f"dflash_config.{key} is missing: {contract.runtime_class} reads it with no default "
                   "(a KeyError at load)", file=MODEL_CONFIG)
        elif key != "mask_token_id" and not _positive_int(draft[key]):
            ev.add(f"dflash_config.{key} is {draft[key]!r}, not a positive integer", file=MODEL_CONFIG)
        elif key == "mask_token_id" and not (_positive_int(draft[key]) or _is_zero(draft[key])):
            ev.add(f"dflash_config.{key} is {draft[key]!r}, not a token id", file=MODEL_CONFIG)
        else:
            values[key] = draft[key]
    ev.measured["dflash_config"] = {k: draft.get(k) for k in contract.required_keys}
    model = model_config(config)
    if str(config.get("speculators_model_type")) in SPECULATORS_ARCHITECTURES:
        for key, why in (("transformer_layer_config", "the draft's model config"),
                         ("aux_hidden_state_layer_ids", "the target layers it reads")):
            if key not in config:
                ev.add(f"'{key}' is missing: vLLM's speculators config reads {why} from it with no default",
                       file=MODEL_CONFIG)
    hidden, vocab = model.get("hidden_size"), model.get("vocab_size")
    hidden = hidden if _positive_int(hidden) else None
    vocab = vocab if _positive_int(vocab) else None
    if vocab is not None and "mask_token_id" in values and values["mask_token_id"] >= vocab:
        ev.add(f"dflash_config.mask_token_id {values['mask_token_id']} is outside the vocabulary "
               f"({vocab} tokens)", file=MODEL_CONFIG)
    if contract.grouped_convolutions:
        _check_convolutions(ckpt, model, contract, values, hidden, ev)
    if contract.candidate_selector:
        _check_selector(ckpt, contract, values, hidden, vocab, ev)
    _check_unquantized(ckpt, contract, ev)
    return ev


def _shape_finding(ckpt: Checkpoint, name: str, want: list[int], why: str, ev: Evidence) -> None:
    if name not in ckpt:
        ev.add(f"is missing: {why} builds it {want} and refuses a checkpoint that leaves it uninitialised",
               tensor=name)
        return
    got = list(ckpt.info(name).shape)
    if got != want:
        ev.add(f"shape {got}, but {why} builds it {want}", file=ckpt.file_of(name), tensor=name)


def _check_convolutions(ckpt: Checkpoint, config: dict[str, Any], contract: DraftModelContract,
                        values: dict[str, int], hidden: int | None, ev: Evidence) -> None:
    taps, group = values.get("conv_kernel_size"), values.get("conv_group_size")
    if hidden is None or taps is None or group is None:
        return  # the missing key or size is already a finding; no shape follows from it
    if hidden % group:
        ev.add(f"dflash_config.conv_group_size {group} does not divide hidden_size {hidden}: "
               f"{contract.runtime_class} refuses it", file=MODEL_CONFIG)
        return
    layers = config.get("num_hidden_layers")
    indices: Iterable[int] = range(layers) if isinstance(layers, int) and _positive_int(layers) else sorted(
        {int(m.group(1)) for n in ckpt.names() if (m := _LAYER.match(n))})
    prefix = "model." if any(n.startswith("model.layers.") for n in ckpt.names()) else ""
    rows = 2 * taps * (hidden // group)
    for i in indices:
        for conv in _CONVS:
            base = f"{prefix}layers.{i}.{conv}"
            _shape_finding(ckpt, f"{base}.base_kernel", [2, taps, hidden],
                           f"{contract.runtime_class} (2 sides x conv_kernel_size {taps} x hidden_size)", ev)
            _shape_finding(ckpt, f"{base}.kernel_projection.weight", [rows, hidden],
                           f"{contract.runtime_class} (2 x conv_kernel_size {taps} x hidden_size {hidden} / "
                           f"conv_group_size {group} rows)", ev)
    ev.measured["kernel_projection_rows"] = rows


def _check_selector(ckpt: Checkpoint, contract: DraftModelContract, values: dict[str, int], hidden: int | None,
                    vocab: int | None, ev: Evidence) -> None:
    rank, top_k = values.get("selector_rank"), values.get("selector_top_k")
    if top_k is not None and vocab is not None and top_k > vocab:
        ev.add(f"dflash_config.selector_top_k {top_k} exceeds the vocabulary ({vocab} tokens): the candidate head "
               "cannot pick that many", file=MODEL_CONFIG)
    if rank is None or hidden is None or vocab is None:
        return
    prefix = "model." if "model.candidate_selector.hidden_projection.weight" in ckpt else ""
    why = f"{contract.runtime_class} (vocab_size x selector_rank)"
    for codebook in ("predecessor_codebook", "successor_codebook"):
        _shape_finding(ckpt, f"{prefix}candidate_selector.{codebook}", [vocab, rank], why, ev)
    _shape_finding(ckpt, f"{prefix}candidate_selector.hidden_projection.weight", [rank, hidden],
                   f"{contract.runtime_class} (selector_rank x hidden_size)", ev)


def _check_unquantized(ckpt: Checkpoint, contract: DraftModelContract, ev: Evidence) -> None:
    pats = contract.unquantized_modules
    for name in ckpt.names():
        module = module_of(name)
        if not is_excluded(module, pats):
            continue
        info, file = ckpt.info(name), ckpt.file_of(name)
        if name.endswith("_scale") or name.endswith((".input_scale", ".weight_scale_2")):
            ev.add(f"quantization scale of a module {contract.runtime_class} builds unquantized "
                   f"(quant_config=None): the load fails with \"There is no module or parameter named "
                   f"'{name}'\"; exclude '{module_of(name)}' from quantization", file=file, tensor=name)
        elif info.dtype == ELEMENT_DTYPE:
            ev.add(f"quantized ({ELEMENT_DTYPE}), but {contract.runtime_class} builds '{module}' unquantized "
                   "(quant_config=None) and would load the fp8 bytes as plain numbers; it must stay in its source "
                   "dtype and be excluded from quantization", file=file, tensor=name)
        elif info.dtype not in FLOAT_DTYPES:
            ev.add(f"stored as {info.dtype}; {contract.runtime_class} builds '{module}' unquantized and needs "
                   f"one of {', '.join(FLOAT_DTYPES)}", file=file, tensor=name)
