"""A trajectory's root turns as chat conversations, exactly as the root saw them.

Source of truth: :func:`rlmdistill.traces.rebuild.root_requests` (every request rebuilt from
``EpisodeStart.initial_messages`` and the turns, each checked against its recorded sha256)
and :func:`rlmdistill.traces.rebuild.assistant_message` (prefill + completion). Only root
turns (``Trajectory.turns``) are used: sub-calls and subagent turns never enter an example
except as the REPL output the root saw.

The conversation is ``head + turn units``:

- head: the system prompt (collected, or replaced for context distillation), the worked
  example turns (``EpisodeStart.n_few_shot_messages`` after the system prompt; kept only as
  unsupervised context, or dropped), then the task message;
- one unit per root turn: the assistant reply, then the REPL output the root saw next
  (plain style: one user message; tool style: ``repl`` tool calls and tool messages).

Trajectory mode ends the conversation at the last assistant reply (output the root never
saw is not included) and supervises every root reply; turn mode gives one conversation per
turn (history as seen + that reply) supervising only that reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rlmdistill.export.options import ExportMode, ExportStyle, ReasoningPolicy, SystemPromptChoice
from rlmdistill.export.tools import REPL_TOOL, ToolCallError, turn_tool_messages
from rlmdistill.models.reasoning import split_inline_reasoning
from rlmdistill.traces.rebuild import assistant_message, root_requests
from rlmdistill.traces.runs import Trajectory
from rlmdistill.traces.schema import TurnBase

__all__ = [
    "Conversation",
    "RenderFailure",
    "drop_leading_turns",
    "render_episode",
    "turn_reasoning",
]


def turn_reasoning(turn: TurnBase) -> tuple[str | None, str]:
    """``(reasoning, answer)`` of a root turn.

    A separately returned reasoning (``reasoning_source == "field"``) sits beside the reply
    (prefill + completion); an inline ``<think>`` block is split off the reply, also in traces
    older than schema version 2 that did not file it. No reasoning: ``(None, reply)``.
    """
    reply = assistant_message(turn).content
    if turn.reasoning_source == "field":
        return turn.reasoning, reply
    return split_inline_reasoning(reply)


@dataclass
class Conversation:
    """One example before tokenisation.

    ``messages[i]`` is a chat message dict (``role``, ``content``, optional ``tool_calls`` /
    ``tool_call_id``); ``supervised[i]`` marks the assistant replies trained on;
    ``prefill_chars[i]`` leading characters of message ``i`` are left unsupervised (a reply
    prefill when ``supervise_prefill`` is off). ``groups`` are the indices where each turn
    unit starts (after the head); ``turn`` is the root turn of a turn-mode example, -1 for a
    whole trajectory.
    """

    messages: list[dict[str, Any]]
    supervised: list[bool]
    prefill_chars: list[int]
    groups: list[int]
    turn: int
    tools: list[dict[str, Any]] | None = None
    n_turns_dropped: int = field(default=0)
    """Leading turns removed by the ``keep_start`` length policy."""
    prefill: str = ""
    """Turn mode: the reply prefill the root was given (part of its prompt)."""
    n_reasoning: int = 0
    """Assistant messages that carry their reasoning (``reasoning_content``)."""


class RenderFailure(NamedTuple):
    """An example (``turn``; -1 = the whole trajectory) that could not be rendered."""

    turn: int
    reason: str
    detail: str


def _head(traj: Trajectory, system: SystemPromptChoice) -> list[dict[str, Any]]:
    initial = [m.model_dump() for m in traj.start.initial_messages]
    n_few = traj.start.n_few_shot_messages
    has_system = bool(initial) and initial[0]["role"] == "system"
    sys_msgs = initial[:1] if has_system else []
    rest = initial[1:] if has_system else initial
    few, task = rest[:n_few], rest[n_few:]
    if system.text is not None:
        sys_msgs = [{"role": "system", "content": system.text}]
    return sys_msgs + (few if system.keep_few_shot else []) + task


def render_episode(
    traj: Trajectory,
    *,
    mode: ExportMode,
    style: ExportStyle,
    system: SystemPromptChoice,
    supervise_prefill: bool = True,
    reasoning: ReasoningPolicy = "last",
) -> list[Conversation | RenderFailure]:
    """Conversations of one episode (one in trajectory mode, one per root turn in turn mode).

    ``reasoning``: which assistant messages carry the turn's reasoning as
    ``reasoning_content`` (the field Qwen3/GLM-4.5 templates render): ``all`` every reply in
    trajectory mode (only the supervised one in turn mode: earlier replies stay as the root
    saw them), ``last`` only the last reply of the conversation, ``drop`` none. The message
    ``content`` is always the answer without the reasoning.

    Raises ``ValueError`` when the rebuilt root prompts do not match the recorded hashes
    (trajectory edited or incomplete). Tool-style turns that cannot be converted
    come back as :class:`RenderFailure` with reason ``malformed_tool_call``; an episode
    without root turns as reason ``no_root_turns``.
    """
    turns = sorted(traj.turns, key=lambda t: t.turn)
    if not turns:
        return [RenderFailure(-1, "no_root_turns", "the trajectory has no root turn")]
    root_requests(traj.start, turns)  # hash check of every request (raises ValueError)
    head = _head(traj, system)
    units: list[list[dict[str, Any]] | ToolCallError] = []
    thoughts: list[str | None] = []
    for t in turns:
        thought, reply = turn_reasoning(t)
        thoughts.append(thought)
        if style == "plain":
            unit: list[dict[str, Any]] = [{"role": "assistant", "content": reply}]
            if t.observation is not None:
                unit.append({"role": "user", "content": t.observation})
            units.append(unit)
        else:
            try:
                units.append(
                    turn_tool_messages(
                        reply, t.observation, episode_id=traj.start.episode_id, turn=t.turn
                    )
                )
            except ToolCallError as exc:
                units.append(exc)
    prefills = [len(t.prefill or "") if not supervise_prefill else 0 for t in turns]
    tools = [REPL_TOOL] if style == "tools" else None

    def build(upto: int, only_last: bool) -> Conversation | RenderFailure:
        bad = next((u for u in units[: upto + 1] if isinstance(u, ToolCallError)), None)
        if bad is not None:
            return RenderFailure(
                -1 if not only_last else turns[upto].turn, "malformed_tool_call", str(bad)
            )
        messages = list(head)
        n_reasoning = 0
        supervised = [False] * len(head)
        prefill_chars = [0] * len(head)
        groups: list[int] = []
        for k in range(upto + 1):
            unit = units[k]
            assert not isinstance(unit, ToolCallError)
            if k == upto:
                unit = unit[:1]  # the reply; output after it was never part of a request
            groups.append(len(messages))
            for j, msg in enumerate(unit):
                is_reply = j == 0
                keep = (reasoning == "all" and not only_last) or (reasoning != "drop" and k == upto)
                if is_reply and keep and thoughts[k]:
                    msg = {**msg, "reasoning_content": thoughts[k]}
                    n_reasoning += 1
                messages.append(msg)
                supervised.append(is_reply and (k == upto or not only_last))
                prefill_chars.append(prefills[k] if is_reply else 0)
        return Conversation(
            messages,
            supervised,
            prefill_chars,
            groups,
            turns[upto].turn if only_last else -1,
            tools,
            # tool style: the prefilled fence became part of the tool call, not a prompt
            prefill=(turns[upto].prefill or "") if only_last and style == "plain" else "",
            n_reasoning=n_reasoning,
        )

    if mode == "trajectory":
        return [build(len(turns) - 1, only_last=False)]
    return [build(i, only_last=True) for i in range(len(turns))]


def drop_leading_turns(conv: Conversation, k: int) -> Conversation:
    """``conv`` without its first ``k`` turn units (the head stays). ``0 <= k < len(groups)``;
    raises ``ValueError`` otherwise (the last turn is never dropped)."""
    if not 0 <= k < len(conv.groups):
        raise ValueError(f"cannot drop {k} of {len(conv.groups)} turns (the last one stays)")
    if k == 0:
        return conv
    head_end, cut = conv.groups[0], conv.groups[k]

    def keep(xs: list[Any]) -> list[Any]:
        return xs[:head_end] + xs[cut:]

    shift = cut - head_end
    return Conversation(
        keep(conv.messages),
        keep(conv.supervised),
        keep(conv.prefill_chars),
        [g - shift for g in conv.groups[k:]],
        conv.turn,
        conv.tools,
        conv.n_turns_dropped + k,
        conv.prefill,
        sum(1 for m in keep(conv.messages) if m.get("reasoning_content")),
    )
