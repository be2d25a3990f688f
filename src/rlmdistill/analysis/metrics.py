"""Per-episode behaviour metrics: one :class:`EpisodeMetrics` row per episode of a run.

Most fields come from ``episodes.jsonl`` and the grader's verdicts; a few need the episode's
trajectory (sub-call batches, sub-calls carrying document text, when the memo is first
written, whether sub-call answers reach the memo) and are read only when asked for
(``trajectories=True``), one trajectory file at a time. Every metric is defined in
``docs/analysis.md``; the definitions that need a choice are:

- **docs read**: documents whose ``coverage.per_document`` share is > 0 (some of their text
  reached a root or sub model input; the ``shingle-v1`` probe detects every span of 79+
  characters).
- **early give-up**: no memo, or a memo written after reading fewer than
  ``give_up_read_share`` (default :data:`GIVE_UP_READ_SHARE` = 0.5) of the room's documents.
  ``None`` when the episode has a memo but no coverage was measured.
- **read but wrote no memo**: coverage > 0 and no memo, the one definition
  (:func:`rlmdistill.traces.scores.read_no_memo`; ``None`` without coverage).
- **answer reach**: share of the root's answered sub-calls (depth 1, no error, at least one
  word) whose response shares a run of :data:`REACH_NGRAM` (8) consecutive words with the
  memo, or, for responses shorter than 8 words, appears whole in the memo (words: NFKC,
  casefolded ``\\w+`` tokens). 8 words is the reference grader's quote length
  (``rlmdistill.judge.reference.MIN_QUOTE_WORDS``): a shorter run is often boilerplate.
- **memo first turn**: the first root turn whose code assigns, augments or appends to a
  variable whose name contains ``memo`` (see :data:`MEMO_WRITE`), or that hands back the final
  answer; ``memo_first_turn_share = (memo_first_turn + 1) / n_turns`` (1.0: written only in
  the last turn; small: written while still reviewing).
- **sub-call metrics** (every sub-call of the episode, depth 1 and 2, i.e. every
  call the sub model answered): an *answer* is a sub-call without error whose response has
  at least one word (as for answer reach). ``sub_answer_chars``: mean length of the answers
  in characters (Unicode code points of the response as recorded). ``sub_answer_quote_share``:
  share of the answers that quote a document of the room by the coverage probe's rule
  (:meth:`~rlmdistill.coverage.index.CoverageIndex.shares_text`: a span of at least 79
  normalised characters in common with a document is always found, one of 64-78 when it
  holds an aligned window, a shorter one never); ``None`` when the room's folder is not
  found or no longer has the content hash the episode ran on. ``sub_used_share`` and
  ``sub_supports_pass_share``: share of all sub-calls whose credit
  (:func:`rlmdistill.traces.sub_credit.sub_call_credit`, method ``sub-credit-v1``) has
  ``used_in_memo`` / ``supports_pass`` (a failed call counts as neither);
  ``sub_supports_pass_share`` is ``None`` when the current memo is not graded (no pass
  rate). The error share is the report's ``sub_call_error_share`` (from the summary). Every
  one of them is ``None`` for an episode without sub-calls (without answers for the two
  answer metrics): excluded from the means, not 0.
- **cost**: root usage priced on the root model and sub usage on the sub model with a
  :class:`~rlmdistill.models.limits.PriceTable` (uncached input, cached input and output
  prices per million tokens); ``None`` when a model has no price.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import multiprocessing
import operator
import os
import re
import sys
import threading
import types
import typing
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, cast

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.analysis.row_cache import RowCache, Stat, metrics_cache_dir, stat_key
from rlmdistill.analysis.trajectory_cache import TrajectoryCache
from rlmdistill.analysis.trajectory_fields import Call, Turn, light_fields
from rlmdistill.coverage.index import CoverageIndex
from rlmdistill.models.base import Usage
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable
from rlmdistill.models.spec import parse_spec
from rlmdistill.paths import room_cache
from rlmdistill.rooms.room import DataRoom, RoomError, locate_moved_room
from rlmdistill.rooms.task import Task, TaskError
from rlmdistill.traces import layout
from rlmdistill.traces.columns import VerdictRow, gc_paused, verdict_rows
from rlmdistill.traces.layout import trajectory_path, verdicts_path
from rlmdistill.traces.runs import (
    RoomTaskProblem,
    Trajectory,
    grader_ids,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_trajectory,
)
from rlmdistill.traces.schema import (
    SCHEMA_VERSION,
    EpisodeSummary,
    RunManifest,
    SubCallRecord,
    Verdict,
)
from rlmdistill.traces.scores import EpisodeScore, read_no_memo, resolve_grader, score_episodes
from rlmdistill.traces.store import read_clean_jsonl, read_jsonl
from rlmdistill.traces.sub_credit import credit_parts, criterion_documents

__all__ = [
    "GIVE_UP_READ_SHARE",
    "MEMO_WRITE",
    "REACH_NGRAM",
    "EpisodeMetrics",
    "RunMetrics",
    "answer_reaches_memo",
    "load_run_metrics",
    "load_runs_metrics",
    "memo_first_turn",
    "metrics_table",
    "word_tokens",
]

GIVE_UP_READ_SHARE = 0.5
"""An episode with a memo gave up early when it read fewer than this share of the documents."""
REACH_NGRAM = 8
"""Consecutive words a sub-call answer must share with the memo to count as reaching it."""
MEMO_WRITE = re.compile(
    r"\b\w*memo\w*\s*(?:\[[^\]\n]*\]\s*)?(?:\+=|=(?!=)|\.(?:append|extend|write|insert)\()",
    re.IGNORECASE,
)
"""Code that writes to a memo variable: ``memo = ..``, ``memo += ..``, ``memo_parts.append(..)``,
``memo['x'] = ..`` (any name containing "memo", case-insensitive)."""

_WORD = re.compile(r"\w+")

CriterionVerdict = str
"""``PASS``, ``FAIL``, ``UNGRADABLE`` or ``MISSING`` (no verdict for the criterion)."""


class EpisodeMetrics(BaseModel):
    """Behaviour metrics of one episode (one row of :func:`metrics_table`).

    Rates and shares are in [0, 1]; tokens are model tokens; times are seconds; cost is USD.
    ``None`` means "not measured / not defined" for that episode (see the field's note).
    """

    model_config = ConfigDict(extra="forbid")

    # identity
    run_id: str
    episode_id: str
    room_id: str
    room_hash: str
    """Content hash of the room: the key that pairs rooms across runs."""
    task_id: str
    sample_index: int
    root_model: str
    sub_model: str
    depth: int
    status: str
    # scores
    grader: str | None
    pass_rate: float | None
    """PASS / all criteria (UNGRADABLE and missing count as failed); ``score_note`` says why
    it is ``None``."""
    graded_pass_rate: float | None = None
    weighted_pass_rate: float | None = None
    n_criteria: int | None = None
    n_pass: int | None = None
    pass_rate_by_type: dict[str, float] = Field(default_factory=dict)
    """Pass rate over the criteria of each criterion type (``finding``, ``citation``, ...)."""
    criteria: dict[str, CriterionVerdict] = Field(default_factory=dict)
    """Verdict per criterion id of the room's task (for flipped-criteria tables)."""
    criterion_types: dict[str, str] = Field(default_factory=dict)
    score_note: str | None = None
    # coverage and room size
    coverage: float | None
    """Share of the room's characters that reached any model input (``Coverage.overall``)."""
    coverage_per_folder: dict[str, float] = Field(default_factory=dict)
    docs_read: int | None
    """Documents with per-document coverage > 0; ``None`` without coverage."""
    docs_read_share: float | None
    room_documents: int
    room_chars: int
    room_tokens: int | None
    # delegation and turns
    n_turns: int
    n_sub_calls: int
    """All sub-calls (every depth)."""
    n_sub_call_errors: int
    n_sub_batches: int
    """``llm_query``/``llm_query_batched`` calls of every depth (from the summary)."""
    root_batch_sizes: list[int] | None = None
    """Trajectory: sizes of the root's own batches (depth-1 calls grouped by ``batch_id``)."""
    mean_batch_size: float | None = None
    max_batch_size: int | None = None
    n_sub_calls_with_text: int | None = None
    """Trajectory: depth-1 sub-calls whose prompt carried document text (``sources``)."""
    share_sub_calls_with_text: float | None = None
    n_answers: int | None = None
    """Trajectory: depth-1 sub-calls answered without error, with at least one word."""
    answer_reach: float | None = None
    """Trajectory: share of ``n_answers`` whose content reaches the memo (module docstring)."""
    n_sub_answers: int | None = None
    """Trajectory: sub-calls of every depth answered without error, with at least one word."""
    sub_answer_chars: float | None = None
    """Trajectory: mean characters of those answers; ``None`` without answers."""
    sub_answer_quote_share: float | None = None
    """Trajectory: share of ``n_sub_answers`` that quote a document of the room
    (``CoverageIndex.shares_text``); ``None`` without answers or without the room."""
    sub_used_share: float | None = None
    """Trajectory: share of all sub-calls whose answer is ``used_in_memo``
    (:mod:`rlmdistill.traces.sub_credit`); ``None`` without sub-calls."""
    sub_supports_pass_share: float | None = None
    """Trajectory and verdicts: share of all sub-calls whose credit has ``supports_pass``;
    ``None`` without sub-calls or when the current memo is not graded."""
    memo_first_turn: int | None = None
    memo_first_turn_share: float | None = None
    # memo and give-up
    has_memo: bool
    memo_chars: int
    memo_words: int
    early_give_up: bool | None
    read_no_memo: bool | None
    # tokens and cost
    root_prompt_tokens: int
    root_cached_tokens: int | None
    """``None``: the server did not report cached prompt tokens (unknown, not 0)."""
    root_completion_tokens: int
    sub_prompt_tokens: int
    sub_cached_tokens: int | None
    sub_completion_tokens: int
    sub_token_share: float | None
    """Sub (prompt + completion) / all tokens; ``None`` with no tokens."""
    sub_input_share: float | None
    sub_output_share: float | None
    root_cost_usd: float | None
    sub_cost_usd: float | None
    cost_usd: float | None
    cost_is_upper_bound: bool = False
    """True when cached prompt tokens are unknown for root or sub: every prompt token was
    priced as uncached, so the cost is an upper bound."""
    price_table: str
    wall_time_s: float


class RunMetrics(NamedTuple):
    """Everything :func:`load_run_metrics` read from one run."""

    manifest: RunManifest
    grader: str | None
    rows: list[EpisodeMetrics]
    tasks: dict[str, Task]
    """Task per room hash (rooms with a usable ``task.json``, see
    :func:`~rlmdistill.traces.runs.load_room_tasks`)."""


def word_tokens(text: str) -> list[str]:
    """NFKC-normalised, casefolded ``\\w+`` tokens of ``text``."""
    if text.isascii():  # NFKC leaves ASCII as it is, and ASCII casefolds as lower()
        return _WORD.findall(text.lower())
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def tokens_are_grader_words(text: str) -> bool:
    """Whether :func:`word_tokens` of ``text`` equal the grader's
    :func:`~rlmdistill.rooms.text.words` of it, so one can stand for the other: for ASCII
    without ``_`` or ``'`` both are the maximal runs of ``[a-z0-9]`` of the lowered text
    (tested on random texts in tests/test_sub_credit.py)."""
    return text.isascii() and "_" not in text and "'" not in text


def answer_reaches_memo(
    answer_words: list[str], memo_ngrams: set[tuple[str, ...]], memo_joined: str, n: int
) -> bool:
    """Whether a sub-call answer (as :func:`word_tokens`) reaches the memo.

    ``memo_ngrams`` holds the memo's ``n``-word runs; ``memo_joined`` is the memo's words
    joined by single spaces with a space at both ends (for answers shorter than ``n``).
    """
    if len(answer_words) >= n:
        if f" {' '.join(answer_words)} " in memo_joined:  # the whole answer is in the memo,
            return True  # so each of its n-word runs is (the same result, found faster)
        return any(
            tuple(answer_words[i : i + n]) in memo_ngrams for i in range(len(answer_words) - n + 1)
        )
    return f" {' '.join(answer_words)} " in memo_joined


def _first_memo_turn(turns: list[Turn]) -> int | None:
    for t in turns:
        if t.final_answer_source is not None:
            return t.turn
        if any(MEMO_WRITE.search(code) for code in t.codes):
            return t.turn
    return None


def _light(traj: Trajectory) -> tuple[list[Turn], list[Call]]:
    """The validated trajectory reduced to what the trajectory metrics use."""
    turns = [
        Turn(t.turn, t.final_answer_source, [b.code for b in t.blocks] or [t.completion])
        for t in traj.turns
    ]
    calls = [
        Call(
            episode_id=c.episode_id,
            batch_id=c.batch_id,
            call_id=c.call_id,
            depth=c.depth,
            subagent=c.subagent,
            error=c.error,
            response=c.response,
            sources=c.sources,  # type: ignore[arg-type]  # only its truthiness is read
        )
        for c in traj.sub_calls
    ]
    return turns, calls


def memo_first_turn(traj: Trajectory) -> int | None:
    """First root turn writing a memo variable (:data:`MEMO_WRITE`) or giving the final answer."""
    return _first_memo_turn(_light(traj)[0])


_RECORD_TYPES = {"episode_start", "turn", "subagent_turn", "sub_call", "episode_end"}
_FINAL_SOURCES = {None, "text", "final_call", "final_var"}


def _opt_str(v: object) -> bool:
    return v is None or type(v) is str


def _light_records(
    records: list[dict[str, Any]], episode_id: str
) -> tuple[list[Turn], list[Call]] | None:
    """The trajectory metrics' fields read from raw records (``read_jsonl`` dicts), without
    validating whole records with pydantic (that was most of the report's time over 10,000
    trajectories). Every field used is type-checked; ``None`` when anything is not as a
    record of this schema writes it (another episode, no leading ``episode_start``, a newer
    ``schema_version``, a missing or mistyped field), so the caller falls back to the
    validated reader, which accepts what pydantic accepts and names the file and record of
    anything it does not."""
    if not records or records[0].get("record_type") != "episode_start":
        return None
    turns: list[Turn] = []
    calls: list[Call] = []
    starts = 0
    try:
        for rec in records:
            version = rec.get("schema_version", 1)
            kind = rec.get("record_type")
            if (
                rec.get("episode_id") != episode_id
                or type(version) is not int
                or version > SCHEMA_VERSION
                or kind not in _RECORD_TYPES
            ):
                return None
            if kind == "sub_call":
                depth, batch = rec.get("depth", 1), rec["batch_id"]
                error, response = rec.get("error"), rec.get("response")
                sources = rec.get("sources", [])
                call_id, subagent = rec["call_id"], rec.get("subagent", False)
                if (
                    type(depth) is not int
                    or type(batch) is not int
                    or type(call_id) is not int
                    or type(subagent) is not bool
                    or not _opt_str(error)
                    or not _opt_str(response)
                    or type(sources) is not list
                    or not all(type(s) is dict for s in sources)
                ):
                    return None
                calls.append(
                    Call(
                        episode_id=episode_id,
                        batch_id=batch,
                        call_id=call_id,
                        depth=depth,
                        subagent=subagent,
                        error=error,
                        response=response,
                        sources=sources,
                    )
                )
            elif kind == "turn":
                turn, final = rec["turn"], rec.get("final_answer_source")
                completion, blocks = rec["completion"], rec.get("blocks", [])
                codes = [b["code"] for b in blocks]
                if (
                    type(turn) is not int
                    or final not in _FINAL_SOURCES
                    or type(completion) is not str
                    or not all(type(c) is str for c in codes)
                ):
                    return None
                turns.append(Turn(turn, final, codes or [completion]))
            elif kind == "episode_start":
                starts += 1
                if starts > 1:
                    return None
    except (KeyError, TypeError):
        return None
    return turns, calls


def _read_trajectory_fields(run_dir: Path, episode_id: str) -> tuple[list[Turn], list[Call]]:
    """Root turns and sub-calls of an episode's trajectory, read fast when the file is as
    this schema writes it (:func:`~rlmdistill.analysis.trajectory_fields.light_fields`; then
    :func:`_light_records` on a file only that decoder refused, e.g. one with a torn line),
    else through the validated :func:`~rlmdistill.traces.runs.load_trajectory` (same
    errors: ``FileNotFoundError`` naming the episode, ``TraceFileError`` naming the file and
    record)."""
    path = trajectory_path(run_dir, episode_id)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no trajectory for episode {episode_id}") from None
    fast = light_fields(raw, episode_id)
    if fast is not None:
        return fast
    records = read_clean_jsonl(path)
    light = _light_records(read_jsonl(path).records if records is None else records, episode_id)
    return light if light is not None else _light(load_trajectory(run_dir, episode_id))


READ_WORKERS_ENV = "RLMDISTILL_READ_WORKERS"
"""Environment variable: processes that read a run's trajectory files (``0``: read them in
the calling process; default: one per CPU this process may run on, at most 8)."""
_PARALLEL_MIN = 400
"""Fewer trajectories to read than this are read in the calling process (a fork and the
hand-back of results cost more than they save)."""

_CHUNK_MIN = 50
"""Fewest trajectories a worker is handed at a time (each worker gets about four chunks, so
a slow one holds up little)."""

_Item = tuple[str, "str | None", int, str]
"""What the trajectory fields of one episode need: ``(episode_id, memo, n_turns,
room_hash)``."""


class _Pass(NamedTuple):
    """What the sub-call credit reads of a verdict: a PASS of criterion ``criterion_id``."""

    criterion_id: str
    verdict: str = "PASS"


class _RoomRef(NamedTuple):
    """What the sub-call metrics need of an episode's room: its folder (``None``: not found)
    and its rubric (``None``: no usable ``task.json``)."""

    room_hash: str
    folder: str | None
    task: Task | None

    def digest(self) -> str:
        """What of the room the trajectory fields depend on, for the trajectory cache's key:
        the folder the room's documents are read from and each criterion's documents."""
        criteria = (
            []
            if self.task is None
            else [[c.id, list(criterion_documents(c))] for c in self.task.criteria]
        )
        text = json.dumps([self.room_hash, self.folder, criteria], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


_INDEXES: dict[tuple[str, str], CoverageIndex | None] = {}
"""Coverage index per ``(room hash, folder)``, loaded once per process (``None``: the room
could not be loaded, or its content hash is not the one the episodes ran on)."""


def _room_index(ref: _RoomRef) -> CoverageIndex | None:
    """The coverage index of ``ref``'s room from the room cache
    (:func:`rlmdistill.paths.room_cache`, built there on a miss, as ``collect`` does);
    ``None`` when the folder is missing, does not load, or holds other content."""
    if ref.folder is None:
        return None
    key = (ref.room_hash, ref.folder)
    if key not in _INDEXES:
        index = None
        try:
            room = DataRoom.load(ref.folder)
            if room.room_hash == ref.room_hash:
                index = CoverageIndex.load_or_build(room, room_cache())
        except (RoomError, TaskError, OSError):
            index = None
        _INDEXES[key] = index
    return _INDEXES[key]


_MOVED: dict[tuple[str, str], str] = {}
"""Where a room recorded at a folder that no longer exists was found, per ``(recorded
folder, room hash)`` (the runs of one moved workspace name the same folders)."""


def _room_folder(path: str, room_hash: str, run_dir: Path) -> str | None:
    """The folder of a room recorded at ``path``: itself, or where a moved workspace has it
    (:func:`~rlmdistill.rooms.room.locate_moved_room`, remembered while the folder found is
    there); ``None`` when not found."""
    if Path(path).is_dir():
        return path
    found = _MOVED.get((path, room_hash))
    if found is not None and Path(found).is_dir():
        return found
    moved = locate_moved_room(path, room_hash, run_dir)
    if moved is None:
        return None
    _MOVED[(path, room_hash)] = str(moved)
    return str(moved)


def _fields_chunk(
    run_dir: str, items: list[_Item], reach_ngram: int, rooms: dict[str, _RoomRef]
) -> tuple[list[dict[str, object]], bool]:
    """The trajectory fields of ``items`` in order, computed in a worker process: ``(fields,
    failed)``; ``failed`` means ``items[len(fields)]`` raised, and the caller computes it (and
    raises its error) itself."""
    out: list[dict[str, object]] = []
    for episode_id, memo, n_turns, room_hash in items:
        try:
            turns, calls = _read_trajectory_fields(Path(run_dir), episode_id)
            out.append(
                _trajectory_fields(turns, calls, memo, n_turns, reach_ngram, rooms.get(room_hash))
            )
        except Exception:  # the caller redoes this one in its own process and raises it
            return out, True
    return out, False


def _read_workers(n_items: int) -> int:
    """Worker processes for reading ``n_items`` trajectories: 0 (in-process) below
    :data:`_PARALLEL_MIN`, with one CPU, off Linux (fork is the only start method that costs
    no re-import there), or when the process runs other Python threads (a dashboard:
    forking a threaded process can copy a held lock); else ``$RLMDISTILL_READ_WORKERS``, or
    one per usable CPU (at most 8) when there are two or more."""
    env = os.environ.get(READ_WORKERS_ENV, "").strip()
    if env:
        try:
            wanted = int(env)
        except ValueError:
            raise ValueError(f"{READ_WORKERS_ENV}={env!r}: expected a whole number") from None
        if wanted < 0:
            raise ValueError(f"{READ_WORKERS_ENV}={env!r}: expected 0 or more")
    else:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        wanted = min(8, cpus) if cpus > 1 else 0
    if (
        wanted == 0
        or n_items < _PARALLEL_MIN
        or sys.platform != "linux"
        or threading.active_count() > 1
    ):
        return 0
    return wanted


class _TrajectoryReader:
    """The trajectory fields of a run's episodes, in order, read by worker processes (given
    their chunks when the reader is made, so they read while the caller builds the rows) or,
    with no workers, in the calling process when asked for. Either way :meth:`get` returns what
    :func:`_read_trajectory_fields` + :func:`_trajectory_fields` give in the calling
    process, and raises the same errors at the same episode: a worker stops at an episode
    that fails, and that episode is computed again here. A pool that breaks (a worker
    killed) costs only the speed-up."""

    def __init__(
        self,
        run_dir: Path,
        items: list[_Item],
        reach_ngram: int,
        rooms: dict[str, _RoomRef],
        pool: ProcessPoolExecutor | None,
        chunk: int,
    ) -> None:
        """``pool``: the workers (shared with the other runs' readers; their owner,
        :func:`load_runs_metrics`, shuts them down), which get the items in chunks of
        ``chunk``, queued behind those submitted before; ``None``: read here."""
        self.run_dir, self.items, self.reach_ngram = run_dir, items, reach_ngram
        self.rooms = rooms
        self._pool = pool
        self._chunks: list[Future[tuple[list[dict[str, object]], bool]]] = []
        self._size = chunk if pool is not None else len(items) or 1
        if pool is not None:
            for i in range(0, len(items), self._size):
                part = items[i : i + self._size]
                part_rooms = {it[3]: rooms[it[3]] for it in part if it[3] in rooms}
                self._chunks.append(
                    pool.submit(_fields_chunk, str(run_dir), part, reach_ngram, part_rooms)
                )
        self._done: dict[int, tuple[list[dict[str, object]], bool]] = {}

    def get(self, j: int) -> dict[str, object]:
        """The fields of ``items[j]``."""
        c, k = divmod(j, self._size)
        if self._pool is not None:
            if c not in self._done:
                try:
                    self._done[c] = self._chunks[c].result()
                except Exception:  # a broken pool: this chunk is computed here
                    self._done[c] = ([], True)
            fields, _ = self._done[c]
            if k < len(fields):
                return fields[k]
        episode_id, memo, n_turns, room_hash = self.items[j]
        turns, calls = _read_trajectory_fields(self.run_dir, episode_id)
        return _trajectory_fields(
            turns, calls, memo, n_turns, self.reach_ngram, self.rooms.get(room_hash)
        )

    def close(self) -> None:
        """Cancel this reader's chunks not started (the pool is its owner's to stop)."""
        for f in self._chunks:
            f.cancel()
        self._pool = None


def _chunk_size(n_items: int, workers: int) -> int:
    """Items a worker is handed at a time: about four chunks per worker, at least
    :data:`_CHUNK_MIN`."""
    return max(_CHUNK_MIN, -(-n_items // (4 * workers)))


def _verdict_rows(run_dir: Path, grader: str) -> dict[str, list[VerdictRow]]:
    """One grader's verdicts of a run grouped by episode id (file order kept): the columnar,
    checked :func:`~rlmdistill.traces.columns.verdict_rows` (validated fallback; an invalid
    record raises ``TraceFileError`` naming the file and line)."""
    return verdict_rows(run_dir, grader)


@functools.lru_cache(maxsize=256)
def _model_id(spec: str) -> str:
    """Canonical model id of a spec (what price patterns match); the spec itself if unparsable.
    Cached: every episode of a run names the same few specs."""
    try:
        return parse_spec(spec).model_id
    except ValueError:
        return spec


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole > 0 else None


def _sub_call_fields(
    calls: list[Call], tokens: list[list[str]], memo: str | None, room: _RoomRef | None
) -> dict[str, object]:
    """The sub-call metrics of the module docstring, but for ``sub_supported_criteria``: per
    sub-call, the criteria its credit would support if every criterion of the rubric passed
    (the credit's ``supported_criteria`` under all-PASS verdicts). A criterion's support does
    not depend on the other criteria's verdicts, so the credit under the grader's verdicts
    supports exactly those of them that passed (:func:`_supports_pass_share`), and these
    fields do not depend on the verdicts (the trajectory cache keeps them)."""
    answers = [c.response or "" for c, t in zip(calls, tokens, strict=True) if t]
    task = room.task if room is not None else None
    every_pass = None if task is None else [_Pass(c.id) for c in task.criteria]
    # the credit reads a record's call_id, depth, subagent, response and error, and a
    # verdict's criterion_id and verdict: the light tuples carry them, at no cost (pydantic
    # models, even made by model_construct, took 2/3 of the time of these fields)
    records = cast("list[SubCallRecord]", calls)
    verdicts = cast("list[Verdict] | None", every_pass)
    # the answer's tokens, cut above, stand for the grader's words where they are the same
    same = [
        t if t and (r := c.response) and tokens_are_grader_words(r) else None
        for c, t in zip(calls, tokens, strict=True)
    ]
    credits = credit_parts(records, memo, verdicts, task, same) if calls else []
    index = _room_index(room) if room is not None and answers else None
    return {
        "n_sub_answers": len(answers),
        "sub_answer_chars": sum(map(len, answers)) / len(answers) if answers else None,
        "sub_answer_quote_share": (
            sum(index.shares_text(a) for a in answers) / len(answers) if index is not None else None
        ),
        "sub_used_share": (
            sum(c.used_in_memo for c in credits) / len(credits) if credits else None
        ),
        "sub_supported_criteria": [list(c.supported_criteria) for c in credits],
    }


def _supports_pass_share(supported: list[list[str]], row: EpisodeMetrics) -> float | None:
    """Share of an episode's sub-calls whose credit has ``supports_pass`` under the grader's
    verdicts of its current memo (``row.criteria``): a call supports a pass when one of the
    criteria it supports under all-PASS verdicts (:func:`_sub_call_fields`) passed. ``None``
    without sub-calls or when the memo is not graded (no pass rate)."""
    if row.pass_rate is None or not supported:
        return None
    passed = {cid for cid, label in row.criteria.items() if label == "PASS"}
    return sum(not passed.isdisjoint(s) for s in supported) / len(supported)


def _trajectory_fields(
    turns: list[Turn],
    calls: list[Call],
    memo: str | None,
    n_turns: int,
    reach_ngram: int,
    room: _RoomRef | None = None,
) -> dict[str, object]:
    root_calls = [c for c in calls if c.depth == 1]
    batches: dict[int, int] = {}
    for c in root_calls:
        batches[c.batch_id] = batches.get(c.batch_id, 0) + 1
    sizes = [batches[b] for b in sorted(batches)]
    memo_words = word_tokens(memo or "")
    ngrams = {
        tuple(memo_words[i : i + reach_ngram]) for i in range(len(memo_words) - reach_ngram + 1)
    }
    joined = f" {' '.join(memo_words)} "
    tokens = [word_tokens(c.response or "") if c.error is None else [] for c in calls]
    answers = [t for c, t in zip(calls, tokens, strict=True) if c.depth == 1 and t]
    reached = sum(answer_reaches_memo(a, ngrams, joined, reach_ngram) for a in answers)
    first = _first_memo_turn(turns)
    with_text = sum(1 for c in root_calls if c.has_sources)
    return {
        "root_batch_sizes": sizes,
        "mean_batch_size": sum(sizes) / len(sizes) if sizes else None,
        "max_batch_size": max(sizes) if sizes else None,
        "n_sub_calls_with_text": with_text,
        "share_sub_calls_with_text": _share(with_text, len(root_calls)),
        "n_answers": len(answers),
        "answer_reach": reached / len(answers) if answers else None,
        "memo_first_turn": first,
        "memo_first_turn_share": (first + 1) / n_turns if first is not None and n_turns else None,
        **_sub_call_fields(calls, tokens, memo, room),
    }


_NO_USAGE = Usage()
"""No sub-call usage (compared with, not built, per episode)."""


def _episode_row(
    e: EpisodeSummary,
    grader: str | None,
    has_verdicts: bool,
    score: EpisodeScore | None,
    task: Task | None,
    task_problem: RoomTaskProblem | None,
    prices: PriceTable,
    give_up_read_share: float,
) -> EpisodeMetrics:
    scores: dict[str, object] = {"pass_rate": None}
    note: str | None = None
    if grader is None:
        note = "run has no verdicts"
    elif task is None:
        note = task_problem.message if task_problem else f"no task for room {e.room.room_hash}"
    elif not has_verdicts:
        note = f"not graded by {grader}"
    elif score is None:
        note = f"{grader} verdicts are for another memo (memo_sha256 differs)"
    else:
        pr = score.rates
        scores = {
            "pass_rate": pr.pass_rate,
            "graded_pass_rate": pr.graded_pass_rate,
            "weighted_pass_rate": pr.weighted_pass_rate,
            "n_criteria": pr.n_criteria,
            "n_pass": pr.n_pass,
            "pass_rate_by_type": score.pass_rate_by_type(),
            "criteria": dict(zip(score.criterion_ids, score.labels, strict=True)),
            "criterion_types": dict(zip(score.criterion_ids, score.types, strict=True)),
        }
    cov = e.coverage
    docs_read = None if cov is None else sum(1 for v in cov.per_document.values() if v > 0)
    read_share = (
        None if docs_read is None or e.room.n_documents == 0 else docs_read / e.room.n_documents
    )
    has_memo = bool(e.memo and e.memo.strip())
    if not has_memo:
        give_up: bool | None = True
    elif read_share is None:
        give_up = None
    else:
        give_up = read_share < give_up_read_share
    t = e.tokens
    root_cost = prices.cost_usd(_model_id(e.root_model), t.root)
    sub_cost = prices.cost_usd(_model_id(e.sub_model), t.sub) if t.sub != _NO_USAGE else 0.0
    root_all = t.root.prompt_tokens + t.root.completion_tokens
    sub_all = t.sub.prompt_tokens + t.sub.completion_tokens
    return EpisodeMetrics(
        run_id=e.run_id,
        episode_id=e.episode_id,
        room_id=e.room.room_id,
        room_hash=e.room.room_hash,
        task_id=e.task_id,
        sample_index=e.sample_index,
        root_model=e.root_model,
        sub_model=e.sub_model,
        depth=e.depth,
        status=e.status,
        grader=grader,
        score_note=note,
        coverage=None if cov is None else cov.overall,
        coverage_per_folder={} if cov is None else dict(cov.per_folder),
        docs_read=docs_read,
        docs_read_share=read_share,
        room_documents=e.room.n_documents,
        room_chars=e.room.n_chars,
        room_tokens=e.room.n_tokens,
        n_turns=e.n_turns,
        n_sub_calls=e.n_sub_calls,
        n_sub_call_errors=e.n_sub_call_errors,
        n_sub_batches=e.n_sub_batches,
        has_memo=has_memo,
        memo_chars=e.memo_chars if has_memo else 0,
        memo_words=len(word_tokens(e.memo or "")),
        early_give_up=give_up,
        read_no_memo=read_no_memo(None if cov is None else cov.overall, has_memo),
        root_prompt_tokens=t.root.prompt_tokens,
        root_cached_tokens=t.root.cached_tokens,
        root_completion_tokens=t.root.completion_tokens,
        sub_prompt_tokens=t.sub.prompt_tokens,
        sub_cached_tokens=t.sub.cached_tokens,
        sub_completion_tokens=t.sub.completion_tokens,
        sub_token_share=_share(sub_all, root_all + sub_all),
        sub_input_share=_share(t.sub.prompt_tokens, t.root.prompt_tokens + t.sub.prompt_tokens),
        sub_output_share=_share(
            t.sub.completion_tokens, t.root.completion_tokens + t.sub.completion_tokens
        ),
        root_cost_usd=root_cost,
        sub_cost_usd=sub_cost,
        cost_usd=None if root_cost is None or sub_cost is None else root_cost + sub_cost,
        cost_is_upper_bound=t.root.cached_tokens is None or t.sub.cached_tokens is None,
        price_table=prices.version,
        wall_time_s=e.wall_time_s,
        **scores,  # type: ignore[arg-type]
    )


class _CachedRows(BaseModel):
    """The body of a row-cache file (:mod:`rlmdistill.analysis.row_cache`)."""

    model_config = ConfigDict(extra="forbid")

    rows: list[EpisodeMetrics]
    tasks: dict[str, Task]


def _row_settings(
    grader: str | None,
    prices: PriceTable,
    trajectories: bool,
    give_up_read_share: float,
    reach_ngram: int,
) -> dict[str, object]:
    """Every setting that changes a row, for the row cache's key (with the row schema, so a
    field added or changed is a miss even where :data:`~rlmdistill.analysis.row_cache.
    CACHE_VERSION` was not raised)."""
    return {
        "grader": grader,
        "prices": prices.model_dump(mode="json"),
        "trajectories": trajectories,
        "give_up_read_share": give_up_read_share,
        "reach_ngram": reach_ngram,
        "schema": _rows_schema(),
    }


@functools.cache
def _rows_schema() -> dict[str, Any]:
    return _CachedRows.model_json_schema()


def _finite(value: object) -> bool:
    """Whether every float in a row's field value is finite (pydantic writes NaN and
    infinities to JSON as ``null``, which would not read back equal)."""
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is dict:
        return all(_finite(v) for v in value.values())
    if type(value) is list:
        return all(_finite(v) for v in value)
    return True


_NO_FLOAT = (str, int, bool, type(None))


def _holds_float(tp: object) -> bool:
    """Whether a value of annotation ``tp`` may hold a float (``True`` when unsure)."""
    if tp in _NO_FLOAT:
        return False
    args = typing.get_args(tp)
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) in (list, dict, tuple):
        return any(_holds_float(a) for a in args if a is not Ellipsis)
    return True


@functools.cache
def _float_fields() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """:class:`EpisodeMetrics` fields by the floats they can hold, from their annotations:
    ``(scalar, dict_values, other)`` - a float or ``None``; a ``dict[str, float]``; any
    other type that may hold a float somewhere (scanned by :func:`_finite`). Fields that
    hold no float (strings, ints, bools, ``None``, and lists and dicts of them) are left
    out."""
    scalar: list[str] = []
    dicts: list[str] = []
    other: list[str] = []
    for name, info in EpisodeMetrics.model_fields.items():
        ann = info.annotation
        if not _holds_float(ann):
            continue
        if ann is float or ann == float | None:
            scalar.append(name)
        elif ann == dict[str, float]:
            dicts.append(name)
        else:
            other.append(name)
    return tuple(scalar), tuple(dicts), tuple(other)


def _all_finite(rows: list[EpisodeMetrics]) -> bool:
    """Whether every float of ``rows`` is finite: :func:`_finite` of every field of every
    row, in one sum. A sum of floats is finite only when each of them is (an infinity or a
    NaN makes any sum infinite or NaN), so a finite sum proves it; a sum that is not finite
    (a NaN, an infinity, or finite values overflowing) is decided by :func:`_finite`."""
    scalar, dicts, other = _float_fields()
    get = operator.attrgetter(*scalar) if len(scalar) > 1 else None
    values: list[float] = []
    for row in rows:
        if get is not None:
            values += [v for v in get(row) if v is not None]
        elif scalar:
            v = getattr(row, scalar[0])
            if v is not None:
                values.append(v)
        for name in dicts:
            values += getattr(row, name).values()
    try:
        exact = math.isfinite(sum(values))
    except OverflowError:  # an int too large for a float (not from these fields)
        exact = False
    if not exact:
        return all(_finite(v) for row in rows for v in row.__dict__.values())
    return all(_finite(getattr(row, name)) for row in rows for name in other)


def _round_trips(rows: list[EpisodeMetrics], tasks: dict[str, Task]) -> bool:
    """Whether the rows and tasks read back from their JSON equal to themselves: every float
    of the rows is finite (:func:`_all_finite`; the rest of a row is ints, bools, strings,
    ``None``, dicts and lists, which pydantic's JSON round-trips exactly; a 10,000-row
    read-back check cost ~1 s on a busy 2-core machine, a scan of each field ~0.4 s, the
    one sum ~0.02 s), and the tasks (few) are read back and compared."""
    if not _all_finite(rows):
        return False
    try:
        back = {k: Task.model_validate_json(t.model_dump_json()) for k, t in tasks.items()}
    except ValueError:
        return False
    return back == tasks


def _cached_rows(body: bytes) -> _CachedRows | None:
    try:
        return _CachedRows.model_validate_json(body)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return None


def load_run_metrics(
    run_dir: Path,
    grader: str | None = None,
    *,
    prices: PriceTable = DEFAULT_PRICES,
    trajectories: bool = True,
    give_up_read_share: float = GIVE_UP_READ_SHARE,
    reach_ngram: int = REACH_NGRAM,
    trajectory_cache: Path | None = None,
    row_cache: Path | bool = True,
) -> RunMetrics:
    """Metrics of every finished episode of ``run_dir`` plus what was read to compute them.

    Args:
        grader: verdict file to score with (``None``: the run's only grader, see
            :func:`rlmdistill.traces.scores.resolve_grader`).
        prices: price table for cost (default: the packaged example table).
        trajectories: also compute the trajectory metrics (reads one trajectory file per
            episode, in worker processes when there are many: :data:`READ_WORKERS_ENV`;
            the rows and errors are those of a read in this process); ``False`` leaves
            them ``None``.
        give_up_read_share: threshold of the early give-up rule (module docstring).
        reach_ngram: words an answer must share with the memo (module docstring).
        trajectory_cache: a cache file of the trajectory metrics
            (:mod:`rlmdistill.analysis.trajectory_cache`, e.g. in the report's folder): an
            episode whose trajectory, memo and turn count are unchanged is not read again.
            ``None``: every trajectory is read.
        row_cache: the cache of whole rows (:mod:`rlmdistill.analysis.row_cache`): ``True``
            uses :func:`~rlmdistill.analysis.row_cache.metrics_cache_dir` (the user's cache;
            ``RLMDISTILL_METRICS_CACHE=off`` turns it off), a path uses that folder, ``False``
            computes every row. While ``run.json``, ``episodes.jsonl``, the verdict file, the
            rooms' ``task.json`` files and (with trajectories) the trajectory files keep their
            size and modification time, the rows and tasks come from the cache, equal to
            computed ones; nothing is written into the run folder.

    Raises:
        NotARunError: no ``run.json``.
        ValueError: unknown/ambiguous grader; an invalid ``task.json`` (a
            :class:`~rlmdistill.traces.runs.RoomTaskError` naming the file). A room whose
            ``task.json`` is not found, or is another task than its episodes ran, is no error:
            its episodes have no pass rate and say why in ``score_note``. A
            ``$RLMDISTILL_READ_WORKERS`` that is not a whole number >= 0.
        FileNotFoundError: ``trajectories=True`` and an episode's trajectory file is missing
            (the message names the episode).
        TraceFileError: a run file does not validate (names the file and line).
    """
    return load_runs_metrics(
        [run_dir],
        grader,
        prices=prices,
        trajectories=trajectories,
        give_up_read_share=give_up_read_share,
        reach_ngram=reach_ngram,
        trajectory_caches=[trajectory_cache],
        row_cache=row_cache,
    )[0]


def load_runs_metrics(
    run_dirs: Sequence[Path],
    grader: str | None = None,
    *,
    prices: PriceTable = DEFAULT_PRICES,
    trajectories: bool = True,
    give_up_read_share: float = GIVE_UP_READ_SHARE,
    reach_ngram: int = REACH_NGRAM,
    trajectory_caches: Sequence[Path | None] | None = None,
    row_cache: Path | bool = True,
    cache_writes: list[Callable[[], None]] | None = None,
) -> list[RunMetrics]:
    """:func:`load_run_metrics` of each of ``run_dirs``, in order, with the trajectories of
    all of them read by one set of worker processes: the workers read the later runs'
    files while this process builds the earlier runs' rows (a report compares several
    runs). The rows, and the errors, are those of :func:`load_run_metrics` run by run; a
    run whose summaries or rubric cannot be read raises before any run's rows are built.

    Args:
        trajectory_caches: one trajectory cache file (or ``None``) per run; ``None``: none.
        cache_writes: ``None``: the trajectory and row caches are written before this
            returns. A list: the caches of the last run (those of the others are written
            while the workers read the later runs) are written by a function appended
            there instead, for the caller to run (or have a forked process run) when it
            likes: the report runs it in its figure drawer, off its critical path. It
            writes atomically; not running it only loses the speed-up of the next read.
        The others: as :func:`load_run_metrics`.

    Raises:
        ValueError: ``trajectory_caches`` not one per run, bad settings; and what
            :func:`load_run_metrics` raises.
    """
    run_dirs = [Path(d) for d in run_dirs]
    caches = list(trajectory_caches) if trajectory_caches is not None else [None] * len(run_dirs)
    if len(caches) != len(run_dirs):
        raise ValueError(f"{len(caches)} trajectory caches for {len(run_dirs)} runs")
    if not 0.0 <= give_up_read_share <= 1.0:
        raise ValueError(f"give_up_read_share must be in [0, 1], got {give_up_read_share}")
    if reach_ngram < 1:
        raise ValueError(f"reach_ngram must be >= 1, got {reach_ngram}")
    settings = (prices, trajectories, give_up_read_share, reach_ngram)
    with gc_paused():  # 10,000 summaries and rows (the collector cost ~1/3 of this read)
        reads = [
            _RunRead(d, grader, *settings, cache, row_cache)
            for d, cache in zip(run_dirs, caches, strict=True)
        ]
        n_items = sum(len(r.to_read) for r in reads)
        workers = _read_workers(n_items)
        pool = (
            ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
            if workers
            else None
        )
        chunk = _chunk_size(n_items, workers) if workers else 0
        readers: list[_TrajectoryReader] = []
        try:
            for r in reads:  # every run's chunks queued now, in run order
                readers.append(
                    _TrajectoryReader(r.run_dir, r.to_read, reach_ngram, r.rooms, pool, chunk)
                )
            # a run's caches are written while the workers still read the later runs; the
            # last run's, after every read, go to the caller when it asked for them
            last = len(reads) - 1
            return [
                r.finish(reader, cache_writes if i == last else None)
                for i, (r, reader) in enumerate(zip(reads, readers, strict=True))
            ]
        finally:
            for reader in readers:
                reader.close()
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


class _RunRead:
    """One run's metrics in two steps: made, it reads what tells which trajectories to read
    (manifest, summaries, tasks, row cache; :attr:`to_read`); :meth:`finish` reads the
    verdicts and builds the rows, taking the trajectory fields from a reader of
    :attr:`to_read` (workers read them meanwhile)."""

    def __init__(
        self,
        run_dir: Path,
        grader: str | None,
        prices: PriceTable,
        trajectories: bool,
        give_up_read_share: float,
        reach_ngram: int,
        trajectory_cache: Path | None,
        row_cache: Path | bool,
    ) -> None:
        self.run_dir, self.prices, self.trajectories = run_dir, prices, trajectories
        self.give_up_read_share = give_up_read_share
        self.manifest = load_manifest(run_dir)
        grader = resolve_grader({str(run_dir): grader_ids(run_dir)}, grader, hint="grader=")
        self.grader = grader
        self.to_read: list[_Item] = []
        self.rooms: dict[str, _RoomRef] = {}
        self.cached: RunMetrics | None = None
        cache_dir = metrics_cache_dir() if row_cache is True else row_cache or None
        self.rows_cache = None
        if cache_dir is not None:
            self.rows_cache = RowCache(
                Path(cache_dir),
                run_dir,
                _row_settings(grader, prices, trajectories, give_up_read_share, reach_ngram),
            )
            body = self.rows_cache.load(run_dir / layout.TRAJECTORIES if trajectories else None)
            cached = None if body is None else _cached_rows(body)
            if cached is not None:
                self.cached = RunMetrics(
                    manifest=self.manifest, grader=grader, rows=cached.rows, tasks=cached.tasks
                )
                return
        # the inputs' stats are taken before they are read (a file changed while being read
        # then no longer matches its stored key)
        inputs: dict[str, Stat] = {
            str(run_dir / layout.RUN_MANIFEST): stat_key(run_dir / layout.RUN_MANIFEST),
            str(run_dir / layout.EPISODES): stat_key(run_dir / layout.EPISODES),
        }
        if grader is not None:
            inputs[str(verdicts_path(run_dir, grader))] = stat_key(verdicts_path(run_dir, grader))
        self.summaries = summaries = load_summaries(run_dir)
        self.cache = (
            TrajectoryCache(trajectory_cache, run_dir, reach_ngram)
            if trajectories and trajectory_cache is not None
            else None
        )
        # every room's task.json as load_room_tasks looks for it first (manifest, then rooms
        # only episodes name); a room whose file is elsewhere (a moved workspace) is found by
        # a search no stat covers, so such a run's rows are not cached. The tasks are read
        # before the trajectories: the sub-call credit needs each criterion's documents
        room_paths = {r.room_hash: r.path for r in self.manifest.rooms}
        for e in summaries:
            room_paths.setdefault(e.room.room_hash, e.room.path)
        task_stats = {
            str(Path(p) / layout.TASK): stat_key(Path(p) / layout.TASK) for p in room_paths.values()
        }
        self.cacheable = all(s is not None for s in task_stats.values())
        inputs.update(task_stats)
        self.inputs = inputs
        room_tasks = load_room_tasks(
            self.manifest, summaries, on_error="raise_invalid", run_dir=run_dir
        )
        self.tasks = room_tasks.tasks
        self.problems = {p.room_hash: p for p in room_tasks.problems}
        self.rooms = (
            {
                h: _RoomRef(h, _room_folder(p, h, run_dir), self.tasks.get(h))
                for h, p in room_paths.items()
            }
            if trajectories
            else {}
        )
        digests = {h: r.digest() for h, r in self.rooms.items()}
        # the trajectories to read are known from the summaries and tasks: workers start
        # reading them as soon as the caller has every run's list
        self.traj_stats: list[Stat] = []
        self.keys: list[Any] = []
        self.cached_fields: list[dict[str, object] | None] = []
        if trajectories:
            for e in summaries:
                path = trajectory_path(run_dir, e.episode_id)
                self.traj_stats.append(stat_key(path))
                key = fields = None
                if self.cache is not None:
                    key = self.cache.key(path, e.memo_sha256, e.n_turns, digests[e.room.room_hash])
                    fields = self.cache.get(e.episode_id, key)
                self.keys.append(key)
                self.cached_fields.append(fields)
                if fields is None:
                    self.to_read.append((e.episode_id, e.memo, e.n_turns, e.room.room_hash))

    def finish(
        self, reader: _TrajectoryReader, cache_writes: list[Callable[[], None]] | None = None
    ) -> RunMetrics:
        """The run's metrics, with the trajectory fields of :attr:`to_read` from ``reader``
        (in order). The caches are written before it returns, or, with ``cache_writes``,
        by the function it appends there (see :func:`load_runs_metrics`)."""
        if self.cached is not None:
            return self.cached
        run_dir, grader, summaries, tasks = self.run_dir, self.grader, self.summaries, self.tasks
        verdicts = _verdict_rows(run_dir, grader) if grader is not None else {}
        graded = set(verdicts)
        scores = score_episodes(summaries, verdicts, tasks)
        rows = []
        read: list[tuple[str, Any, dict[str, object]]] = []
        n_read = 0
        for i, e in enumerate(summaries):
            row = _episode_row(
                e,
                grader,
                e.episode_id in graded,
                scores.get(e.episode_id),
                tasks.get(e.room.room_hash),
                self.problems.get(e.room.room_hash),
                self.prices,
                self.give_up_read_share,
            )
            if self.trajectories:
                fields = self.cached_fields[i]
                if fields is None:
                    fields = reader.get(n_read)
                    n_read += 1
                    read.append((e.episode_id, self.keys[i], fields))
                fields = dict(fields)
                supported = fields.pop("sub_supported_criteria")
                fields["sub_supports_pass_share"] = _supports_pass_share(supported, row)  # type: ignore[arg-type]
                row = row.model_copy(update=fields)
            rows.append(row)

        def write_caches() -> None:
            if self.cache is not None:
                for episode_id, key, fields in read:
                    self.cache.put(episode_id, key, fields)
                self.cache.save()
            if (
                self.rows_cache is not None
                and self.cacheable
                and not self.rows_cache.racy(self.inputs.values())
                and _round_trips(rows, tasks)
            ):
                self.rows_cache.save(
                    self.inputs,
                    [e.episode_id for e in summaries],
                    self.traj_stats if self.trajectories else None,
                    _CachedRows(rows=rows, tasks=tasks).model_dump_json().encode(),
                )

        if cache_writes is None:
            write_caches()
        else:
            cache_writes.append(write_caches)
        return RunMetrics(manifest=self.manifest, grader=grader, rows=rows, tasks=tasks)


def metrics_table(
    run_dir: Path,
    grader: str | None = None,
    *,
    prices: PriceTable = DEFAULT_PRICES,
    trajectories: bool = True,
) -> list[EpisodeMetrics]:
    """One :class:`EpisodeMetrics` per finished episode of ``run_dir`` (``episodes.jsonl``
    order). See :func:`load_run_metrics` for arguments and errors."""
    return load_run_metrics(run_dir, grader, prices=prices, trajectories=trajectories).rows
