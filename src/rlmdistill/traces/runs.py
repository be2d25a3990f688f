"""Read a run directory: manifest, episode summaries, verdicts and (lazily) trajectories.

The one loader every later stage (filter, export, analysis, dashboard) uses, so none of them
parses run files its own way. Listing a run reads only ``run.json`` and ``episodes.jsonl``;
a trajectory is parsed only when :func:`load_trajectory` is asked for it.

Layout read (see ``docs/architecture.md``)::

    runs/<run>/run.json                        RunManifest
    runs/<run>/episodes.jsonl                  EpisodeSummary per finished episode
    runs/<run>/trajectories/<episode_id>.jsonl EpisodeStart, TurnRecord*, SubagentTurnRecord*,
                                               SubCallRecord*, EpisodeEnd
    runs/<run>/verdicts/<grader>.jsonl         Verdict per (episode, criterion)
    rooms/<room>/task.json                     the rubric of each room (``RoomInfo.path``)

:func:`load_room_tasks` is the one reader of the rooms' ``task.json`` for every stage that
scores episodes (``show``, analysis metrics, filter, dashboard): one error policy argument,
and every problem (missing, invalid, another task than the episodes ran) reported alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

from pydantic import TypeAdapter

from rlmdistill.rooms.task import Task, TaskError, load_task
from rlmdistill.traces import layout
from rlmdistill.traces.layout import trajectory_path
from rlmdistill.traces.schema import (
    AttemptRecord,
    EpisodeEnd,
    EpisodeStart,
    EpisodeSummary,
    RunManifest,
    SubagentTurnRecord,
    SubCallRecord,
    TrajectoryRecord,
    TurnRecord,
    Verdict,
)
from rlmdistill.traces.store import TraceFileError, parse_records, read_jsonl

__all__ = [
    "EpisodeRef",
    "NotARunError",
    "RoomTaskError",
    "RoomTaskProblem",
    "RoomTasks",
    "TaskErrorPolicy",
    "TaskProblemKind",
    "Trajectory",
    "grader_ids",
    "load_manifest",
    "load_room_tasks",
    "load_summaries",
    "load_summary",
    "load_trajectory",
    "load_verdicts",
    "trajectory_path",
]

_TRAJECTORY = TypeAdapter(TrajectoryRecord)
_R = TypeVar("_R", EpisodeSummary, Verdict)


class NotARunError(FileNotFoundError):
    """The directory has no ``run.json``: it is not a run made by ``rlmdistill collect``."""


class EpisodeRef(NamedTuple):
    """Names one episode of one run: what the filter stage hands to the export stage."""

    run_dir: Path
    episode_id: str


@dataclass
class Trajectory:
    """Every record of one episode's trajectory file, split by kind (file order kept).

    ``turns`` are root turns only (the SFT source); ``subagent_turns`` and
    ``sub_calls`` are stored apart. ``end`` is ``None`` for an episode that never finished
    (crash); ``torn_tail`` is the unparsable last line left by a crash, if any.
    """

    path: Path
    start: EpisodeStart
    turns: list[TurnRecord] = field(default_factory=list)
    subagent_turns: list[SubagentTurnRecord] = field(default_factory=list)
    sub_calls: list[SubCallRecord] = field(default_factory=list)
    end: EpisodeEnd | None = None
    torn_tail: str | None = None


def load_manifest(run_dir: Path) -> RunManifest:
    """The run's :class:`RunManifest`. Raises :class:`NotARunError` when ``run.json`` is absent,
    :class:`TraceFileError` (naming the file) when it does not validate."""
    path = Path(run_dir) / layout.RUN_MANIFEST
    if not path.exists():
        raise NotARunError(f"{path} not found: is {run_dir} a run directory?")
    try:
        return RunManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TraceFileError(f"{path}: invalid run manifest: {exc}") from exc


def load_summaries(run_dir: Path) -> list[EpisodeSummary]:
    """Every :class:`EpisodeSummary` of ``episodes.jsonl`` in file order (one per finished
    episode; a torn last line is ignored, see :func:`rlmdistill.traces.store.read_jsonl`).

    Raises :class:`NotARunError` when ``run.json`` is absent.
    """
    run_dir = Path(run_dir)
    if not (run_dir / layout.RUN_MANIFEST).exists():
        raise NotARunError(f"{run_dir / 'run.json'} not found: is {run_dir} a run directory?")
    return list(parse_records(run_dir / layout.EPISODES, EpisodeSummary))


def load_attempts(run_dir: Path) -> list[AttemptRecord]:
    """Every :class:`AttemptRecord` of ``attempts.jsonl`` in file order (episode attempts cut
    short by the serving infrastructure); ``[]`` when the file is absent (runs without any, and
    runs written before it existed)."""
    return list(parse_records(Path(run_dir) / layout.ATTEMPTS, AttemptRecord))


def load_summary(run_dir: Path, episode_id: str) -> EpisodeSummary:
    """The :class:`EpisodeSummary` of one episode, validating only its own line.

    Finds the line by its ``"episode_id":"<id>"`` key (as written by the store), so opening
    one episode of a 10,000-episode run does not parse the others. Raises ``KeyError`` naming
    the run when the episode has no summary line (not finished) and :class:`NotARunError`
    when ``run.json`` is absent.
    """
    run_dir = Path(run_dir)
    if not (run_dir / layout.RUN_MANIFEST).exists():
        raise NotARunError(f"{run_dir / 'run.json'} not found: is {run_dir} a run directory?")
    for summary in reversed(_episode_lines(run_dir / layout.EPISODES, episode_id, EpisodeSummary)):
        return summary
    raise KeyError(f"{run_dir}: episode {episode_id} has no line in episodes.jsonl")


def grader_ids(run_dir: Path) -> list[str]:
    """Ids of the graders that wrote verdicts for this run (``verdicts/<id>.jsonl``), sorted.

    Side files of a grader (``<id>.cache.jsonl``, ``<id>.usage.jsonl``) are not graders.
    """
    return sorted(
        p.stem
        for p in layout.verdicts_dir(run_dir).glob("*.jsonl")
        if not p.stem.endswith(layout.VERDICT_SIDE_FILES)
    )


def load_verdicts(run_dir: Path, grader_id: str, episode_id: str | None = None) -> list[Verdict]:
    """All verdicts of one grader for a run (empty when it never graded the run), in file
    order; with ``episode_id``, only that episode's (only their lines are parsed)."""
    path = layout.verdicts_path(run_dir, grader_id)
    if episode_id is not None:
        return _episode_lines(path, episode_id, Verdict)
    return list(parse_records(path, Verdict))


