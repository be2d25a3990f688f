"""Data loaders behind the dashboard pages, cached by path and modification time (case A3).

Every cached function takes plain strings and integers only -- a path as ``str`` and a *stamp*
built from the modification times (``st.stat().st_mtime_ns``) and sizes of the files it reads --
never a pydantic model, UUID or ``Path`` object, so Streamlit can hash its arguments and a file
that changes on disk (an appended episode, a new verdict file) is re-read on the next rerun.
Caches are bounded (``max_entries``). Listing a run reads ``run.json``, ``episodes.jsonl`` and
``verdicts/*.jsonl`` only; a trajectory is parsed only when one episode is opened
(:func:`trajectory`), through the shared run loader :mod:`rlmdistill.traces.runs`.

The functions work outside a Streamlit session too (tests, ``benchmarks/bench_dashboard.py``):
``st.cache_data`` then keeps an in-memory cache.

Workspace layout (see ``docs/dashboard.md``)::

    DIR/runs/<run>/       run directories made by ``rlmdistill collect`` (+ ``judge``)
    DIR/datasets/<name>/  datasets written by ``rlmdistill filter`` (export.json, filter_report.*)
    DIR/adapters/<name>/  adapters written by ``rlmdistill sft`` (sft.json, train_log.jsonl)
    DIR/reports/<name>/   reports written by ``rlmdistill report`` (report.json, *.png, *.md)
    DIR/rooms/<room>/     data rooms
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import pyarrow as pa
import streamlit as st

from rlmdistill.dashboard import ENV_WORKSPACE
from rlmdistill.rooms.task import Task
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import (
    ArtefactError,
    ExportManifest,
    SFTManifest,
    load_export_manifest,
    load_sft_manifest,
    read_train_log,
)
from rlmdistill.traces.columns import EPISODE_COLUMNS, VERDICT_COLUMNS, read_table
from rlmdistill.traces.layout import EXPORT_MANIFEST, SFT_MANIFEST, TRAIN_LOG
from rlmdistill.traces.runs import (
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

__all__ = [
    "ENV_WORKSPACE",
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
    "search_run",
    "sft_manifest",
    "train_log",
    "trajectory",
    "workspace_from_env",
]


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


# ------------------------------------------------------------------------------------ stamps
def file_stamp(path: Path) -> str:
    """``"<mtime_ns>:<size>"`` of a file, ``"-"`` when it does not exist (cache-key part)."""
    try:
        st_ = path.stat()
    except FileNotFoundError:
        return "-"
    return f"{st_.st_mtime_ns}:{st_.st_size}"


def run_stamp(run_dir: Path) -> str:
    """Stamp of everything a run listing reads: ``run.json``, ``episodes.jsonl``, every
    ``verdicts/*.jsonl`` (names, modification times, sizes) and the ``task.json`` of each room
    of the manifest (pass rates are counted against it). Never raises: a missing or invalid
    ``run.json`` only leaves the rooms out (the loaders then name the problem)."""
    parts = [file_stamp(run_dir / layout.RUN_MANIFEST), file_stamp(run_dir / layout.EPISODES)]
    vdir = run_dir / layout.VERDICTS
    if vdir.is_dir():
        parts += [f"{p.name}={file_stamp(p)}" for p in sorted(vdir.glob("*.jsonl"))]
    try:
        rooms = run_manifest(run_dir).rooms
    except (FileNotFoundError, ValueError):
        rooms = []
    parts += [f"{r.room_hash}={file_stamp(Path(r.path) / 'task.json')}" for r in rooms]
    return "|".join(parts)


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
@st.cache_data(max_entries=64, show_spinner=False)
def _manifest(run_dir: str, stamp: str) -> RunManifest:
    return load_manifest(Path(run_dir))


def run_manifest(run_dir: Path) -> RunManifest:
    """The run's manifest (``run.json``), cached by path + mtime."""
    return _manifest(str(run_dir), file_stamp(run_dir / layout.RUN_MANIFEST))


_RAN_COLUMNS = pa.schema(
    [("room", pa.struct([("room_hash", pa.string())])), ("task_id", pa.string())]
)
"""The two columns of ``episodes.jsonl`` that say which task each room's episodes ran."""


@st.cache_data(max_entries=16, show_spinner=False)
def _tasks(run_dir: str, stamp: str) -> dict[str, Task]:
    rd = Path(run_dir)
    table = read_table(rd / layout.EPISODES, _RAN_COLUMNS)
    if table is None:  # pyarrow could not read it: the validated loader names the problem
        summaries = _summaries(run_dir, file_stamp(rd / layout.EPISODES)).values()
        return load_room_tasks(run_manifest(rd), summaries, on_error="report", run_dir=rd).tasks
    hashes = [room["room_hash"] if room else None for room in table["room"].to_pylist()]
    return _tasks_ran(rd, hashes, table["task_id"].to_pylist())


def _tasks_ran(
    run_dir: Path, room_hashes: Sequence[str | None], task_ids: Sequence[str | None]
) -> dict[str, Task]:
    """Usable tasks by room hash, given the (room hash, task id) of every episode."""
    ran: dict[str, set[str]] = {}
    for room_hash, task_id in zip(room_hashes, task_ids, strict=True):
        if room_hash and task_id:
            ran.setdefault(room_hash, set()).add(task_id)
    return load_room_tasks(
        run_manifest(run_dir), task_ids=ran, on_error="report", run_dir=run_dir
    ).tasks


def room_tasks(run_dir: Path) -> dict[str, Task]:
    """Task of each room of the run, by ``room_hash``, from
    :func:`~rlmdistill.traces.runs.load_room_tasks`: rooms without a usable ``task.json`` (not
    found, invalid, or another task than their episodes ran) are left out, so their episodes
    have no pass rate. Cached by path + :func:`run_stamp` (which covers the ``task.json``
    files)."""
    return _tasks(str(run_dir), run_stamp(run_dir))


@st.cache_resource(max_entries=8, show_spinner=False)
def _summaries(run_dir: str, stamp: str) -> dict[str, EpisodeSummary]:
    # A resource cache (no copy per hit): the summaries are read-only for every page.
    return {s.episode_id: s for s in load_summaries(Path(run_dir))}


@st.cache_resource(max_entries=256, show_spinner=False)
def _summary(run_dir: str, episode_id: str, stamp: str) -> EpisodeSummary:
    return load_summary(Path(run_dir), episode_id)


def episode_summary(run_dir: Path, episode_id: str) -> EpisodeSummary:
    """The :class:`EpisodeSummary` of one episode (only its line is parsed). Raises
    ``KeyError`` naming the run when the episode has no summary line (not finished)."""
    return _summary(str(run_dir), episode_id, file_stamp(run_dir / layout.EPISODES))


@st.cache_resource(max_entries=32, show_spinner=False)
def _verdicts_by_episode(run_dir: str, grader: str, stamp: str) -> dict[str, list[Verdict]]:
    # A resource cache (no copy per hit): read-only for every page.
    out: dict[str, list[Verdict]] = {}
    for v in load_verdicts(Path(run_dir), grader):
        out.setdefault(v.episode_id, []).append(v)
    return out


def _verdicts(run_dir: Path, grader: str) -> dict[str, list[Verdict]]:
    return _verdicts_by_episode(
        str(run_dir), grader, file_stamp(layout.verdicts_path(run_dir, grader))
    )


RUN_COLUMNS = [
    "episode_id", "run_id", "room_id", "room_hash", "task_id", "sample_index", "status", "depth",
    "root_model", "sub_model", "n_documents", "n_chars", "n_turns", "n_sub_calls",
    "n_sub_call_errors", "n_sub_batches", "memo", "memo_chars", "n_cited", "coverage",
    "root_prompt_tokens", "root_completion_tokens", "sub_prompt_tokens", "sub_completion_tokens",
    "wall_time_s",
]  # fmt: skip
"""Columns of :func:`run_table` before the per-grader ``pass_rate:<grader>`` columns."""


class _VerdictRow(NamedTuple):
    episode_id: str
    criterion_id: str
    verdict: str
    memo_sha256: str | None


def _summary_columns(run_dir: Path) -> pd.DataFrame:
    """RUN_COLUMNS of every summary: columnar fast path, validated loader as fallback."""
    table = read_table(run_dir / layout.EPISODES, EPISODE_COLUMNS)
    if table is None:  # pyarrow could not read it: the validated loader names the problem
        summaries = _summaries(str(run_dir), file_stamp(run_dir / layout.EPISODES)).values()
        rows = [s.model_dump(mode="json", exclude={"memo"}) for s in summaries]
    else:
        rows = table.to_pylist()
    out = []
    for r in rows:
        room, tok, cov = r["room"] or {}, r["tokens"] or {}, r.get("coverage")
        root, sub = tok.get("root") or {}, tok.get("sub") or {}
        out.append(
            {
                "episode_id": r["episode_id"],
                "run_id": r["run_id"],
                "room_id": room.get("room_id"),
                "room_hash": room.get("room_hash"),
                "task_id": r["task_id"],
                "sample_index": r["sample_index"],
                "status": r["status"],
                "depth": r["depth"] or 1,
                "root_model": r["root_model"],
                "sub_model": r["sub_model"],
                "n_documents": room.get("n_documents"),
                "n_chars": room.get("n_chars"),
                "n_turns": r["n_turns"],
                "n_sub_calls": r["n_sub_calls"],
                "n_sub_call_errors": r["n_sub_call_errors"] or 0,
                "n_sub_batches": r["n_sub_batches"] or 0,
                "memo": bool(r["memo_chars"]),
                "memo_chars": r["memo_chars"] or 0,
                "n_cited": len(r["cited_documents"] or []),
                "coverage": cov.get("overall") if cov else None,
                "root_prompt_tokens": root.get("prompt_tokens") or 0,
                "root_completion_tokens": root.get("completion_tokens") or 0,
                "sub_prompt_tokens": sub.get("prompt_tokens") or 0,
                "sub_completion_tokens": sub.get("completion_tokens") or 0,
                "wall_time_s": r["wall_time_s"],
                "_memo_sha256": r.get("memo_sha256"),
            }
        )
    return pd.DataFrame(out, columns=[*RUN_COLUMNS, "_memo_sha256"])


def _verdict_rows(run_dir: Path, grader: str) -> dict[str, list[_VerdictRow]]:
    """Verdict rows by episode: columnar fast path, validated loader as fallback."""
    table = read_table(layout.verdicts_path(run_dir, grader), VERDICT_COLUMNS)
    out: dict[str, list[_VerdictRow]] = {}
    if table is None:
        for eid, vs in _verdicts(run_dir, grader).items():
            out[eid] = [_VerdictRow(eid, v.criterion_id, v.verdict, v.memo_sha256) for v in vs]
        return out
    cols = table.to_pydict()
    for row in zip(
        cols["episode_id"], cols["criterion_id"], cols["verdict"], cols["memo_sha256"], strict=True
    ):
        out.setdefault(row[0], []).append(_VerdictRow(*row))
    return out


@st.cache_data(max_entries=16, show_spinner=False)
def _run_table(run_dir: str, stamp: str) -> pd.DataFrame:
    rd = Path(run_dir)
    table = _summary_columns(rd)
    # the table already holds each episode's room and task: no second read of episodes.jsonl
    tasks = _tasks_ran(rd, list(table["room_hash"]), list(table["task_id"]))
    keys = [
        EpisodeKey(eid, room_hash, memo_sha)
        for eid, room_hash, memo_sha in zip(
            table["episode_id"], table["room_hash"], table["_memo_sha256"], strict=True
        )
    ]
    for grader in grader_ids(rd):
        scores = score_episodes(keys, _verdict_rows(rd, grader), tasks)
        rates = [s.rates.pass_rate if (s := scores.get(k.episode_id)) else None for k in keys]
        table[f"pass_rate:{grader}"] = pd.array(rates, dtype="Float64")
    return table.drop(columns=["_memo_sha256"])


def run_table(run_dir: Path) -> pd.DataFrame:
    """One row per finished episode of a run (from ``episodes.jsonl``; no trajectory read).

    Columns: ``episode_id, run_id, room_id, room_hash, task_id, sample_index, status, depth,
    root_model, sub_model, n_documents, n_chars, n_turns, n_sub_calls, n_sub_call_errors,
    n_sub_batches, memo (bool), memo_chars, n_cited, coverage (0..1 or NA), root/sub
    prompt/completion tokens, wall_time_s`` and one ``pass_rate:<grader>`` column per grader
    (0..1, NA when the room has no task or the episode's memo was not graded; verdicts of an
    older memo are ignored, as in ``rlmdistill show``). Cached by path + the run's stamp.
    """
    return _run_table(str(run_dir), run_stamp(run_dir))


class RunOverview(NamedTuple):
    """Headline figures of one run for the Runs page."""

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
    """Per grader: mean pass rate over graded episodes (None when none is graded)."""
    mean_sub_calls: float | None
    mean_turns: float | None


def run_overview(run_dir: Path) -> RunOverview:
    """Headline figures of a run (config, status counts, means), from :func:`run_table`."""
    m = run_manifest(run_dir)
    table = run_table(run_dir)
    cfg = m.config
    n = len(table)

    def mean(col: str) -> float | None:
        if n == 0 or col not in table:
            return None
        v = table[col].dropna()
        return float(v.mean()) if len(v) else None

    graders = [c.split(":", 1)[1] for c in table.columns if c.startswith("pass_rate:")]
    return RunOverview(
        run_id=m.run_id,
        root=str(cfg.get("root")),
        sub=str(cfg.get("sub")),
        depth=int(cfg.get("depth", 1)),
        rooms=[r.room_id for r in m.rooms],
        n_planned=len(m.rooms) * int(cfg.get("episodes", 0)),
        n_episodes=n,
        status_counts=table["status"].value_counts().to_dict() if n else {},
        mean_coverage=mean("coverage"),
        mean_pass_rate={g: mean(f"pass_rate:{g}") for g in graders},
        mean_sub_calls=mean("n_sub_calls"),
        mean_turns=mean("n_turns"),
    )


def run_summary(run_dir: Path) -> Any:
    """The analysis stage's :class:`~rlmdistill.analysis.summary.RunSummary` (what
    ``rlmdistill show`` prints), cached by path + stamp."""
    return _run_summary(str(run_dir), run_stamp(run_dir))


@st.cache_data(max_entries=8, show_spinner=False)
def _run_summary(run_dir: str, stamp: str) -> Any:
    from rlmdistill.analysis.summary import summarize_run

    return summarize_run(Path(run_dir))


# ----------------------------------------------------------------------------- one episode
@st.cache_data(max_entries=32, show_spinner=False)
def _trajectory(run_dir: str, episode_id: str, stamp: str) -> Trajectory:
    return load_trajectory(Path(run_dir), episode_id)


def trajectory(run_dir: Path, episode_id: str) -> Trajectory:
    """One episode's trajectory, parsed on demand (lazily) and cached by path + mtime.

    Raises ``FileNotFoundError`` / ``TraceFileError`` from :func:`load_trajectory`.
    """
    return _trajectory(str(run_dir), episode_id, file_stamp(trajectory_path(run_dir, episode_id)))


@st.cache_resource(max_entries=256, show_spinner=False)
def _episode_verdicts(run_dir: str, grader: str, episode_id: str, stamp: str) -> list[Verdict]:
    return load_verdicts(Path(run_dir), grader, episode_id)


def _episode_task(run_dir: Path, summary: EpisodeSummary) -> Task | None:
    """The usable task of one episode's room (checked against the task the episode ran), read
    without touching the run's other rooms or episodes (``None`` when unusable)."""
    room_hash = summary.room.room_hash
    manifest = run_manifest(run_dir)
    one = manifest.model_copy(
        update={"rooms": [r for r in manifest.rooms if r.room_hash == room_hash]}
    )
    return load_room_tasks(one, [summary], on_error="report", run_dir=run_dir).tasks.get(room_hash)


def episode_verdicts(run_dir: Path, episode_id: str) -> pd.DataFrame:
    """Every grader's verdicts of one episode's *current* memo, one row per (grader,
    criterion): ``grader, criterion_id, title, criterion_type, verdict, reason``; criteria of
    the room's task with no verdict appear as ``MISSING``. Empty when nothing is graded."""
    summary = episode_summary(run_dir, episode_id)
    task = _episode_task(run_dir, summary)
    titles = {c.id: c.title for c in task.criteria} if task else {}
    frames = []
    for grader in grader_ids(run_dir):
        latest = {
            v.criterion_id: v
            for v in _episode_verdicts(str(run_dir), grader, episode_id, run_stamp(run_dir))
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
    for episode_id in _summaries(run_dir, file_stamp(rd / layout.EPISODES)):
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


def search_run(run_dir: Path, query: str, limit: int = 200) -> list[SearchHit]:
    """Case-insensitive substring search in the message contents of a run: initial messages,
    root completions (prefill included), observations as the root saw them, sub-call prompts
    and responses. At most ``limit`` hits, in episode then message order. Only trajectory files
    whose raw text contains the query are parsed. Raises ``ValueError`` for an empty query."""
    if not query.strip():
        raise ValueError("search query is empty")
    return _search(str(run_dir), query, limit, run_stamp(run_dir))


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
