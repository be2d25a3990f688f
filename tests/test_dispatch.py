"""Shared, bounded sub-call dispatch (harness/dispatch.py) and hundreds of concurrent episodes."""

from __future__ import annotations

import threading
from pathlib import Path

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.harness.dispatch import Dispatch, async_chat_of
from rlmdistill.models.base import ChatResult, Message, Sampling, Usage
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room

BATCH = "```repl\nanswers = llm_query_batched(['q %d' % i for i in range(12)])\nprint(len(answers))\n```"
MEMO = "```repl\nFINAL_VAR('memo: ' + ' | '.join(answers[:2]))\n```"


class _ChatOnly(OpenAIChatClient):
    """Overrides ``chat`` alone: must stay on the thread path (its ``chat`` is what runs)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.threads: list[threading.Thread] = []
        self._names_lock = threading.Lock()

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        with self._names_lock:
            self.threads.append(threading.current_thread())
        return super().chat(messages, sampling, prefill=prefill)


def test_only_clients_whose_chat_and_achat_match_go_async() -> None:
    plain = OpenAIChatClient("m", "http://127.0.0.1:9/v1", api_key="x")
    wrapped = _ChatOnly("m", "http://127.0.0.1:9/v1", api_key="x")
    assert async_chat_of(plain) is not None
    assert async_chat_of(wrapped) is None
    assert async_chat_of(object()) is None


def test_batch_limit_and_results_in_order_on_the_event_loop() -> None:
    handler = ScriptedHandler(["x"], lambda p: "answer " + p)
    dispatch = Dispatch(max_threads=4, agent_threads=2)
    with FakeOpenAIServer(handler, latency_s=0.05) as server:
        client = OpenAIChatClient("sub", server.base_url, api_key="x")
        reqs = [
            ([Message(role="user", content=f"q{i}")], Sampling(max_tokens=8)) for i in range(10)
        ]
        out = dispatch.chat(client, reqs, limit=3).result()
        peak = server.max_in_flight
        client.close()
    assert [r.text for r, _ in out] == [f"answer q{i}" for i in range(10)]  # type: ignore[union-attr]
    assert peak == 3
    assert dispatch.peak_in_flight == 3


def test_thread_path_is_bounded_by_the_shared_pool() -> None:
    class Slow:
        model_id = "slow"

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.now = self.peak = 0

        def chat(self, messages, sampling, *, prefill=None):
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            threading.Event().wait(0.02)
            with self.lock:
                self.now -= 1
            return ChatResult(
                text=messages[0].content.upper(), usage=Usage(), latency_s=0, model="s"
            )

    client = Slow()
    dispatch = Dispatch(max_threads=4, agent_threads=2)
    reqs = [([Message(role="user", content=f"q{i}")], Sampling()) for i in range(6)]
    pendings = [dispatch.chat(client, reqs, limit=6) for _ in range(3)]  # 18 calls, 4 threads
    outs = [p.result() for p in pendings]
    assert all([r.text for r, _ in out] == [f"Q{i}" for i in range(6)] for out in outs)  # type: ignore[union-attr]
    assert client.peak == 4
    assert dispatch._pool is not None and len(dispatch._pool._threads) <= 4  # its own pool only


def _collect_batches(
    tmp_path: Path,
    sub_cls: type[OpenAIChatClient],
    episodes: int,
    sub_concurrency: int,
    latency: float,
) -> tuple[list, OpenAIChatClient, int]:
    """``episodes`` episodes of one 12-prompt batch and a memo against a fake server; returns
    the summaries, the sub client (a ``sub_cls``) and the server's peak requests in flight."""
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=50)
    handler = ScriptedHandler([BATCH, MEMO], lambda p: "answer " + p)
    with FakeOpenAIServer(handler, latency_s=latency) as server:
        url = server.base_url
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{url}",
            sub=f"openai:sub@{url}",
            episodes=episodes,
            concurrency=1,
            sub_concurrency=sub_concurrency,
            limits=EpisodeLimits(max_turns=3),
            sandbox="audit",
        )
        root = OpenAIChatClient("root", url, api_key="x")
        sub = sub_cls("sub", url, api_key="x")
        res = collect(cfg, tmp_path / "run", root, sub, progress=False)
        root.close()
        sub.close()
        return res.summaries, sub, server.max_in_flight


