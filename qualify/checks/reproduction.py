"""Bit-exact reproduction: re-quantize the source and compare every weight and scale byte.

This is the strongest evidence a conversion can give: the output is what the reference
quantizer makes from the pinned source, byte for byte. Tensors are handled one at a
time per worker thread (source, expected bytes and found bytes of one tensor), so
memory stays bounded by a few tensors whatever the checkpoint's size. Identical bytes,
the common case, cost one quantization and one wide comparison; only a tensor that
differs pays for counting, locating and diagnosing the differences.

When bytes differ, the comparison says where (first positions, source value, expected
and found byte) and tries to say why: another known recipe reproduces the tensor, the
scales are the right bytes in the wrong order (a swizzled layout), the weight is the
source's transpose, or a handful of isolated bytes changed (corruption).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from qualify.checkpoint.checksums import thread_map
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.core import Evidence
from qualify.errors import CheckpointError
from qualify.mxfp8 import codec as mxfp8
from qualify.util.progress import StepProgress

SCALE_SUFFIX = "_scale"
#: How many differing positions a result lists in full.
MAX_POSITIONS = 5


@dataclass(frozen=True)
class ByteDiff:
    tensor: str
    index: tuple[int, ...]
    expected: int
    found: int
    source_value: float | None = None

    def __str__(self) -> str:
        src = f" (source value {self.source_value:.6g})" if self.source_value is not None else ""
        return f"{self.tensor}{list(self.index)}: expected 0x{self.expected:02x}, found 0x{self.found:02x}{src}"


@dataclass
class TensorResult:
    """The comparison of one tensor."""

    name: str
    action: str  # quantized | kept | excluded
    weight_bytes: int = 0
    weight_bytes_differ: int = 0
    scale_bytes: int = 0
    scale_bytes_differ: int = 0
    diffs: list[ByteDiff] = field(default_factory=list)
    cause: str | None = None
    explained_by: str | None = None  # a recipe that does reproduce it
    problem: str | None = None  # could not be compared at all

    @property
    def identical(self) -> bool:
        return self.problem is None and self.weight_bytes_differ == 0 and self.scale_bytes_differ == 0

    def describe(self) -> str:
        if self.problem:
            return self.problem
        parts = []
        if self.weight_bytes_differ:
            parts.append(f"{self.weight_bytes_differ} of {self.weight_bytes} weight bytes differ")
        if self.scale_bytes_differ:
            parts.append(f"{self.scale_bytes_differ} of {self.scale_bytes} scale bytes differ")
        text = "; ".join(parts) or "identical"
        if self.diffs:
            text += "; first: " + ", ".join(str(d) for d in self.diffs[:MAX_POSITIONS])
        if self.cause:
            text += f". Most likely cause: {self.cause}"
        return text


def _u8(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _raw_u8(ckpt: Checkpoint, name: str) -> torch.Tensor:
    raw = ckpt.raw(name)
    if len(raw) == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only mapping, only read
        return torch.frombuffer(raw, dtype=torch.uint8)


#: Bytes per step when counting differences in a large tensor (a bool mask of this size at a time).
_COUNT_CHUNK = 1 << 24


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two flat uint8 tensors hold the same bytes.

    ``torch.equal`` on uint8 compares one byte at a time (about 3 ns per byte on the
    benchmark machine); on int64 views of the same memory it compares eight at a time,
    which is what makes a byte-exact check of a whole checkpoint cost little more than
    reading it. The bytes past the last multiple of 8 are compared as uint8.
    """
    if a.numel() != b.numel():
        return False
    wide = a.numel() - a.numel() % 8
    if wide:
        try:
            if not torch.equal(a[:wide].view(torch.int64), b[:wide].view(torch.int64)):
                return False
        except RuntimeError:  # a view torch cannot reinterpret (an odd storage offset): compare bytes
            return torch.equal(a, b)
    return torch.equal(a[wide:], b[wide:])


def _count_differing(expected: torch.Tensor, found: torch.Tensor) -> tuple[int, list[int]]:
    """How many bytes of two flat uint8 tensors differ, and the first :data:`MAX_POSITIONS` positions.

    In chunks: a mask of a whole 600 MB lm_head would be as large as the tensor, and
    summing a bool tensor makes an int64 copy of it (eight times larger still).
    """
    count = 0
    first: list[int] = []
    for start in range(0, expected.numel(), _COUNT_CHUNK):
        differ = expected[start:start + _COUNT_CHUNK] != found[start:start + _COUNT_CHUNK]
        n = int(torch.count_nonzero(differ))
        if n and len(first) < MAX_POSITIONS:
            first += [start + int(i) for i in differ.nonzero()[: MAX_POSITIONS - len(first), 0]]
        count += n
    return count, first