TaskProblemKind = Literal["missing", "invalid", "task_mismatch"]
"""What is wrong with a room's task: no ``task.json``; a ``task.json`` that cannot be read or
does not validate; a valid one whose task id is not the one the run's episodes ran."""

TaskErrorPolicy = Literal["raise", "raise_invalid", "report"]
"""What :func:`load_room_tasks` does with a problem: ``"raise"`` raises on the first problem of
any kind; ``"raise_invalid"`` raises on an ``invalid`` task file only and reports the others
(a room that moved away, or whose task changed since the run, is not a broken file);
``"report"`` never raises."""


class RoomTaskProblem(NamedTuple):
    """Why one room of a run has no usable task (so its episodes have no pass rate)."""

    room_id: str
    room_hash: str
    path: Path
    """The ``task.json`` looked for (``<RoomInfo.path>/task.json``)."""
    kind: TaskProblemKind
    message: str
    """Names the file and the error (or the two task ids), e.g.
    ``"rooms/a/task.json: task file not found"``."""


class RoomTasks(NamedTuple):
    """What :func:`load_room_tasks` found: usable tasks and the problems of the other rooms."""

    tasks: dict[str, Task]
    """Task per room hash, only for rooms whose task is readable and is the task the run's
    episodes ran."""
    problems: list[RoomTaskProblem]
    """One per room left out of ``tasks``, in room order (manifest first)."""


