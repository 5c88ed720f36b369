"""The checkpoint's own quantization config, as a runtime reads it.

ModelOpt exports declare the scheme twice: ``hf_quant_config.json``
(``{"producer": ..., "quantization": {"quant_algo", "kv_cache_quant_algo", "group_size",
"exclude_modules"}}``) and ``config.json``'s ``quantization_config``. Each declaration is read
here with exactly the keys vLLM 0.32 reads from it (``ModelOptQuantConfigBase.from_config``
in ``vllm/model_executor/layers/quantization/modelopt.py``):

- a block holding a ``quantization`` object (hf_quant_config.json, or a nested config.json
  block): ``quantization.quant_algo``, ``quantization.kv_cache_quant_algo`` (a string, or null),
  ``quantization.group_size`` and ``quantization.exclude_modules``; for MXFP8 vLLM requires
  the last two keys. An ``ignore`` or ``kv_cache_scheme`` beside them is not read.
- a flat block (config.json's ``{"quant_method": "modelopt", "quant_algo": ...}``):
  ``quant_algo``, ``group_size``, ``ignore`` (absent: nothing excluded) and ``kv_cache_scheme``
  (an object with ``type`` "float" and ``num_bits`` 8 means an FP8 KV cache; anything else, or
  none, means none). An ``exclude_modules`` or ``kv_cache_quant_algo`` there is not read.

A key vLLM does not read that says something other than the key it reads is a conflict
(:attr:`DeclaredScheme.conflicts`): one reader of the file would load another model than the
next. Which file vLLM reads: config.json's ``quantization_config`` whenever config.json has one
(``vllm/transformers_utils/config.py``, ``get_config``); ``hf_quant_config.json`` only when it
has none, and then vLLM 0.32 does not detect MXFP8 from it at all (:data:`RUNTIME_FILE`).
Exclusions are fnmatch patterns against module names, as vLLM matches them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from qualify.errors import QuantConfigError
from qualify.util.jsonio import load_json_file

HF_QUANT_CONFIG = "hf_quant_config.json"
MODEL_CONFIG = "config.json"
#: The name of config.json's declaration, as findings name its file.
CONFIG_BLOCK = f"{MODEL_CONFIG} quantization_config"
#: The declaration vLLM 0.32 builds its quantization from when config.json has one: config.json's
#: ``quantization_config`` wins over hf_quant_config.json, which is read only in its absence.
RUNTIME_FILE = CONFIG_BLOCK
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
    #: The scheme sits in a ``quantization`` object (vLLM then requires kv_cache_quant_algo and exclude_modules).
    nested: bool = False
    #: Keys vLLM does not read from this block that say something else than the ones it reads, in words.
    conflicts: tuple[str, ...] = ()
    #: ``producer.name`` of the block, when it names one.
    producer: Any = None

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
    def runtime_scheme(self) -> DeclaredScheme | None:
        """The declaration vLLM 0.32 reads: config.json's quantization_config, or None when there is none."""
        return next((s for s in self.schemes if s.file == RUNTIME_FILE), None)

    @property
    def exclude_modules(self) -> tuple[str, ...]:
        """Every declaration's exclusions, merged in order (a module any of them excludes)."""
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


def _patterns(value: Any, key: str, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and all(isinstance(p, str) for p in value)):
        raise QuantConfigError(f"'{key}' must be a list of strings", file=where)
    return tuple(value)


def kv_cache_algo(value: Any) -> Any:
    """A ``kv_cache_quant_algo`` as vLLM normalises it (a string upper-cased; null stays None)."""
    return value.upper() if isinstance(value, str) else value


def kv_cache_from_scheme(scheme: Any) -> str | None:
    """The KV-cache algorithm vLLM 0.32 derives from a flat block's ``kv_cache_scheme``: FP8 or none."""
    if isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8:
        return "FP8"
    return None


def _show(value: Any) -> str:
    return "absent" if value is _MISSING else repr(value)