def _positions(
    tensor: str, expected: torch.Tensor, found: torch.Tensor, shape: tuple[int, ...], source: torch.Tensor | None,
) -> tuple[int, list[ByteDiff]]:
    """Count differing bytes and describe the first few (index in ``shape``, ``source``'s value when given)."""
    n, flat = _count_differing(expected.reshape(-1), found.reshape(-1))
    out: list[ByteDiff] = []
    if n:
        for i in flat:
            idx = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), shape))
            value = None
            if source is not None:
                value = float(source.reshape(-1)[i])
            out.append(ByteDiff(tensor, idx, int(expected.reshape(-1)[i]), int(found.reshape(-1)[i]), value))
    return n, out


def compare_quantized(
    name: str, source: torch.Tensor, found_data: torch.Tensor, found_scale: torch.Tensor, recipe: mxfp8.ScaleRecipe,
) -> TensorResult:
    """Quantize ``source`` with ``recipe`` and compare with the found weight and scale bytes."""
    result = TensorResult(name, "quantized")
    q = mxfp8.quantize(source, recipe, name=name)
    exp_w, exp_s = _u8(q.data).reshape(-1), _u8(q.scale).reshape(-1)
    result.weight_bytes, result.scale_bytes = exp_w.numel(), exp_s.numel()
    if found_data.numel() != exp_w.numel() or found_scale.numel() != exp_s.numel():
        result.problem = (f"sizes differ: found {found_data.numel()} weight and {found_scale.numel()} scale bytes, "
                          f"the source quantizes to {exp_w.numel()} and {exp_s.numel()}")
        return result
    if same_bytes(exp_w, found_data) and same_bytes(exp_s, found_scale):
        return result  # identical: nothing to locate or diagnose
    nw, dw = _positions(name, exp_w, found_data, tuple(q.data.shape), source)
    ns, ds = _positions(name + SCALE_SUFFIX, exp_s, found_scale, tuple(q.scale.shape), None)
    result.weight_bytes_differ, result.scale_bytes_differ = nw, ns
    result.diffs = ds[:MAX_POSITIONS] + dw[: max(0, MAX_POSITIONS - len(ds))]
    if nw or ns:
        result.cause = diagnose(source, q, found_data, found_scale, recipe, result)
        if result.cause and result.cause.startswith("produced with the"):
            result.explained_by = result.cause.split("'")[1]
    return result


def diagnose(
    source: torch.Tensor, q: mxfp8.MXFP8Weight, found_data: torch.Tensor, found_scale: torch.Tensor,
    recipe: mxfp8.ScaleRecipe, result: TensorResult,
) -> str:
    """The most likely reason the found bytes differ from the expected ones."""
    for other in mxfp8.RECIPES:
        if other is recipe:
            continue
        alt = mxfp8.quantize(source, other)
        if torch.equal(_u8(alt.data).reshape(-1), found_data) and torch.equal(_u8(alt.scale).reshape(-1), found_scale):
            return f"produced with the '{other}' scale recipe, not '{recipe}'"
    exp_s = _u8(q.scale).reshape(-1)
    if result.weight_bytes_differ and not result.scale_bytes_differ:
        exp_w = _u8(q.data).reshape(q.scale.numel(), -1)
        bad_blocks = (exp_w != found_data.reshape(exp_w.shape)).any(dim=1)
        if bool((exp_s[bad_blocks] == 0).all()):
            return (f"the differing elements all sit in {int(bad_blocks.sum())} block(s) whose scale byte is 0 "
                    "(exponent clamped at -127): the producer scales such blocks' elements by another factor "
                    "(1.0 in TransformerEngine and torchao RCEIL, 2**126 in torchao FLOOR) than OCP's 2**127")
    if result.scale_bytes_differ and not result.weight_bytes_differ:
        if torch.equal(torch.sort(exp_s).values, torch.sort(found_scale).values):
            return ("the scale bytes are right but in the wrong order: a swizzled (tiled) scale layout, "
                    "not row-major unswizzled")
        delta = found_scale.to(torch.int16) - exp_s.to(torch.int16)
        off = delta[delta != 0]
        if off.numel() and bool((off == off[0]).all()):
            return (f"{off.numel()} block scale(s) off by {int(off[0]):+d} exponent(s) while the elements match: "
                    "a scale rule that rounds differently at block boundaries, or edited scales")
        return "scale bytes differ while the elements match: scales were computed or stored differently"
    if source.dim() == 2 and source.shape[0] % mxfp8.BLOCK_SIZE == 0:
        t = mxfp8.quantize(source.t().contiguous(), recipe)
        if torch.equal(_u8(t.data).reshape(-1), found_data):
            return "the weight was quantized transposed: blocks must run along the input dimension K of [N, K]"
    if result.weight_bytes_differ and result.weight_bytes_differ <= 16 and not result.scale_bytes_differ:
        return "a few isolated weight bytes changed after quantization (corruption or an edited file)"
    share = result.weight_bytes_differ / max(1, result.weight_bytes)
    if share > 0.5:
        return ("most bytes differ: the source is not the one this checkpoint was made from (another revision?), "
                "or the weight was not quantized from it")
    return "the quantizer that made these bytes rounds differently from every known recipe"


