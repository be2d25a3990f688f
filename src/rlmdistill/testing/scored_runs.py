"""Synthetic run directories for tests and benchmarks of the filter stage.

:func:`write_scored_run` writes a real run layout (``run.json``, ``episodes.jsonl``,
``verdicts/<grader>.jsonl`` and a ``task.json`` per room) from a few numbers per episode,
with the schema models and :func:`rlmdistill.traces.store.append_records`, so selection can be
tested on hand-computed expectations. No trajectories are written (selection never reads
them unless ``dedup`` asks for ``completions``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rlmdistill.rooms.task import Criterion, Task, save_task
from rlmdistill.traces import layout
from rlmdistill.traces.schema import (
    Coverage,
    EpisodeStatus,
    EpisodeSummary,
    RoomInfo,
    RunManifest,
    TokenUsage,
    Verdict,
)
from rlmdistill.traces.store import append_records

__all__ = ["SyntheticEpisode", "SyntheticRoom", "write_scored_run", "write_task_problem_run"]

_T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


class SyntheticRoom(NamedTuple):
    """A room: ``name`` (room id), documents, rubric criteria (ids ``c0``, ``c1``, ...)."""

    name: str
    n_documents: int = 4
    n_criteria: int = 4


class SyntheticEpisode(NamedTuple):
    """One episode summary; ``n_pass``: criteria graded PASS (the rest FAIL, except
    ``n_ungradable`` UNGRADABLE ones); ``None`` = the grader wrote no verdicts for it.
    ``memo`` defaults to a text unique to the episode."""

    episode_id: str
    room: str
    n_pass: int | None = None
    coverage: float | None = 0.5
    status: EpisodeStatus = "completed"
    memo: str | None = ""
    n_turns: int = 2
    n_sub_calls: int = 1
    n_ungradable: int = 0
    depth: int = 1


def _room_info(room: SyntheticRoom, base: Path) -> RoomInfo:
    return RoomInfo(
        room_id=room.name,
        room_hash=hashlib.sha256(room.name.encode()).hexdigest()[:16],
        path=str(base / room.name),
        n_documents=room.n_documents,
        n_chars=1000 * room.n_documents,
        folders={"Contracts": room.n_documents},
    )


def write_scored_run(
    run_dir: Path,
    rooms: Sequence[SyntheticRoom],
    episodes: Sequence[SyntheticEpisode],
    *,
    run_id: str | None = None,
    grader: str = "reference",
    rooms_dir: Path | None = None,
) -> Path:
    """Write a run directory and return it.

    Rooms (only their ``task.json``) go under ``rooms_dir`` (default ``run_dir.parent /
    "rooms"``); a room shared by two runs must use the same ``rooms_dir``. Raises
    ``KeyError`` for an episode naming an unknown room and ``ValueError`` when
    ``n_pass + n_ungradable`` exceeds the room's criteria.
    """
    run_dir = Path(run_dir)
    run_id = run_id or run_dir.name
    base = Path(rooms_dir) if rooms_dir is not None else run_dir.parent / "rooms"
    infos = {r.name: _room_info(r, base) for r in rooms}
    by_name = {r.name: r for r in rooms}
    for room in rooms:
        folder = base / room.name
        if not (folder / "task.json").exists():
            folder.mkdir(parents=True, exist_ok=True)
            task = Task(
                id=f"task-{room.name}",
                title=f"Review {room.name}",
                instructions="Write a due-diligence memo.",
                criteria=[
                    Criterion(id=f"c{i}", title=f"criterion {i}", match_criteria="PASS if found")
                    for i in range(room.n_criteria)
                ],
            )
            save_task(task, folder / "task.json")
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(
        run_id=run_id,
        config={"episodes": len(episodes)},
        config_hash="synthetic",
        versions={},
        rooms=list(infos.values()),
    )
    (run_dir / layout.RUN_MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    summaries: list[EpisodeSummary] = []
    verdicts: list[Verdict] = []
    for index, ep in enumerate(episodes):
        room = by_name[ep.room]
        memo = f"memo of {ep.episode_id}" if ep.memo == "" else ep.memo
        sha = hashlib.sha256(memo.encode("utf-8")).hexdigest() if memo else None
        summaries.append(
            EpisodeSummary(
                episode_id=ep.episode_id,
                run_id=run_id,
                sample_index=index,
                room=infos[ep.room],
                task_id=f"task-{ep.room}",
                root_model="root",
                sub_model="sub",
                depth=2 if ep.depth == 2 else 1,
                seed=index,
                status=ep.status,
                n_turns=ep.n_turns,
                n_sub_calls=ep.n_sub_calls,
                tokens=TokenUsage(),
                wall_time_s=1.0 + index,
                memo=memo,
                memo_chars=len(memo or ""),
                memo_sha256=sha,
                coverage=(
                    Coverage(method="shingle-v1", overall=ep.coverage)
                    if ep.coverage is not None
                    else None
                ),
                started_at=_T0,
                ended_at=_T0 + dt.timedelta(seconds=1),
            )
        )
        if ep.n_pass is None:
            continue
        if ep.n_pass + ep.n_ungradable > room.n_criteria:
            raise ValueError(
                f"episode {ep.episode_id}: n_pass + n_ungradable > {room.n_criteria} criteria"
            )
        for i in range(room.n_criteria):
            label = (
                "PASS"
                if i < ep.n_pass
                else "UNGRADABLE"
                if i < ep.n_pass + ep.n_ungradable
                else "FAIL"
            )
            verdicts.append(
                Verdict(
                    episode_id=ep.episode_id,
                    grader=grader,
                    grader_version="1",
                    criterion_id=f"c{i}",
                    verdict=label,  # type: ignore[arg-type]
                    reason="synthetic",
                    memo_sha256=sha,
                    graded_at=_T0,
                )
            )
    append_records(run_dir / layout.EPISODES, summaries)
    if verdicts:
        append_records(layout.verdicts_path(run_dir, grader), verdicts)
    return run_dir


def write_task_problem_run(run_dir: Path, n_criteria: int = 3) -> Path:
    """A run of four rooms, one episode each (``e-<room>``, 1 criterion passed), whose tasks
    are: ``ok``; ``gone`` (``task.json`` deleted); ``broken`` (truncated JSON); ``changed``
    (``task.json`` now holds task ``task-new``, the episode ran ``task-changed``).

    Rooms go under ``run_dir.parent / "rooms"``. Returns ``run_dir``.
    """
    names = ["ok", "gone", "broken", "changed"]
    run = write_scored_run(
        run_dir,
        [SyntheticRoom(n, n_criteria=n_criteria) for n in names],
        [SyntheticEpisode(f"e-{n}", n, n_pass=1) for n in names],
    )
    rooms = Path(run_dir).parent / "rooms"
    (rooms / "gone" / "task.json").unlink()
    (rooms / "broken" / "task.json").write_text('{"title": "x"', encoding="utf-8")
    task = json.loads((rooms / "changed" / "task.json").read_text(encoding="utf-8"))
    task["id"] = "task-new"
    (rooms / "changed" / "task.json").write_text(json.dumps(task), encoding="utf-8")
    return run
