"""Tool-call style: REPL code blocks as tool calls, argument parsing and Arrow-safe storage.

- :data:`REPL_TOOL` is the one tool schema of tool style: ``repl(code: str)``.
- :func:`turn_tool_messages` turns one root turn (reply with ```` ```repl ```` blocks + the
  REPL output the root saw) into an assistant message with ``tool_calls`` and one ``tool``
  message per executed block.
- :func:`normalize_tool_calls` parses tool-call arguments given as a JSON string into a
  mapping before templating (never double-encoded); invalid JSON raises
  :class:`ToolCallError` naming the episode and message index (the export counts
  and drops that example instead of crashing).
- :func:`load_messages` restores the exact message dicts of a dataset row from its
  ``messages_json`` string column (Arrow would widen heterogeneous argument dicts,
  giving row 1 ``{"q": "a", "n": null}`` when row 2 has ``{"n": 1}``).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlmdistill.traces.replies import split_fences

__all__ = [
    "REPL_TOOL",
    "REPL_TOOL_NAME",
    "ToolCallError",
    "load_messages",
    "normalize_tool_calls",
    "turn_tool_messages",
]

REPL_TOOL_NAME = "repl"
"""Name of the tool a ```` ```repl ```` block becomes in tool style."""

REPL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": REPL_TOOL_NAME,
        "description": (
            "Run Python code in the persistent REPL that holds the data room. Printed output "
            "is returned (truncated if long). Call FINAL_VAR(memo) in code to hand back the memo."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code to run."}},
            "required": ["code"],
        },
    },
}
"""OpenAI-style function schema of the REPL tool (stored as JSON in the ``tools`` column)."""

_SCALARS = (str, int, float, bool, type(None))

_BLOCK_HEADER = re.compile(r"^REPL output \(block (\d+)\):$", re.MULTILINE)


class ToolCallError(ValueError):
    """A tool call that cannot be used: invalid JSON arguments, or a turn whose code blocks
    and REPL output do not line up. Carries the episode id and message (or turn) index."""

    def __init__(self, episode_id: str, index: int, detail: str, *, what: str = "message"):
        self.episode_id = episode_id
        self.index = index
        self.detail = detail
        super().__init__(f"episode {episode_id} {what} {index}: {detail}")


def normalize_tool_calls(messages: Sequence[Mapping[str, Any]], episode_id: str) -> list[dict]:
    """Copies of ``messages`` whose tool-call ``arguments`` are mappings.

    A JSON-string argument is parsed once; a mapping is kept as is (so nothing is ever
    double-encoded). Raises :class:`ToolCallError` naming ``episode_id`` and the message
    index when a string is not valid JSON or does not decode to an object.
    """
    out: list[dict] = []
    for i, msg in enumerate(messages):
        if all(isinstance(v, _SCALARS) for v in msg.values()):
            out.append(dict(msg))  # nothing nested: a copy of the dict is a deep copy
            continue
        m = copy.deepcopy(dict(msg))
        calls = m.get("tool_calls")
        if calls:
            for j, call in enumerate(calls):
                fn = call.get("function", call)
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        parsed = json.loads(args)
                    except json.JSONDecodeError as exc:
                        raise ToolCallError(
                            episode_id,
                            i,
                            f"tool call {j} ({fn.get('name')!r}): arguments are not valid JSON "
                            f"({exc.msg} at char {exc.pos}): {args[:80]!r}",
                        ) from exc
                    args = parsed
                if not isinstance(args, Mapping):
                    raise ToolCallError(
                        episode_id,
                        i,
                        f"tool call {j} ({fn.get('name')!r}): arguments must be a JSON object, "
                        f"got {type(args).__name__}",
                    )
                fn["arguments"] = dict(args)
        out.append(m)
    return out


def turn_tool_messages(
    reply: str,
    observation: str | None,
    *,
    episode_id: str,
    turn: int,
) -> list[dict[str, Any]]:
    """One root turn in tool style: ``[assistant(tool_calls), tool, tool, ...]``.

    ``reply`` is the assistant text (prefill + completion); each executable fence in it
    becomes a ``repl`` call with arguments ``{"code": ...}`` (ids ``call_<turn>_<k>``), the
    prose outside fences (stripped) is the assistant content. ``observation`` is the user
    message the root saw after the turn: it is split at its ``REPL output (block k):``
    headers into one tool message per call; text after the last block's output (e.g. an
    error note) stays with the last tool message. A turn without code keeps its observation
    as a user message. ``observation is None`` (the episode ended in this turn) gives no
    tool messages.

    Raises :class:`ToolCallError` (``what="turn"``) when the observation's block headers do
    not match the reply's code blocks one to one (a malformed turn).
    """
    blocks, prose = split_fences(reply)
    calls = [
        {
            "id": f"call_{turn}_{b.position}",
            "type": "function",
            "function": {"name": REPL_TOOL_NAME, "arguments": {"code": b.code}},
        }
        for b in blocks
    ]
    assistant: dict[str, Any] = {"role": "assistant", "content": prose.strip()}
    if calls:
        assistant["tool_calls"] = calls
    out: list[dict[str, Any]] = [assistant]
    if observation is None:
        return out
    if not calls:
        out.append({"role": "user", "content": observation})
        return out
    headers = list(_BLOCK_HEADER.finditer(observation))
    positions = [int(h.group(1)) for h in headers]
    if positions != [b.position for b in blocks] or headers[0].start() != 0:
        raise ToolCallError(
            episode_id,
            turn,
            f"REPL output blocks {positions} do not match the reply's code blocks "
            f"{[b.position for b in blocks]}",
            what="turn",
        )
    bounds = [h.start() for h in headers] + [len(observation)]
    for k, call in enumerate(calls):
        part = observation[bounds[k] : bounds[k + 1]]
        if k + 1 < len(calls) and part.endswith("\n\n"):
            part = part[:-2]  # the separator of prompts.observation_message
        out.append({"role": "tool", "tool_call_id": call["id"], "content": part})
    return out


def load_messages(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The exact message dicts of a dataset row (from its ``messages_json`` column).

    Raises ``KeyError`` when the row has no ``messages_json`` and ``ValueError`` when it is not
    a JSON list.
    """
    data = json.loads(row["messages_json"])
    if not isinstance(data, list):
        raise ValueError("messages_json must hold a JSON list of message objects")
    return data