def test_sub_concurrency_stays_per_episode(tmp_path: Path) -> None:
    summaries, sub, peak = _collect_batches(tmp_path, _ChatOnly, 3, 3, 0.05)  # the thread path
    assert isinstance(sub, _ChatOnly)
    assert [s.status for s in summaries] == ["completed"] * 3
    assert [s.n_sub_calls for s in summaries] == [12, 12, 12]
    assert peak == 3  # 12 prompts per batch, at most 3 in flight for the episode
    assert len(sub.threads) == 36
    assert all(t.name.startswith("sub-call") for t in sub.threads)  # the shared pool's


class _PoolSpy(OpenAIChatClient):
    """Notes how many connections its pool had open when each request left."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.open_at_send: list[int] = []

    async def _apost(self, body):
        self.open_at_send.append(self._aio.open_connections if self._aio is not None else 0)
        return await super()._apost(body)


def test_the_first_batch_finds_its_connections_open_before_it(tmp_path: Path) -> None:
    assert async_chat_of(_PoolSpy("sub", "http://127.0.0.1:9/v1", api_key="x")) is not None
    summaries, sub, _ = _collect_batches(tmp_path, _PoolSpy, 1, 6, 0.2)  # the event-loop path
    assert isinstance(sub, _PoolSpy)
    assert [s.n_sub_calls for s in summaries] == [12]
    # opened while the root's first turn was in flight (min(sub_concurrency, max_sub_calls)),
    # so none of the 12 requests waited for TCP set-up, and none more were opened
    assert sub.open_at_send == [6] * 12


def test_300_concurrent_episodes_complete_with_no_error(tmp_path: Path) -> None:
    """Issue 17: 300 episodes at concurrency 300 (each: a batch of 8 sub-calls, then the
    memo) on one node; the select() limit and thread-per-sub-call once failed such runs.
    Where memory for 300 REPLs is short, admission runs fewer at once (a warning says how
    many) and the others wait: none may fail either way. Under bubblewrap, the sandbox users
    get by default (each REPL is a bwrap process tree)."""
    turn0 = "```repl\nanswers = llm_query_batched(['q %d' % i for i in range(8)])\nprint(len(answers))\n```"
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=20)
    handler = ScriptedHandler([turn0, MEMO], lambda p: "answer " + p)
    with FakeOpenAIServer(handler, latency_s=0.5) as server:
        url = server.base_url
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{url}",
            sub=f"openai:sub@{url}",
            episodes=300,
            concurrency=300,
            sub_concurrency=8,
            limits=EpisodeLimits(max_turns=3),
        )
        root = OpenAIChatClient("root", url, api_key="x")
        sub = OpenAIChatClient("sub", url, api_key="x")
        peak_threads = [threading.active_count()]
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.05):
                peak_threads[0] = max(peak_threads[0], threading.active_count())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            res = collect(cfg, tmp_path / "run", root, sub, progress=False)
        finally:
            stop.set()
            root.close()
            sub.close()
        n_requests = len(server.requests)
    assert len(res.summaries) == 300
    assert {s.status for s in res.summaries} == {"completed"}, [
        s.status_detail for s in res.summaries if s.status != "completed"
    ][:3]
    assert sum(s.n_sub_calls for s in res.summaries) == 2400
    assert sum(s.n_sub_call_errors for s in res.summaries) == 0
    assert len({s.episode_id for s in res.summaries}) == 300
    assert n_requests == 300 * 2 + 2400  # two root turns each, no retry
    # one thread per episode + the event loop + small bounded pools, never one per sub-call
    assert peak_threads[0] <= 300 + 40


def test_wall_time_covers_the_coverage_result(tmp_path: Path, monkeypatch) -> None:
    """Issue 17: wall_time_s was taken before the coverage result (1-2.5 s on LAB rooms)."""
    import time

    from rlmdistill.harness.episode import Episode

    done_at: list[float] = []
    real_coverage = Episode._coverage

    def coverage(self):
        out = real_coverage(self)
        done_at.append(time.monotonic() - self._t_start)
        return out

    monkeypatch.setattr(Episode, "_coverage", coverage)
    room = write_clause_room(tmp_path / "room", n_documents=2, repeats=5)
    with FakeOpenAIServer(ScriptedHandler([BATCH, MEMO], lambda p: "a " + p)) as server:
        url = server.base_url
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{url}",
            sub=f"openai:sub@{url}",
            episodes=1,
            limits=EpisodeLimits(max_turns=3),
            sandbox="audit",
        )
        root = OpenAIChatClient("root", url, api_key="x")
        (s,) = collect(cfg, tmp_path / "run", root, root, progress=False).summaries
        root.close()
    assert s.status == "completed" and len(done_at) == 1
    assert s.wall_time_s >= done_at[0] > 0


def test_an_empty_batch_on_the_event_loop_returns_at_once() -> None:
    client = OpenAIChatClient("sub", "http://127.0.0.1:9/v1", api_key="x")  # never reached
    assert Dispatch().chat(client, [], limit=4).result() == []


def test_episodes_run_with_the_start_up_heap_out_of_the_cyclic_gc(tmp_path: Path) -> None:
    """A full collection walks every object alive since start-up with the GIL held, stalling
    every episode and the event loop at once (~37 ms per collection with the collector's
    modules imported): while episodes run the start-up heap is frozen, and after the run the
    collector sees it again."""
    import gc

    seen: list[int] = []

    class Recording(_ChatOnly):
        def chat(self, messages, sampling, *, prefill=None):  # type: ignore[no-untyped-def]
            seen.append(gc.get_freeze_count())
            return super().chat(messages, sampling, prefill=prefill)

    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=5)
    handler = ScriptedHandler([BATCH, MEMO], lambda p: "answer " + p)
    before = gc.get_freeze_count()
    with FakeOpenAIServer(handler) as server:
        url = server.base_url
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{url}",
            sub=f"openai:sub@{url}",
            episodes=1,
            sub_concurrency=4,
            limits=EpisodeLimits(max_turns=3),
            sandbox="audit",
        )
        root = OpenAIChatClient("root", url, api_key="x")
        sub = Recording("sub", url, api_key="x")
        res = collect(cfg, tmp_path / "run", root, sub, progress=False)
        root.close()
        sub.close()
    assert [s.status for s in res.summaries] == ["completed"]
    assert len(seen) == 12 and min(seen) > 1000  # the imported modules' objects, frozen
    assert gc.get_freeze_count() == before == 0


class _Counting:
    """A client with a coroutine ``achat`` that counts the requests started and holds each
    until ``release`` is set (so none can finish before the test looks)."""

    model_id = "counting"

    def __init__(self) -> None:
        self.started = 0
        self.release = threading.Event()

    async def achat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        import asyncio

        self.started += 1  # the first step of the request: what "sent" waits for
        while not self.release.is_set():
            await asyncio.sleep(0.005)
        return ChatResult(
            text="ok", usage=Usage(), latency_s=0.0, finish_reason="stop", model="counting"
        )

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:  # pragma: no cover - the loop path is taken
        raise AssertionError("chat() called")


def test_a_batch_tells_when_its_requests_have_left() -> None:
    """``Pending.wait_sent`` returns once every request of the batch (up to ``limit``) has
    started, before any has finished: the episode builds its records and feeds the coverage
    probe after that, so that work never holds the GIL while the loop sends."""
    dispatch = Dispatch(max_threads=2, agent_threads=1)
    reqs = [([Message(role="user", content=f"q{i}")], Sampling(max_tokens=8)) for i in range(12)]
    for limit, expected in ((12, 12), (5, 5)):
        client = _Counting()
        pending = dispatch.chat(client, reqs, limit)
        assert pending.wait_sent(10.0)
        assert client.started == expected  # all of the first window, and no more
        client.release.set()
        assert [r.text for r, _ in pending.result()] == ["ok"] * 12  # type: ignore[union-attr]
        assert client.started == 12
    empty = dispatch.chat(_Counting(), [], 3)
    assert empty.wait_sent(10.0) and empty.result() == []
