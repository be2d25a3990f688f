"""Data loaders behind the dashboard pages, cached by path and modification time.

Every cached function takes plain strings and integers only -- a path as ``str`` and a *stamp*
built from the modification times (``st.stat().st_mtime_ns``) and sizes of the files it reads --
never a pydantic model, UUID or ``Path`` object, so Streamlit can hash its arguments and a file
that changes on disk (an appended episode, a new verdict file) is re-read on the next rerun.
Caches are bounded (``max_entries``).

A run is read through one cached :class:`~rlmdistill.dashboard.runview.RunView` per (run
path, stamp) (:func:`run_view`): a page computes it once per rerun and passes it on, and every
run function here takes either the view or the run folder (then it computes the view). The
listing reads ``run.json``, ``episodes.jsonl`` and ``verdicts/*.jsonl`` only; a trajectory is
parsed only when one episode is opened (:func:`trajectory`), through the shared run loader
:mod:`rlmdistill.traces.runs`. Means of metrics are the analysis stage's
(:mod:`rlmdistill.dashboard.live`).

The functions work outside a Streamlit session too (tests, ``benchmarks/bench_dashboard.py``):
``st.cache_data`` / ``st.cache_resource`` then keep an in-memory cache.

Workspace layout (see ``docs/dashboard.md``)::

    DIR/runs/<run>/       run directories made by ``rlmdistill collect`` (+ ``judge``)
    DIR/datasets/<name>/  datasets written by ``rlmdistill filter`` (export.json, filter_report.*)
    DIR/adapters/<name>/  adapters written by ``rlmdistill sft`` (sft.json, train_log.jsonl)
    DIR/reports/<name>/   reports written by ``rlmdistill report`` (report.json, *.png, *.md)
    DIR/rooms/<room>/     data rooms
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from rlmdistill.dashboard import ENV_WORKSPACE
from rlmdistill.dashboard.live import column_mean_of_room_means
from rlmdistill.dashboard.runview import (
    RUN_COLUMNS,
    RunView,
    file_stamp,
    run_stamp,
    run_view,
    trajectory,
    view_at,
)
from rlmdistill.rooms.task import Task
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import (
    ArtefactError,
    ExportManifest,
    SFTManifest,
    load_export_manifest,
    load_sft_manifest,
    read_rl_log,
    read_train_log,
)
from rlmdistill.traces.columns import gc_paused
from rlmdistill.traces.layout import EXPORT_MANIFEST, RL_LOG, SFT_MANIFEST, TRAIN_LOG
from rlmdistill.traces.runs import RoomTaskError, load_trajectory, trajectory_path
from rlmdistill.traces.schema import EpisodeSummary, RunManifest

__all__ = [
    "ENV_WORKSPACE",
    "RUN_COLUMNS",
    "RunOverview",
    "RunView",
    "SearchHit",
    "Workspace",
    "adapter_info",
    "episode_summary",
    "episode_verdicts",
    "export_manifest",
    "file_stamp",
    "list_adapters",
    "list_datasets",
    "list_reports",
    "list_runs",
    "load_json",
    "room_tasks",
    "run_manifest",
    "run_overview",
    "run_stamp",
    "run_summary",
    "run_table",
    "run_view",
    "search_run",
    "sft_manifest",
    "train_log",
    "trajectory",
    "workspace_from_env",
]

Run = Path | RunView
"""A run folder or its :class:`RunView` (a page passes the view it computed for the rerun)."""


class Workspace(NamedTuple):
    """The folders of one workspace (``root`` and its standard sub-folders)."""

    root: Path
    runs: Path
    datasets: Path
    adapters: Path
    reports: Path
    rooms: Path

    @classmethod
    def at(cls, root: str | Path) -> Workspace:
        """Workspace rooted at ``root`` (folders need not exist yet)."""
        r = Path(root).expanduser().resolve()
        return cls(
            r,
            r / layout.RUNS,
            r / layout.DATASETS,
            r / layout.ADAPTERS,
            r / layout.REPORTS,
            r / layout.ROOMS,
        )


def workspace_from_env(argv: list[str] | None = None) -> Workspace:
    """The workspace given as ``--workspace DIR`` after ``--`` in the script args, else by the
    :data:`ENV_WORKSPACE` environment variable, else the current directory."""
    args = list(sys.argv[1:] if argv is None else argv)
    for i, a in enumerate(args):
        if a == "--workspace" and i + 1 < len(args):
            return Workspace.at(args[i + 1])
        if a.startswith("--workspace="):
            return Workspace.at(a.split("=", 1)[1])
    return Workspace.at(os.environ.get(ENV_WORKSPACE) or ".")


# ------------------------------------------------------------------------------ workspace
def _subdirs(folder: Path, marker: str | None) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.iterdir() if p.is_dir() and (marker is None or (p / marker).exists())
    )


def list_runs(ws: Workspace) -> list[Path]:
    """Run directories of the workspace (``runs/*`` holding a ``run.json``), by name."""
    return _subdirs(ws.runs, layout.RUN_MANIFEST)


def list_datasets(ws: Workspace) -> list[Path]:
    """Dataset folders (``datasets/*``), by name."""
    return _subdirs(ws.datasets, None)


def list_adapters(ws: Workspace) -> list[Path]:
    """Adapter folders (``adapters/*``), by name."""
    return _subdirs(ws.adapters, None)


def list_reports(ws: Workspace) -> list[Path]:
    """Report folders (``reports/*``), by name."""
    return _subdirs(ws.reports, None)


@st.cache_data(max_entries=256, show_spinner=False)
def _load_json(path: str, stamp: str) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load_json(path: Path) -> Any:
    """Parsed JSON of a file (cached by path + mtime), ``None`` when it does not exist.

    Raises ``ValueError`` naming the file when it is not valid JSON.
    """
    stamp = file_stamp(path)
    if stamp == "-":
        return None
    try:
        return _load_json(str(path), stamp)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON: {exc}") from exc


# ----------------------------------------------------------------------------------- runs
def run_manifest(run: Run) -> RunManifest:
    """The run's manifest (``run.json``), cached by path + mtime. Raises
    :class:`~rlmdistill.traces.runs.NotARunError` / ``TraceFileError`` naming the file."""
    return run_view(run).manifest


def room_tasks(run: Run) -> dict[str, Task]:
    """Task of each room of the run, by ``room_hash`` (:meth:`RunView.tasks`): rooms without a
    usable ``task.json`` (not found, invalid, or another task than their episodes ran) are left
    out, so their episodes have no pass rate. Cached by path + :func:`run_stamp` (which covers
    the ``task.json`` files)."""
    return run_view(run).tasks()


def episode_summary(run: Run, episode_id: str) -> EpisodeSummary:
    """The :class:`EpisodeSummary` of one episode (only its line is parsed). Raises
    ``KeyError`` naming the run when the episode has no summary line (not finished)."""
    return run_view(run).summary(episode_id)


def run_table(run: Run) -> pd.DataFrame:
    """One row per finished episode of a run (from ``episodes.jsonl``; no trajectory read).

    Columns: ``episode_id, run_id, room_id, room_hash, task_id, sample_index, status, depth,
    root_model, sub_model, n_documents, n_chars, n_turns, n_sub_calls, n_sub_call_errors,
    n_sub_batches, memo (bool), memo_chars, n_cited, coverage (0..1 or NA), root/sub
    prompt/completion tokens, wall_time_s`` and one ``pass_rate:<grader>`` column per grader
    (0..1, NA when the room has no task or the episode's memo was not graded; verdicts of an
    older memo are ignored, as in ``rlmdistill show``). Cached by path + the run's stamp and
    shared between pages: copy it before changing it.
    """
    return run_view(run).table()


class RunOverview(NamedTuple):
    """Headline figures of one run for the Runs page.

    Every mean is a mean of room means (each room weighs the same, as in the report) of the
    values the analysis stage's per-episode metrics
    (:class:`~rlmdistill.analysis.metrics.EpisodeMetrics`) hold, ``None`` when no episode has
    a value."""

    run_id: str
    root: str
    sub: str
    depth: int
    rooms: list[str]
    n_planned: int
    n_episodes: int
    status_counts: dict[str, int]
    mean_coverage: float | None
    mean_pass_rate: dict[str, float | None]
    """Per grader: mean of room means of the pass rate over graded episodes."""
    mean_sub_calls: float | None
    mean_turns: float | None


def run_overview(run: Run) -> RunOverview:
    """Headline figures of a run (config, status counts, means of room means) from the run
    table's columns (:meth:`RunView.table`, so opening a run reads its files once): coverage
    (``Coverage.overall``), sub-calls, turns and each grader's pass rate (the one scoring
    rule, :func:`~rlmdistill.traces.scores.score_episodes`) are the values of the analysis
    stage's metrics rows, and the means are the report's
    (:func:`~rlmdistill.dashboard.live.column_mean_of_room_means`); no trajectory is read.

    Raises, as the metrics rows do, :class:`~rlmdistill.traces.runs.RoomTaskError` (a
    ``ValueError``) naming an invalid ``task.json``, and ``NotARunError``/``TraceFileError``
    naming the run file (file and line of an invalid record)."""
    view = run_view(run)

    def make() -> RunOverview:
        with gc_paused():  # 40,000 small rows for the room means
            return _overview(view)

    return view.derived("overview", make)


def _overview(view: RunView) -> RunOverview:
    m = view.manifest
    cfg = m.config
    table = view.table()
    for problem in view.room_tasks().problems:
        if problem.kind == "invalid":  # the report refuses such a room (metrics rows raise)
            raise RoomTaskError(problem)
    rooms = table["room_hash"].tolist()

    def mean(column: str) -> float | None:  # NaN: no value (left out, as None is)
        values = table[column].to_numpy(dtype=float, na_value=math.nan).tolist()
        return column_mean_of_room_means(rooms, values)

    return RunOverview(
        run_id=m.run_id,
        root=str(cfg.root),
        sub=str(cfg.sub),
        depth=cfg.depth,
        rooms=[r.room_id for r in m.rooms],
        n_planned=len(m.rooms) * cfg.episodes,
        n_episodes=len(table),
        status_counts=table["status"].value_counts().to_dict() if len(table) else {},
        mean_coverage=mean("coverage"),
        mean_pass_rate={g: mean(f"pass_rate:{g}") for g in view.graders},
        mean_sub_calls=mean("n_sub_calls"),
        mean_turns=mean("n_turns"),
    )


def run_summary(run: Run) -> Any:
    """The analysis stage's :class:`~rlmdistill.analysis.summary.RunSummary` (what
    ``rlmdistill show`` prints), cached by path + stamp."""
    view = run_view(run)
    return _run_summary(str(view.run_dir), view.stamp)


@st.cache_data(max_entries=8, show_spinner=False)
def _run_summary(run_dir: str, stamp: str) -> Any:
    from rlmdistill.analysis.summary import summarize_run

    return summarize_run(Path(run_dir))


# ----------------------------------------------------------------------------- one episode
def episode_verdicts(run: Run, episode_id: str) -> pd.DataFrame:
    """Every grader's verdicts of one episode's *current* memo, one row per (grader,
    criterion): ``grader, criterion_id, title, criterion_type, verdict, reason``; criteria of
    the room's task with no verdict appear as ``MISSING``. Empty when nothing is graded."""
    view = run_view(run)
    summary = view.summary(episode_id)
    task = view.episode_task(summary)
    titles = {c.id: c.title for c in task.criteria} if task else {}
    frames = []
    for grader in view.graders:
        latest = {
            v.criterion_id: v
            for v in view.verdicts(grader, episode_id)
            if v.memo_sha256 == summary.memo_sha256
        }
        mine = list(latest.values())
        got = set(latest)
        rows = [
            {
                "grader": grader,
                "criterion_id": r.criterion_id,
                "title": titles.get(r.criterion_id, ""),
                "criterion_type": r.criterion_type,
                "verdict": r.verdict,
                "reason": r.reason,
            }
            for r in mine
        ]
        if mine:
            rows += [
                {
                    "grader": grader,
                    "criterion_id": cid,
                    "title": title,
                    "criterion_type": None,
                    "verdict": "MISSING",
                    "reason": "no verdict for this criterion",
                }
                for cid, title in titles.items()
                if cid not in got
            ]
        frames.append(pd.DataFrame(rows))
    cols = ["grader", "criterion_id", "title", "criterion_type", "verdict", "reason"]
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True).reindex(columns=cols)


class SearchHit(NamedTuple):
    """One match of a search inside a run's messages."""

    episode_id: str
    turn: int
    """Root turn index; -1 for the initial messages (system prompt, task)."""
    where: str
    """``initial[<i>]:<role>``, ``completion``, ``observation``, ``sub_call[<id>].prompt`` or
    ``sub_call[<id>].response``."""
    snippet: str


def _snippet(text: str, pos: int, n: int, width: int = 80) -> str:
    a, b = max(0, pos - width), min(len(text), pos + n + width)
    return ("…" if a else "") + text[a:b].replace("\n", " ") + ("…" if b < len(text) else "")


@st.cache_data(max_entries=32, show_spinner=False)
def _search(run_dir: str, query: str, limit: int, stamp: str) -> list[SearchHit]:
    rd = Path(run_dir)
    q = query.lower()
    # A raw-text prefilter: the query, JSON-escaped as it is stored, must occur in the file.
    needle = json.dumps(query, ensure_ascii=False)[1:-1].lower()
    hits: list[SearchHit] = []
    view = view_at(run_dir, stamp)
    for episode_id in dict.fromkeys(view.table()["episode_id"]):
        path = trajectory_path(rd, episode_id)
        try:
            raw = path.read_text(encoding="utf-8").lower()
        except FileNotFoundError:
            continue
        if needle not in raw and q not in raw:
            continue
        traj = load_trajectory(rd, episode_id)
        texts: list[tuple[int, str, str]] = [
            (-1, f"initial[{i}]:{m.role}", m.content)
            for i, m in enumerate(traj.start.initial_messages)
        ]
        for t in traj.turns:
            texts.append((t.turn, "completion", (t.prefill or "") + t.completion))
            if t.observation is not None:
                texts.append((t.turn, "observation", t.observation))
        for c in traj.sub_calls:
            texts.append((c.turn, f"sub_call[{c.call_id}].prompt", c.prompt))
            if c.response is not None:
                texts.append((c.turn, f"sub_call[{c.call_id}].response", c.response))
        for turn, where, text in texts:
            pos = text.lower().find(q)
            if pos >= 0:
                hits.append(SearchHit(episode_id, turn, where, _snippet(text, pos, len(q))))
                if len(hits) >= limit:
                    return hits
    return hits


def search_run(run: Run, query: str, limit: int = 200) -> list[SearchHit]:
    """Case-insensitive substring search in the message contents of a run: initial messages,
    root completions (prefill included), observations as the root saw them, sub-call prompts
    and responses. At most ``limit`` hits, in episode then message order. Only trajectory files
    whose raw text contains the query are parsed. Raises ``ValueError`` for an empty query."""
    if not query.strip():
        raise ValueError("search query is empty")
    view = run_view(run)
    return _search(str(view.run_dir), query, limit, view.stamp)


# -------------------------------------------------------------------------------- adapters
@st.cache_data(max_entries=32, show_spinner=False)
def _train_log(adapter_dir: str, stamp: str) -> pd.DataFrame:
    log = read_train_log(Path(adapter_dir))
    cols = ["step", "epoch", "loss", "learning_rate", "grad_norm", "tokens_seen", "tokens_per_s"]
    df = pd.DataFrame(log.rows)
    for c in cols:
        if c not in df:
            df[c] = pd.NA
    return df


def train_log(adapter_dir: Path) -> pd.DataFrame:
    """``train_log.jsonl`` of an adapter folder as a table (one row per logging step, each
    line checked against :class:`~rlmdistill.traces.artefacts.TrainLogRecord`; a torn last
    line of a job still writing is skipped). Columns at least ``step, epoch, loss,
    learning_rate, grad_norm, tokens_seen, tokens_per_s``; empty when there is no log yet.

    Raises :class:`~rlmdistill.traces.artefacts.ArtefactError` naming the line that is not a
    log record."""
    path = adapter_dir / TRAIN_LOG
    if not path.exists():
        return pd.DataFrame(columns=["step", "loss", "learning_rate", "tokens_seen"])
    return _train_log(str(adapter_dir), file_stamp(path))


RL_COLUMNS = [
    "step",
    "reward_mean",
    "reward_std",
    "groups",
    "zero_variance_groups",
    "zero_variance_share",
    "kl",
    "loss",
    "staleness",
    "stale_token_share",
    "rollout_wall_s",
    "sub_calls_per_rollout",
]
"""Columns of :func:`rl_log` (the :class:`~rlmdistill.traces.artefacts.RLLogRecord` fields
plus each step's zero-variance share)."""


@st.cache_data(max_entries=64, show_spinner=False)
def _rl_log(adapter_dir: str, stamp: str) -> pd.DataFrame:
    log = read_rl_log(Path(adapter_dir))
    rows = [
        r.model_dump(include=set(RL_COLUMNS)) for r in sorted(log.records, key=lambda r: r.step)
    ]
    df = pd.DataFrame(rows, columns=RL_COLUMNS)
    groups = pd.to_numeric(df["groups"], errors="coerce")
    zero = pd.to_numeric(df["zero_variance_groups"], errors="coerce")
    df["zero_variance_share"] = (zero / groups).where(groups > 0)
    return df


def rl_log(adapter_dir: Path) -> pd.DataFrame:
    """``rl_log.jsonl`` of an RL adapter folder (``rlmdistill rl``) as a table, one row per
    optimiser step, columns :data:`RL_COLUMNS` (``None``/NaN where a log did not record a
    value); empty when there is no log. A torn last line is skipped.

    Raises :class:`~rlmdistill.traces.artefacts.ArtefactError` naming the line that is not a
    log record."""
    path = adapter_dir / RL_LOG
    if not path.exists():
        return pd.DataFrame(columns=RL_COLUMNS)
    return _rl_log(str(adapter_dir), file_stamp(path))


@st.cache_data(max_entries=64, show_spinner=False)
def _sft_manifest(adapter_dir: str, stamp: str) -> SFTManifest:
    return load_sft_manifest(Path(adapter_dir))


def sft_manifest(adapter_dir: Path) -> SFTManifest | None:
    """``sft.json`` of an adapter folder (cached by path + mtime); ``None`` when absent.

    Raises :class:`~rlmdistill.traces.artefacts.ArtefactError` naming the file when invalid."""
    stamp = file_stamp(adapter_dir / SFT_MANIFEST)
    return None if stamp == "-" else _sft_manifest(str(adapter_dir), stamp)


def export_manifest(dataset_dir: Path) -> ExportManifest | None:
    """``export.json`` of a dataset folder; ``None`` when absent. Raises
    :class:`~rlmdistill.traces.artefacts.ArtefactError` naming the file when invalid."""
    if not (dataset_dir / EXPORT_MANIFEST).exists():
        return None
    return load_export_manifest(dataset_dir)


class AdapterInfo(NamedTuple):
    """What the SFT jobs page shows for one adapter folder."""

    name: str
    path: Path
    status: str
    """``sft.json``'s ``status``; ``running`` when only a log exists; ``invalid`` when
    ``sft.json`` does not match its schema (``error`` says why); ``unknown`` otherwise."""
    manifest: SFTManifest | None
    n_log_steps: int
    last_loss: float | None
    has_weights: bool
    error: str | None = None
    """Why ``sft.json`` could not be read (names the file), else ``None``."""


def adapter_info(adapter_dir: Path) -> AdapterInfo:
    """Status and last logged loss of an adapter folder (``sft.json`` + ``train_log.jsonl``)."""
    error: str | None = None
    try:
        manifest = sft_manifest(adapter_dir)
    except ArtefactError as exc:  # one broken adapter must not hide the others
        manifest, error = None, str(exc)
    log = train_log(adapter_dir)
    loss = pd.to_numeric(log["loss"], errors="coerce").dropna() if len(log) else pd.Series()
    if manifest is not None:
        status = str(manifest.status)
    elif error is not None:
        status = "invalid"
    elif len(log):
        status = "running"
    else:
        status = "unknown"
    return AdapterInfo(
        name=adapter_dir.name,
        path=adapter_dir,
        status=status,
        manifest=manifest,
        n_log_steps=len(log),
        last_loss=float(loss.iloc[-1]) if len(loss) else None,
        has_weights=(adapter_dir / "adapter_model.safetensors").exists(),
        error=error,
    )
