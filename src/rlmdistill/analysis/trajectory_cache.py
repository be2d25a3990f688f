"""A cache of the per-episode trajectory metrics, so a report rebuilt over the same runs does
not read every trajectory file again.

Reading 10,000 trajectory files (JSON decoding of every record) was the largest share of a
full report's time (``docs/analysis.md``, Measured). The trajectory metrics of an episode
(batch sizes, sub-calls with text, answer reach, memo timing) depend only on its trajectory
file, its memo and turn count (``episodes.jsonl``), its room (the sub-call metrics: the
folder its documents are read from, each rubric criterion's documents) and the reach n-gram;
the cache stores them per episode with that key:

- the trajectory file's size and modification time (``st_size``, ``st_mtime_ns``);
- the episode's ``memo_sha256`` and ``n_turns`` from its summary;
- a digest of what the sub-call metrics read of the room (``room``, from the caller);
- per file: :data:`CACHE_VERSION` (raised whenever a trajectory metric's definition changes),
  the run folder and ``reach_ngram``.

An entry whose key differs is stale and is computed again; a cache file that cannot be read,
does not validate or is of another version is ignored whole (everything is computed again)
and replaced. The cache lives in the report's own folder (``reports/NAME/.cache/``), never in
a run folder: nothing collected is written or altered. Writing it is best effort (a read-only
report folder only loses the speed-up) and atomic (a temporary file renamed over the old one).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["CACHE_VERSION", "TrajectoryCache", "TrajectoryFields", "cache_file"]

CACHE_VERSION = 2
"""Version of the cache file and of the trajectory metrics' definitions it holds."""


class TrajectoryFields(BaseModel):
    """The trajectory metrics of one episode (the fields of
    :class:`~rlmdistill.analysis.metrics.EpisodeMetrics` read from its trajectory)."""

    model_config = ConfigDict(extra="forbid")

    root_batch_sizes: list[int]
    mean_batch_size: float | None
    max_batch_size: int | None
    n_sub_calls_with_text: int
    share_sub_calls_with_text: float | None
    n_answers: int
    answer_reach: float | None
    memo_first_turn: int | None
    memo_first_turn_share: float | None
    n_sub_answers: int
    sub_answer_chars: float | None
    sub_answer_quote_share: float | None
    sub_used_share: float | None
    sub_supported_criteria: list[list[str]]
    """Per sub-call, the criteria it supports when every criterion passes (the row's
    ``sub_supports_pass_share`` is computed from them and the verdicts)."""


class _Key(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int
    mtime_ns: int
    memo_sha256: str | None
    n_turns: int
    room: str | None = None


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: _Key
    fields: TrajectoryFields


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    run_dir: str
    reach_ngram: int
    episodes: dict[str, _Entry]


def cache_file(cache_dir: Path, run_dir: Path) -> Path:
    """The cache file of ``run_dir`` under ``cache_dir`` (one per run, named by a hash of the
    run folder's absolute path)."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"trajectory-metrics-{digest}.v{CACHE_VERSION}.json"


class TrajectoryCache:
    """The cached trajectory metrics of one run's episodes (see the module docstring).

    ``get`` returns an episode's fields when its key still matches; ``put`` records fields
    just computed; ``save`` writes the file with exactly the episodes seen by ``get`` /
    ``put`` in this pass (entries of episodes no longer in the run are dropped).
    """

    def __init__(self, path: Path, run_dir: Path, reach_ngram: int) -> None:
        self.path = Path(path)
        self.run_dir = str(Path(run_dir).resolve())
        self.reach_ngram = reach_ngram
        self._old: dict[str, _Entry] = {}
        self._new: dict[str, _Entry] = {}
        self._changed = False
        try:
            data = _File.model_validate_json(self.path.read_bytes())
        except (OSError, ValidationError, ValueError):
            self._changed = self.path.exists()  # unreadable or invalid: replaced on save
            return
        if (data.version, data.run_dir, data.reach_ngram) == (
            CACHE_VERSION,
            self.run_dir,
            reach_ngram,
        ):
            self._old = data.episodes
        else:
            self._changed = True

    @staticmethod
    def key(
        trajectory: Path, memo_sha256: str | None, n_turns: int, room: str | None = None
    ) -> _Key | None:
        """The key of an episode's trajectory metrics (``None`` when the file is missing);
        ``room``: a digest of what they read of the episode's room."""
        try:
            st = trajectory.stat()
        except OSError:
            return None
        return _Key(
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            memo_sha256=memo_sha256,
            n_turns=n_turns,
            room=room,
        )

    def get(self, episode_id: str, key: _Key | None) -> dict[str, object] | None:
        """The cached fields of ``episode_id`` when recorded under ``key``, else ``None``."""
        entry = self._old.get(episode_id)
        if key is None or entry is None or entry.key != key:
            return None
        self._new[episode_id] = entry
        return entry.fields.model_dump()

    def put(self, episode_id: str, key: _Key | None, fields: dict[str, object]) -> None:
        """Record ``fields`` just computed for ``episode_id`` under ``key``."""
        if key is None:
            return
        self._new[episode_id] = _Entry(key=key, fields=TrajectoryFields.model_validate(fields))
        self._changed = True

    def save(self) -> None:
        """Write the cache when anything changed (atomically; errors only lose the cache)."""
        if not self._changed and self._new.keys() == self._old.keys():
            return
        data = _File(
            version=CACHE_VERSION,
            run_dir=self.run_dir,
            reach_ngram=self.reach_ngram,
            episodes=self._new,
        )
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(data.model_dump_json(), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
