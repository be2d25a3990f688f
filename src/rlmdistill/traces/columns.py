"""Columnar fast reads of run files for listings (dashboard tables over 10,000+ episodes).

:func:`rlmdistill.traces.store.parse_records` validates every record with pydantic, which
costs ~0.1-0.3 ms per record; a listing that needs a few columns of every episode and
verdict does not need that. :func:`read_table` reads a JSON Lines file with ``pyarrow.json``
against an explicit schema of just those columns (other fields are skipped unparsed), with
the same torn-tail rules as the validated reader (case T3). It returns ``None`` when pyarrow
cannot read the file (a corrupt line in the middle, a type change): callers then fall back to
the validated reader, which names the file and line. Values are not checked against the
record models, so use this only for display, never to feed a later stage.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj

from rlmdistill.traces.store import TORN_MARKER

__all__ = ["EPISODE_COLUMNS", "VERDICT_COLUMNS", "read_table"]

_usage = pa.struct([("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64())])

EPISODE_COLUMNS = pa.schema(
    [
        ("episode_id", pa.string()),
        ("run_id", pa.string()),
        ("sample_index", pa.int64()),
        (
            "room",
            pa.struct(
                [
                    ("room_id", pa.string()),
                    ("room_hash", pa.string()),
                    ("n_documents", pa.int64()),
                    ("n_chars", pa.int64()),
                ]
            ),
        ),
        ("task_id", pa.string()),
        ("root_model", pa.string()),
        ("sub_model", pa.string()),
        ("depth", pa.int64()),
        ("status", pa.string()),
        ("n_turns", pa.int64()),
        ("n_sub_calls", pa.int64()),
        ("n_sub_call_errors", pa.int64()),
        ("n_sub_batches", pa.int64()),
        ("tokens", pa.struct([("root", _usage), ("sub", _usage)])),
        ("wall_time_s", pa.float64()),
        ("memo_chars", pa.int64()),
        ("memo_sha256", pa.string()),
        ("cited_documents", pa.list_(pa.string())),
        ("coverage", pa.struct([("overall", pa.float64())])),
    ]
)
"""Columns of ``episodes.jsonl`` (:class:`~rlmdistill.traces.schema.EpisodeSummary`) used by
listings; ``memo`` itself is left out (``memo_chars`` says whether there is one)."""

VERDICT_COLUMNS = pa.schema(
    [
        ("episode_id", pa.string()),
        ("criterion_id", pa.string()),
        ("verdict", pa.string()),
        ("memo_sha256", pa.string()),
    ]
)
"""Columns of ``verdicts/<grader>.jsonl`` needed for pass rates."""


def _clean(raw: bytes) -> bytes:
    """Drop a torn last line, torn lines closed off by a marker, and the markers."""
    if raw and not raw.endswith(b"\n"):
        raw = raw[: raw.rfind(b"\n") + 1]
    if TORN_MARKER.encode() not in raw:
        return raw
    lines = raw.split(b"\n")
    keep = []
    for i, line in enumerate(lines):
        if TORN_MARKER.encode() in line and len(line) < 64:
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else b""
        if TORN_MARKER.encode() in nxt and len(nxt) < 64:
            continue  # the torn line the marker closes off
        keep.append(line)
    return b"\n".join(keep)


def read_table(path: Path, schema: pa.Schema) -> pa.Table | None:
    """Read the ``schema`` columns of every complete record of ``path``.

    A missing or empty file gives an empty table. Returns ``None`` when pyarrow cannot parse
    the file (callers fall back to :func:`~rlmdistill.traces.store.parse_records`).
    """
    path = Path(path)
    data = _clean(path.read_bytes()) if path.exists() else b""
    if not data.strip():
        return schema.empty_table()
    try:
        return pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=1 << 24),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
