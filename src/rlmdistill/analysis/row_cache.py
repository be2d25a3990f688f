"""A per-run cache of the whole per-episode metrics rows, so a second report over the same runs
(into any folder) and the dashboard's run view load them without reading the run again.

:func:`~rlmdistill.analysis.metrics.load_run_metrics` of a (run, grader, settings) triple
reads ``episodes.jsonl``, the grader's verdict file, the rooms' ``task.json`` files and, with
trajectories, one trajectory file per episode; that read was most of a 10,000-episode
report's time (``docs/analysis.md``, Measured). This module keeps the result - the
:class:`~rlmdistill.analysis.metrics.EpisodeMetrics` rows and the tasks - in one file per
triple, and hands it back only while every input is as it was:

- the cache version (:data:`CACHE_VERSION`, raised whenever a metric's definition changes),
  the run folder's resolved path and the settings that change a row (grader, price table,
  trajectories on/off, give-up share, reach n-gram; :func:`settings_digest`);
- the ``(st_size, st_mtime_ns)`` of ``run.json``, ``episodes.jsonl``, the grader's verdict
  file, every room's ``task.json`` and, with trajectories, every episode's trajectory file
  (:func:`stat_key`; a missing file is ``None``).

**Where.** In the user's cache, ``$RLMDISTILL_METRICS_CACHE`` or
``<cache home>/metrics`` (:func:`metrics_cache_dir`; ``RLMDISTILL_METRICS_CACHE=off``
turns it off), named by a hash of the run's resolved path and of the settings: never in the run
folder (nothing collected is written or altered), and not in a report folder, so a report
into a new folder and the dashboard share it.

**Validity.** A file is a header line (the key above, the episode ids, the ``task.json``
paths, the SHA-256 of the body) and a body line (the rows and tasks as JSON). Any key
mismatch, a torn or corrupt file (unparsable header, body hash differs, body does not
validate) or an unreadable file is a miss: the caller computes the rows and stores them again.
Writes go to a temporary file renamed over the old one (``os.replace``), so two reports at
once each see a whole file (the last writer wins); a failed write only loses the speed-up.

**Racy inputs.** A file's modification time has the file system's coarse clock granularity
(milliseconds), so a file rewritten with the same size within one tick of being read would
keep its key. As git's index does ("racy git", ``Documentation/technical/racy-git.txt`` in
git), rows are not stored while any input was modified less than :data:`RACY_NS` before the
read began; they are computed again next time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlmdistill.paths import cache_home

__all__ = [
    "CACHE_VERSION",
    "ENV",
    "RACY_NS",
    "RowCache",
    "Stat",
    "metrics_cache_dir",
    "settings_digest",
    "stat_key",
]

CACHE_VERSION = 1
"""Version of the file format and of the metrics' definitions the rows were computed with."""
ENV = "RLMDISTILL_METRICS_CACHE"
"""Environment variable: the cache folder, or ``off`` / ``0`` / ``none`` for no cache."""
RACY_NS = 2_000_000_000
"""Inputs modified less than this many nanoseconds (2 s) before the read began are "racy":
the rows read from them are not stored (module docstring)."""

Stat = tuple[int, int] | None
"""``(st_size, st_mtime_ns)`` of a file, ``None`` when it does not exist or cannot be stat'ed."""


def metrics_cache_dir() -> Path | None:
    """The cache folder: ``$RLMDISTILL_METRICS_CACHE``, or ``<cache home>/metrics``
    (:func:`rlmdistill.paths.cache_home`); ``None`` when the variable is ``off``, ``0`` or
    ``none`` (case-insensitive). The folder is created on the first write."""
    env = os.environ.get(ENV)
    if env is not None and env.strip().lower() in {"off", "0", "none", "false"}:
        return None
    if env:
        return Path(env).expanduser()
    return cache_home() / "metrics"


def stat_key(path: Path | str) -> Stat:
    """``(st_size, st_mtime_ns)`` of ``path``; ``None`` when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def settings_digest(settings: dict[str, object]) -> str:
    """SHA-256 (hex) of ``settings`` as sorted-key JSON (values must be JSON-serialisable)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


