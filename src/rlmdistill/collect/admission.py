"""Admission control: how many episodes may run at once on this node, and a gate that makes
the others wait their turn instead of failing.

An episode needs descriptors (its REPL's three pipes, its root connection), tasks (its
thread in the collector, bubblewrap and the worker process) and memory (the REPL process).
:func:`capacity` turns what the process may still use into a number of concurrent
episodes, once per run; :class:`Gate` then lets an episode start only while memory is
available (re-checked at each start, since other jobs share the machine). When nothing is
running the gate always admits, so a run never stalls. Sub-call sockets are bounded apart
(:class:`~rlmdistill.harness.dispatch.Dispatch` ``max_in_flight``).

Per-episode figures and where they come from:

- descriptors :data:`FDS_PER_EPISODE` = 8: the REPL's stdin/stdout/stderr pipes (3), the
  root's keep-alive connection (1), the trajectory file while appending (1), slack (3);
- tasks :data:`TASKS_PER_EPISODE` = 4: the episode thread, bwrap, bwrap's init, the worker;
- memory :data:`REPL_MEMORY_MB` = 48 MiB per REPL: an idle worker over a small room has an
  RSS of 12.4 MiB (PSS 6.9 MiB; bwrap's two processes 1.5 MiB each; measured with psutil on
  the 2-core machine), and each extra REPL over a 1 GiB room adds 11 MiB (README, "Shared
  rooms"); 48 leaves room for the data the root's code builds.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["Capacity", "Gate", "capacity", "raise_descriptor_limit"]

FDS_PER_EPISODE = 8
TASKS_PER_EPISODE = 4
REPL_MEMORY_MB = 48
RESERVE_FDS = 256
"""Descriptors kept for everything else (room files, logs, the preflight, libraries)."""
RESERVE_MEMORY_MB = 1024
"""Available memory (MiB) the gate never hands to REPLs."""
RESERVE_TASKS = 256


def raise_descriptor_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (what servers such as Ray do at
    start); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


def _pids_max() -> int | None:
    """The ``pids.max`` of this process's cgroup (v2), when there is one."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        rel = line.split("::", 1)[1] if "::" in line else None
        if rel is None:
            return None
        text = (Path("/sys/fs/cgroup") / rel.lstrip("/") / "pids.max").read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Capacity:
    """Concurrent episodes each resource allows, and the smallest (``episodes``)."""

    descriptors: int
    tasks: int
    memory: int

    @property
    def episodes(self) -> int:
        """Episodes that fit all three (at least 1)."""
        return max(1, min(self.descriptors, self.tasks, self.memory))

    @property
    def bound(self) -> str:
        """The resource that sets :attr:`episodes`."""
        pairs = {"descriptors": self.descriptors, "tasks": self.tasks, "memory": self.memory}
        return min(pairs, key=lambda k: pairs[k])


def capacity(fds_per_episode: int = 0, extra_repls: int = 0) -> Capacity:
    """Concurrent episodes this process can carry now.

    ``fds_per_episode``: descriptors an episode needs besides :data:`FDS_PER_EPISODE` (its
    sub-call sockets: ``sub_concurrency``); ``extra_repls``: REPLs started besides the
    episodes' own (depth-2 subagents: the shared subagent pool's threads), each counted like
    an episode. Raises the soft descriptor limit to the hard one first."""
    soft = raise_descriptor_limit()
    free_fds = soft - _open_fds() - RESERVE_FDS
    by_fds = free_fds // (FDS_PER_EPISODE + fds_per_episode) - extra_repls
    nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    limits = [n for n in (nproc, _pids_max()) if n not in (None, resource.RLIM_INFINITY)]
    with contextlib.suppress(OSError, ValueError):
        limits.append(int(Path("/proc/sys/kernel/threads-max").read_text()))
    task_limit = min(limits) if limits else 1 << 20
    used = psutil.Process().num_threads()
    by_tasks = (task_limit - used - RESERVE_TASKS) // TASKS_PER_EPISODE - extra_repls
    avail_mb = psutil.virtual_memory().available // 2**20
    by_mem = (avail_mb - RESERVE_MEMORY_MB) // REPL_MEMORY_MB - extra_repls
    return Capacity(max(1, by_fds), max(1, by_tasks), max(1, by_mem))


class Gate:
    """Lets an episode start while memory is available for its REPL; others wait.

    ``with gate.admit(): ...`` around an episode. With no episode running it admits at once
    (progress is guaranteed); otherwise it waits until available memory exceeds
    ``RESERVE_MEMORY_MB + REPL_MEMORY_MB`` or an episode ends, re-checking every second.
    :attr:`waits` counts the starts that had to wait."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.running = 0
        self.waits = 0

    @staticmethod
    def _memory_ok() -> bool:
        avail_mb = psutil.virtual_memory().available // 2**20
        return avail_mb >= RESERVE_MEMORY_MB + REPL_MEMORY_MB

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Hold an admission for the duration of the block (see the class docstring)."""
        with self._cond:
            waited = False
            while self.running > 0 and not self._memory_ok():
                waited = True
                self._cond.wait(timeout=1.0)
            self.waits += waited
            self.running += 1
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify_all()
