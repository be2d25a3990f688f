"""``rlmdistill judge``: grade every episode of a run, appending to ``verdicts/<grader>.jsonl``.

Re-judging never edits earlier lines: an episode whose memo was already graded by the same
grader version is skipped; a new grader version appends new verdicts (the reader keeps the
last verdict per criterion). With ``regrade_ungradable`` an episode whose latest verdicts hold
an UNGRADABLE one is graded again (meant for the LLM judge, whose UNGRADABLE verdicts come
from failed requests or malformed replies; its cache makes the PASS/FAIL part free).

Episodes can be graded concurrently (``concurrency``, threads); each episode's verdicts are
appended in one write, in episode order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from rlmdistill.judge.base import Grader
from rlmdistill.rooms.room import DataRoom
from rlmdistill.traces.layout import RUN_MANIFEST, verdicts_path
from rlmdistill.traces.runs import load_summaries, load_verdicts
from rlmdistill.traces.schema import EpisodeSummary, Verdict
from rlmdistill.traces.store import append_records, parse_records

__all__ = ["JudgeResult", "judge_run", "load_verdicts", "verdicts_path"]
"""``load_verdicts`` and ``verdicts_path`` are :mod:`rlmdistill.traces`' (re-exported)."""


class JudgeResult(NamedTuple):
    """What :func:`judge_run` did."""

    graded: int
    """Episodes graded by this call."""
    skipped: int
    """Episodes already graded by this grader version with the same memo."""
    verdicts_path: Path
    counts: dict[str, int]
    """Verdicts written by this call per label (PASS, FAIL, UNGRADABLE)."""


def _graded_keys(path: Path, version: str, regrade_ungradable: bool) -> set[tuple[str, str | None]]:
    """(episode_id, memo_sha256) pairs that need no grading by this grader version."""
    latest: dict[tuple[str, str | None], dict[str, str]] = {}
    for v in parse_records(path, Verdict):
        if v.grader_version == version:
            latest.setdefault((v.episode_id, v.memo_sha256), {})[v.criterion_id] = v.verdict
    if not regrade_ungradable:
        return set(latest)
    return {k for k, labels in latest.items() if "UNGRADABLE" not in labels.values()}


def judge_run(
    run_dir: Path,
    grader: Grader,
    *,
    concurrency: int = 1,
    regrade_ungradable: bool = False,
) -> JudgeResult:
    """Grade every finished episode of ``run_dir`` not yet graded by ``grader``.

    Args:
        run_dir: a run directory (holds ``run.json`` and ``episodes.jsonl``).
        grader: any :class:`Grader`; ``grade`` must be thread-safe when ``concurrency > 1``.
        concurrency: episodes graded at once (threads), >= 1.
        regrade_ungradable: also grade episodes whose latest verdicts (this grader version,
            same memo) include UNGRADABLE.

    Rooms are loaded from the paths recorded in the episodes; a room whose content hash no
    longer matches raises ``ValueError`` naming the episode (its criteria may have changed).
    Raises ``FileNotFoundError`` when ``run_dir`` is not a run directory (no ``run.json``) and
    ``ValueError`` for ``concurrency < 1`` or a room without ``task.json``. Verdicts of
    episodes graded before an error are kept (appended per episode).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if not (run_dir / RUN_MANIFEST).exists():
        raise FileNotFoundError(
            f"{run_dir / RUN_MANIFEST} not found: is {run_dir} a run directory?"
        )
    summaries = load_summaries(run_dir)
    path = verdicts_path(run_dir, grader.grader_id)
    done = _graded_keys(path, grader.version, regrade_ungradable)
    rooms: dict[str, DataRoom] = {}
    todo: list[tuple[EpisodeSummary, DataRoom]] = []
    skipped = 0
    for s in summaries:
        if (s.episode_id, s.memo_sha256) in done:
            skipped += 1
            continue
        room = rooms.get(s.room.path)
        if room is None:
            where = Path(s.room.path)
            if not where.is_dir():  # moved with its workspace: found by content hash
                from rlmdistill.rooms.room import locate_moved_room

                where = locate_moved_room(where, s.room.room_hash, run_dir) or where
            room = rooms[s.room.path] = DataRoom.load(where)
        if room.room_hash != s.room.room_hash:
            raise ValueError(
                f"episode {s.episode_id}: room {s.room.path} changed since collection "
                f"(hash {room.room_hash} != {s.room.room_hash}); grade against the original room"
            )
        if room.task is None:
            raise ValueError(f"episode {s.episode_id}: room {s.room.path} has no task.json")
        if not room.task.criteria:  # nothing to grade: no verdict, no pass rate, no re-grading
            skipped += 1
            continue
        todo.append((s, room))

    def grade(item: tuple[EpisodeSummary, DataRoom]) -> list[Verdict]:
        s, room = item
        assert room.task is not None
        return grader.grade(
            s.memo, room.task, room, episode_id=s.episode_id, memo_sha256=s.memo_sha256
        )

    counts: Counter[str] = Counter()

    def write_all(results: Iterator[list[Verdict]]) -> None:
        for verdicts in results:
            append_records(path, verdicts)
            counts.update(v.verdict for v in verdicts)

    if concurrency > 1 and len(todo) > 1:
        with ThreadPoolExecutor(min(concurrency, len(todo)), "rlmd-judge-ep") as pool:
            write_all(pool.map(grade, todo))
    else:
        write_all(map(grade, todo))
    return JudgeResult(len(todo), skipped, path, dict(counts))
