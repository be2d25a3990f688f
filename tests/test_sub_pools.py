"""Run-level sub-call thread pools: started once per run, one per running episode, reused."""

from __future__ import annotations

import threading
from pathlib import Path

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import _started_pool, collect, sub_call_pools
from rlmdistill.models.base import ChatResult, Message, Sampling
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room

BATCH = "```repl\nanswers = llm_query_batched(['q %d' % i for i in range(12)])\nprint(len(answers))\n```"
MEMO = "```repl\nFINAL_VAR('memo: ' + ' | '.join(answers[:2]))\n```"


class _ThreadRecordingClient(OpenAIChatClient):
    """Records the thread every chat runs on (the objects: names and idents get reused)."""

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


def test_started_pool_has_every_thread_running_before_any_work() -> None:
    pool = _started_pool(5, "warm-test")
    try:
        names = [t.name for t in threading.enumerate() if t.name.startswith("warm-test")]
        assert len(names) == 5
    finally:
        pool.shutdown(wait=True)
    assert not [t for t in threading.enumerate() if t.name.startswith("warm-test")]


def test_sub_call_pools_hands_out_distinct_pools_and_shuts_them_down() -> None:
    with sub_call_pools(3, 2) as free:
        pools = [free.get() for _ in range(3)]
        assert len({id(p) for p in pools}) == 3
        assert free.empty()
        for p in pools:
            free.put(p)
    assert all(p._shutdown for p in pools)


def test_sub_concurrency_stays_per_episode_and_threads_are_reused(tmp_path: Path) -> None:
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=50)
    handler = ScriptedHandler([BATCH, MEMO], lambda p: "answer " + p)
    with FakeOpenAIServer(handler, latency_s=0.05) as server:
        url = server.base_url
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{url}",
            sub=f"openai:sub@{url}",
            episodes=3,
            concurrency=1,
            sub_concurrency=3,
            limits=EpisodeLimits(max_turns=3),
        )
        root = OpenAIChatClient("root", url, api_key="x")
        sub = _ThreadRecordingClient("sub", url, api_key="x", max_concurrency=64)
        res = collect(cfg, tmp_path / "run", root, sub, progress=False)
        root.close()
        sub.close()
        peak = server.max_in_flight
    assert [s.status for s in res.summaries] == ["completed"] * 3
    assert [s.n_sub_calls for s in res.summaries] == [12, 12, 12]
    # 12 prompts per batch, 3 threads for the episode: never more than 3 requests in flight
    assert peak == 3
    # 36 sub-calls over 3 episodes ran on the same 3 threads of the run's one pool
    assert len(sub.threads) == 36
    assert len({id(t) for t in sub.threads}) == 3
