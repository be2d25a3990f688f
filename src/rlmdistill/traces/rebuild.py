"""Rebuild the exact message lists the root was sent, from a trajectory's records."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from json.encoder import encode_basestring  # type: ignore[attr-defined]

from rlmdistill.models.base import Message
from rlmdistill.traces.schema import EpisodeStart, SubagentTurnRecord, TurnBase, TurnRecord


def messages_sha256(messages: list[Message]) -> str:
    """sha256 (hex) of a message list, over its canonical JSON (role + content)."""
    return MessagesHash(messages).hexdigest()


def _message_json(m: Message) -> bytes:
    # json.dumps([m.model_dump() for m in ...], ensure_ascii=False, sort_keys=True), one item,
    # with the string encoder json.dumps uses: a Message has exactly these two fields, so the
    # sorted keys are content, role
    text = f'{{"content": {encode_basestring(m.content)}, "role": {encode_basestring(m.role)}}}'
    return text.encode("utf-8", "surrogatepass")


class MessagesHash:
    """:func:`messages_sha256` of a message list that grows, fed one message at a time: a
    prompt history hashed at every turn costs one pass over its messages, not one per turn.

    The bytes hashed are those of ``json.dumps(list, ensure_ascii=False, sort_keys=True)``
    over the messages' dumps: ``[`` + items joined by ``, `` + ``]``."""

    def __init__(self, messages: Sequence[Message] = ()) -> None:
        self._h = hashlib.sha256(b"[")
        self._n = 0
        for m in messages:
            self.append(m)

    def append(self, message: Message) -> None:
        """Add one message at the end."""
        self._h.update((b", " if self._n else b"") + _message_json(message))
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def hexdigest(self) -> str:
        """sha256 (hex) of the list so far (the list is left open for more)."""
        h = self._h.copy()
        h.update(b"]")
        return h.hexdigest()


def assistant_message(turn: TurnBase) -> Message:
    """The assistant message a turn added to the root history (prefill + completion)."""
    return Message(role="assistant", content=(turn.prefill or "") + turn.completion)


def _requests(initial: list[Message], turns: Sequence[TurnBase], who: str) -> list[list[Message]]:
    history = list(initial)
    out: list[list[Message]] = []
    for turn in sorted(turns, key=lambda t: t.turn):
        if len(history) != turn.n_messages_before or messages_sha256(history) != turn.prompt_sha256:
            raise ValueError(
                f"episode {turn.episode_id} {who} turn {turn.turn}: rebuilt prompt does not match "
                "the recorded length/hash (trajectory incomplete or edited)"
            )
        out.append(list(history))
        history.append(assistant_message(turn))
        if turn.observation is not None:
            history.append(Message(role="user", content=turn.observation))
    return out


def root_requests(start: EpisodeStart, turns: Sequence[TurnRecord]) -> list[list[Message]]:
    """The message list of every root request of an episode, in turn order.

    Shape: ``len(result) == len(turns)``; ``result[t]`` is exactly what turn ``t`` sent.
    Raises ``ValueError`` if a rebuilt list does not match the recorded length or hash.
    """
    return _requests(start.initial_messages, turns, "root")


def subagent_requests(turns: Sequence[SubagentTurnRecord]) -> list[list[Message]]:
    """The message list of every request of one subagent (depth 2), in turn order.

    ``turns`` are the :class:`SubagentTurnRecord` of one ``call_id``; turn 0 carries the
    initial messages. Raises ``ValueError`` when turn 0 is missing or a hash does not match.
    """
    first = min(turns, key=lambda t: t.turn, default=None)
    if first is None or first.turn != 0 or first.initial_messages is None:
        raise ValueError("subagent turns must include turn 0 with its initial messages")
    return _requests(first.initial_messages, turns, f"subagent {first.call_id}")
