"""Several servers behind one spec: ``openai:MODEL@URL1,URL2,...`` (or ``servers:`` in a config).

:class:`ReplicaClient` is a :class:`~rlmdistill.models.base.ModelClient` over one
:class:`~rlmdistill.models.openai_client.OpenAIChatClient` per replica (same model, same
weights). For each request it picks:

1. the replica the request's **affinity key** is pinned to, when that replica is healthy: the
   collector runs every root turn of an episode under :func:`affinity` (its episode id), so
   one episode's growing prompt always reaches the same server and its prefix cache;
2. otherwise the healthy replica with the **fewest outstanding requests** (ties go round
   robin), and a keyed request is pinned there.

A replica whose request fails with an infrastructure fault (refused or reset connection and
timeouts at once, HTTP 429/5xx after that client's own retries) **leaves the rotation** for a
cool-down (:data:`COOLDOWN_S`, doubling per consecutive failure up to :data:`MAX_COOLDOWN_S`),
and the request is sent again to another replica straight away. When every replica is cooling
down, the request waits for the one that comes back first (it is probed with the request) and
at most ``len(replicas) * (max_retries + 1)`` HTTP attempts are spent in all. A success puts a
replica back. Other errors (context length, 4xx, empty replies) are the model's answer and are
raised as they are.

Counters for tests and benchmarks: :attr:`ReplicaClient.served` (requests answered per replica),
:attr:`ReplicaClient.failovers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence

from rlmdistill.models.base import (
    ChatResult,
    FatalModelError,
    Message,
    ModelError,
    RetryableModelError,
    Sampling,
)
from rlmdistill.models.openai_client import OpenAIChatClient

__all__ = ["COOLDOWN_S", "MAX_COOLDOWN_S", "ReplicaClient", "affinity"]

COOLDOWN_S = 2.0
"""Seconds a replica stays out of the rotation after its first failure in a row."""
MAX_COOLDOWN_S = 60.0
"""Longest cool-down (the cool-down doubles with each consecutive failure)."""
_PINS = 65536
"""Affinity keys remembered (least recently used dropped first)."""

_affinity: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rlmdistill_replica_affinity", default=None
)


@contextlib.contextmanager
def affinity(key: str) -> Iterator[None]:
    """Requests made by this thread (or task) inside the block share ``key``: a
    :class:`ReplicaClient` sends them to one replica while it is healthy."""
    token = _affinity.set(key)
    try:
        yield
    finally:
        _affinity.reset(token)


class ReplicaClient:
    """One model served by several replicas (see the module docstring). Thread-safe; its
    :meth:`achat` runs on one event loop (the collector's sub-call dispatch).

    Args:
        replicas: one client per server, the first the spec's identity; built by
            :func:`rlmdistill.models.spec.open_client` with ``retry_transport=False``.
        model_id: id recorded in traces (the spec on its first server: the replica list is
            operational, see :func:`rlmdistill.models.spec.identity`).

    Raises ``ValueError`` for an empty list.
    """

    def __init__(self, replicas: Sequence[OpenAIChatClient], model_id: str | None = None) -> None:
        if not replicas:
            raise ValueError("ReplicaClient needs at least one replica")
        self.replicas = list(replicas)
        self.model_id = model_id or self.replicas[0].model_id
        self.max_concurrency = max(r.max_concurrency for r in self.replicas)
        self.max_retries = max(r.max_retries for r in self.replicas)
        self.outstanding = [0] * len(self.replicas)
        """Requests in flight per replica now."""
        self.served = [0] * len(self.replicas)
        """Requests answered per replica."""
        self.failovers = 0
        """Requests sent again to another replica after a failure."""
        self._fails = [0] * len(self.replicas)
        self._down_until = [0.0] * len(self.replicas)
        self._pins: OrderedDict[str, int] = OrderedDict()
        self._rr = itertools.count()
        self._lock = threading.Lock()

    @property
    def base_urls(self) -> list[str]:
        """The replicas' URLs, in spec order."""
        return [r.base_url for r in self.replicas]

    # -- choosing -------------------------------------------------------------------------
    def _pick(self, key: str | None) -> tuple[int, float]:
        """``(replica, seconds to wait first)``; counts the request as outstanding there."""
        now = time.monotonic()
        with self._lock:
            healthy = [i for i, t in enumerate(self._down_until) if t <= now]
            wait = 0.0
            choice = None
            if key is not None:
                pinned = self._pins.get(key)
                if pinned is not None and pinned in healthy:
                    choice = pinned
                    self._pins.move_to_end(key)
            if choice is None:
                if healthy:
                    start = next(self._rr)
                    n = len(self.replicas)
                    order = sorted(healthy, key=lambda i: (self.outstanding[i], (i - start) % n))
                    choice = order[0]
                else:  # all cooling down: wait for the first to come back and probe it
                    choice = min(range(len(self.replicas)), key=lambda i: self._down_until[i])
                    wait = self._down_until[choice] - now
                if key is not None:
                    self._pins[key] = choice
                    self._pins.move_to_end(key)
                    if len(self._pins) > _PINS:
                        self._pins.popitem(last=False)
            self.outstanding[choice] += 1
            return choice, wait

    def _done(self, i: int, exc: BaseException | None) -> bool:
        """Book the end of a request on replica ``i``; True when it should fail over."""
        with self._lock:
            self.outstanding[i] -= 1
            if exc is None:
                self._fails[i] = 0
                self._down_until[i] = 0.0
                self.served[i] += 1
                return False
            if not isinstance(exc, RetryableModelError):
                return False
            self._fails[i] += 1
            # every request in flight on a dead replica fails: cap the exponent (2.0**1100
            # overflows a float)
            doublings = min(self._fails[i] - 1, 16)
            cooldown = min(MAX_COOLDOWN_S, COOLDOWN_S * 2.0**doublings)
            self._down_until[i] = time.monotonic() + cooldown
            self.failovers += 1
            return True

    def _budget(self) -> int:
        return len(self.replicas) * (self.max_retries + 1)

    @staticmethod
    def _finish(res: ChatResult, attempts: int, t0: float) -> ChatResult:
        return res.model_copy(update={"attempts": attempts, "latency_s": time.perf_counter() - t0})

    def _give_up(self, exc: ModelError, attempts: int) -> ModelError:
        exc.attempts = attempts
        return exc

    # -- ModelClient ------------------------------------------------------------------------
    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """Complete ``messages`` on a replica (see the module docstring); raises what the
        last replica raised, with ``attempts`` counting the HTTP attempts on all of them."""
        key = _affinity.get()
        t0 = time.perf_counter()
        attempts = 0
        while True:
            i, wait = self._pick(key)
            if wait > 0:
                time.sleep(wait)
            try:
                res = self.replicas[i].chat(messages, sampling, prefill=prefill)
            except ModelError as exc:
                attempts += max(1, exc.attempts)
                if not self._done(i, exc) or attempts >= self._budget():
                    raise self._give_up(exc, attempts) from exc
                continue
            except BaseException:
                self._done(i, FatalModelError("interrupted"))
                raise
            self._done(i, None)
            return self._finish(res, attempts + res.attempts, t0)

    async def achat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """:meth:`chat` as a coroutine (each replica's :meth:`OpenAIChatClient.achat`)."""
        key = _affinity.get()
        t0 = time.perf_counter()
        attempts = 0
        while True:
            i, wait = self._pick(key)
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                res = await self.replicas[i].achat(messages, sampling, prefill=prefill)
            except ModelError as exc:
                attempts += max(1, exc.attempts)
                if not self._done(i, exc) or attempts >= self._budget():
                    raise self._give_up(exc, attempts) from exc
                continue
            except BaseException:
                self._done(i, FatalModelError("interrupted"))
                raise
            self._done(i, None)
            return self._finish(res, attempts + res.attempts, t0)

    def close(self) -> None:
        """Close every replica's client. Idempotent."""
        for r in self.replicas:
            r.close()

    def __enter__(self) -> ReplicaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ReplicaClient({self.model_id!r}, replicas={self.base_urls})"
