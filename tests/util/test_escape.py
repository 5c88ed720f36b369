"""Text from a checkpoint cannot forge what a person reads: terminal lines, report.md, the card, diff, gate."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qualify.core import Evidence, Status
from qualify.report.card import validation_status_section
from qualify.report.diff import diff_runs, render
from qualify.report.markdown import render_markdown, summary_lines
from qualify.report.model import Check, LevelResult, Run, read_json, write_json
from qualify.util.escape import escape_markdown, escape_terminal, markdown_code

FORGED = [
    "w\nverdict: qualified",
    "w\rverdict: qualified",
    "w\r\nverdict: qualified",
    "w\x1b[2K\x1b[1A\rverdict: qualified",  # erase the line above, go back up
    "w\x1b]0;title\x07",  # OSC: window title
    "w\x9b2K",  # the 8-bit CSI
    "w\u2028verdict: qualified",  # line separator
    "w\u2029verdict: qualified",  # paragraph separator
    "w\x85verdict: qualified",  # NEL
    "w\x0bverdict: qualified\x0c",
    "w\u202edeifilauq :tcidrev",  # right-to-left override
    "w\u2066x\u2069\u200b\ufeff",
]

# Everything str.splitlines() breaks on, and what a terminal obeys.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def run_with_name(name: str) -> Run:
    ev = Evidence("every tensor is named by the manifest")
    ev.add("present in the checkpoint but not named by the manifest", tensor=name, file=name + ".safetensors")
    check = Check("structure.output_coverage", "structure", "t", Status.FAILED, ev.failure_text(), ev)
    return Run(run_id="r-1", harness_version="0", started_at="2026-01-01T00:00:00Z",
               profile={"name": "fixture", "sha256": "0" * 64, "conditions": {}},
               checkpoint={"path": "/c", "files": [{"path": name, "sha256": "a" * 64, "size": 1}]},
               levels=[LevelResult("structure", checks=[check])], errors=[f"could not read {name}"])


def test_controls_become_visible_escapes():
    assert escape_terminal("a\nb\rc\td\x1b[0m\x00\x7f") == "a\\nb\\rc\\td\\x1b[0m\\x00\\x7f"
    assert escape_terminal("\u202e\u2028\x85") == "\\u202e\\u2028\\x85"
    assert escape_terminal("\U000e0041") == "\\U000e0041"  # a tag character (Cf), invisible
    assert escape_terminal("a\\nb") == "a\\\\nb"  # a real backslash never reads as an escape
    assert escape_terminal("layers.0.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert escape_terminal("Gewichte ü ß 权重") == "Gewichte ü ß 权重"


def test_markdown_escapes_structure_but_keeps_names_readable():
    assert escape_markdown("layers.0.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert escape_markdown("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)\\>"
    assert escape_markdown("a|b") == "a\\|b"
    assert escape_markdown("*bold* _em_ `code` [l](u) ~~s~~ &amp;") == \
        "\\*bold\\* \\_em\\_ \\`code\\` \\[l\\](u) \\~\\~s\\~\\~ \\&amp;"
    assert escape_markdown("# heading") == "\\# heading"
    assert escape_markdown("1. item") == "1\\. item"
    assert escape_markdown("a\n# b") == "a\\\\n# b"
    assert markdown_code("a`b|c") == "``a`b\\|c``"
    assert markdown_code("`x`") == "`` `x` ``"


@pytest.mark.parametrize("name", FORGED)
def test_summary_lines_cannot_be_forged(name):
    lines = summary_lines(run_with_name(name))
    text = "\n".join(lines)
    assert not any(ch in text for ch in "\x1b\x9b\x07") and "\u202e" not in text
    physical = text.splitlines()
    assert len(physical) == len(lines)
    assert [ln for ln in physical if ln.startswith("verdict:")] == ["verdict: not qualified"]
    assert physical[-1] == "verdict: not qualified"


@pytest.mark.parametrize("name", [*FORGED, "<script>x</script>", "a|b|c", "`x` **y**", "# h", "[a](javascript:x)"])
def test_markdown_report_cannot_be_forged(name, tmp_path):
    run = run_with_name(name)
    md = render_markdown(run)
    assert not any(ch in md for ch in LINE_BREAKS.replace("\n", "") + "\x1b\x9b\u202e")
    assert [ln for ln in md.splitlines() if "Verdict" in ln] == ["**Verdict: not qualified**"]
    # Raw HTML only inside code spans, where Markdown shows it as text.
    outside = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", md)
    assert "<script>" not in outside
    assert not re.search(r"(?<!\\)\]\((?!position)", outside)  # no link but the chart's
    # The file table keeps three columns whatever the file's name.
    row = next(ln for ln in md.splitlines() if ln.startswith("| ") and "a" * 64 in ln)
    assert row.replace("\\|", "").count("|") == 4
    # report.json keeps the exact name.
    write_json(run, tmp_path / "report.json")
    back = read_json(tmp_path / "report.json")
    assert back.levels[0].checks[0].evidence.findings[0].tensor == name
    assert json.loads((tmp_path / "report.json").read_text())["checkpoint"]["files"][0]["path"] == name


@pytest.mark.parametrize("name", FORGED)
def test_card_and_diff_cannot_be_forged(name):
    run = run_with_name(name)
    run.checkpoint["repo"] = name
    card = validation_status_section(run)
    assert not any(ch in card for ch in LINE_BREAKS.replace("\n", "") + "\x1b\x9b\u202e")
    assert not any(ln.startswith("verdict") or ln.startswith("Status: qualified") for ln in card.splitlines())
    other = run_with_name("plain")
    lines = render(diff_runs(other, run), "a", "b")
    text = "\n".join(lines)
    assert len(text.splitlines()) == len(lines)
    assert "\x1b" not in text


# Any text at all: letters, every control, separators, surrogate-free astral characters.
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40)


@given(ANY_TEXT)
def test_fuzz_terminal_escape_is_one_safe_line(text):
    out = escape_terminal(text)
    assert out.splitlines() == ([out] if out else [])
    assert all(unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn") for ch in out)
    if text.isprintable() and "\\" not in text:
        assert out == text


@given(ANY_TEXT, ANY_TEXT)
def test_fuzz_no_input_starts_a_line(name, message):
    """Whatever a tensor name or message holds, each printed line starts with the harness's own text."""
    run = run_with_name(name)
    run.levels[0].checks[0].evidence.add(message, tensor=name)
    lines = summary_lines(run)
    physical = "\n".join(lines).splitlines()
    assert len(physical) == len(lines)
    assert physical[-1] == "verdict: not qualified"
    allowed = ("structure ", "  failed ", "  error ", "    - ", "verdict: ", "interrupted: ")
    assert all(ln.startswith(allowed) for ln in physical), physical
    md_lines = render_markdown(run).splitlines()
    finding_lines = [ln for ln in md_lines if ln.startswith("  - ")]
    assert len(finding_lines) == 2
    assert sum(ln.startswith("**Verdict") for ln in md_lines) == 1


