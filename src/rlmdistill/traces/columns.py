"""Columnar fast reads of run files for listings (dashboard tables over 10,000+ episodes).

:func:`rlmdistill.traces.store.parse_records` validates every record with pydantic, which
costs ~0.1-0.3 ms per record; a listing that needs a few columns of every episode and
verdict does not need that. :func:`read_table` reads a JSON Lines file with ``pyarrow.json``
against an explicit schema of just those columns (other fields are skipped unparsed), with
the same torn-tail rules as the validated reader. It returns ``None`` when pyarrow
cannot read the file (a corrupt line in the middle, a type change): callers then fall back to
the validated reader, which names the file and line. Values are not checked against the
record models, so use this only for display, never to feed a later stage.

:func:`episode_columns_ok` and :func:`verdict_columns_ok` make the checks the record models
make of the columns read (required fields present, a record of a schema this package knows,
literal values such as a status or a PASS/FAIL/UNGRADABLE label); a reader falls back to the
validated loader when they fail, so an invalid record is named (file and line) as before.
:func:`verdict_rows` is the one columnar reader of a grader's verdicts (dashboard listing and
analysis metrics alike).
"""

from __future__ import annotations

import contextlib
import gc
import io
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from rlmdistill.traces import layout
from rlmdistill.traces.runs import load_verdicts
from rlmdistill.traces.schema import SCHEMA_VERSION, EpisodeStatus, VerdictLabel
from rlmdistill.traces.store import TORN_MARKER

__all__ = [
    "EPISODE_COLUMNS",
    "VERDICT_COLUMNS",
    "VerdictRow",
    "episode_columns_ok",
    "gc_paused",
    "read_table",
    "verdict_columns_ok",
    "verdict_rows",
]