def _same_patterns(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> bool:
    return set(a or ()) == set(b or ())


def _nested(block: dict[str, Any], outer: dict[str, Any], where: str) -> tuple[DeclaredScheme, list[str]]:
    """A block whose scheme is ``outer["quantization"]`` (``block``), read as vLLM reads it; and its conflicts."""
    excl = _patterns(block.get("exclude_modules"), "exclude_modules", where)
    kv = block.get("kv_cache_quant_algo", _MISSING)
    conflicts = []
    for holder, name in ((block, "quantization.ignore"), (outer, "ignore")):
        if "ignore" in holder:
            other = _patterns(holder["ignore"], name, where)
            if not _same_patterns(other, excl):
                conflicts.append(f"{name} is {list(other or ())} but quantization.exclude_modules, which vLLM reads "
                                 f"here, is {list(excl) if excl is not None else 'absent'}")
    for holder, name in ((block, "quantization.kv_cache_scheme"), (outer, "kv_cache_scheme")):
        if "kv_cache_scheme" in holder:
            said = kv_cache_from_scheme(holder["kv_cache_scheme"])
            if said != (None if kv is _MISSING else kv_cache_algo(kv)):
                conflicts.append(f"{name} {holder['kv_cache_scheme']!r} means a KV cache of {said!r} but "
                                 f"quantization.kv_cache_quant_algo, which vLLM reads here, is {_show(kv)}")
    for key in ("quant_algo", "group_size", "kv_cache_quant_algo", "exclude_modules"):
        if outer is not block and key in outer and outer[key] != block.get(key, _MISSING):
            conflicts.append(f"{key} is {outer[key]!r} but quantization.{key}, which vLLM reads here, is "
                             f"{_show(block.get(key, _MISSING))}")
    producer = outer.get("producer")
    scheme = DeclaredScheme(
        file=where,
        quant_method=outer.get("quant_method", "modelopt" if where == HF_QUANT_CONFIG else None),
        quant_algo=block.get("quant_algo"),
        group_size=block.get("group_size", _MISSING),
        kv_cache_quant_algo=kv,
        exclude_modules=excl,
        nested=True,
        producer=producer.get("name") if isinstance(producer, dict) else None,
    )
    return scheme, conflicts


def _hf_quant(data: Any) -> DeclaredScheme:
    if not isinstance(data, dict) or not isinstance(data.get("quantization"), dict):
        raise QuantConfigError("has no 'quantization' object", file=HF_QUANT_CONFIG)
    scheme, conflicts = _nested(data["quantization"], data, HF_QUANT_CONFIG)
    return replace(scheme, conflicts=tuple(conflicts))


def _flat(qc: dict[str, Any], where: str) -> DeclaredScheme:
    """A flat config.json block, read as vLLM 0.32 reads it: ``ignore`` and ``kv_cache_scheme``."""
    ignore = _patterns(qc.get("ignore"), "ignore", where)
    excl = _patterns(qc.get("exclude_modules"), "exclude_modules", where)
    kv = kv_cache_from_scheme(qc.get("kv_cache_scheme"))
    conflicts = []
    if "exclude_modules" in qc and not _same_patterns(excl, ignore):
        conflicts.append(f"exclude_modules is {list(excl or ())} but ignore, which vLLM reads here, is "
                         f"{list(ignore) if ignore is not None else 'absent'}: vLLM excludes "
                         f"{list(ignore or ()) or 'nothing'}")
    if "kv_cache_quant_algo" in qc and kv_cache_algo(qc["kv_cache_quant_algo"]) != kv:
        conflicts.append(f"kv_cache_quant_algo is {qc['kv_cache_quant_algo']!r} but kv_cache_scheme, which vLLM "
                         f"reads here, is {_show(qc.get('kv_cache_scheme', _MISSING))}: vLLM runs a KV cache of "
                         f"{kv!r}")
    elif qc.get("kv_cache_scheme") is not None and kv is None:
        conflicts.append(f"kv_cache_scheme {qc['kv_cache_scheme']!r} is not one vLLM recognises (only type 'float' "
                         "with num_bits 8, an FP8 KV cache): vLLM runs the KV cache unquantized")
    if ignore is None and excl is None:
        declared: tuple[str, ...] | None = None
    else:
        declared = ignore or ()
    producer = qc.get("producer")
    return DeclaredScheme(
        file=where,
        quant_method=qc.get("quant_method"),
        quant_algo=qc.get("quant_algo"),
        group_size=qc.get("group_size", _MISSING),
        kv_cache_quant_algo=kv,
        exclude_modules=declared,
        conflicts=tuple(conflicts),
        producer=producer.get("name") if isinstance(producer, dict) else None,
    )


def _config_quant(qc: Any) -> DeclaredScheme:
    if not isinstance(qc, dict):
        raise QuantConfigError("'quantization_config' must be an object", file=MODEL_CONFIG)
    # vLLM reads the scheme from a "quantization" object whenever the block has one (a nested export).
    if "quantization" in qc:
        if not isinstance(qc["quantization"], dict):
            raise QuantConfigError("'quantization' must be an object", file=CONFIG_BLOCK)
        scheme, conflicts = _nested(qc["quantization"], qc, CONFIG_BLOCK)
        return replace(scheme, conflicts=tuple(conflicts))
    return _flat(qc, CONFIG_BLOCK)


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
