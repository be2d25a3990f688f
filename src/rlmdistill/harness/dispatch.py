"""Bounded dispatch of sub-calls, shared by every episode of the process.

Episodes hand their ``llm_query_batched`` batches here instead of starting threads:

- a client with a coroutine ``achat`` (:class:`~rlmdistill.models.openai_client.OpenAIChatClient`,
  :class:`~rlmdistill.models.replicas.ReplicaClient`) has its requests run on **one asyncio
  event-loop thread** ("sub-io"), so thousands of sub-calls can be in flight with one thread;
- any other client (in-process models, :class:`~rlmdistill.models.limits.LimitedClient`,
  test doubles) runs on one shared thread pool of at most ``max_threads`` threads;
- depth-2 subagents (turn loops that block on their own model and REPL) run on one shared
  pool of at most ``agent_threads`` threads; their own sub-calls come back here as plain
  batches, so no task ever waits for a thread of its own pool (no deadlock).

Limits: ``limit`` (the run's ``sub_concurrency``) caps the requests of one batch in flight at
once, as before; ``max_in_flight`` caps the event loop's requests of all episodes together
(each holds a socket; the default leaves a quarter of the process's descriptor limit for the
rest), so when descriptors run short requests wait for a slot instead of failing.
The threads of the process are therefore: one per running episode, one event loop, and at
most ``max_threads + agent_threads`` pool threads, started on demand.
"""

from __future__ import annotations

import asyncio
import itertools
import resource
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

from rlmdistill.models.base import ChatResult, FatalModelError, Message, ModelError, Sampling

__all__ = ["Dispatch", "Outcome", "async_chat_of", "default_max_in_flight", "shared_dispatch"]

T = TypeVar("T")
R = TypeVar("R")

Outcome = tuple[ChatResult | ModelError, float]
"""One sub-call's result or its classified error, and its wall time in seconds."""

AsyncChat = Callable[..., Awaitable[ChatResult]]


def async_chat_of(client: Any) -> AsyncChat | None:
    """``client.achat`` when the client can run on an event loop, else ``None``.

    Only when ``achat`` and ``chat`` come from the same class: a subclass that overrides
    ``chat`` alone (a wrapper, a test double) keeps its ``chat`` on the thread path."""
    mro = type(client).__mro__
    achat_owner = next((c for c in mro if "achat" in c.__dict__), None)
    chat_owner = next((c for c in mro if "chat" in c.__dict__), None)
    if achat_owner is None or achat_owner is not chat_owner:
        return None
    fn: AsyncChat = client.achat
    return fn


