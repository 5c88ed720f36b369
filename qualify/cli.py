"""Command line: argument parsing and exit codes only; the work is in the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__
from .errors import HarnessError, QualifyError, UsageError

EXIT_QUALIFIED = 0
EXIT_NOT_QUALIFIED = 1
EXIT_ERROR = 2

EPILOG = """\
exit codes:
  0  qualified: every requested level passed
  1  not qualified: a check failed, was skipped, or did not run (the report says which)
  2  usage or harness error: bad arguments, unreadable profile, the harness itself failed
"""

DEFAULT_REPORTS = Path("reports")


def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="qualify a checkpoint directory (manifest, format, ...) and write a report",
        description="Run the checkpoint levels of a profile against CHECKPOINT and write "
        "REPORT_DIR/<run-id>/report.json and report.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path, help="the quantized checkpoint directory")
    p.add_argument("--source", type=Path, help="the source (unquantized) checkpoint directory at its pinned revision")
    p.add_argument("--profile", default="fixture", help="profile name or path to a .toml (default: fixture)")
    p.add_argument("--report-dir", type=Path, default=DEFAULT_REPORTS,
                   help="parent folder of the run folder (default: reports)")
    p.add_argument("--levels", help="comma-separated subset of levels (default: the profile's required levels)")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    from .profile import load_profile
    from .render import summary_lines
    from .runner import make_run_dir, new_run, parse_levels, run_suites

    profile = load_profile(args.profile)
    _existing_dir(args.checkpoint, "checkpoint")
    if args.source is not None:
        _existing_dir(args.source, "source checkpoint")
    levels = parse_levels(args.levels, profile)
    run = new_run(profile, args.checkpoint, args.source, levels, command=["qualify", *sys.argv[1:]])
    run_dir = make_run_dir(args.report_dir, run.run_id)
    code = run_suites(run, profile=profile, checkpoint=args.checkpoint, source=args.source, report_dir=run_dir)
    print()
    for line in summary_lines(run):
        print(line)
    print(f"report: {run_dir / 'report.json'}")
    print(f"        {run_dir / 'report.md'}")
    if code in (3, 4):  # pytest: internal error / usage error: the harness, not the checkpoint
        return EXIT_ERROR
    return EXIT_QUALIFIED if str(run.verdict) == "qualified" else EXIT_NOT_QUALIFIED


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="quantize a BF16 checkpoint to MXFP8 with the reference quantizer (config and manifest included)",
        description="Write OUTPUT_DIR: <module>.weight F8_E4M3 [N, K] and <module>.weight_scale U8 [N, K/32] "
        "(row-major, unswizzled), excluded modules copied unchanged, hf_quant_config.json, config.json "
        "quantization_config, and conversion_manifest.json.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", type=Path, help="the source checkpoint directory (BF16)")
    p.add_argument("output", type=Path, help="the output directory (must not exist or be empty)")
    p.add_argument("--recipe", default="modelopt", help="scale recipe: modelopt (default) or ocp-floor")
    p.add_argument("--exclude", action="append", default=None, metavar="PATTERN",
                   help="module pattern to leave unquantized (fnmatch, repeatable; default: lm_head)")
    p.add_argument("--kv-cache-quant-algo", default=None, help="declared KV cache quantization (default: null)")
    _add_source_identity(p)
    p.set_defaults(func=cmd_convert)


def _add_manifest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "manifest",
        help="write conversion_manifest.json for a conversion made by another tool (e.g. ModelOpt)",
        description="Read SOURCE_DIR and OUTPUT_DIR, work out what happened to every tensor, find the scale "
        "recipe that reproduces the quantized ones, and write OUTPUT_DIR/conversion_manifest.json with "
        "checksums, coverage and statistics. `qualify check` can then run every level.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", type=Path, help="the source checkpoint directory the conversion read")
    p.add_argument("output", type=Path, help="the converted checkpoint directory")
    _add_source_identity(p)
    p.set_defaults(func=cmd_manifest)


def _add_source_identity(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-repo", required=True, help="hub repository of the source, e.g. org/name")
    p.add_argument("--source-revision", required=True, help="the immutable 40-hex commit of the source")


def _existing_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise UsageError(f"{path}: not a {what} directory")
    return path


def cmd_convert(args: argparse.Namespace) -> int:
    import re

    from .convert import convert

    if not re.fullmatch(r"[0-9a-f]{40}", args.source_revision):
        raise UsageError(f"--source-revision {args.source_revision!r} is not a 40-hex commit")
    manifest = convert(
        _existing_dir(args.source, "source checkpoint"), args.output, source_repo=args.source_repo,
        source_revision=args.source_revision, recipe=args.recipe, exclude=args.exclude or ["lm_head"],
        kv_cache_quant_algo=args.kv_cache_quant_algo,
    )
    agg = manifest["aggregate"]
    print(f"wrote {args.output}: {agg['tensors']} tensors quantized ({manifest['quantization']['scale_recipe']}), "
          f"relative RMS error {agg['relative_rms_error']:.4g}")
    return EXIT_QUALIFIED


def cmd_manifest(args: argparse.Namespace) -> int:
    from .convert import describe_conversion
    from .quant_config import HF_QUANT_CONFIG

    output = _existing_dir(args.output, "converted checkpoint")
    producer = None
    hf = output / HF_QUANT_CONFIG
    if hf.exists():
        from .jsonio import load_json_file

        declared = (load_json_file(hf, display=HF_QUANT_CONFIG) or {}).get("producer") or {}
        if isinstance(declared.get("name"), str) and isinstance(declared.get("version"), str):
            producer = {"name": declared["name"], "version": declared["version"],
                        "command": ["qualify", "manifest", str(args.source), str(args.output)]}
    manifest = describe_conversion(
        _existing_dir(args.source, "source checkpoint"), output, source_repo=args.source_repo,
        source_revision=args.source_revision, producer=producer,
    )
    recipe = manifest["quantization"]["scale_recipe"]
    print(f"wrote {output / 'conversion_manifest.json'}: {len(manifest['tensors'])} source tensors, "
          f"{manifest['aggregate']['tensors']} quantized, scale recipe "
          + (recipe if recipe else "unknown (no known recipe reproduces the quantized tensors)"))
    return EXIT_QUALIFIED if recipe else EXIT_NOT_QUALIFIED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qualify",
        description="Decide, with evidence, whether a quantized checkpoint release may ship.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"qualify {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_check, _add_convert, _add_manifest]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"qualify: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except HarnessError as exc:
        print(f"qualify: harness error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except QualifyError as exc:
        print(f"qualify: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("qualify: interrupted", file=sys.stderr)
        return EXIT_NOT_QUALIFIED


if __name__ == "__main__":
    raise SystemExit(main())
