"""Prompt sets read from local files in their published formats, and the identity that makes them evidence.

A figure is only as comparable as the prompts it was measured on, so every set a run
reads is identified by the sha256 of its file's bytes (and how many of its prompts were
used), and the chat template that turned chat prompts into tokens by its own sha256.
Nothing is downloaded at run time: a GPU runner places the files, the profile names them.

Formats (one JSON object a line for the JSONL ones; blank lines are allowed):

- ``qualify``: this repository's prompt set (``fixtures/prompts/``): see
  :func:`load_prompts`.
- ``mt-bench``: FastChat's ``question.jsonl``: ``question_id``, ``category``, ``turns`` (a
  list of user messages). The first turn is asked as a chat message (a second turn needs
  the model's own first answer, which would make the two drafts' prompts differ).
- ``gsm8k``: the GSM8K ``test.jsonl``: ``question`` (asked as a chat message) and
  ``answer`` (required, not sent); category ``gsm8k``.
- ``humaneval``: OpenAI's ``HumanEval.jsonl``: ``task_id`` and ``prompt`` (sent as a plain
  completion, the way the set is meant to be continued); category ``humaneval``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import JsonProblem, UsageError
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

    def identity(self) -> dict[str, Any]:
        counts = {c: sum(p.category == c for p in self.prompts) for c in self.categories}
        return {"name": self.name, "file": self.path.name, "sha256": self.sha256, "licence": self.licence,
                "prompts": len(self.prompts), "per_category": counts}


def load_prompts(path: Path) -> PromptSet:
    """A prompt set file (JSON: name, licence, categories, prompts); strict, every problem named."""
    path = Path(path)
    where = f"prompt set {path}"
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read forever
            raise UsageError(f"{where}: not a regular file")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None
    # The one strict reader, on the very bytes hashed below: a duplicate key or a NaN is refused, not guessed.
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
                     tuple(prompts))

FORMATS: tuple[str, ...] = ("qualify", "mt-bench", "gsm8k", "humaneval")
#: What a standard set's licence line says: the harness does not verify a downloaded file's licence.
STANDARD_LICENCE = "not stated: the format carries no licence field (a published set's is its authors'); not verified"


def _read(path: Path, where: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file", hint="place the published file there; nothing is "
                                                        "downloaded at run time") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: is a folder, not a file") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None


def _jsonl(raw: bytes, where: str) -> list[tuple[int, dict[str, Any]]]:
    """Every non-blank line as (line number, object); a line that is not a JSON object names itself."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    out = []
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        body = line.strip()
        if body:
            try:
                obj = parse_strict(body, offset)
            except JsonProblem as exc:
                raise UsageError(f"{where}: line {number}: {exc}") from None
            if not isinstance(obj, dict):
                raise UsageError(f"{where}: line {number}: expected a JSON object, found {type(obj).__name__}")
            out.append((number, obj))
        offset += len(line.encode("utf-8"))
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
    return Prompt(task, "humaneval", "completion", prompt=_text(obj, "prompt", where))


def load_prompt_set(path: Path, fmt: str, *, name: str | None = None, limit: int | None = None) -> PromptSet:
    """A prompt set from a local file in its published format; strict, every problem naming the file and line.

    Args:
        path: the file.
        fmt: one of :data:`FORMATS`.
        name: the set's name in the report (default: the format's, or the shipped set's own).
        limit: use only the first ``limit`` prompts (in file order); the identity says so.

    Raises:
        UsageError: unknown format, missing or unreadable file, a malformed line, a duplicate id.
    """
    path = Path(path)
    where = f"prompt set {path} ({fmt})"
    if fmt not in FORMATS:
        raise UsageError(f"prompt set {path}: unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    if limit is not None and limit < 1:
        raise UsageError(f"{where}: limit must be at least 1, not {limit}")
    if fmt == "qualify":
        loaded = load_prompts(path)
        prompts = loaded.prompts[:limit] if limit is not None else loaded.prompts
        categories = tuple(c for c in loaded.categories if any(p.category == c for p in prompts))
        return PromptSet(name or loaded.name, path, loaded.sha256, loaded.licence, categories, prompts)
    raw = _read(path, where)
    readers: dict[str, Callable[[dict[str, Any], str, int], Prompt]] = {
        "mt-bench": lambda o, w, n: _mt_bench(o, w),
        "gsm8k": _gsm8k,
        "humaneval": lambda o, w, n: _humaneval(o, w),
    }
    read: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, obj in _jsonl(raw, where):
        at = f"{where}: line {number}"
        prompt = readers[fmt](obj, at, number)
        if prompt.id in seen:
            raise UsageError(f"{at}: id {prompt.id!r} repeats line {seen[prompt.id]}")
        seen[prompt.id] = number
        read.append(prompt)
    if limit is not None:
        read = read[:limit]
    categories = tuple(dict.fromkeys(p.category for p in read))
    return PromptSet(name or fmt, path, hashlib.sha256(raw).hexdigest(), STANDARD_LICENCE, categories, tuple(read))


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


__all__ = ["FORMATS", "chat_template_identity", "load_prompt_set", "set_identity"]
