"""Human-readable renderings of a :class:`~qualify.report.Run` (pure: text in, text out)."""

from __future__ import annotations

from typing import Any

from .report import LEVEL_TITLES, LEVELS, Check, LevelResult, Run, Status, Verdict

_MARK = {
    Status.PASSED: "passed",
    Status.FAILED: "**FAILED**",
    Status.SKIPPED: "skipped",
    Status.ERROR: "**ERROR**",
    Status.NOT_RUN: "not run",
}


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
#: Levels that need the runtime; their conditions (target, image, GPUs, backends) only apply to them.
RUNTIME_LEVELS = ("load", "smoke", "acceptance", "losslessness", "throughput")


_LAYOUT_WORDS = {"row-major-unswizzled": "row-major and unswizzled"}


def _number(n: int) -> str:
    return _NUMBERS.get(n, str(n))


def checkpoint_conditions(run: Run) -> list[str]:
    """What the checkpoint levels' verdict is about: which files, from which source, in which format."""
    c = run.profile.get("conditions") or {}
    ck, src = run.checkpoint, c.get("source") or {}
    lines = []
    what = ck.get("repo") or ck.get("path")
    if what:
        manifest = f" (conversion_manifest.json sha256 {ck['manifest_sha256']})" if ck.get("manifest_sha256") else ""
        lines.append(f"- Checkpoint: {what}{manifest}")
    if src.get("repo"):
        at = f" at immutable revision {src['revision']}" if src.get("revision") else ""
        lines.append(f"- Source: {src['repo']}{at}")
    f = c.get("format") or {}
    if f:
        excluded = ", ".join(f.get("excluded_modules") or []) or "none"
        lines.append(
            f"- Format: {f.get('element_dtype')} weights, biased E8M0 scales stored as {f.get('scale_dtype')}, "
            f"1x{f.get('block_size')} blocks along the input dimension, "
            f"{_LAYOUT_WORDS.get(str(f.get('scale_layout')), f.get('scale_layout'))} scales, excluded: {excluded}"
        )
    recipe = _measured(run, "reproduction.quantized_tensors", "recipe")
    if recipe:
        lines.append(f"- Reproduced with the reference quantizer's '{recipe}' scale recipe")
    return lines


def runtime_conditions(conditions: dict[str, Any]) -> list[str]:
    """The runtime conditions in the model card's words (target, runtime, hardware, parallelism, backends)."""
    c = conditions
    lines = []
    t = c.get("target") or {}
    if t.get("repo"):
        lines.append(f"- Target: {t['repo']}" + (f" revision {t['revision']}" if t.get("revision") else " (unpinned)"))
    rt = c.get("runtime") or {}
    if rt.get("image"):
        lines.append(f"- Runtime: {rt['image']}" + (f" ({rt['digest']})" if rt.get("digest") else ""))
    hw = c.get("hardware") or {}
    if hw.get("count"):
        lines.append(f"- Hardware: {_number(hw['count'])} {hw.get('name') or 'GPU'} GPUs")
    elif hw:
        lines.append("- Hardware: CPU only (no GPU)")
    par = c.get("parallelism") or {}
    if par:
        lines.append(f"- Parallelism: tensor parallel size {par.get('tensor_parallel_size')} and decode-context "
                     f"parallel size {par.get('decode_context_parallel_size')}")
    b = c.get("backends") or {}
    target = [b.get(k) for k in ("target_attention", "target_moe", "target_linear", "target_all_reduce")]
    if target and all(target) and len(set(target)) == 1:
        lines.append(f"- Target attention, MoE, linear, and tensor-parallel all-reduce: {target[0]}")
    else:
        labels = (("target_attention", "Target attention"), ("target_moe", "Target MoE"),
                  ("target_linear", "Target linear"), ("target_all_reduce", "Target tensor-parallel all-reduce"))
        for key, label in labels:
            if b.get(key):
                lines.append(f"- {label}: {b[key]}")
    if b.get("dflash_attention"):
        lines.append(f"- DFlash attention: {b['dflash_attention']}")
    if b.get("dflash_linear"):
        lines.append(f"- DFlash linear: {b['dflash_linear']}")
    if c.get("proposal_length"):
        n = c["proposal_length"]
        lines.append(f"- DFlash proposal length: {_number(n)} token{'s' if n != 1 else ''}")
    if c.get("draft_kv_cache"):
        lines.append(f"- DFlash KV cache: {c['draft_kv_cache']}")
    if c.get("cuda_graph_mode"):
        lines.append(f"- CUDA graph mode: {c['cuda_graph_mode']} for the load-and-inference qualification")
    return lines


def _measured(run: Run, check_id: str, key: str) -> Any:
    for lvl in run.levels:
        for c in lvl.checks:
            if c.id == check_id and c.status is Status.PASSED and c.evidence:
                return c.evidence.measured.get(key)
    return None


def condition_lines(run: Run) -> list[str]:
    lines = checkpoint_conditions(run)
    if any(lvl.name in RUNTIME_LEVELS for lvl in run.levels):
        lines += runtime_conditions(run.profile.get("conditions") or {})
    return lines


