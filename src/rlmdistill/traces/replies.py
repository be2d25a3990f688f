"""Reading the root's reply: fenced code blocks and the final answer.

The one reading of a reply's text: the collector's episode acts on it, and the export stage
reads recorded replies with it (tool-call style), so it sits in ``traces``, below both.

Actions are fenced code blocks in plain text (``action_format = "fenced_code"``), as in the
reference RLM work: a block opened with ```` ```repl ```` or ```` ```python ```` (or a bare
fence) is executed in the REPL. The final answer is handed back either from code, by calling
``FINAL(value)`` / ``FINAL_VAR(name)`` inside a block (the REPL records it), or in the prose of
the reply, outside every fence, as ``FINAL(text)`` / ``FINAL_VAR(name)``. Text inside a fence
is never read as a prose answer; ``FINAL(...)`` is matched with balanced parentheses.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

_FENCE_OPEN = re.compile(r"^[ \t]*```[ \t]*(repl|python|py|python3)?[ \t]*$", re.IGNORECASE)
_FENCE_ANY = re.compile(r"^[ \t]*```")
_FINAL = re.compile(r"\bFINAL(_VAR)?\s*\(")


class CodeBlock(NamedTuple):
    """One executable block: its 0-based index in the reply and its code."""

    position: int
    code: str
    closed: bool
    """False when the reply ended before the closing fence (e.g. cut by ``max_tokens``)."""


class FinalAnswer(NamedTuple):
    """A final answer found in prose: the literal text, or a variable name to look up."""

    kind: Literal["text", "var"]
    value: str


class ParsedReply(NamedTuple):
    """A root reply split into executable blocks, prose, and an optional prose answer."""

    blocks: list[CodeBlock]
    prose: str
    """The reply with every fenced block removed."""
    final: FinalAnswer | None


def split_fences(reply: str) -> tuple[list[CodeBlock], str]:
    """Split ``reply`` into executable code blocks and the prose outside all fences.

    Fences with another language tag (```` ```json ````, ```` ```text ````) are removed from
    the prose but not executed. An unclosed executable fence at the end counts as a block with
    ``closed=False``.
    """
    blocks: list[CodeBlock] = []
    prose: list[str] = []
    lines = reply.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE_ANY.match(line):
            executable = bool(_FENCE_OPEN.match(line))
            body: list[str] = []
            i += 1
            closed = False
            while i < len(lines):
                if lines[i].strip().startswith("```"):
                    closed = True
                    break
                body.append(lines[i])
                i += 1
            if executable:
                blocks.append(CodeBlock(len(blocks), "\n".join(body), closed))
            i += 1
            continue
        prose.append(line)
        i += 1
    return blocks, "\n".join(prose)


def balanced_argument(text: str, open_index: int) -> str | None:
    """Return the text between ``text[open_index] == "("`` and its matching ``)``.

    Parentheses inside single/double-quoted strings are ignored. Returns ``None`` when the
    parenthesis is never closed.
    """
    depth = 0
    quote: str | None = None
    i = open_index
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : i]
        i += 1
    return None


def find_final(prose: str) -> FinalAnswer | None:
    """Find the last ``FINAL(...)``/``FINAL_VAR(...)`` in prose (text outside code fences).

    ``FINAL(x)`` gives the literal text ``x`` (stripped; surrounding quotes are kept, since a
    memo may quote). When quotes make the parentheses unbalanced (an apostrophe in a memo), the
    last ``)`` of the prose closes the answer. ``FINAL_VAR(name)`` gives the name with quotes
    and whitespace stripped. Returns ``None`` when neither appears.
    """
    found: FinalAnswer | None = None
    for m in _FINAL.finditer(prose):
        open_index = m.end() - 1
        arg = balanced_argument(prose, open_index)
        if arg is None:
            last = prose.rfind(")")
            if last <= open_index:
                continue
            arg = prose[open_index + 1 : last]
        if m.group(1):
            found = FinalAnswer("var", arg.strip().strip("'\"").strip())
        else:
            found = FinalAnswer("text", arg.strip())
    return found


def parse_reply(reply: str) -> ParsedReply:
    """Parse a full root reply (prefill included) into blocks, prose and a prose answer."""
    blocks, prose = split_fences(reply)
    return ParsedReply(blocks, prose, find_final(prose))
