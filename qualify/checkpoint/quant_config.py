"""The checkpoint's own quantization config, as a runtime reads it.

ModelOpt exports declare the scheme twice: ``hf_quant_config.json``
(``{"producer": ..., "quantization": {"quant_algo", "kv_cache_quant_algo", "group_size",
"exclude_modules"}}``) and ``config.json``'s ``quantization_config``
(``{"quant_method": "modelopt", "quant_algo", "ignore", ...}``). vLLM's ModelOpt loader
requires ``kv_cache_quant_algo`` and the exclusion list, and matches exclusions as
fnmatch patterns against module names, so this module does the same. When both files
declare the scheme they must agree: a runtime that reads the other one would load a
different model.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.errors import QuantConfigError
from qualify.util.jsonio import load_json_file

HF_QUANT_CONFIG = "hf_quant_config.json"
MODEL_CONFIG = "config.json"
_MISSING: Any = object()


@dataclass(frozen=True)
class DeclaredScheme:
    """One file's declaration of the quantization scheme, normalised."""

    file: str
    quant_method: str | None
    quant_algo: Any
    group_size: Any  # _MISSING when the file does not say
    kv_cache_quant_algo: Any  # _MISSING when the key is absent; None is a valid "not quantized"
    exclude_modules: tuple[str, ...] | None

    @property
    def declares_kv_cache(self) -> bool:
        return self.kv_cache_quant_algo is not _MISSING

    @property
    def declares_group_size(self) -> bool:
        return self.group_size is not _MISSING


@dataclass(frozen=True)
class QuantConfig:
    schemes: tuple[DeclaredScheme, ...] = field(default_factory=tuple)

    @property
    def exclude_modules(self) -> tuple[str, ...]:
        pats: list[str] = []
        for s in self.schemes:
            for p in s.exclude_modules or ():
                if p not in pats:
                    pats.append(p)
        return tuple(pats)


def module_of(tensor_name: str) -> str:
    """``layers.0.mlp.up_proj.weight`` -> ``layers.0.mlp.up_proj``."""
    return tensor_name.rsplit(".", 1)[0] if "." in tensor_name else tensor_name


def is_excluded(module: str, patterns: Iterable[str]) -> bool:
    """True if ``module`` matches an exclusion the way vLLM reads them.

    A pattern matches the module itself (fnmatch), or any module below it (so
    ``lm_head`` also excludes ``lm_head.something``). Checkpoints with and without the
    ``model.`` prefix appear in the wild, so both spellings are tried.
    """
    candidates = {module}
    if module.startswith("model."):
        candidates.add(module[len("model."):])
    else:
        candidates.add("model." + module)
    for pat in patterns:
        for cand in candidates:
            if fnmatch.fnmatchcase(cand, pat) or cand.startswith(pat + "."):
                return True
    return False


def _hf_quant(data: Any) -> DeclaredScheme:
    if not isinstance(data, dict) or not isinstance(data.get("quantization"), dict):
        raise QuantConfigError("has no 'quantization' object", file=HF_QUANT_CONFIG)
    q = data["quantization"]
    excl = q.get("exclude_modules")
    if excl is not None and not (isinstance(excl, list) and all(isinstance(p, str) for p in excl)):
        raise QuantConfigError("'exclude_modules' must be a list of strings", file=HF_QUANT_CONFIG)
    return DeclaredScheme(
        file=HF_QUANT_CONFIG,
        quant_method="modelopt",
        quant_algo=q.get("quant_algo"),
        group_size=q.get("group_size", _MISSING),
        kv_cache_quant_algo=q.get("kv_cache_quant_algo", _MISSING),
        exclude_modules=tuple(excl) if excl is not None else None,
    )


def _config_quant(qc: Any) -> DeclaredScheme:
    where = f"{MODEL_CONFIG} quantization_config"
    if not isinstance(qc, dict):
        raise QuantConfigError("'quantization_config' must be an object", file=MODEL_CONFIG)
    # Some exporters nest the ModelOpt block as {"quant_method": "modelopt", "quantization": {...}}.
    nested = qc.get("quantization")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else qc
    excl = inner.get("exclude_modules", inner.get("ignore", qc.get("ignore")))
    if excl is not None and not (isinstance(excl, list) and all(isinstance(p, str) for p in excl)):
        raise QuantConfigError("'ignore'/'exclude_modules' must be a list of strings", file=where)
    kv = inner.get("kv_cache_quant_algo", _MISSING)
    if kv is _MISSING and "kv_cache_scheme" in qc:
        kv = qc["kv_cache_scheme"]
    return DeclaredScheme(
        file=where,
        quant_method=qc.get("quant_method"),
        quant_algo=inner.get("quant_algo"),
        group_size=inner.get("group_size", _MISSING),
        kv_cache_quant_algo=kv,
        exclude_modules=tuple(excl) if excl is not None else None,
    )


def read_quant_config(root: Path) -> QuantConfig:
    """Every declaration of the scheme found in the checkpoint (possibly none)."""
    root = Path(root)
    schemes = []
    if (root / HF_QUANT_CONFIG).exists():
        schemes.append(_hf_quant(load_json_file(root / HF_QUANT_CONFIG, display=HF_QUANT_CONFIG,
                                                error=QuantConfigError)))
    if (root / MODEL_CONFIG).exists():
        cfg = read_model_config(root)
        if "quantization_config" in cfg:
            schemes.append(_config_quant(cfg["quantization_config"]))
    return QuantConfig(tuple(schemes))


def read_model_config(root: Path) -> dict[str, Any]:
    data = load_json_file(Path(root) / MODEL_CONFIG, display=MODEL_CONFIG, error=QuantConfigError)
    if not isinstance(data, dict):
        raise QuantConfigError("must be a JSON object", file=MODEL_CONFIG)
    return data