_usage = pa.struct([("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64())])

EPISODE_COLUMNS = pa.schema(
    [
        ("record_type", pa.string()),
        ("schema_version", pa.int64()),
        ("episode_id", pa.string()),
        ("run_id", pa.string()),
        ("sample_index", pa.int64()),
        (
            "room",
            pa.struct(
                [
                    ("room_id", pa.string()),
                    ("room_hash", pa.string()),
                    ("path", pa.string()),
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
        ("record_type", pa.string()),
        ("schema_version", pa.int64()),
        ("episode_id", pa.string()),
        ("grader", pa.string()),
        ("grader_version", pa.string()),
        ("criterion_id", pa.string()),
        ("verdict", pa.string()),
        ("reason", pa.string()),
        ("memo_sha256", pa.string()),
    ]
)
"""Columns of ``verdicts/<grader>.jsonl`` (:class:`~rlmdistill.traces.schema.Verdict`) read
for pass rates, with the required ones :func:`verdict_columns_ok` checks."""

_EPISODE_REQUIRED = (
    "episode_id", "run_id", "sample_index", "room", "room.room_id", "room.room_hash",
    "room.path", "room.n_documents", "room.n_chars", "task_id", "root_model", "sub_model",
    "status", "n_turns", "n_sub_calls", "tokens", "wall_time_s",
)  # fmt: skip
"""Fields of :data:`EPISODE_COLUMNS` that :class:`~rlmdistill.traces.schema.EpisodeSummary`
requires (no default): none may be null."""
_VERDICT_REQUIRED = ("episode_id", "grader", "grader_version", "criterion_id", "verdict", "reason")
_STATUSES = frozenset(typing.get_args(EpisodeStatus))
_LABELS = frozenset(typing.get_args(VerdictLabel))


def _column(table: pa.Table, dotted: str) -> pa.ChunkedArray:
    """A column, or a field of a struct column (``"room.room_id"``); a struct field is null
    wherever its struct is."""
    name, _, child = dotted.partition(".")
    col = table.column(name)
    return pc.struct_field(col, child) if child else col


def _record_ok(table: pa.Table, record_type: str) -> bool:
    kinds = set(table.column("record_type").unique().to_pylist())
    newest = pc.max(table.column("schema_version")).as_py()
    return kinds <= {record_type, None} and (newest is None or newest <= SCHEMA_VERSION)


def episode_columns_ok(table: pa.Table) -> bool:
    """Whether the :data:`EPISODE_COLUMNS` of ``episodes.jsonl`` pass the checks
    :class:`~rlmdistill.traces.schema.EpisodeSummary` makes of them: every required field
    present (not null), ``episode_summary`` records of a schema version this package knows, a
    known status, depth 1 or 2, ``coverage.overall`` present wherever there is a coverage.
    Types were checked by the read (an explicit schema: a string where a number belongs fails
    it). ``False``: read the file with the validated loader, which names the record."""
    if any(_column(table, name).null_count for name in _EPISODE_REQUIRED):
        return False
    statuses = set(table.column("status").unique().to_pylist())
    depths = set(table.column("depth").unique().to_pylist())
    coverage = table.column("coverage")
    overall = pc.struct_field(coverage, "overall")
    return (
        _record_ok(table, "episode_summary")
        and statuses <= _STATUSES
        and depths <= {1, 2, None}
        and overall.null_count == coverage.null_count
    )


def verdict_columns_ok(table: pa.Table) -> bool:
    """Whether the :data:`VERDICT_COLUMNS` of a verdict file pass the checks
    :class:`~rlmdistill.traces.schema.Verdict` makes of them: every required field present,
    ``verdict`` records of a known schema version, a PASS/FAIL/UNGRADABLE label."""
    if any(table.column(name).null_count for name in _VERDICT_REQUIRED):
        return False
    labels = set(table.column("verdict").unique().to_pylist())
    return _record_ok(table, "verdict") and labels <= _LABELS


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a listing builds many small objects
    (100,000 verdict rows, 10,000 scores), and restore it after.

    CPython starts a collection every 700 net container allocations and, as the young
    objects survive, older-generation collections that traverse every tracked object of the
    process (``gc`` module docs, "threshold"); for a listing of 10,000 episodes that was
    about half its CPU time (measured: opening a run, 1.70 s with the collector, 0.69 s
    without, on a busy 2-core Xeon). Reference counting still frees everything that is not
    in a cycle. Re-entrant and safe across threads: only the call that found the collector
    enabled enables it again.

    On the way out the objects made meanwhile go to the oldest generation
    (``gc.freeze()`` then ``gc.unfreeze()``, which "put them back into the oldest
    generation", ``gc`` module docs) instead of being traversed by the young collection
    that re-enabling would start at once: that one collection cost 0.33 s after reading two
    5,000-episode runs (a third of the report's serial tail, 2-core AMD EPYC). Cycles among
    them are found by the next full collection. Skipped when something else froze objects
    (``gc.get_freeze_count()`` not 0: unfreezing would release theirs).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class VerdictRow(NamedTuple):
    """What scoring reads of one verdict (a :class:`~rlmdistill.traces.scores.MemoVerdict`)."""

    episode_id: str
    criterion_id: str
    verdict: str
    memo_sha256: str | None


def verdict_rows(run_dir: Path, grader: str) -> dict[str, list[VerdictRow]]:
    """One grader's verdicts of a run grouped by episode id (file order kept within each
    episode; episodes in order of their first verdict); ``{}`` when the grader never graded
    the run.

    Read as columns (:func:`read_table`): validating 100,000 verdicts one by one with pydantic
    was most of a 10,000-episode listing. The columns are checked as the record model checks
    them (:func:`verdict_columns_ok`); when pyarrow cannot read the file or a check fails, the
    validated :func:`~rlmdistill.traces.runs.load_verdicts` reads it instead, which raises
    :class:`~rlmdistill.traces.store.TraceFileError` naming the file and line of an invalid
    record.
    """
    table = read_table(layout.verdicts_path(run_dir, grader), VERDICT_COLUMNS)
    out: dict[str, list[VerdictRow]] = {}
    if table is None or not verdict_columns_ok(table):
        for v in load_verdicts(run_dir, grader):
            out.setdefault(v.episode_id, []).append(
                VerdictRow(v.episode_id, v.criterion_id, v.verdict, v.memo_sha256)
            )
        return out
    cols = table.select(["episode_id", "criterion_id", "verdict", "memo_sha256"]).to_pydict()
    new = tuple.__new__  # a row without the Python-level NamedTuple constructor (100,000 rows)
    with gc_paused():
        for values in zip(
            cols["episode_id"],
            cols["criterion_id"],
            cols["verdict"],
            cols["memo_sha256"],
            strict=True,
        ):
            row = new(VerdictRow, values)
            rows = out.get(row[0])
            if rows is None:
                out[row[0]] = [row]
            else:
                rows.append(row)
    return out


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
    if not data or data.isspace():  # (strip() would copy a 30 MB file)
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
