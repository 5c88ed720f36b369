"""Bit-exact reproduction of every quantized tensor of the full-size fixture, against its floor and its peers.

    python bench/bench_reproduce.py [FIXTURE] [--repeats N] [--peers torchao,modelopt]

All contenders handle the same tensors (every quantized weight the manifest lists) and
are timed side by side, interleaved; throughput is GB/s of BF16 source weights.

- ``qualify check_quantized``: the harness's ``reproduction.quantized_tensors`` check as
  the suite runs it: the reference quantizer on worker threads and a byte comparison of
  every weight and scale byte, from freshly opened checkpoints (so page-mapping costs count).
- ``qualify per-tensor, 1 thread``: ``compare_quantized`` in a plain loop on one thread:
  the quantizer's own cost, without the parallelism.
- ``floor``: what any reproduction must pay at least: read the same source, weight and
  scale bytes (plain reads from the page cache), write as many expected bytes as the
  weight has (a copy), and compare them with one ``torch.equal``. Reported twice: with
  ``torch.equal`` on the uint8 bytes (what the brief names), and with the comparison
  the harness uses (``same_bytes``: int64 views, eight bytes per compare), the stricter
  floor. The target ratio is against the stricter one.
- peers, each an independent MXFP8 implementation quantizing the same BF16 tensors,
  plus the same byte comparison against the checkpoint (so they do the same job):
  torchao ``to_mx`` with RCEIL scaling (eager, CPU), and ModelOpt's
  ``MXFP8QTensor.quantize``. They run with torch's own threads, as they are used.
  How many tensors each reproduces exactly is printed too (torchao RCEIL differs, by
  design, on blocks whose scale byte is 0: see tests/mxfp8/test_codec.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import benchlib
import torch
from benchlib import gb, interleaved, ratio_table

from qualify.checkpoint.manifest import load_manifest
from qualify.checkpoint.safetensors_io import Checkpoint
from qualify.checks import reproduction as r
from qualify.mxfp8 import codec as mxfp8


def plain_read_floor(root: Path, names: list[str], compare: Callable[[torch.Tensor, torch.Tensor], bool]) -> None:
    """Read every source, weight and scale byte with plain reads; copy the weight; compare once per tensor."""
    with Checkpoint.open(root / "source") as src, Checkpoint.open(root / "mxfp8") as out:
        biggest = max(src.info(n).nbytes for n in names)
        buf = torch.empty(biggest, dtype=torch.uint8)
        wbuf = torch.empty(biggest // 2, dtype=torch.uint8)
        expected = torch.empty(biggest // 2, dtype=torch.uint8)
        sbuf = torch.empty(biggest // 32, dtype=torch.uint8)
        fds = {}
        try:
            for name in names:
                for ckpt, tensor, target in ((src, name, buf), (out, name, wbuf), (out, name + "_scale", sbuf)):
                    f = ckpt.files[ckpt.file_of(tensor)]
                    info = f.tensors[tensor]
                    fd = fds.get(f.path) or fds.setdefault(f.path, os.open(f.path, os.O_RDONLY))
                    view = memoryview(target.numpy())[: info.nbytes]
                    got = 0
                    while got < info.nbytes:
                        got += os.preadv(fd, [view[got:]], f.data_offset + info.start + got)
                n = out.info(name).nbytes
                expected[:n].copy_(wbuf[:n])  # the expected bytes a quantizer would have written
                if not compare(expected[:n], wbuf[:n]):
                    raise AssertionError(name)
        finally:
            for fd in fds.values():
                os.close(fd)


def harness(root: Path, plan: list[r.PlanItem], recipe: str, revision: str) -> dict[str, Any]:
    with Checkpoint.open(root / "source") as src, Checkpoint.open(root / "mxfp8") as out:
        ev = r.check_quantized(plan, out, src, declared_recipe=recipe, source_revision=revision)
    if not ev.ok:
        raise AssertionError(ev.findings[:3])
    return ev.measured


def per_tensor_one_thread(root: Path, names: list[str], recipe: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with Checkpoint.open(root / "source") as src, Checkpoint.open(root / "mxfp8") as out:
            for name in names:
                res = r.compare_quantized(name, src.tensor(name), r._raw_u8(out, name),
                                          r._raw_u8(out, name + "_scale"), mxfp8.parse_recipe(recipe))
                if not res.identical:
                    raise AssertionError(res.describe())
    finally:
        torch.set_num_threads(threads)


def peer(root: Path, names: list[str], quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
         agree: dict[str, int]) -> None:
    """A peer quantizer over the same tensors, with the same comparison against the checkpoint's bytes."""
    same = 0
    with Checkpoint.open(root / "source") as src, Checkpoint.open(root / "mxfp8") as out:
        for name in names:
            data, scale = quantize(src.tensor(name))
            ok = r.same_bytes(data.contiguous().view(torch.uint8).reshape(-1), r._raw_u8(out, name))
            ok = r.same_bytes(scale.contiguous().view(torch.uint8).reshape(-1), r._raw_u8(out, name + "_scale")) and ok
            same += ok
    agree["identical"] = same


