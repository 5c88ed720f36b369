"""``qualify run``: one run of a profile from its inputs to the verdict, every level in order.

The draft and its source come from local folders (``--checkpoint``, ``--source``) or from
the hub at their pinned commits; the runtimes the levels need are prepared by the harness
(a locally built image, the profile's local vLLM servers) and always torn down. ``make
qualify`` is ``qualify run --profile fixture``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from qualify.commands import (
    EXIT_HARNESS,
    add_pinning_options,
    add_profile_option,
    add_report_dir_option,
    parser_for,
)
from qualify.errors import ExitCode, UsageError
from qualify.release.signing import SIGN_KEY_ENV, SIGN_KEY_PASSWORD_ENV

#: CI can ask for JUnit through `make qualify`, whose command line it does not own.
JUNIT_ENV = "QUALIFY_JUNIT_XML"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value) if value else None


def add_run_arguments(p: argparse.ArgumentParser, *, levels_default: str) -> None:
    """The options ``qualify run`` and ``qualify check`` share."""
    p.add_argument("--source", type=Path, help="the source (unquantized) checkpoint directory at its pinned revision "
                   "(default: the hub at the profile's source revision)")
    p.add_argument("--trust-local-source", action="store_true",
                   help="go on with a --source folder whose identity no proof establishes (no digests pinned in the "
                   "profile, and the hub not consulted: offline or unreachable; a hub cache snapshot alone proves "
                   "nothing); the report and card say so, and qualify gate refuses the report unless "
                   "--allow-untrusted-source")
    add_profile_option(p)
    add_report_dir_option(p, holds="report.json and report.md")
    p.add_argument("--levels", help=f"comma-separated subset of levels (default: {levels_default})")
    p.add_argument("--junit-xml", type=Path, metavar="PATH", default=_env_path(JUNIT_ENV),
                   help=f"also write the checks as JUnit XML to PATH, for CI test reports (default: ${JUNIT_ENV}, "
                   "if set)")
    signing = p.add_argument_group("signing (a signed attestation of the run, for the release gate)")
    signing.add_argument("--sign-key", type=Path, metavar="PATH", default=_env_path(SIGN_KEY_ENV),
                         help="EC P-256 private key (PEM): write a signed in-toto attestation "
                         f"(attestation.intoto.jsonl) beside report.json (default: ${SIGN_KEY_ENV}, if set; an "
                         f"encrypted key's passphrase in ${SIGN_KEY_PASSWORD_ENV})")
    signing.add_argument("--sign-model", action="store_true",
                         help="also sign the checkpoint folder in the OpenSSF model-signing format (model.sig beside "
                         "report.json, verifiable with `model_signing verify key`); needs --sign-key")
    runtime = p.add_argument_group("runtime and serving levels (load, smoke, acceptance, losslessness, throughput)")
    add_pinning_options(runtime)
    runtime.add_argument("--image-digest", help="pin the runtime image to sha256:... where the profile states none")
    runtime.add_argument("--hf-cache", type=Path, help="a Hugging Face hub cache: downloads go there, and the "
                         "runtime mounts it read-only")
    runtime.add_argument("--target", type=Path, help="a local target folder for the local vLLM servers of a "
                         "[local_server] of kind vllm-cpu")
    runtime.add_argument("--target-snapshot", type=Path, metavar="DIR",
                         help="the target as a hub-cache snapshot folder at [target].revision "
                         "(.../models--OWNER--NAME/snapshots/<revision>): mounted read-only, MODEL pointed at it, "
                         "the hub offline, so the runtime loads exactly that revision (the report then says the "
                         "target revision was enforced; without it, or a launcher revision variable the profile "
                         "declares, it is not, and qualify gate refuses the run)")
    runtime.add_argument("--endpoint", help="OpenAI-compatible endpoint of a server already running (default: the "
                         "runtime this run launches)")
    runtime.add_argument("--reference-endpoint", help="the target served without a speculator (losslessness)")
    runtime.add_argument("--source-endpoint",
                         help="the target served with the source draft, same settings (the paired level)")
    runtime.add_argument("--server-log", type=Path,
                         help="the log file of the --endpoint server (the smoke level's log evidence; with "
                         "--source-server-log, the paired level's engine-settings comparison)")
    runtime.add_argument("--source-server-log", type=Path,
                         help="the log file of the --source-endpoint server: the paired level verifies that both "
                         "servers run the same engine settings but for the draft, and fails when it cannot")


def register(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "run",
        help="qualify a release from its inputs to the verdict: every level of a profile, in order",
        description="Fetch (or take from local folders) the draft and its source, then run the profile's levels in "
        "order -- structure, format, reproduction, load, smoke, acceptance, losslessness, throughput -- and write "
        "REPORT_DIR/<run-id>/report.json and report.md. A level after a failed one is not run.",
    )
    p.add_argument("--checkpoint", type=Path, help="a local draft directory (default: the hub at --draft-revision)")
    add_run_arguments(p, levels_default="the profile's required and measured levels")
    p.set_defaults(func=run, default_levels="run")


def run(args: argparse.Namespace) -> int:
    from qualify.errors import HarnessError
    from qualify.profile import load_profile
    from qualify.report.markdown import summary_lines
    from qualify.report.model import parse_levels
    from qualify.run.outcome import run_outcome
    from qualify.run.pipeline import CHECKPOINT_LEVELS, RunOptions, deliver_junit, run_qualification
    from qualify.util.escape import escape_terminal
    from qualify.util.redact import redact

    # The key is read before any level runs: a run that cannot be signed as asked is refused at once.
    sign_key = None
    if args.sign_key is not None:
        from qualify.release.signing import load_signing_key

        sign_key = load_signing_key(args.sign_key, os.environ.get(SIGN_KEY_PASSWORD_ENV) or None)
    if args.sign_model:
        if sign_key is None:
            raise UsageError(f"--sign-model needs a signing key: --sign-key PATH or ${SIGN_KEY_ENV}")
        if importlib.util.find_spec("model_signing") is None:
            raise UsageError("--sign-model needs the model-signing package: pip install 'qualify[sign]'")
    profile = load_profile(args.profile)
    if args.default_levels == "run":
        default = profile.run_levels
    else:  # qualify check: what a checkpoint folder alone can show
        default = tuple(lv for lv in profile.required_levels if lv in CHECKPOINT_LEVELS) or profile.required_levels
    opts = RunOptions(
        profile=profile, levels=parse_levels(args.levels, default), report_dir=args.report_dir,
        checkpoint=args.checkpoint, source=args.source, target=args.target, draft_revision=args.draft_revision,
        image_digest=args.image_digest, allow_unpinned=args.allow_unpinned, hf_cache=args.hf_cache,
        target_snapshot=args.target_snapshot,
        trust_local_source=args.trust_local_source,
        endpoint=args.endpoint, reference_endpoint=args.reference_endpoint, source_endpoint=args.source_endpoint,
        # Absolute: the suites may read them from another working directory.
        server_log=args.server_log.resolve() if args.server_log else None,
        source_server_log=args.source_server_log.resolve() if args.source_server_log else None,
        junit_xml=args.junit_xml,
        command=["qualify", *sys.argv[1:]], fetch_source=args.default_levels == "run",
        sign_key=sign_key, sign_model=args.sign_model,
    )
    run_, run_dir, code = run_qualification(opts)
    outcome = ExitCode.HARNESS if code in (3, 4) else run_outcome(run_)  # pytest broke: the harness, not the checkpoint
    lines = summary_lines(run_)
    if outcome is ExitCode.HARNESS and lines and lines[-1].startswith("verdict: not"):
        # pytest itself broke (no fault the report holds): read here, that is no verdict either.
        lines[-1] = "verdict: none: a harness fault kept the run from one (the cause below; exit 3)"
    print()
    for line in lines:
        print(line)
    print(f"report: {run_dir / 'report.json'}")
    print(f"        {run_dir / 'report.md'}")
    if args.junit_xml:
        try:
            deliver_junit(run_dir, args.junit_xml)
        except HarnessError as exc:
            # The verdict stands in the report; the XML CI asked for is missing, and CI must notice.
            print(f"qualify: harness error: {escape_terminal(exc)}", file=sys.stderr)
            return EXIT_HARNESS
        print(f"junit:  {args.junit_xml}")
    if sign_key is not None:
        from qualify.release.attestation import ATTESTATION_NAME, MODEL_SIGNATURE_NAME

        print(f"signed: {run_dir / ATTESTATION_NAME} (key {sign_key.fingerprint})")
        if args.sign_model:
            print(f"        {run_dir / MODEL_SIGNATURE_NAME} (OpenSSF model-signing)")
    if outcome is ExitCode.HARNESS:
        # The cause in one line where the summary's verdict line cannot say it: no verdict was reached.
        faults = run_.harness_faults() or ["the qualification suites stopped (see the report)"]
        shown = "; ".join(faults[:3]) + (f"; and {len(faults) - 3} more" if len(faults) > 3 else "")
        print(f"qualify: harness fault: no verdict was reached (a check could not run, or the run recorded a "
              f"harness error): {escape_terminal(redact(shown))}", file=sys.stderr)
    return int(outcome)