def compare_unquantized(name: str, action: str, source: Checkpoint, output: Checkpoint) -> TensorResult:
    result = TensorResult(name, action)
    s_info, o_info = source.info(name), output.info(name)
    if (s_info.dtype, s_info.shape) != (o_info.dtype, o_info.shape):
        result.problem = (f"{action} tensor is {o_info.dtype} {list(o_info.shape)} but the source has "
                          f"{s_info.dtype} {list(s_info.shape)}; it must be copied unchanged")
        return result
    exp, found = _raw_u8(source, name), _raw_u8(output, name)
    result.weight_bytes = exp.numel()
    if same_bytes(exp, found):
        return result
    n, first = _count_differing(exp, found)
    result.weight_bytes_differ = n
    if n:
        i = first[0]
        result.diffs = [ByteDiff(name, (i,), int(exp[i]), int(found[i]))]
        result.cause = f"a {action} tensor must be byte-identical to the source"
    return result


@dataclass(frozen=True)
class PlanItem:
    name: str
    action: str


def plan_from_checkpoint(output: Checkpoint, source: Checkpoint) -> list[PlanItem]:
    """Without a manifest: F8_E4M3 weights with scales were quantized; every other tensor was copied."""
    plan = []
    for name in sorted(output.names()):
        if name.endswith(".weight" + SCALE_SUFFIX):
            continue
        if output.info(name).dtype == "F8_E4M3":
            plan.append(PlanItem(name, "quantized"))
        elif name in source:
            plan.append(PlanItem(name, "kept"))
    return plan


def resolve_recipe(
    plan: list[PlanItem], output: Checkpoint, source: Checkpoint, declared: str | None,
) -> tuple[mxfp8.ScaleRecipe | None, str, dict[str, int]]:
    """The recipe to reproduce with: the declared one, else the one that reproduces the first tensors.

    Returns (recipe or None, how it was chosen, per-recipe count of reproduced probe tensors).
    """
    if declared:
        return mxfp8.parse_recipe(declared), "declared", {}
    probes = [p.name for p in plan if p.action == "quantized"][:3]
    counts: dict[str, int] = {}
    for recipe in mxfp8.RECIPES:
        counts[str(recipe)] = 0
        for name in probes:
            try:
                r = compare_quantized(name, source.tensor(name), _raw_u8(output, name),
                                      _raw_u8(output, name + SCALE_SUFFIX), recipe)
            except CheckpointError:
                continue
            counts[str(recipe)] += int(r.identical)
    best = max(counts, key=lambda k: counts[k])  # counts has every recipe
    if counts[best] == 0:
        return None, "detected", counts
    return mxfp8.parse_recipe(best), "detected", counts


def reproduce(
    plan: Iterable[PlanItem], output: Checkpoint, source: Checkpoint, recipe: mxfp8.ScaleRecipe,
    *, workers: int | None = None,
) -> Iterator[TensorResult]:
    """Compare every planned tensor, in plan order, on ``workers`` threads (default: one per CPU).

    A tensor at a time per thread: memory is bounded by a few tensors, not the checkpoint.
    """
    return thread_map(lambda item: _reproduce_one(item, output, source, recipe), plan, workers=workers)


def _reproduce_one(item: PlanItem, output: Checkpoint, source: Checkpoint, recipe: mxfp8.ScaleRecipe) -> TensorResult:
    name = item.name
    if name not in source:
        return TensorResult(name, item.action, problem="the source has no such tensor")
    if name not in output:
        return TensorResult(name, item.action, problem="the checkpoint has no such tensor")
    if item.action != "quantized":
        return compare_unquantized(name, item.action, source, output)
    scale = name + SCALE_SUFFIX
    if scale not in output:
        return TensorResult(name, item.action, problem=f"the checkpoint has no '{scale}'")
    try:
        return compare_quantized(name, source.tensor(name), _raw_u8(output, name), _raw_u8(output, scale), recipe)
    except CheckpointError as exc:
        return TensorResult(name, item.action, problem=exc.detail)