class RoomTaskError(TaskError):
    """A room's task is unusable under the chosen :data:`TaskErrorPolicy`; the message is the
    problem's (naming the file), and ``problem`` holds it whole."""

    def __init__(self, problem: RoomTaskProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def load_room_tasks(
    run: Path | RunManifest,
    episodes: Iterable[EpisodeSummary] = (),
    *,
    task_ids: Mapping[str, Iterable[str]] | None = None,
    rooms_ran: Mapping[str, tuple[str, str]] | None = None,
    on_error: TaskErrorPolicy = "raise",
    run_dir: Path | None = None,
) -> RoomTasks:
    """The rubric task (``task.json``) of every room of a run, by room hash.

    Rooms are the manifest's (``run`` is a run directory or its loaded manifest), plus any
    room an episode of ``episodes`` ran in that the manifest does not list (the manifest's
    path wins for a room in both). Given the task ids the run's episodes ran (``episodes``
    and/or ``task_ids``), a task whose id differs from one its room's episodes ran is a
    ``task_mismatch`` problem and is left out, so no episode is scored against another rubric;
    without them there is no such check.

    Args:
        run: run directory (its ``run.json`` is read) or its :class:`RunManifest`.
        episodes: the run's :class:`EpisodeSummary` records (e.g. :func:`load_summaries`).
        task_ids: task ids the run's episodes ran, by room hash, for a caller without the
            summaries at hand (the dashboard reads these two columns only); merged with those
            of ``episodes``.
        rooms_ran: ``(room_id, room folder)`` by room hash of the rooms the run's episodes
            ran in, for a caller without the summaries at hand (columns of
            ``episodes.jsonl``, in file order): a room the manifest does not list is added as
            for ``episodes`` (the manifest's path, then the first episode's, wins).
        on_error: what a problem does (:data:`TaskErrorPolicy`).
        run_dir: where the run is now, when ``run`` is a loaded manifest (a run directory
            given as ``run`` is its own). A room whose recorded folder no longer exists is
            then looked for near it, as a moved workspace has it
            (:func:`~rlmdistill.rooms.room.locate_moved_room`, checked by content hash).

    Returns:
        :class:`RoomTasks`: ``tasks`` by room hash and the ``problems`` of the other rooms.

    Raises:
        RoomTaskError: (a :class:`~rlmdistill.rooms.task.TaskError`, so a ``ValueError``) a
            problem the policy raises on; the message names the file.
        NotARunError: ``run`` is a directory without ``run.json``.
        TraceFileError: ``run.json`` does not validate.
    """
    manifest = run if isinstance(run, RunManifest) else load_manifest(run)
    if not isinstance(run, RunManifest):
        run_dir = Path(run)
    rooms = {r.room_hash: (r.room_id, r.path) for r in manifest.rooms}
    ran: dict[str, set[str]] = {h: set(ids) for h, ids in (task_ids or {}).items()}
    for e in episodes:
        rooms.setdefault(e.room.room_hash, (e.room.room_id, e.room.path))
        ran.setdefault(e.room.room_hash, set()).add(e.task_id)
    for room_hash, room in (rooms_ran or {}).items():
        rooms.setdefault(room_hash, room)
    out = RoomTasks(tasks={}, problems=[])
    for room_hash, (room_id, room_path) in rooms.items():
        path = Path(room_path) / layout.TASK
        if not path.is_file() and run_dir is not None:
            from rlmdistill.rooms.room import locate_moved_room

            moved = locate_moved_room(room_path, room_hash, run_dir)
            path = path if moved is None else moved / layout.TASK
        problem = None
        if not path.is_file():
            problem = RoomTaskProblem(
                room_id, room_hash, path, "missing", f"{path}: task file not found"
            )
        else:
            try:
                task = load_task(path)
            except TaskError as exc:
                problem = RoomTaskProblem(room_id, room_hash, path, "invalid", str(exc))
            else:
                other = sorted(ran.get(room_hash, set()) - {task.id})
                if other:
                    problem = RoomTaskProblem(
                        room_id,
                        room_hash,
                        path,
                        "task_mismatch",
                        f"{path}: task {task.id}, but the run's episodes in room {room_id} "
                        f"ran {', '.join(other)}",
                    )
                else:
                    out.tasks[room_hash] = task
        if problem is None:
            continue
        if on_error == "raise" or (on_error == "raise_invalid" and problem.kind == "invalid"):
            raise RoomTaskError(problem)
        out.problems.append(problem)
    return out


def _episode_lines(path: Path, episode_id: str, model: type[_R]) -> list[_R]:
    """Records of ``path`` whose ``episode_id`` is ``episode_id``, in file order, parsing
    only the lines that carry its ``"episode_id":"<id>"`` key (as the store writes it).
    Torn or foreign lines that merely contain the key are skipped."""
    needle = f'"episode_id":"{episode_id}"'.encode()
    raw = path.read_bytes() if path.exists() else b""
    out: list[_R] = []
    for line in raw.split(b"\n"):
        if needle in line:
            try:
                rec = model.model_validate_json(line)
            except ValueError:
                continue
            if getattr(rec, "episode_id", None) == episode_id:
                out.append(rec)
    return out


def load_trajectory(run_dir: Path, episode_id: str) -> Trajectory:
    """Parse one episode's trajectory file.

    Raises ``FileNotFoundError`` when the file is missing and :class:`TraceFileError` (naming
    the file and record) when a record is invalid, the first record is not an
    ``episode_start``, or a record belongs to another episode.
    """
    path = trajectory_path(run_dir, episode_id)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no trajectory for episode {episode_id}")
    read = read_jsonl(path)
    start: EpisodeStart | None = None
    traj: Trajectory | None = None
    for i, raw in enumerate(read.records):
        try:
            rec = _TRAJECTORY.validate_python(raw)
        except ValueError as exc:
            raise TraceFileError(f"{path}: record {i + 1} is invalid: {exc}") from exc
        if rec.episode_id != episode_id:
            raise TraceFileError(
                f"{path}: record {i + 1} belongs to episode {rec.episode_id}, not {episode_id}"
            )
        if isinstance(rec, EpisodeStart):
            if start is not None:
                raise TraceFileError(f"{path}: record {i + 1}: a second episode_start")
            start = rec
            traj = Trajectory(path=path, start=rec, torn_tail=read.torn_tail)
            continue
        if traj is None:
            raise TraceFileError(f"{path}: record {i + 1} comes before the episode_start")
        if isinstance(rec, TurnRecord):
            traj.turns.append(rec)
        elif isinstance(rec, SubagentTurnRecord):
            traj.subagent_turns.append(rec)
        elif isinstance(rec, SubCallRecord):
            traj.sub_calls.append(rec)
        elif isinstance(rec, EpisodeEnd):
            traj.end = rec
    if traj is None:
        raise TraceFileError(f"{path}: no episode_start record")
    return traj
