"""``qualify profile-diff``: what differs between two profiles, key by key, and whether a rehearsal may differ so."""

from __future__ import annotations

import argparse

from qualify.commands import EXIT_NOT_QUALIFIED, EXIT_QUALIFIED

EPILOG = """\
exit codes:
  0  no difference (with --rehearsal: only differences the rehearsal allow-list allows)
  1  the profiles differ (with --rehearsal: in a key the allow-list does not allow, marked NOT ALLOWED)
  2  usage error: no such profile, or a profile that fails its schema or its consistency rules
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile-diff", help="show what differs between two profiles, key by key",
        description="Compare profile A with profile B (each a shipped profile's name or a path to a .toml): one "
        "line per flattened key whose value differs (runtime.env.TP, evidence[name=...].pattern; a table on one "
        "side only is one line). With --rehearsal, each line also says why the release profile and its CPU "
        "rehearsal may differ there (qualify/profile/rehearsal.py), or NOT ALLOWED.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="a profile name or path (the release profile, with --rehearsal)")
    p.add_argument("b", metavar="B", help="a profile name or path (its rehearsal, with --rehearsal)")
    p.add_argument("--rehearsal", action="store_true",
                   help="judge every difference against the rehearsal allow-list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qualify.profile import load_profile
    from qualify.profile.diff import render_value
    from qualify.profile.rehearsal import disallowed_leaves, judge_all
    from qualify.util.escape import escape_terminal

    a, b = load_profile(args.a), load_profile(args.b)  # ProfileError -> exit 2
    judged = judge_all(a, b)
    print(escape_terminal(f"A: {a.name} ({a.path}, sha256 {a.sha256[:12]})"))
    print(escape_terminal(f"B: {b.name} ({b.path}, sha256 {b.sha256[:12]})"))
    bad = 0
    for j in judged:
        d = j.difference
        line = f"{d.key}: {render_value(d.a)} -> {render_value(d.b)}"
        if args.rehearsal:
            if j.allowed_by is not None:
                line += f"  [allowed: {j.allowed_by.reason}]"
            else:
                bad += 1
                line += f"  [NOT ALLOWED: {', '.join(disallowed_leaves(j, a.data, b.data))}]"
        print(escape_terminal(line))
    if args.rehearsal:
        print(f"{len(judged)} difference(s), {bad} not allowed")
        return int(EXIT_NOT_QUALIFIED if bad else EXIT_QUALIFIED)
    print(f"{len(judged)} difference(s)")
    return int(EXIT_NOT_QUALIFIED if judged else EXIT_QUALIFIED)