def validation_status(run: Run) -> str:
    """A "Validation status" paragraph in the seed's style, claiming exactly the levels that passed."""
    passed = [lvl for lvl in run.levels if lvl.status is Status.PASSED]
    conditions = run.profile.get("conditions") or {}
    out = []
    if run.verdict is Verdict.QUALIFIED:
        out.append(f"Status: qualified for {_join([lvl.title for lvl in passed])} under the following conditions:")
    else:
        not_passed = [f"{lvl.title} ({lvl.status})" for lvl in run.levels if lvl.status is not Status.PASSED]
        head = "Status: not qualified."
        if run.interrupted:
            head += f" The run was interrupted ({run.interrupted}) before it finished."
        if run.errors:
            head += " The harness reported errors: " + "; ".join(run.errors) + "."
        if not_passed:
            head += f" Not passed: {_join(not_passed)}."
        if passed:
            head += f" Passed, but not sufficient for a release: {_join([lvl.title for lvl in passed])}."
        out.append(head + " Conditions of this run:")
    out.extend(condition_lines(run))
    ran = {lvl.name for lvl in run.levels}
    not_qualified = [str(x) for x in conditions.get("not_qualified") or []]
    not_qualified += [LEVEL_TITLES[n] for n in LEVELS if n not in ran and LEVEL_TITLES[n] not in not_qualified]
    if not_qualified:
        out.append("")
        out.append(f"Not qualified by this run: {_join(not_qualified)}.")
    return "\n".join(out)


def _finding_lines(check: Check) -> list[str]:
    if check.evidence is None:
        return []
    lines = [f"  - {f}" for f in check.evidence.findings]
    total = check.evidence.findings_total or len(check.evidence.findings)
    if total > len(check.evidence.findings):
        lines.append(f"  - ... and {total - len(check.evidence.findings)} more (see report.json)")
    return lines


def _level_section(level: LevelResult) -> list[str]:
    out = [f"### {level.title} (`{level.name}`): {_MARK[level.status]}", ""]
    if not level.checks:
        out.append(f"No check ran: {level.reason or 'not run'}.")
        out.append("")
        return out
    out.append("| check | status | what was checked | time |")
    out.append("|---|---|---|---|")
    for c in level.checks:
        what = (c.message or c.title).replace("|", "\\|").replace("\n", " ")
        out.append(f"| `{c.id}` | {_MARK[c.status]} | {what} | {c.duration_s:.2f} s |")
    out.append("")
    for c in level.checks:
        if c.status in (Status.FAILED, Status.ERROR):
            out.append(f"`{c.id}` {c.status}: {c.message}")
            out.extend(_finding_lines(c))
            out.append("")
    return out


def render_markdown(run: Run) -> str:
    ck = run.checkpoint
    out = [
        f"# Qualification report `{run.run_id}`",
        "",
        f"**Verdict: {run.verdict}**",
        "",
        "## Validation status",
        "",
        validation_status(run),
        "",
        "## Levels",
        "",
        "| level | required | status | checks |",
        "|---|---|---|---|",
    ]
    for lvl in run.levels:
        counts = {s: sum(1 for c in lvl.checks if c.status is s) for s in Status}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
        out.append(f"| {lvl.title} | {'yes' if lvl.required else 'no'} | {_MARK[lvl.status]} | {summary} |")
    out.append("")
    for lvl in run.levels:
        out.extend(_level_section(lvl))
    out += ["## Checkpoint", "", f"- Path: `{ck.get('path')}`"]
    if ck.get("manifest_sha256"):
        out.append(f"- Manifest sha256: `{ck['manifest_sha256']}`")
    for key in ("repo", "revision"):
        if ck.get(key):
            out.append(f"- {key.capitalize()}: `{ck[key]}`")
    src = run.source
    if src.get("path") or src.get("repo"):
        out.append(f"- Source: `{src.get('repo') or src.get('path')}`"
                   + (f" at `{src['revision']}`" if src.get("revision") else ""))
    files = ck.get("files") or []
    if files:
        out += ["", "| file | size | sha256 |", "|---|---|---|"]
        out += [f"| `{f['path']}` | {f['size']} | `{f['sha256']}` |" for f in files]
    env = run.environment
    out += [
        "",
        "## Run",
        "",
        f"- Harness: qualify {run.harness_version}",
        f"- Profile: `{run.profile.get('name')}` (sha256 `{run.profile.get('sha256')}`)",
        f"- Started: {run.started_at}; finished: {run.finished_at}",
        f"- Command: `{' '.join(run.command)}`" if run.command else "- Command: (library call)",
        f"- Python {env.get('python')} on {env.get('platform')}",
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items()),
    ]
    if run.errors:
        out += ["", "## Harness errors", ""] + [f"- {e}" for e in run.errors]
    return "\n".join(out) + "\n"


def summary_lines(run: Run, *, findings_per_check: int = 5) -> list[str]:
    """One line per level, the failed checks under it with their first findings, then the verdict."""
    lines = []
    for lvl in run.levels:
        n = len(lvl.checks)
        lines.append(f"{lvl.name:<13} {lvl.status!s:<8} {n} check{'s' if n != 1 else ''}"
                     + (f" ({lvl.reason})" if not lvl.checks and lvl.reason else ""))
        for c in lvl.checks:
            if c.status in (Status.FAILED, Status.ERROR):
                rule = c.evidence.summary if c.evidence and c.message == c.evidence.summary else None
                lines.append(f"  {c.status!s} {c.id} (rule: {rule})" if rule else f"  {c.status!s} {c.id}: {c.message}")
                shown = c.evidence.findings[:findings_per_check] if c.evidence else []
                lines.extend(f"    - {f}" for f in shown)
                total = (c.evidence.findings_total or 0) if c.evidence else 0
                if total > len(shown):
                    lines.append(f"    - ... {total - len(shown)} more in the report")
        not_run = [c.id for c in lvl.checks if c.status is Status.NOT_RUN]
        if not_run:
            lines.append(f"  not run (an input they need is broken): {', '.join(not_run)}")
    if run.interrupted:
        lines.append(f"interrupted: {run.interrupted}")
    lines.append(f"verdict: {run.verdict}")
    return lines
