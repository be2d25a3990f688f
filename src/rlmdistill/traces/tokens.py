"""Token-exact traces: record what a model saw and produced as ids, and rebuild it.

At collection time a :class:`TokenTrail` per agent (the root; a subagent) turns each
:class:`~rlmdistill.models.base.ChatResult` into a :class:`TokenTrace`: the completion ids and
logprobs as produced, and the prompt ids as a *delta* against the previous request's prompt +
completion ids (the shared prefix is counted, only the rest is stored), so an episode's ids grow
linearly with its length, not quadratically. :func:`prompt_ids` rebuilds every prompt from the
deltas and checks each against its stored sha256. :func:`note_turn` also files the reasoning of
a turn (separate field or inline ``<think>`` block).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from rlmdistill.models.base import ChatResult
from rlmdistill.models.reasoning import split_inline_reasoning
from rlmdistill.traces.schema import TokenTrace, TurnBase

__all__ = ["TokenTrail", "answer_text", "ids_sha256", "note_turn", "prompt_ids", "token_trace"]

NOT_RETURNED = (
    "the back end returned no token ids (an OpenAI-compatible server returns them only when "
    "it supports vLLM's return_token_ids / return_tokens_as_token_ids, vLLM >= 0.10.2)"
)


def ids_sha256(ids: Sequence[int]) -> str:
    """sha256 (hex) of a list of token ids, over their decimal text joined by commas."""
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def token_trace(result: ChatResult, base: Sequence[int] = (), *, source: str = "") -> TokenTrace:
    """The :class:`TokenTrace` of one result; ``base`` = previous prompt + completion ids of
    the same agent (empty: store the whole prompt). ``source`` overrides the guess
    (``generation`` when the model id starts with ``local:``, else ``server``)."""
    kind = source or ("generation" if result.model.startswith("local:") else "server")
    prompt = result.prompt_token_ids
    ids = result.token_ids
    if ids is None and prompt is None:
        return TokenTrace(source="unavailable", unavailable=NOT_RETURNED)
    missing = []
    if prompt is None:
        missing.append("prompt ids")
    if result.logprobs is None:
        missing.append("logprobs")
    trace = TokenTrace(
        source=kind,  # type: ignore[arg-type]
        unavailable=f"not returned: {', '.join(missing)}" if missing else None,
        completion_ids=ids,
        logprobs=result.logprobs,
    )
    if prompt is not None:
        k = _common_prefix(base, prompt)
        trace.prompt_reused = k
        trace.prompt_new_ids = list(prompt[k:])
        trace.prompt_n = len(prompt)
        trace.prompt_sha256 = ids_sha256(prompt)
    return trace


class TokenTrail:
    """Prompt + completion ids of an agent's last request (the base of the next delta).

    Not thread-safe: one agent takes its turns one after another.
    """

    def __init__(self) -> None:
        self.ids: list[int] = []

    def record(self, result: ChatResult) -> TokenTrace:
        """The trace of ``result`` against the previous request; then remember this one."""
        trace = token_trace(result, self.ids)
        if result.prompt_token_ids is not None:
            self.ids = list(result.prompt_token_ids) + list(result.token_ids or [])
        else:  # no prompt ids: the next delta cannot rely on this request
            self.ids = []
        return trace


def answer_text(turn: TurnBase) -> str:
    """The reply of a turn without its reasoning: ``prefill + completion`` with a leading
    inline ``<think>`` block removed (the completion of a separate-field turn is the answer)."""
    reply = (turn.prefill or "") + turn.completion
    if turn.reasoning_source == "inline":
        return split_inline_reasoning(reply)[1]
    return reply


def note_turn(rec: TurnBase, result: ChatResult, trail: TokenTrail | None) -> str:
    """File the reasoning and (with a ``trail``) the token ids of ``result`` in ``rec``.

    Returns the text the harness should parse for actions: the answer without reasoning (the
    completion itself stays as generated, so the prompt rebuild is unchanged).
    """
    reply = (rec.prefill or "") + result.text
    if result.reasoning:
        rec.reasoning, rec.reasoning_source = result.reasoning, "field"
    else:
        reasoning, answer = split_inline_reasoning(reply)
        if reasoning is not None:
            rec.reasoning, rec.reasoning_source = reasoning, "inline"
            reply = answer
    if trail is not None:
        rec.tokens = trail.record(result)
    return reply


def prompt_ids(turns: Sequence[TurnBase]) -> list[list[int] | None]:
    """The exact prompt ids of every turn (in turn order) rebuilt from the stored deltas.

    ``result[t]`` is ``None`` for a turn without ids. Raises ``ValueError`` naming the episode
    and turn when a rebuilt prompt does not match its stored length/sha256 (edited or
    incomplete trajectory).
    """
    out: list[list[int] | None] = []
    base: list[int] | None = []
    for turn in sorted(turns, key=lambda t: t.turn):
        tr = turn.tokens
        if tr is None or tr.prompt_new_ids is None:
            out.append(None)
            base = None
            continue
        if tr.prompt_reused and (base is None or len(base) < tr.prompt_reused):
            raise ValueError(
                f"episode {turn.episode_id} turn {turn.turn}: prompt reuses "
                f"{tr.prompt_reused} ids of a previous request that has none recorded"
            )
        ids = (base or [])[: tr.prompt_reused] + list(tr.prompt_new_ids)
        if len(ids) != tr.prompt_n or ids_sha256(ids) != tr.prompt_sha256:
            raise ValueError(
                f"episode {turn.episode_id} turn {turn.turn}: rebuilt prompt ids do not match "
                "the recorded length/sha256 (trajectory edited or incomplete)"
            )
        out.append(ids)
        base = ids + list(tr.completion_ids or [])
    return out
