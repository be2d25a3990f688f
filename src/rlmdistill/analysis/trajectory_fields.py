"""What the trajectory metrics read of a trajectory file, decoded without building its records.

A report over 10,000 episodes reads every trajectory file; most of each file is text the
metrics never use (sub-call prompts, root completions, token ids). :func:`light_fields`
decodes a file with msgspec into typed structs that name only the fields the metrics use
(msgspec skips the others without building them), and checks every one of those fields'
types as it decodes. It answers only for a file as this schema writes it; for anything else
it returns ``None`` and the caller reads the file the careful way
(:func:`rlmdistill.analysis.metrics._read_trajectory_fields`), which gives the same fields
for every file this function accepts and names the file and record of a bad one.

Why msgspec (a well-kept PyPI library, C, the JSON decoder of Litestar and others): decoding
into structs of five fields skips the rest of each record, which ``json.loads`` or
``pydantic_core.from_json`` must build as Python objects first. Measured on one run of the
report benchmark (5,000 trajectory files, 205 MB, ``benchmarks/bench_report.py``; 2-core AMD
EPYC, 2026-12-05): reading them to these fields in one process 1.29 -> 0.62 s.
"""

from __future__ import annotations

from typing import Annotated, Literal, NamedTuple

import msgspec

from rlmdistill.traces.schema import SCHEMA_VERSION

__all__ = ["Call", "Turn", "light_fields"]


class Turn(NamedTuple):
    """What the trajectory metrics use of one root turn: its code blocks' code, or the
    completion itself when no block ran."""

    turn: int
    final_answer_source: str | None
    codes: list[str]


_Version = Annotated[int, msgspec.Meta(le=SCHEMA_VERSION)]
"""A ``schema_version`` this code reads (a newer one: the careful reader says so)."""


class _Block(msgspec.Struct):
    code: str


class _Start(msgspec.Struct, tag_field="record_type", tag="episode_start"):
    episode_id: str
    schema_version: _Version = 1


class _TurnRec(msgspec.Struct, tag_field="record_type", tag="turn"):
    episode_id: str
    turn: int
    completion: str
    schema_version: _Version = 1
    final_answer_source: Literal["text", "final_call", "final_var"] | None = None
    blocks: list[_Block] = []


class Call(msgspec.Struct, tag_field="record_type", tag="sub_call"):
    """What the trajectory metrics use of one sub-call record (decoded as such)."""

    episode_id: str
    batch_id: int
    call_id: int
    schema_version: _Version = 1
    depth: int = 1
    subagent: bool = False
    error: str | None = None
    response: str | None = None
    sources: list[dict[str, msgspec.Raw]] = []

    @property
    def has_sources(self) -> bool:
        """The call carried document text handed out by the room helpers."""
        return bool(self.sources)


class _SubagentTurn(msgspec.Struct, tag_field="record_type", tag="subagent_turn"):
    episode_id: str
    schema_version: _Version = 1


class _End(msgspec.Struct, tag_field="record_type", tag="episode_end"):
    episode_id: str
    schema_version: _Version = 1


_Record = _Start | _TurnRec | Call | _SubagentTurn | _End
_DECODER = msgspec.json.Decoder(list[_Record])
_LINE = msgspec.json.Decoder(_Record)


def light_fields(raw: bytes, episode_id: str) -> tuple[list[Turn], list[Call]] | None:
    """The root turns and sub-calls of one trajectory file's bytes ``raw``, or ``None`` when
    the file is not exactly as this schema writes it for ``episode_id``: not ending in a
    newline (a torn last line), naming the torn-tail marker, a line that is not one of the
    five record types, a used field missing or of another type, a record of another episode
    or of a newer ``schema_version``, no leading ``episode_start`` or a second one. Blank
    lines are skipped. Never raises on file content."""
    if not raw.endswith(b"\n"):
        return None
    try:  # every line at once, as one array (a torn-tail marker line is no record type)
        records = _DECODER.decode(b"[" + raw[:-1].replace(b"\n", b",") + b"]")
        if len(records) != raw.count(b"\n"):  # a record split over two lines: not ours
            return None
    except msgspec.DecodeError:
        try:  # blank lines (",," above) or a bad line: one line at a time
            records = [
                _LINE.decode(line) for line in raw.split(b"\n") if line and not line.isspace()
            ]
        except msgspec.DecodeError:
            return None
    if (
        not records
        or type(records[0]) is not _Start
        or {r.episode_id for r in records} != {episode_id}
        or sum(type(r) is _Start for r in records) != 1
    ):
        return None
    turns = [
        Turn(r.turn, r.final_answer_source, [b.code for b in r.blocks] or [r.completion])
        for r in records
        if type(r) is _TurnRec
    ]
    return turns, [r for r in records if type(r) is Call]
