"""``qualify preflight``: every arm of a profile's run launched as the run launches it, stopped where vLLM reads its
arguments, and compared with what the arm means (:mod:`qualify.runtime.preflight`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qualify.commands import EXIT_HARNESS, EXIT_QUALIFIED, add_pinning_options, add_profile_option, parser_for

EPILOG_NOTE = """\
preflight exit codes:
  0  every arm's launch asks vLLM for what the arm means
  2  usage error: an unknown arm, a folder that is not one, a target snapshot at another revision
  3  a launch does not ask vLLM for what its arm means (each finding names the arm, the variable and both
     values), never reached vLLM, or the image is missing or not the pinned one: a fault of the launch
     configuration or the image's launcher, never of the checkpoint
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "preflight",
        help="check, before any GPU is held, that the image's launcher asks vLLM for what each arm means",
        description="For each arm of the profile's run (the checkpoint, its source draft, the target alone, both as "
        "published), start the pinned image with the arm's environment, mounts and entrypoint, with a recording "
        "stand-in over vLLM's package that stops the process before vLLM imports torch; compare the command vLLM "
        "was given with the arm's intent: the mounted target with the hub offline, the speculative config (method, "
        "the draft's folder at the pinned revision, the proposal length; none for a reference arm), TP, DCP, the "
        "CUDA graph mode, the KV cache dtypes, the backends, the port and the served name. No network, no GPU. "
        "\n\n" + EPILOG_NOTE,
    )
    add_profile_option(p)
    p.add_argument("--checkpoint", type=Path, help="the local draft folder the run mounts")
    p.add_argument("--source", type=Path, help="the source draft folder the source arm mounts")
    p.add_argument("--target-snapshot", type=Path, metavar="DIR",
                   help="the target's hub-cache snapshot folder at [target].revision, mounted as the run mounts it")
    p.add_argument("--image-digest", help="pin the runtime image to sha256:... where the profile states none")
    add_pinning_options(p)
    p.add_argument("--arm", action="append", default=[], metavar="ARM",
                   help="only this arm (repeatable; default: every arm of the run)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds one arm's launcher may take to reach vLLM (default 180)")
    p.add_argument("--with-gpus", action="store_true",
                   help="pass the profile's GPU device requests too (the stand-in still stops before any device is "
                   "touched); by default none, so it runs where there is no GPU")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the preflight's record as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.profile import load_profile
    from qualify.run import preflight_arms
    from qualify.runtime import preflight
    from qualify.util.atomic import atomic_write_text
    from qualify.util.escape import escape_terminal

    profile = load_profile(args.profile)
    opts = preflight_arms.PreflightOptions(
        profile, checkpoint=args.checkpoint, source=args.source, target_snapshot=args.target_snapshot,
        draft_revision=args.draft_revision, image_digest=args.image_digest, allow_unpinned=args.allow_unpinned,
        arms=tuple(args.arm), timeout_s=args.timeout or preflight.DEFAULT_TIMEOUT_S, with_gpus=args.with_gpus)
    report = preflight_arms.run(opts)
    for line in preflight.render(report):
        print(escape_terminal(line))
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    preflight.raise_on_findings(report)
    print(escape_terminal(f"preflight: every arm of {profile.name} asks vLLM for what it means"))
    return int(EXIT_QUALIFIED)


__all__ = ["EXIT_HARNESS", "register", "run"]