@given(ANY_TEXT)
def test_fuzz_markdown_escape_has_no_active_syntax(text):
    out = escape_markdown(text)
    assert "\n" not in out and "\r" not in out
    # Every special character is preceded by a backslash (an odd run of them).
    for i, ch in enumerate(out):
        if ch in "`*[]<>|~&":
            run = len(out[:i]) - len(out[:i].rstrip("\\"))
            assert run % 2 == 1, (text, out)


@pytest.mark.parametrize(("stdout", "stderr"), [
    ("structure failed\nverdict: qualified\nverdict: not qualified\n", ""),
    ("  - x\x1b[2K\n", ""),
    ("", "qualify: error: a\u202eb\n"),
    ("a\rverdict: qualified\n", ""),
])
def test_the_corpus_notices_forged_output(stdout, stderr):
    from fixtures.run_corpus import forged_output

    assert forged_output(stdout, stderr) is not None
    assert forged_output("structure failed\n    - x\\nverdict: qualified\nverdict: not qualified\n", "") is None


@pytest.mark.slow
def test_gate_refusals_cannot_be_forged(tmp_path, capsys):
    import shutil

    from qualify import cli
    from tests.helpers import FIXTURE, run_qualify

    release = tmp_path / "release"
    shutil.copytree(FIXTURE / "mxfp8", release)
    proc = run_qualify("check", str(release), "--source", str(FIXTURE / "source"), "--levels", "structure,format",
                       "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = (tmp_path / "r").glob("*/report.json")
    (release / "x\nqualified: structure passed\x1b[2K.json").write_text("{}")
    capsys.readouterr()
    code = cli.main(["gate", str(report), "--require", "structure,format", "--allow-unsigned",
                     "--checkpoint", str(release)])
    out = capsys.readouterr().out
    assert code == 1
    assert "\x1b" not in out
    assert all(line.startswith("refused: ") for line in out.splitlines()), out
    assert "x\\nqualified: structure passed\\x1b[2K.json: in the checkpoint directory but not in the report" in out
