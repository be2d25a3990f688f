"""glibc heap settings of the collector process (``mallopt``); no-ops outside glibc.

Why a cap on malloc arenas: glibc gives threads that meet a locked arena an arena of their
own, up to 8 per core, and each arena keeps the memory freed in it for reuse. A collector's
episode threads each build and drop megabytes (a sub-call batch's JSON message, its parsed
prompts, request bodies), so with 8 episodes at once most of that stayed resident in 8 arenas:
measured on a 337 M-character room (``benchmarks/bench_lab_room.py --steps warm --episodes 1
8``, 2-core AMD EPYC), the collector grew 4.7 MiB per extra live episode with glibc's default
and ~1.7 MiB with the arenas capped at 2 (the collector's target: <= 5% of the room per extra episode).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Any

_M_ARENA_MAX = -8
"""``mallopt`` parameter number of ``M_ARENA_MAX`` (glibc ``malloc.h``)."""


@functools.lru_cache(maxsize=1)
def libc() -> Any:
    """This process's C library (``ctypes.CDLL(None)``), or None where it cannot be loaded."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def arena_cap() -> int:
    """Arenas :func:`limit_arenas` allows by default: ``$RLMDISTILL_MALLOC_ARENAS`` where set
    (0: glibc's own default, no cap), else one per CPU of this process, at least 2. Raises
    ValueError naming the variable when it is not a whole number >= 0."""
    env = os.environ.get("RLMDISTILL_MALLOC_ARENAS")
    if env is not None and env.strip():
        try:
            n = int(env)
        except ValueError:
            n = -1
        if n < 0:
            raise ValueError(f"RLMDISTILL_MALLOC_ARENAS={env!r}: expected a whole number >= 0")
        return n
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(2, n)


def limit_arenas(n: int | None = None) -> None:
    """Cap glibc's malloc arenas at ``n`` (default :func:`arena_cap`) for the rest of the
    process (``mallopt(M_ARENA_MAX, n)``; arenas that exist already stay). Raises nothing:
    a no-op outside glibc."""
    n = arena_cap() if n is None else n
    lib = libc()
    if n <= 0:
        return
    with contextlib.suppress(AttributeError, OSError):
        lib.mallopt(_M_ARENA_MAX, int(n))
