"""``qualify convert`` (reference MXFP8 conversion) and ``qualify manifest`` (describe another tool's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED, existing_dir, parser_for
from qualify.errors import CheckpointError, UsageError
from qualify.util.identifiers import is_commit


def register(sub: argparse._SubParsersAction) -> None:
    _register_convert(sub)
    _register_manifest(sub)


def _register_convert(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "convert",
        help="quantize a BF16 checkpoint to MXFP8 with the reference quantizer (config and manifest included)",
        description="Write OUTPUT_DIR: <module>.weight F8_E4M3 [N, K] and <module>.weight_scale U8 [N, K/32] "
        "(row-major, unswizzled), excluded modules copied unchanged, hf_quant_config.json, config.json "
        "quantization_config, and conversion_manifest.json.",
    )
    p.add_argument("source", type=Path, help="the source checkpoint directory (BF16)")
    p.add_argument("output", type=Path, help="the output directory (must not exist or be empty)")
    p.add_argument("--recipe", default="modelopt", help="scale recipe: modelopt (default) or ocp-floor")
    p.add_argument("--exclude", action="append", default=None, metavar="PATTERN",
                   help="module pattern to leave unquantized (fnmatch, repeatable; default: lm_head)")
    p.add_argument("--kv-cache-quant-algo", default=None, help="declared KV cache quantization (default: null)")
    _add_source_identity(p)
    p.set_defaults(func=run_convert)


def _register_manifest(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "manifest",
        help="write conversion_manifest.json for a conversion made by another tool (e.g. ModelOpt)",
        description="Read SOURCE_DIR and OUTPUT_DIR, work out what happened to every tensor, find the scale "
        "recipe that reproduces the quantized ones, and write OUTPUT_DIR/conversion_manifest.json with "
        "checksums, coverage and statistics. `qualify check` can then run every level.",
    )
    p.add_argument("source", type=Path, help="the source checkpoint directory the conversion read")
    p.add_argument("output", type=Path, help="the converted checkpoint directory")
    _add_source_identity(p)
    p.set_defaults(func=run_manifest)


def _add_source_identity(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-repo", required=True, help="hub repository of the source, e.g. org/name")
    p.add_argument("--source-revision", required=True, help="the immutable 40-hex commit of the source")


def run_convert(args: argparse.Namespace) -> int:

    from qualify.release.convert import convert

    if not is_commit(args.source_revision):
        raise UsageError(f"--source-revision {args.source_revision!r} is not a 40-hex commit")
    try:
        manifest = convert(
            existing_dir(args.source, "source checkpoint"), args.output, source_repo=args.source_repo,
            source_revision=args.source_revision, recipe=args.recipe, exclude=args.exclude or ["lm_head"],
            kv_cache_quant_algo=args.kv_cache_quant_algo,
        )
    except CheckpointError as exc:
        # Converting judges nothing: a source the converter cannot take is the input the user gave it.
        raise UsageError(f"cannot convert {args.source}: {exc}") from None
    agg = manifest["aggregate"]
    print(f"wrote {args.output}: {agg['tensors']} tensors quantized ({manifest['quantization']['scale_recipe']}), "
          f"relative RMS error {agg['relative_rms_error']:.4g}")
    return EXIT_QUALIFIED


def run_manifest(args: argparse.Namespace) -> int:
    from qualify.checkpoint.quant_config import HF_QUANT_CONFIG
    from qualify.release.convert import describe_conversion

    output = existing_dir(args.output, "converted checkpoint")
    producer = None
    hf = output / HF_QUANT_CONFIG
    if hf.exists():
        from qualify.util.jsonio import load_json_file

        declared = (load_json_file(hf, display=HF_QUANT_CONFIG) or {}).get("producer") or {}
        if isinstance(declared.get("name"), str) and isinstance(declared.get("version"), str):
            producer = {"name": declared["name"], "version": declared["version"],
                        "command": ["qualify", "manifest", str(args.source), str(args.output)]}
    manifest = describe_conversion(
        existing_dir(args.source, "source checkpoint"), output, source_repo=args.source_repo,
        source_revision=args.source_revision, producer=producer,
    )
    recipe = manifest["quantization"]["scale_recipe"]
    print(f"wrote {output / 'conversion_manifest.json'}: {len(manifest['tensors'])} source tensors, "
          f"{manifest['aggregate']['tensors']} quantized, scale recipe "
          + (recipe if recipe else "unknown (no known recipe reproduces the quantized tensors)"))
    return EXIT_QUALIFIED if recipe else EXIT_NOT_QUALIFIED


