"""Text from a checkpoint, made safe to show: one escape for terminals and logs, one for Markdown.

Tensor names, file names, config values and the messages that quote them come from files
anyone can write. Printed raw, a name holding a newline starts a line of its choosing (a
``verdict: qualified`` above the real verdict), ANSI/CSI/OSC sequences move the cursor or
erase what was printed, and bidi overrides show text in another order than it is. Every
such character becomes a visible escape (``\\n``, ``\\x1b``, ``\\u202e``), so a line the
harness prints is one line, and it reads as what it holds. report.json keeps the exact
strings; only what a person reads is escaped.
"""

from __future__ import annotations

import re
import unicodedata

#: Unicode categories never shown raw: controls (C0, DEL, C1), format characters (bidi
#: embeddings, overrides and isolates, zero-width joiners, BOM), line and paragraph
#: separators, surrogates, private use and unassigned code points.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}

#: Markdown punctuation that can open emphasis, code, a link or image, raw HTML, an entity, a table
#: column or strike-through. An underscore between two letters or digits opens nothing (CommonMark's
#: flanking rules), so ``self_attn`` stays as it is; one at a word's edge is escaped.
_MD_SPECIAL = re.compile(r"[\\`*\[\]<>|~&]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# A heading, list or ordered-list marker, or a setext underline, at the start of a cell or item.
_MD_LEADING = re.compile(r"^(\s*\d*)([-+=#.)])")


def _visible(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(ch: str) -> bool:
    return ch in _SHORT or unicodedata.category(ch) in _UNSAFE_CATEGORIES


def escape_terminal(text: object) -> str:
    """``text`` as one line a terminal shows as it is: controls, escapes, separators and bidi marks made visible.

    A backslash is doubled, so an escaped newline (``\\n``) and a name holding a backslash
    and an ``n`` never look alike. Printable text, non-ASCII letters included, is unchanged.

    Args:
        text: anything; it is converted with ``str`` first.
    """
    s = str(text)
    if s.isprintable() and "\\" not in s:  # the common case, in C
        return s
    return "".join(_visible(ch) if _unsafe(ch) else ch for ch in s)


def escape_lines(lines: list[str]) -> list[str]:
    """Each line escaped with :func:`escape_terminal`: what a command prints, one physical line each."""
    return [escape_terminal(line) for line in lines]


def escape_markdown(text: object) -> str:
    """``text`` as inline Markdown that renders as exactly this text, inside a paragraph, list item or table cell.

    Controls become visible escapes as on a terminal (so no newline ends the line or the
    table row), then every character that could open emphasis, code, a link, raw HTML, a
    heading or a table column is backslash-escaped.

    Args:
        text: anything; it is converted with ``str`` first.
    """
    s = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), escape_terminal(text))
    return _MD_LEADING.sub(lambda m: m.group(1) + "\\" + m.group(2), s)


def markdown_code(text: object) -> str:
    """``text`` as a Markdown code span that shows it verbatim (controls made visible), safe in a table cell.

    The fence is one backtick longer than the longest run of backticks inside, and a pipe is
    escaped, which GitHub's tables require even inside code.

    Args:
        text: anything; it is converted with ``str`` first.
    """
    s = escape_terminal(text).replace("|", "\\|")
    runs = [len(r) for r in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) else ""
    return f"{fence}{pad}{s}{pad}{fence}"