def _reproduce_all(
    items: list[PlanItem], output: Checkpoint, source: Checkpoint, recipe: mxfp8.ScaleRecipe, what: str,
) -> list[TensorResult]:
    """:func:`reproduce` with a progress display counted in source bytes."""
    sizes = {p.name: source.info(p.name).nbytes if p.name in source else 0 for p in items}
    results = []
    with StepProgress("reproduce", f"{len(items)} {what} tensors", sum(sizes.values())) as bar:
        for r in reproduce(items, output, source, recipe):
            results.append(r)
            bar.advance(sizes[r.name])
    return results


def summarize(results: list[TensorResult]) -> dict[str, Any]:
    q = [r for r in results if r.action == "quantized"]
    u = [r for r in results if r.action != "quantized"]
    return {
        "quantized_tensors": len(q),
        "quantized_identical": sum(r.identical for r in q),
        "weight_bytes_compared": sum(r.weight_bytes for r in q),
        "weight_bytes_differing": sum(r.weight_bytes_differ for r in q),
        "scale_bytes_compared": sum(r.scale_bytes for r in q),
        "scale_bytes_differing": sum(r.scale_bytes_differ for r in q),
        "unquantized_tensors": len(u),
        "unquantized_identical": sum(r.identical for r in u),
        "unquantized_bytes_compared": sum(r.weight_bytes for r in u),
    }


def check_quantized(
    plan: list[PlanItem], output: Checkpoint, source: Checkpoint, *, declared_recipe: str | None,
    source_revision: str | None,
) -> Evidence:
    """Every quantized tensor's weight and scale bytes equal the reference quantizer's output from the source."""
    ev = Evidence("re-quantizing the source with the reference MXFP8 quantizer reproduces every weight and scale byte")
    quantized = [p for p in plan if p.action == "quantized"]
    ev.measured["source_revision"] = source_revision
    if not quantized:
        ev.add("no tensor is marked quantized: there is nothing to reproduce")
        return ev
    recipe, how, probes = resolve_recipe(plan, output, source, declared_recipe)
    ev.measured.update(recipe=str(recipe) if recipe else None, recipe_chosen=how)
    if probes:
        ev.measured["recipe_probe"] = probes
    if recipe is None:
        ev.add(f"no known recipe ({', '.join(map(str, mxfp8.RECIPES))}) reproduces the first quantized tensors; "
               "the checkpoint was made by a quantizer whose rounding is not one of them, or from another source")
        recipe = mxfp8.ScaleRecipe.MODELOPT  # still compare, so the findings say where bytes differ
    results = _reproduce_all(quantized, output, source, recipe, "quantized")
    explained: dict[str, int] = {}
    for r in results:
        if not r.identical:
            ev.add(r.describe(), file=output.file_of(r.name) if r.name in output else None, tensor=r.name)
            if r.explained_by:
                explained[r.explained_by] = explained.get(r.explained_by, 0) + 1
    ev.measured.update(summarize(results))
    differing = [r for r in results if not r.identical]
    if explained:
        ev.measured["explained_by_other_recipe"] = explained
        if len(explained) == 1 and sum(explained.values()) == len(differing):
            other = next(iter(explained))
            _lead(ev, f"every differing tensor ({len(differing)}) is reproduced exactly by the '{other}' recipe: "
                      f"the checkpoint was made with '{other}', not the '{recipe}' it was compared with")
    elif differing and len(differing) == len(results):
        _lead(ev, "no quantized tensor reproduces: the source is probably not the revision this checkpoint was "
                  "converted from (see structure.source_checksums), or it was made by an unknown quantizer")
    return ev


def _lead(ev: Evidence, message: str) -> None:
    """Put a conclusion drawn from all findings before them."""
    ev.add(message)
    ev.findings.insert(0, ev.findings.pop())


def check_unquantized(plan: list[PlanItem], output: Checkpoint, source: Checkpoint) -> Evidence:
    """Kept and excluded tensors (lm_head, norms) are byte-identical to the source."""
    ev = Evidence("kept and excluded tensors are byte-identical to the source")
    items = [p for p in plan if p.action != "quantized"]
    results = _reproduce_all(items, output, source, mxfp8.ScaleRecipe.MODELOPT, "kept and excluded")
    for r in results:
        if not r.identical:
            ev.add(r.describe(), file=output.file_of(r.name) if r.name in output else None, tensor=r.name)
    ev.measured.update({k: v for k, v in summarize(results).items() if k.startswith("unquantized")})
    if not items:
        ev.add("no kept or excluded tensor: an MXFP8 draft keeps at least its norms and lm_head unquantized")
    return ev