def torchao_rceil() -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    def quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale, data = to_mx(t, torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL)
        return data, scale

    return quantize


def modelopt_mxfp8() -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    from modelopt.torch.quantization.qtensor import MXFP8QTensor

    def quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, scale = MXFP8QTensor.quantize(t)
        return q._quantized_data, scale

    return quantize


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.fixture_arg(ap)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--peers", default="torchao,modelopt", help="comma-separated: torchao, modelopt (or none)")
    args = ap.parse_args(argv)
    root = benchlib.ensure_fixture(args.fixture)
    manifest = load_manifest(root / "mxfp8")
    plan = [r.PlanItem(t.source_name, t.action) for t in manifest.quantized]
    names = [p.name for p in plan]
    recipe = manifest.scale_recipe or "modelopt"
    with Checkpoint.open(root / "source") as src:
        source_bytes = sum(src.info(n).nbytes for n in names)
    benchlib.print_machine()
    print(f"reproduction of {len(names)} quantized tensors: {gb(source_bytes)} of BF16 source, "
          f"{gb(source_bytes // 2)} of weights, recipe {recipe}")

    agreement: dict[str, dict[str, int]] = {}
    contenders: list[tuple[str, Callable[[], Any]]] = [
        ("floor: plain read + torch.equal (uint8)", lambda: plain_read_floor(root, names, torch.equal)),
        ("floor: plain read + same_bytes (int64)", lambda: plain_read_floor(root, names, r.same_bytes)),
        ("qualify check_quantized (workers)", lambda: harness(root, plan, recipe, manifest.source_revision)),
        ("qualify per-tensor, 1 thread", lambda: per_tensor_one_thread(root, names, recipe)),
    ]
    wanted = {p.strip() for p in args.peers.split(",") if p.strip() and p.strip() != "none"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "torchao" in wanted:
            q = torchao_rceil()
            agreement["torchao to_mx RCEIL"] = {}
            contenders.append(("torchao to_mx RCEIL", lambda: peer(root, names, q, agreement["torchao to_mx RCEIL"])))
        if "modelopt" in wanted:
            m = modelopt_mxfp8()
            agreement["modelopt MXFP8QTensor"] = {}
            contenders.append(("modelopt MXFP8QTensor",
                               lambda: peer(root, names, m, agreement["modelopt MXFP8QTensor"])))

        plain_read_floor(root, names, torch.equal)  # warm the page cache
        timings = interleaved(contenders, args.repeats)
    print(f"warm page cache, {args.repeats} interleaved repetitions:")
    for line in ratio_table(timings, "floor: plain read + same_bytes (int64)", source_bytes):
        print(line)
    for name, a in agreement.items():
        print(f"  {name}: {a.get('identical', 0)} of {len(names)} tensors byte-identical to the checkpoint")
    ours = timings["qualify check_quantized (workers)"]
    floor = timings["floor: plain read + same_bytes (int64)"]
    literal = timings["floor: plain read + torch.equal (uint8)"]
    x = ours.best / floor.best
    print(f"target: within 3x of the read+compare floor: {'met' if x <= 3 else 'MISSED'} "
          f"({x:.2f}x the int64 floor, {ours.best / literal.best:.2f}x the uint8 torch.equal floor)")
    for name in agreement:
        y = timings[name].best / ours.best
        print(f"target: faster than {name}: {'met' if y > 1 else 'MISSED'} ({y:.2f}x our time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
