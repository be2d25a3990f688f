"""``rlmdistill judge``: grade every episode of a run, appending to ``verdicts/<grader>.jsonl``.

Re-judging never edits earlier lines: an episode whose memo was already graded by the same
grader version is skipped; a new grader version appends new verdicts (the reader keeps the
last verdict per criterion).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rlmdistill.judge.base import Grader
from rlmdistill.rooms.room import DataRoom
from rlmdistill.traces.schema import EpisodeSummary, Verdict
from rlmdistill.traces.store import append_records, parse_records


class JudgeResult(NamedTuple):
    """What :func:`judge_run` did."""

    graded: int
    """Episodes graded by this call."""
    skipped: int
    """Episodes already graded by this grader version with the same memo."""
    verdicts_path: Path


def verdicts_path(run_dir: Path, grader_id: str) -> Path:
    """Path of one grader's verdict file in a run."""
    return run_dir / "verdicts" / f"{grader_id}.jsonl"


def load_verdicts(run_dir: Path, grader_id: str) -> list[Verdict]:
    """Every verdict a grader wrote for a run (torn last line tolerated)."""
    return list(parse_records(verdicts_path(run_dir, grader_id), Verdict))


def judge_run(run_dir: Path, grader: Grader) -> JudgeResult:
    """Grade every finished episode of ``run_dir`` not yet graded by ``grader``.

    Rooms are loaded from the paths recorded in the episodes; a room whose content hash no
    longer matches raises ``ValueError`` naming the episode (its criteria may have changed).
    Raises ``FileNotFoundError`` when ``run_dir`` is not a run directory (no ``run.json``).
    """
    if not (run_dir / "run.json").exists():
        raise FileNotFoundError(f"{run_dir / 'run.json'} not found: is {run_dir} a run directory?")
    summaries = list(parse_records(run_dir / "episodes.jsonl", EpisodeSummary))
    path = verdicts_path(run_dir, grader.grader_id)
    done = {
        (v.episode_id, v.memo_sha256)
        for v in parse_records(path, Verdict)
        if v.grader_version == grader.version
    }
    rooms: dict[str, DataRoom] = {}
    graded = skipped = 0
    for s in summaries:
        if (s.episode_id, s.memo_sha256) in done:
            skipped += 1
            continue
        room = rooms.get(s.room.path)
        if room is None:
            room = rooms[s.room.path] = DataRoom.load(s.room.path)
        if room.room_hash != s.room.room_hash:
            raise ValueError(
                f"episode {s.episode_id}: room {s.room.path} changed since collection "
                f"(hash {room.room_hash} != {s.room.room_hash}); grade against the original room"
            )
        if room.task is None:
            raise ValueError(f"episode {s.episode_id}: room {s.room.path} has no task.json")
        verdicts = grader.grade(
            s.memo, room.task, room, episode_id=s.episode_id, memo_sha256=s.memo_sha256
        )
        append_records(path, verdicts)
        graded += 1
    return JudgeResult(graded, skipped, path)
