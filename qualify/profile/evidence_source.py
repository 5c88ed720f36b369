"""Where an ``[[evidence]]`` line comes from: the format string in the source that prints it.

An evidence item names the statement that prints its line: ``source = { file = "vllm/...py", format = "..." }``
for vLLM (the file relative to site-packages of the pinned vLLM), ``source = { project = "runtimes/...",
format = "..." }`` for a line this project's own runtime code prints, or ``unverified = "<why>"`` for a line no
source at hand prints (the community image's own lines, taken from the model card).

:func:`format_in_source` says whether the format is in that file, as Python reads its string literals
(implicit concatenation joined; an f-string with each placeholder written ``{expr}``, ``{expr!r}`` or
``{expr:spec}``, so ``f"{method=}"`` reads ``method={method!r}``). :func:`sample_line` prints the format with
sample values, so a test can check that the item's pattern matches a line the format can produce.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from qualify.errors import ProfileError
from qualify.profile.specs import EvidenceSource, EvidenceSpec

#: A %-style conversion, an escaped ``%``, a ``{...}`` placeholder or an escaped brace.
_PLACEHOLDER = re.compile(r"%%|%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.(\d+))?[diouxXeEfFgGcrsa]|\{\{|\}\}|\{[^{}]*\}")


def _render_fstring(node: ast.JoinedStr, text: str) -> str:
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            out.append(part.value)
        elif isinstance(part, ast.FormattedValue):
            expr = ast.get_source_segment(text, part.value) or ast.unparse(part.value)
            conv = f"!{chr(part.conversion)}" if part.conversion != -1 else ""
            spec = ""
            if isinstance(part.format_spec, ast.JoinedStr):
                spec = ":" + _render_fstring(part.format_spec, text)
            out.append(f"{{{expr}{conv}{spec}}}")
    return "".join(out)


def string_literals(text: str, *, where: str) -> Iterator[str]:
    """Every string literal of Python source ``text``, f-strings rendered as the module's docstring says.

    Raises:
        ProfileError: ``text`` is not Python (``where`` names the file).
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ProfileError(f"{where}: not Python source ({exc.msg}, line {exc.lineno})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield _render_fstring(node, text)


def format_in_source(fmt: str, text: str, *, where: str) -> bool:
    """Whether format string ``fmt`` is (part of) one string literal of ``text``."""
    return any(fmt in literal for literal in string_literals(text, where=where))


def sample_line(fmt: str, args: Sequence[str] = ()) -> str:
    """``fmt`` printed with ``args`` in order (as text), then sample values: ``1`` for an integer
    conversion, ``1.00`` (to the stated precision) for a float one, ``x`` for anything else."""
    given = iter(args)

    def fill(m: re.Match[str]) -> str:
        token = m.group(0)
        if token in ("%%", "{{", "}}"):
            return token[0]
        value = next(given, None)
        if value is not None:
            return value
        kind = token[-1]
        if token.startswith("%") and kind in "diouxX":
            return "1"
        if token.startswith("%") and kind in "eEfFgG":
            digits = int(m.group(1)) if m.group(1) else 6
            return "1." + "0" * digits if digits else "1"
        return "x"

    return _PLACEHOLDER.sub(fill, fmt)


def evidence_matches(item: EvidenceSpec, log_text: str) -> tuple[list[re.Match[str]], bool]:
    """Every match of ``item``'s pattern in ``log_text``, and whether its anchor (``after``) was found.

    With an anchor, only the text after the first line the anchor matches is searched: the line that
    starts the draft's load, so the same words printed for the target before it are not the draft's.
    """
    start = 0
    if item.after_pattern is not None:
        anchor = re.search(item.after_pattern, log_text, re.MULTILINE)
        if anchor is None:
            return [], False
        start = anchor.end()
    return list(re.compile(item.pattern, re.MULTILINE).finditer(log_text, start)), True


def _source_path(source: EvidenceSource, vllm_site: Path | None, project_root: Path) -> Path | None:
    if source.file is not None:
        return vllm_site / source.file if vllm_site is not None else None
    return project_root / str(source.project)


#: What a sample line is printed after, as vLLM's logger prefixes every line.
SAMPLE_PREFIX = "INFO 01-01 00:00:00 [x.py:1] "


def source_problems(item: EvidenceSpec, *, vllm_site: Path | None, project_root: Path) -> list[str]:
    """Why ``item``'s line is not shown to come from its source: each problem names the item and the file.

    ``vllm_site`` is the pinned vLLM's site-packages (None: vLLM files are not checked). An item must have a
    source or say why it is unverified; the format (and the anchor's) must be in its file; the pattern must
    match the sample line the format prints, after the anchor's own sample line.
    """
    if item.source is None:
        return [] if item.unverified else [f"evidence {item.name!r}: names no source and is not marked unverified"]
    out: list[str] = []
    lines: list[str] = []
    for what, source in (("anchor", item.after_source), ("format", item.source)):
        if source is None:
            continue
        path = _source_path(source, vllm_site, project_root)
        if path is None:
            return []
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            out.append(f"evidence {item.name!r}: {source.where}: cannot read {path}: {exc.strerror or exc}")
            continue
        if not format_in_source(source.format, text, where=str(path)):
            out.append(f"evidence {item.name!r}: its {what} {source.format!r} is not in {source.where} ({path})")
        lines.append(SAMPLE_PREFIX + sample_line(source.format, source.args))
    if not out:
        sample = "\n".join(lines) + "\n"
        matches, _ = evidence_matches(item, sample)
        if not matches:
            out.append(f"evidence {item.name!r}: its pattern {item.pattern!r} does not match the line its format "
                       f"prints in {item.source.where}: {lines[-1]!r}")
    return out
