"""Tests for qualify.serving.prompt_sets: standard prompt sets from local files, and their identities."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.serving.prompt_sets import chat_template_identity, load_prompt_set, set_identity
from tests.helpers import REPO

SHIPPED = REPO / "fixtures" / "prompts" / "acceptance-v1.json"


def jsonl(path: Path, rows: list[object], *, blank_after: int | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


MT_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Compose a travel blog post.", "Rewrite it."]},
    {"question_id": 101, "category": "reasoning", "turns": ["Who is second?", "And now?"]},
    {"question_id": 111, "category": "math", "turns": ["What is the area of the triangle?"]},
]
GSM8K = [
    {"question": "Natalia sold clips to 48 friends...", "answer": "...\n#### 72"},
    {"question": "Weng earns $12 an hour...", "answer": "...\n#### 10"},
]
HUMANEVAL = [
    {"task_id": "HumanEval/0", "prompt": "def has_close_elements(numbers, threshold):\n", "entry_point": "x"},
    {"task_id": "HumanEval/1", "prompt": "def separate_paren_groups(s):\n", "test": "..."},
]


def test_mt_bench_first_turns_as_chat_prompts(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "question.jsonl", MT_BENCH, blank_after=1)
    ps = load_prompt_set(path, "mt-bench")
    assert [p.id for p in ps.prompts] == ["mt-bench-81", "mt-bench-101", "mt-bench-111"]
    assert ps.categories == ("writing", "reasoning", "math")
    assert ps.prompts[0].messages == ({"role": "user", "content": "Compose a travel blog post."},)
    assert ps.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ps.name == "mt-bench"


def test_gsm8k_questions_as_chat_prompts(tmp_path: Path) -> None:
    ps = load_prompt_set(jsonl(tmp_path / "test.jsonl", GSM8K), "gsm8k", name="gsm8k-test")
    assert [p.id for p in ps.prompts] == ["gsm8k-1", "gsm8k-2"]
    assert ps.categories == ("gsm8k",) and ps.name == "gsm8k-test"
    assert ps.prompts[1].kind == "chat" and "Weng" in ps.prompts[1].messages[0]["content"]  # type: ignore[index]


def test_humaneval_prompts_as_plain_completions(tmp_path: Path) -> None:
    ps = load_prompt_set(jsonl(tmp_path / "HumanEval.jsonl", HUMANEVAL), "humaneval", limit=1)
    assert [(p.id, p.kind, p.prompt) for p in ps.prompts] == [
        ("HumanEval/0", "completion", "def has_close_elements(numbers, threshold):\n")]
    ident = set_identity(ps, "humaneval", total=2)
    assert ident["used"] == "the first 1 of 2 prompts"
    assert ident["sha256"] == hashlib.sha256((tmp_path / "HumanEval.jsonl").read_bytes()).hexdigest()
    assert ident["format"] == "humaneval" and ident["per_category"] == {"humaneval": 1}


def test_the_shipped_format_with_a_limit_keeps_only_the_categories_used() -> None:
    full = load_prompt_set(SHIPPED, "qualify")
    assert len(full.prompts) >= 20 and full.categories == ("chat", "code", "math", "long_context")
    few = load_prompt_set(SHIPPED, "qualify", limit=2)
    assert len(few.prompts) == 2 and few.categories == ("chat",) and few.sha256 == full.sha256


@pytest.mark.parametrize(
    ("fmt", "rows", "words"),
    [
        ("mt-bench", [MT_BENCH[0], {"question_id": 82, "category": "writing", "turns": []}],
         r"line 2: 'turns' must be a non-empty list"),
        ("mt-bench", [{"category": "x", "turns": ["a"]}], r"line 1: 'question_id' must be"),
        ("mt-bench", [MT_BENCH[0], MT_BENCH[0]], r"line 2: id 'mt-bench-81' repeats line 1"),
        ("gsm8k", [GSM8K[0], {"question": "q"}], r"line 2: 'answer' must be a non-empty string \(missing\)"),
        ("gsm8k", [{"question": "", "answer": "a"}], r"line 1: 'question' must be a non-empty string"),
        ("humaneval", [{"task_id": "HumanEval/0", "prompt": 3}], r"line 1: 'prompt' must be a non-empty string"),
        ("humaneval", [[1, 2]], r"line 1: expected a JSON object, found list"),
    ],
)
def test_a_malformed_line_is_an_error_naming_the_file_and_line(tmp_path: Path, fmt: str, rows: list[object],
                                                                words: str) -> None:
    path = jsonl(tmp_path / "set.jsonl", rows)
    with pytest.raises(UsageError, match=words) as info:
        load_prompt_set(path, fmt)
    assert str(path) in str(info.value)


def test_a_line_that_is_not_json_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "question.jsonl"
    path.write_text(json.dumps(MT_BENCH[0]) + "\n{\"question_id\": 2,\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"question.jsonl \(mt-bench\): line 2: not valid JSON"):
        load_prompt_set(path, "mt-bench")


def test_a_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_text('{"question": "a", "question": "b", "answer": "c"}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"line 1: duplicate key 'question'"):
        load_prompt_set(path, "gsm8k")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p, "no such file"),
        (lambda p: (p.mkdir(), p)[1], "is a folder"),
        (lambda p: (p.write_bytes(b"\n\n"), p)[1], r"no prompt in the file \(empty\)"),
        (lambda p: (p.write_bytes(b"\xff\xfe"), p)[1], r"not UTF-8 text \(byte 0\)"),
    ],
)
def test_a_missing_or_empty_file_is_a_clear_error(tmp_path: Path, make: object, words: str) -> None:
    path = make(tmp_path / "question.jsonl")  # type: ignore[operator]
    with pytest.raises(UsageError, match=words) as info:
        load_prompt_set(path, "mt-bench")
    assert "question.jsonl" in str(info.value)


def test_unknown_format_and_bad_limit(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown format 'alpaca'; formats: qualify, mt-bench, gsm8k, humaneval"):
        load_prompt_set(tmp_path / "x.jsonl", "alpaca")
    with pytest.raises(UsageError, match="limit must be at least 1, not 0"):
        load_prompt_set(jsonl(tmp_path / "t.jsonl", GSM8K), "gsm8k", limit=0)


def test_chat_template_identity(tmp_path: Path) -> None:
    assert chat_template_identity(None)["sha256"] is None
    assert "not verified" in chat_template_identity(None)["note"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}), encoding="utf-8")
    assert chat_template_identity(tmp_path)["sha256"] == hashlib.sha256(b"{{ x }}").hexdigest()
    (tmp_path / "chat_template.jinja").write_bytes(b"{{ y }}")
    assert chat_template_identity(tmp_path)["sha256"] == hashlib.sha256(b"{{ y }}").hexdigest()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert chat_template_identity(empty)["sha256"] is None
    # Two templates in one file: which one the server uses is not known, so no hash is claimed.
    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "tokenizer_config.json").write_text('{"chat_template": "{{ a }}", "chat_template": "{{ b }}"}')
    identity = chat_template_identity(twice)
    assert identity["sha256"] is None
    assert "not verified: tokenizer_config.json is not strict JSON (duplicate key 'chat_template')" in identity["note"]