def default_max_in_flight() -> int:
    """Requests the event loop may have in flight: 3/4 of the soft descriptor limit
    (``RLIMIT_NOFILE``), at least 64; each request holds one socket."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(64, soft * 3 // 4)


class Pending(Generic[R]):
    """A batch in flight; :meth:`result` waits for it (list in input order).

    ``sent``: set once the batch's first requests have been handed to the transport (for a
    batch on the event loop: every request task has run up to its first wait); ``None``
    when there is nothing to wait for (the thread pool starts its calls at once)."""

    def __init__(self, wait_fn: Callable[[], list[R]], sent: threading.Event | None = None) -> None:
        self._wait = wait_fn
        self._sent = sent

    def result(self) -> list[R]:
        """The batch's results in input order (waits)."""
        return self._wait()

    def wait_sent(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds until the batch's requests have left (see the
        class docstring); ``True`` when they have. A caller with work to do while the batch
        is in flight does it after this, so that work does not hold the GIL while the
        event-loop thread sends (Python hands the GIL over only every 5 ms,
        ``sys.getswitchinterval``)."""
        return True if self._sent is None else self._sent.wait(timeout_s)


class Dispatch:
    """Bounded sub-call dispatch (see the module docstring). Thread-safe; start-up is lazy.

    Args:
        max_threads: threads of the shared pool for clients without ``achat``.
        agent_threads: threads of the shared pool for depth-2 subagents.
        max_in_flight: event-loop requests of all episodes at once (default
            :func:`default_max_in_flight`).
    """

    def __init__(
        self, max_threads: int = 128, agent_threads: int = 64, max_in_flight: int | None = None
    ) -> None:
        self.max_threads = max_threads
        self.agent_threads = agent_threads
        self.max_in_flight = max_in_flight or default_max_in_flight()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._global: asyncio.Semaphore | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._agents: ThreadPoolExecutor | None = None
        self.in_flight = 0
        """Event-loop requests in flight now."""
        self.peak_in_flight = 0
        """Most event-loop requests in flight at once so far."""
        self._tasks: dict[Future[list[Outcome]], list[asyncio.Task[None]]] = {}
        self._background: set[asyncio.Task[int]] = set()

    # -- start-up ---------------------------------------------------------------------
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop (its thread, "sub-io", is started on first use; a daemon)."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    self._global = asyncio.Semaphore(self.max_in_flight)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=run, name="sub-io", daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _threads(self, agents: bool) -> ThreadPoolExecutor:
        with self._lock:
            if agents:
                if self._agents is None:
                    self._agents = ThreadPoolExecutor(self.agent_threads, "subagent")
                return self._agents
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_threads, "sub-call")
            return self._pool

    # -- batches ----------------------------------------------------------------------
    def chat(
        self,
        client: Any,
        requests: Sequence[tuple[list[Message], Sampling]],
        limit: int,
    ) -> Pending[Outcome]:
        """Send every ``(messages, sampling)`` of ``requests`` to ``client``, at most
        ``limit`` at once; returns at once. Each outcome is the :class:`ChatResult` or that
        request's :class:`ModelError` alone (an unexpected exception becomes a
        :class:`FatalModelError`; one failing prompt never fails the others)."""
        model_id = str(getattr(client, "model_id", client))
        achat = async_chat_of(client)
        if achat is None:

            def call(req: tuple[list[Message], Sampling]) -> Outcome:
                t0 = time.monotonic()
                try:
                    out: ChatResult | ModelError = client.chat(req[0], req[1])
                except ModelError as exc:
                    out = exc
                except Exception as exc:  # a bug must not kill the sibling prompts
                    out = FatalModelError(f"{model_id}: {type(exc).__name__}: {exc}")
                return out, time.monotonic() - t0

            return self._windowed(self._threads(False), call, list(requests), limit)
        loop = self.loop()
        done: Future[list[Outcome]] = Future()
        sent = threading.Event()
        loop.call_soon_threadsafe(self._start, achat, model_id, list(requests), limit, done, sent)
        return Pending(done.result, sent)

    def prewarm(self, client: Any, n: int) -> None:
        """Let ``client`` open up to ``n`` connections on the loop now, in the background
        (returns at once), when it runs on the loop and can (``aprewarm``); else nothing.
        An episode calls it before its root's first turn, so that its first sub-call batch
        does not pay TCP set-up on its critical path."""
        aprewarm = getattr(client, "aprewarm", None)
        if async_chat_of(client) is None or aprewarm is None or n <= 0:
            return
        loop = self.loop()

        def start() -> None:
            task = loop.create_task(aprewarm(n))
            self._background.add(task)  # the loop holds tasks weakly
            task.add_done_callback(self._background.discard)

        loop.call_soon_threadsafe(start)

    def _start(
        self,
        achat: AsyncChat,
        model_id: str,
        requests: list[tuple[list[Message], Sampling]],
        limit: int,
        done: Future[list[Outcome]],
        sent: threading.Event,
    ) -> None:
        """On the loop: one task per request; the last to finish hands the whole batch to
        ``done`` itself; ``sent`` is set once every task has run its first step (the loop
        runs its callbacks in order). (Not ``asyncio.gather`` in a coroutine behind
        ``run_coroutine_threadsafe``: the gathering future, the outer task and the chained
        future each wait their turn in the loop's queue, behind every other episode's
        callbacks, before the episode thread sees its batch.)"""
        assert self._global is not None
        glob = self._global
        n = len(requests)
        if n == 0:
            sent.set()
            done.set_result([])
            return
        local = asyncio.Semaphore(limit) if limit < n else None
        results: list[Any] = [None] * n
        left = [n]
        tasks: list[asyncio.Task[None]] = []
        self._tasks[done] = tasks  # the loop holds tasks weakly: keep them until the end

        async def one(i: int, req: tuple[list[Message], Sampling]) -> None:
            try:
                if local is not None:
                    await local.acquire()
                await glob.acquire()
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                t0 = time.monotonic()
                try:
                    out: ChatResult | ModelError = await achat(req[0], req[1])
                except ModelError as exc:
                    out = exc
                except Exception as exc:
                    out = FatalModelError(f"{model_id}: {type(exc).__name__}: {exc}")
                finally:
                    self.in_flight -= 1
                    glob.release()
                    if local is not None:
                        local.release()
                results[i] = (out, time.monotonic() - t0)
            except BaseException as exc:  # cancelled (the loop is going away): fail the batch
                self._finish(done, exc)
                raise
            left[0] -= 1
            if left[0] == 0:
                self._finish(done, results)

        loop = asyncio.get_running_loop()
        tasks.extend(loop.create_task(one(i, r)) for i, r in enumerate(requests))
        loop.call_soon(sent.set)  # after each task's first step: the requests have left

    def _finish(self, done: Future[list[Outcome]], outcome: list[Outcome] | BaseException) -> None:
        self._tasks.pop(done, None)
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    def run(self, fn: Callable[[T], R], items: Sequence[T], limit: int) -> list[R]:
        """``[fn(x) for x in items]`` on the shared subagent pool, at most ``limit`` at once
        (waits; exceptions propagate). For depth-2 subagents only: ``fn`` may dispatch plain
        batches through :meth:`chat`, never through :meth:`run`."""
        return self._windowed(self._threads(True), fn, list(items), limit).result()

    @staticmethod
    def _windowed(
        pool: ThreadPoolExecutor, fn: Callable[[T], R], items: list[T], limit: int
    ) -> Pending[R]:
        """Submit ``items`` to ``pool`` keeping at most ``limit`` of them queued or running
        (the first window now, the rest as they finish, in :meth:`Pending.result`)."""
        results: list[Any] = [None] * len(items)
        todo = iter(enumerate(items))

        def task(i: int, x: T) -> None:
            results[i] = fn(x)

        pending: set[Future[None]] = {
            pool.submit(task, i, x) for i, x in itertools.islice(todo, max(1, limit))
        }

        def finish() -> list[R]:
            nonlocal pending
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
                pending |= {pool.submit(task, i, x) for i, x in itertools.islice(todo, len(done))}
            return results

        return Pending(finish)


_shared: Dispatch | None = None
_shared_lock = threading.Lock()


def shared_dispatch() -> Dispatch:
    """The process-wide :class:`Dispatch` (created on first use), shared by every run."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Dispatch()
        return _shared
