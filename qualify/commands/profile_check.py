"""``qualify profile-check``: the paired level's error rates by design, for a profile at its pilot spread."""

from __future__ import annotations

import argparse

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED

EPILOG = """\
exit codes:
  0  the profile's design meets every target (its 95% Monte-Carlo bound within it)
  1  a target is missed, or the profile states no pilot spread (nothing is claimed without one)
  2  usage error: no such profile, a profile that fails its schema, no [paired] block, a prompt set missing
     or changed, a spread or trial count out of range
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile-check", help="print the paired level's error rates by design for a profile",
        description="Simulate the profile's paired level (its prompt sets and categories, concurrencies, "
        "confidence, bootstrap, margins) at the per-prompt spread it states ([paired] pilot_spread, with its "
        "pilot_source), each simulated run decided by the harness's own decision code: how often a draft with no "
        "loss fails each criterion, how often one that lost twice the margin everywhere, or the category margin "
        "in its smallest category, passes it; and whether the targets are met (docs/operating-characteristic.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("profile", metavar="NAME", help="a shipped profile's name or a path to a .toml")
    p.add_argument("--spread", type=float, help="the per-prompt spread to use instead of the profile's pilot "
                   "(a fraction: 0.036 = 3.6%%)")
    p.add_argument("--trials", type=int, default=400, help="simulated runs per scenario (default 400)")
    p.add_argument("--seed", type=int, default=0, help="the simulation's seed (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.profile import load_profile
    from qualify.run.operating import profile_check, render, render_acceptance
    from qualify.util.escape import escape_terminal

    profile = load_profile(args.profile)  # ProfileError -> exit 2
    check = profile_check(profile, spread=args.spread, trials=args.trials, seed=args.seed)
    print(escape_terminal(f"profile: {profile.name} ({profile.path}, sha256 {profile.sha256[:12]})"))
    # The floors' rates are reported beside the paired level's; the targets are the paired level's.
    acceptance = (render_acceptance(check.acceptance) if check.acceptance is not None
                  else [f"acceptance: not computed: {check.acceptance_missing}"])
    for line in acceptance:
        print(escape_terminal(line))
    if check.oc is None:
        print(escape_terminal(f"not computed: {check.missing}"))
        return int(EXIT_NOT_QUALIFIED)
    print(escape_terminal(f"spread source: {check.spread_source}"))
    for line in render(check.oc):
        print(escape_terminal(line))
    return int(EXIT_QUALIFIED if check.oc.met else EXIT_NOT_QUALIFIED)
