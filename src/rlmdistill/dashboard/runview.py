"""One cached view of a run per (run folder, stamp): everything a page reads of one run.

A page calls :func:`run_view` once per rerun and hands the :class:`RunView` to every helper,
so the run's *stamp* -- ``mtime_ns:size`` of ``run.json``, ``episodes.jsonl``, every
``verdicts/*.jsonl`` and each room's ``task.json`` -- is computed once per rerun,
not once per loader. The view is a ``st.cache_resource`` keyed on the run path and the stamp,
both plain strings: a file that changes on disk gives a new stamp, hence a new view, on the
next rerun; an unchanged run gives the same view object, whose parts were read once.
Tests: ``test_run_view_is_one_object_per_stamp_and_rereads_a_changed_run_case_a3`` and
``test_trace_page_computes_the_run_stamp_once_per_rerun`` (``tests/test_dashboard_analysis.py``).

Parts are read on first use and kept on the view (read-only for every page):

- :meth:`RunView.table`: the episode listing with a ``pass_rate:<grader>`` column per grader,
  from the columns pyarrow reads and checks (:mod:`rlmdistill.traces.columns`, built into the
  frame column by column; the validated reader as the fallback, which names the file and line
  of an invalid record); the Runs page's headline means of room means are computed from it;
- :meth:`RunView.room_tasks` / :meth:`RunView.tasks`: the rooms' usable tasks and the problems
  of the others (:func:`~rlmdistill.traces.runs.load_room_tasks`);
- :meth:`RunView.summary` / :meth:`RunView.summaries`: one episode's summary (its line only) or
  all of them;
- :meth:`RunView.verdicts`: one episode's verdicts of one grader (its lines only);
- :meth:`RunView.metrics`: the analysis stage's per-episode
  :class:`~rlmdistill.analysis.metrics.EpisodeMetrics` rows
  (:func:`~rlmdistill.analysis.metrics.load_run_metrics`), the one definition of every metric
  the report uses; the live Compare and Ablations pages take their numbers from these (the
  Runs page's headline means are computed from :meth:`RunView.table`, whose columns hold the
  same values: ``tests/test_dashboard_open_run.py``).

Trajectories are not part of the stamp (an episode's trajectory is final once its summary line
is committed): :func:`trajectory` caches one by its own file's stamp.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import streamlit as st

from rlmdistill.rooms.task import Task
from rlmdistill.traces import layout
from rlmdistill.traces.columns import (
    EPISODE_COLUMNS,
    VerdictRow,
    episode_columns_ok,
    gc_paused,
    read_table,
    verdict_rows,
)
from rlmdistill.traces.runs import (
    RoomTasks,
    Trajectory,
    grader_ids,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_summary,
    load_trajectory,
    load_verdicts,
    trajectory_path,
)
from rlmdistill.traces.schema import EpisodeSummary, RunManifest, Verdict
from rlmdistill.traces.scores import EpisodeKey, score_episodes

if TYPE_CHECKING:
    from rlmdistill.analysis.metrics import RunMetrics

__all__ = [
    "RUN_COLUMNS",
    "RunView",
    "file_stamp",
    "manifest_of",
    "run_stamp",
    "run_view",
    "trajectory",
    "view_at",
]

_T = TypeVar("_T")


def file_stamp(path: Path) -> str:
    """``"<mtime_ns>:<size>"`` of a file, ``"-"`` when it does not exist (cache-key part)."""
    try:
        st_ = path.stat()
    except FileNotFoundError:
        return "-"
    return f"{st_.st_mtime_ns}:{st_.st_size}"


@st.cache_resource(max_entries=64, show_spinner=False)
def _manifest(run_dir: str, stamp: str) -> RunManifest:
    # A resource cache (no copy per hit): the manifest is read-only for every page.
    return load_manifest(Path(run_dir))


def manifest_of(run_dir: Path) -> RunManifest:
    """The run's manifest (``run.json``), parsed once per version of the file (cached by path
    + its stamp). Raises :class:`~rlmdistill.traces.runs.NotARunError` when absent and
    :class:`~rlmdistill.traces.store.TraceFileError` (naming the file) when invalid."""
    return _manifest(str(run_dir), file_stamp(Path(run_dir) / layout.RUN_MANIFEST))


def run_stamp(run_dir: Path) -> str:
    """Stamp of everything a run view reads: ``run.json``, ``episodes.jsonl``, every
    ``verdicts/*.jsonl`` (names, modification times, sizes) and the ``task.json`` of each room
    of the manifest (pass rates are counted against it). Never raises: a missing or invalid
    ``run.json`` only leaves the rooms out (the view's parts then name the problem)."""
    run_dir = Path(run_dir)
    parts = [file_stamp(run_dir / layout.RUN_MANIFEST), file_stamp(run_dir / layout.EPISODES)]
    vdir = run_dir / layout.VERDICTS
    if vdir.is_dir():
        parts += [f"{p.name}={file_stamp(p)}" for p in sorted(vdir.glob("*.jsonl"))]
    try:
        rooms = manifest_of(run_dir).rooms
    except (FileNotFoundError, ValueError):
        rooms = []
    parts += [f"{r.room_hash}={file_stamp(Path(r.path) / layout.TASK)}" for r in rooms]
    return "|".join(parts)


RUN_COLUMNS = [
    "episode_id", "run_id", "room_id", "room_hash", "task_id", "sample_index", "status", "depth",
    "root_model", "sub_model", "n_documents", "n_chars", "n_turns", "n_sub_calls",
    "n_sub_call_errors", "n_sub_batches", "memo", "memo_chars", "n_cited", "coverage",
    "root_prompt_tokens", "root_completion_tokens", "sub_prompt_tokens", "sub_completion_tokens",
    "wall_time_s",
]  # fmt: skip
"""Columns of :meth:`RunView.table` before the per-grader ``pass_rate:<grader>`` columns."""

_RAN_COLUMNS = pa.schema(
    [
        (
            "room",
            pa.struct(
                [("room_id", pa.string()), ("room_hash", pa.string()), ("path", pa.string())]
            ),
        ),
        ("task_id", pa.string()),
    ]
)
"""The columns of ``episodes.jsonl`` that say which room (and its folder) and task each
episode ran."""


class _Ran(NamedTuple):
    """Which room and task each episode ran (columns of ``episodes.jsonl``, file order)."""

    room_ids: list[str | None]
    room_hashes: list[str | None]
    room_paths: list[str | None]
    task_ids: list[str | None]

    @classmethod
    def of(cls, cols: pa.Table) -> _Ran:
        room = cols.column("room")

        def field(name: str) -> list[str | None]:
            return pc.struct_field(room, name).to_pylist()  # type: ignore[no-any-return]

        return cls(
            field("room_id"), field("room_hash"), field("path"), cols.column("task_id").to_pylist()
        )


class RunView:
    """What the pages read of one run at one stamp; parts are read on first use and kept.

    Build it with :func:`run_view` (cached); never mutate what it returns. Thread-safe: the
    Streamlit server runs each session in its own thread and they share views.
    """

    def __init__(self, run_dir: Path, stamp: str) -> None:
        self.run_dir = Path(run_dir)
        """The run folder."""
        self.stamp = stamp
        """The :func:`run_stamp` this view was read at."""
        self._lock = threading.RLock()
        self._parts: dict[object, Any] = {}

    def __repr__(self) -> str:
        return f"RunView({str(self.run_dir)!r})"

    @property
    def name(self) -> str:
        """The run folder's name (how the pages and the report label the run)."""
        return self.run_dir.name

    def derived(self, key: str, make: Callable[[], _T]) -> _T:
        """A value derived from this view's parts (e.g. the Runs page's overview), computed
        once by ``make`` and kept under ``key`` for the view's life (its stamp). A failure is
        not kept."""
        return self._part(("derived", key), make)

    def _part(self, key: object, make: Callable[[], _T]) -> _T:
        with self._lock:
            if key not in self._parts:
                self._parts[key] = make()
            return self._parts[key]  # type: ignore[no-any-return]

    # ---------------------------------------------------------------------- run files
    @property
    def manifest(self) -> RunManifest:
        """``run.json`` (raises as :func:`manifest_of`)."""
        return self._part("manifest", lambda: manifest_of(self.run_dir))

    @property
    def graders(self) -> list[str]:
        """Graders with a verdict file for this run, sorted
        (:func:`~rlmdistill.traces.runs.grader_ids`)."""
        return self._part("graders", lambda: grader_ids(self.run_dir))

    def summaries(self) -> dict[str, EpisodeSummary]:
        """Every :class:`EpisodeSummary` by episode id (``episodes.jsonl`` order), validated."""
        return self._part(
            "summaries", lambda: {s.episode_id: s for s in load_summaries(self.run_dir)}
        )

    def summary(self, episode_id: str) -> EpisodeSummary:
        """One episode's summary; only its line of ``episodes.jsonl`` is parsed (unless all
        summaries were read already). Raises ``KeyError`` naming the run when the episode has
        no summary line (not finished)."""
        with self._lock:
            everything = self._parts.get("summaries")
        if everything is not None:
            if episode_id not in everything:
                raise KeyError(
                    f"{self.run_dir}: episode {episode_id} has no line in episodes.jsonl"
                )
            return everything[episode_id]  # type: ignore[no-any-return]
        return self._part(("summary", episode_id), lambda: load_summary(self.run_dir, episode_id))

    def verdicts(self, grader: str, episode_id: str) -> list[Verdict]:
        """One episode's verdicts of one grader, file order (only its lines are parsed)."""
        return self._part(
            ("verdicts", grader, episode_id),
            lambda: load_verdicts(self.run_dir, grader, episode_id),
        )

    # ------------------------------------------------------------------------- tasks
    def tasks(self) -> dict[str, Task]:
        """Task of each room of the run, by ``room_hash``, from
        :func:`~rlmdistill.traces.runs.load_room_tasks`: rooms without a usable ``task.json``
        (not found, invalid, or another task than their episodes ran) are left out, so their
        episodes have no pass rate. Never raises for a room's task."""
        return self.room_tasks().tasks

    def room_tasks(self) -> RoomTasks:
        """:meth:`tasks` and the problem of each other room (in the order
        :func:`~rlmdistill.traces.runs.load_room_tasks` meets them: the manifest's rooms, then
        rooms only episodes name). Never raises for a room's task."""
        return self._part("room_tasks", self._read_tasks)

    def _read_tasks(self) -> RoomTasks:
        with self._lock:
            cols = self._parts.get("episode_columns")
        if cols is None:  # no listing yet: read the room and task columns only
            cols = read_table(self.run_dir / layout.EPISODES, _RAN_COLUMNS)
        if cols is None:  # pyarrow could not read it: the validated loader names the problem
            return load_room_tasks(
                self.manifest, self.summaries().values(), on_error="report", run_dir=self.run_dir
            )
        return self._tasks_ran(_Ran.of(cols))

    def _tasks_ran(self, ran: _Ran) -> RoomTasks:
        """Usable tasks by room hash, given the room and task every episode ran."""
        task_ids: dict[str, set[str]] = {}
        rooms: dict[str, tuple[str, str]] = {}
        for room_id, room_hash, path, task_id in zip(*ran, strict=True):
            if room_hash and task_id:
                task_ids.setdefault(room_hash, set()).add(task_id)
            if room_hash and room_id is not None and path is not None:
                rooms.setdefault(room_hash, (room_id, path))
        return load_room_tasks(
            self.manifest,
            task_ids=task_ids,
            rooms_ran=rooms,
            on_error="report",
            run_dir=self.run_dir,
        )

    def episode_task(self, summary: EpisodeSummary) -> Task | None:
        """The usable task of one episode's room (checked against the task the episode ran),
        read without touching the run's other rooms or episodes (``None`` when unusable)."""
        room_hash = summary.room.room_hash
        with self._lock:
            found = self._parts.get("room_tasks")
        if found is not None:  # every room's task was read already
            return found.tasks.get(room_hash)  # type: ignore[no-any-return]

        def read() -> Task | None:
            manifest = self.manifest
            one = manifest.model_copy(
                update={"rooms": [r for r in manifest.rooms if r.room_hash == room_hash]}
            )
            found = load_room_tasks(one, [summary], on_error="report", run_dir=self.run_dir)
            return found.tasks.get(room_hash)

        return self._part(("task", room_hash, summary.task_id), read)

    # ----------------------------------------------------------------------- listing
    def table(self) -> pd.DataFrame:
        """One row per finished episode (from ``episodes.jsonl``; no trajectory read).

        Columns: :data:`RUN_COLUMNS` (``memo`` a bool, ``coverage`` 0..1 or NA) and one
        ``pass_rate:<grader>`` column per grader (0..1, NA when the room has no usable task or
        the episode's current memo was not graded: :func:`~rlmdistill.traces.scores.score_episodes`,
        the one scoring rule). Shared by every page: copy it before changing it.
        """
        return self._part("table", self._read_table)

    def _read_table(self) -> pd.DataFrame:
        with gc_paused():  # 10,000 keys and scores, 100,000 verdict rows
            return self._scored_listing()

    def _scored_listing(self) -> pd.DataFrame:
        cols = self._part("episode_columns", self._episode_columns)
        table = _listing(cols)
        tasks = self.tasks()
        # the scoring keys from the Arrow columns (pandas would turn a missing memo hash
        # into NaN, which matches no verdict)
        keys = [
            EpisodeKey(eid, room_hash, memo_sha)
            for eid, room_hash, memo_sha in zip(
                cols.column("episode_id").to_pylist(),
                pc.struct_field(cols.column("room"), "room_hash").to_pylist(),
                cols.column("memo_sha256").to_pylist(),
                strict=True,
            )
        ]
        for grader in self.graders:
            scores = score_episodes(keys, self.verdict_rows(grader), tasks)
            rates = [s.rates.pass_rate if (s := scores.get(k.episode_id)) else None for k in keys]
            table[f"pass_rate:{grader}"] = pd.array(rates, dtype="Float64")
        return table

    def _episode_columns(self) -> pa.Table:
        """:data:`~rlmdistill.traces.columns.EPISODE_COLUMNS` of every summary: the columnar
        read when it passes :func:`~rlmdistill.traces.columns.episode_columns_ok`, else the
        same columns of the validated summaries (whose loader raises ``TraceFileError``
        naming the file and line of an invalid record)."""
        if not (self.run_dir / layout.RUN_MANIFEST).exists():
            self.manifest  # noqa: B018 - raises NotARunError naming the folder
        cols = read_table(self.run_dir / layout.EPISODES, EPISODE_COLUMNS)
        if cols is not None and episode_columns_ok(cols):
            return cols
        rows = [s.model_dump(mode="json", exclude={"memo"}) for s in self.summaries().values()]
        return _columns_of(rows)

    def verdict_rows(self, grader: str) -> dict[str, list[VerdictRow]]:
        """One grader's verdict rows by episode id (:func:`~rlmdistill.traces.columns.
        verdict_rows`: columns checked as the record model checks them, validated fallback),
        read once per view."""
        return self._part(("verdict_rows", grader), lambda: verdict_rows(self.run_dir, grader))

    # ----------------------------------------------------------------------- metrics
    def metrics(self, grader: str | None, *, trajectories: bool = False) -> RunMetrics:
        """The analysis stage's metrics of every finished episode, scored by ``grader``
        (:func:`~rlmdistill.analysis.metrics.load_run_metrics` with the default price table and
        thresholds, as ``rlmdistill report`` computes them). ``grader=None``: the run's only
        grader (none: unscored rows). ``trajectories=True`` also computes the trajectory
        metrics (reads every trajectory file once; kept apart from the ``False`` rows).

        Raises what :func:`~rlmdistill.analysis.metrics.load_run_metrics` raises (a
        ``ValueError`` naming the file or the grader, ``FileNotFoundError`` naming the
        episode whose trajectory is missing); a failure is not kept, so the next call retries.
        """
        from rlmdistill.analysis.metrics import load_run_metrics

        return self._part(
            ("metrics", grader, trajectories),
            lambda: load_run_metrics(self.run_dir, grader, trajectories=trajectories),
        )


@st.cache_resource(max_entries=16, show_spinner=False)
def view_at(run_dir: str, stamp: str) -> RunView:
    """The cached :class:`RunView` of ``run_dir`` at ``stamp`` (both plain strings: the cache
    key). Use :func:`run_view`, which computes the current stamp; this is for cached functions
    that were handed a stamp."""
    return RunView(Path(run_dir), stamp)


def run_view(run_dir: Path | RunView) -> RunView:
    """The :class:`RunView` of ``run_dir`` at its current :func:`run_stamp` (cached by path +
    stamp; the same object while no file it covers changes). A view given is returned as is,
    so helpers take either and a page computes the stamp once per rerun."""
    if isinstance(run_dir, RunView):
        return run_dir
    return view_at(str(run_dir), run_stamp(Path(run_dir)))


@st.cache_resource(max_entries=32, show_spinner=False)
def _trajectory(run_dir: str, episode_id: str, stamp: str) -> Trajectory:
    # A resource cache (no copy per hit): a trajectory is read-only for the trace page.
    return load_trajectory(Path(run_dir), episode_id)


def trajectory(run: Path | RunView, episode_id: str) -> Trajectory:
    """One episode's trajectory, parsed on demand and cached by path + its file's stamp.

    Raises ``FileNotFoundError`` / ``TraceFileError`` from :func:`load_trajectory`.
    """
    run_dir = run.run_dir if isinstance(run, RunView) else Path(run)
    stamp = file_stamp(trajectory_path(run_dir, episode_id))
    return _trajectory(str(run_dir), episode_id, stamp)


def _columns_of(rows: list[dict[str, Any]]) -> pa.Table:
    """:data:`~rlmdistill.traces.columns.EPISODE_COLUMNS` of summaries dumped to JSON-mode
    dicts (the validated fallback), as the columnar read gives them."""
    names = EPISODE_COLUMNS.names

    def pick(value: Any, typ: pa.DataType) -> Any:
        if isinstance(typ, pa.StructType) and isinstance(value, dict):
            return {f.name: pick(value.get(f.name), f.type) for f in typ}
        return value

    return pa.Table.from_pylist(
        [{n: pick(r.get(n), EPISODE_COLUMNS.field(n).type) for n in names} for r in rows],
        schema=EPISODE_COLUMNS,
    )


def _listing(cols: pa.Table) -> pd.DataFrame:
    """:data:`RUN_COLUMNS` of every summary from its :data:`~rlmdistill.traces.columns.
    EPISODE_COLUMNS`, built column by column (Arrow compute, one conversion to pandas)."""
    room, tokens = cols.column("room"), cols.column("tokens")

    def field(col: pa.ChunkedArray, *names: str) -> pa.ChunkedArray:
        for name in names:
            col = pc.struct_field(col, name)
        return col

    def zero(col: pa.ChunkedArray) -> pa.ChunkedArray:
        return pc.fill_null(col, 0)

    memo_chars = zero(cols.column("memo_chars"))
    arrays = {
        "episode_id": cols.column("episode_id"),
        "run_id": cols.column("run_id"),
        "room_id": field(room, "room_id"),
        "room_hash": field(room, "room_hash"),
        "task_id": cols.column("task_id"),
        "sample_index": cols.column("sample_index"),
        "status": cols.column("status"),
        "depth": pc.fill_null(cols.column("depth"), 1),
        "root_model": cols.column("root_model"),
        "sub_model": cols.column("sub_model"),
        "n_documents": field(room, "n_documents"),
        "n_chars": field(room, "n_chars"),
        "n_turns": cols.column("n_turns"),
        "n_sub_calls": cols.column("n_sub_calls"),
        "n_sub_call_errors": zero(cols.column("n_sub_call_errors")),
        "n_sub_batches": zero(cols.column("n_sub_batches")),
        "memo": pc.not_equal(memo_chars, 0),
        "memo_chars": memo_chars,
        "n_cited": zero(pc.list_value_length(cols.column("cited_documents")).cast(pa.int64())),
        "coverage": field(cols.column("coverage"), "overall"),
        "root_prompt_tokens": zero(field(tokens, "root", "prompt_tokens")),
        "root_completion_tokens": zero(field(tokens, "root", "completion_tokens")),
        "sub_prompt_tokens": zero(field(tokens, "sub", "prompt_tokens")),
        "sub_completion_tokens": zero(field(tokens, "sub", "completion_tokens")),
        "wall_time_s": cols.column("wall_time_s"),
    }
    return pa.table(arrays).to_pandas()
