"""``messages_sha256`` and its incremental form ``MessagesHash``: the bytes hashed are those
of ``json.dumps`` over the messages' dumps, as every trajectory since the first schema
records them (``TurnRecord.prompt_sha256``)."""

from __future__ import annotations

import hashlib
import json
import random

from rlmdistill.models.base import Message
from rlmdistill.traces.rebuild import MessagesHash, messages_sha256


def _reference(messages: list[Message]) -> str:
    payload = json.dumps([m.model_dump() for m in messages], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def test_a_known_list_has_its_recorded_hash():
    msgs = [Message(role="system", content="You are a root."), Message(role="user", content="Go")]
    assert messages_sha256(msgs) == _reference(msgs)
    assert messages_sha256([]) == hashlib.sha256(b"[]").hexdigest()


def test_every_prefix_hashes_as_the_reference_with_escapes_and_lone_surrogates():
    rng = random.Random(0)
    alphabet = ['a', '"', "\\", "\n", "é", "\ud800", "\udfff", "😀", "\x00", "\x1f", "\x7f",
                " ", "{", "\u2028", "/", "\t"]  # fmt: skip
    for _ in range(200):
        msgs = [
            Message(
                role=rng.choice(["system", "user", "assistant"]),
                content="".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))),
            )
            for _ in range(rng.randint(0, 6))
        ]
        assert messages_sha256(msgs) == _reference(msgs)
        grown = MessagesHash()
        for i, m in enumerate(msgs):
            assert len(grown) == i and grown.hexdigest() == _reference(msgs[:i])
            grown.append(m)
        assert grown.hexdigest() == _reference(msgs) == MessagesHash(msgs).hexdigest()
