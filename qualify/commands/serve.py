"""``qualify serve``: launch a profile's pinned runtime container as the load level does, or print how.

``--dry-run`` prints the launch plan and ``--print-docker-run`` the equivalent ``docker run``
line (neither talks to Docker), so a person can reproduce a launch by hand. Without them
the container is started after the same preflight the load level runs (GPUs, image
present and pinned, revisions pinned, port free), its log goes to
``REPORT_DIR/<run-id>/server.log``, and it is removed on exit, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from qualify import errors
from qualify.commands import (
    EXIT_NOT_QUALIFIED,
    EXIT_QUALIFIED,
    add_pinning_options,
    add_profile_option,
    add_report_dir_option,
    existing_dir,
    parser_for,
)
from qualify.util.redact import redact


def register(sub: argparse._SubParsersAction) -> None:
    p = parser_for(
        sub, "serve",
        help="launch the profile's pinned runtime container (or print the plan / the docker run line)",
        description="Launch the profile's runtime container exactly as the load level does: never pulling, "
        "pinned by image ID, removed on exit. Exit 0 when it serves the model (and, with --exit-when-ready, "
        "shows the load evidence), 1 when the runtime fails or a precondition does not hold, 2 on usage or "
        "harness errors.",
    )
    add_profile_option(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--dry-run", action="store_true", help="print the launch plan (JSON) and the docker run line")
    what.add_argument("--print-docker-run", action="store_true", help="print only the equivalent docker run line")
    p.add_argument("--published", action="store_true",
                   help="plan the published serving command (the profile's env without the qualification overrides)")
    add_pinning_options(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", type=Path, help="a local draft directory, mounted read-only at its revision")
    src.add_argument("--hf-cache", type=Path, help="a Hugging Face hub cache, mounted read-only")
    p.add_argument("--pass-hf-token", action="store_true", help="pass HF_TOKEN by name; its value is never printed")
    p.add_argument("--startup-timeout", type=float, help="seconds to wait for readiness (default: the profile's)")
    add_report_dir_option(p, holds="server.log and serve.json")
    p.add_argument("--exit-when-ready", action="store_true",
                   help="check the load evidence and stop once ready, instead of serving until Ctrl-C")
    p.set_defaults(func=run)


def _say(text: str) -> None:
    print(redact(text), flush=True)  # a runtime's message or log line may quote a token


def run(args: argparse.Namespace) -> int:
    import logging

    from qualify.profile import load_profile
    from qualify.runtime import plan as plans
    from qualify.util.redact import install_log_redaction

    # Library warnings (docker, huggingface_hub) reach stderr through one handler, and never with a token.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    install_log_redaction()

    profile = load_profile(args.profile)
    if args.checkpoint is not None:
        existing_dir(args.checkpoint, "checkpoint")
    if args.hf_cache is not None:
        existing_dir(args.hf_cache, "Hugging Face cache")
    plan = plans.build_plan(profile, draft_revision=args.draft_revision, checkpoint_dir=args.checkpoint,
                        hf_cache=args.hf_cache, pass_hf_token=args.pass_hf_token, allow_unpinned=args.allow_unpinned,
                        serving=args.published, startup_timeout_s=args.startup_timeout)
    if args.print_docker_run:
        _say(plans.render_docker_run(plan))
        return EXIT_QUALIFIED
    if args.dry_run:
        _say(redact(json.dumps(plan.to_dict(), indent=2)))
        _say("")
        _say(plans.render_docker_run(plan))
        return EXIT_QUALIFIED
    return _serve(args, profile, plan)


def _serve(args: argparse.Namespace, profile: object, plan: object) -> int:
    from qualify.runtime import container as c
    from qualify.runtime import engine
    from qualify.runtime import plan as plans
    from qualify.runtime.gpu import check_gpus, query_gpus
    from qualify.runtime.log_evidence import check_log_evidence
    from qualify.util.atomic import atomic_write_text
    from qualify.util.redact import redact

    assert isinstance(plan, plans.LaunchPlan)
    run_dir = Path(args.report_dir) / plan.run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    record: dict[str, object] = {"plan": plan.to_dict(), "docker_run": plans.render_docker_run(plan)}

    def finish(code: int, message: str) -> int:
        record["result"] = message
        atomic_write_text(run_dir / "serve.json", redact(json.dumps(record, indent=2, default=str)) + "\n")
        _say(message)
        _say(f"run folder: {run_dir}")
        return code

    _say(f"run {plan.run_id}: {plan.image} for profile {plan.profile}")
    for what in plan.unpinned:
        _say(f"  unpinned (not reproducible): {what}")
    if plan.gpus:
        gpus = check_gpus(query_gpus(), profile)  # type: ignore[arg-type]
        record["gpu_preflight"] = gpus.to_dict()
        if not gpus.ok:
            return finish(EXIT_NOT_QUALIFIED, "GPU preflight failed:\n" + gpus.failure_text())
    client = engine.docker_client()
    try:
        with c.launched(client, plan, log_path=run_dir / "server.log") as rt:
            record["image"] = rt.identity.to_dict() if rt.identity else None
            _say(f"  container {plan.name} started from {rt.identity.id if rt.identity else '?'}; waiting up to "
                 f"{plan.startup_timeout_s:.0f} s for {plan.endpoint}")
            readiness = rt.wait_ready()
            record["readiness"] = readiness.to_dict()
            _say(f"  ready after {readiness.ready_s:.1f} s: serving {plan.served_model_name!r} at {plan.endpoint}")
            evidence = check_log_evidence(rt.logs_text(), profile, "load", log_name="server.log",  # type: ignore
                                          draft_folder=args.checkpoint)
            record["load_evidence"] = evidence.to_dict()
            _say(("  load evidence: " + evidence.summary) if evidence.ok else evidence.failure_text())
            if args.exit_when_ready:
                code = EXIT_QUALIFIED if evidence.ok else EXIT_NOT_QUALIFIED
            else:
                _say("  serving; Ctrl-C or SIGTERM stops and removes the container")
                while rt.state().get("Status") == "running":
                    time.sleep(1)
                raise errors.ContainerExited("the runtime container stopped while serving",
                                        exit_code=rt.state().get("ExitCode"), log_tail=rt.log_tail())
    except errors.RuntimeFailure as exc:
        record["teardown"] = _teardown(locals())
        tail = "".join(f"\n    | {line}" for line in exc.log_tail)
        return finish(EXIT_NOT_QUALIFIED, f"runtime failed: {exc}" + (f"\n  last log lines:{tail}" if tail else ""))
    except KeyboardInterrupt:
        record["teardown"] = _teardown(locals())
        print("qualify: interrupted; the runtime container was removed", file=sys.stderr, flush=True)
        finish(EXIT_NOT_QUALIFIED, "interrupted")
        raise
    record["teardown"] = _teardown(locals())
    return finish(code, "done; the runtime container was removed")


def _teardown(scope: dict[str, object]) -> object:
    rt = scope.get("rt")
    teardown = getattr(rt, "teardown", None)
    return teardown.to_dict() if teardown is not None else None


__all__ = ["register", "run"]