class _Header(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    run_dir: str
    settings: str
    """:func:`settings_digest` of the settings."""
    inputs: dict[str, tuple[int, int] | None]
    """Stat of every input other than trajectories, by path."""
    episode_ids: list[str]
    trajectories: list[tuple[int, int] | None] | None
    """Stat of each episode's trajectory file (``episode_ids`` order), ``None``: not read."""
    body_sha256: str


class RowCache:
    """The cached rows of one (run, settings) pair under ``cache_dir`` (module docstring).

    ``load`` returns the body bytes when the file is whole and every input is unchanged;
    ``save`` stores a body computed from inputs whose stats were taken before reading them.
    The body's format is the caller's (:mod:`rlmdistill.analysis.metrics` writes the rows).
    """

    def __init__(self, cache_dir: Path, run_dir: Path, settings: dict[str, object]) -> None:
        self.run_dir = str(Path(run_dir).resolve())
        self.settings = settings_digest({"version": CACHE_VERSION, **settings})
        run_hash = hashlib.sha256(self.run_dir.encode()).hexdigest()[:16]
        self.path = Path(cache_dir) / f"rows-{run_hash}-{self.settings[:16]}.v{CACHE_VERSION}"
        self.started_ns = time.time_ns()
        """When this pass began (before any input was stat'ed or read): the racy check's
        reference."""

    def load(self, trajectory_dir: Path | None) -> bytes | None:
        """The stored body when the header matches the inputs as they are now, else ``None``.

        Args:
            trajectory_dir: the run's trajectory folder when the rows used the trajectory
                files (``<dir>/<episode_id>.jsonl``, as
                :func:`~rlmdistill.traces.layout.trajectory_path` names them; their stats are
                then part of the key), ``None`` when they did not.
        """
        try:
            with self.path.open("rb") as f:
                head = f.readline()
                body = f.read()
            header = _Header.model_validate_json(head)
        except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
            return None
        if (header.version, header.run_dir, header.settings) != (
            CACHE_VERSION,
            self.run_dir,
            self.settings,
        ):
            return None
        if any(stat_key(Path(p)) != _stat(s) for p, s in header.inputs.items()):
            return None
        if trajectory_dir is not None:
            if header.trajectories is None or len(header.trajectories) != len(header.episode_ids):
                return None
            folder = str(trajectory_dir)
            join, stat = os.path.join, stat_key  # 10,000 files: plain strings, no Path objects
            for eid, st in zip(header.episode_ids, header.trajectories, strict=True):
                if st is None or stat(join(folder, f"{eid}.jsonl")) != (st[0], st[1]):
                    return None
        elif header.trajectories is not None:
            return None
        if hashlib.sha256(body).hexdigest() != header.body_sha256:
            return None  # torn or altered body
        return body

    def racy(self, stats: Iterable[Stat]) -> bool:
        """Whether any input was modified less than :data:`RACY_NS` before this pass began
        (or after it began), or is missing."""
        limit = self.started_ns - RACY_NS
        return any(s is None or s[1] >= limit for s in stats)

    def save(
        self,
        inputs: dict[str, Stat],
        episode_ids: list[str],
        trajectories: list[Stat] | None,
        body: bytes,
    ) -> bool:
        """Store ``body`` under the key (stats taken before the inputs were read); returns
        whether it was written. Not written when an input is racy (:meth:`racy`) or the
        write fails (atomic: a temporary file renamed over the old one)."""
        if self.racy(inputs.values()) or (trajectories is not None and self.racy(trajectories)):
            return False
        header = _Header(
            version=CACHE_VERSION,
            run_dir=self.run_dir,
            settings=self.settings,
            inputs=inputs,
            episode_ids=episode_ids,
            trajectories=trajectories,
            body_sha256=hashlib.sha256(body).hexdigest(),
        )
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{time.time_ns()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as f:
                f.write(header.model_dump_json().encode() + b"\n")
                f.write(body)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return False
        return True


def _stat(s: tuple[int, int] | None) -> Stat:
    return None if s is None else (s[0], s[1])
