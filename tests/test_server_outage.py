"""A model server lost in the middle of a run and brought back on the same port.

The server dies as a crashed process would (every open connection reset, new ones refused),
stays down for a while, and a new one comes up on its port. Requests in flight and requests
sent while it is down are retried with backoff (``docs/serving.md``, "connection reset" and
"connection refused"), so every episode finishes, none is blamed on the policy, and each
request the run sent reached one of the two servers. The fake server reports no cached
tokens (as vLLM without ``--enable-prompt-tokens-details``), so ``show`` counts every
episode's cache hits as unknown, not as 0.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from rlmdistill.analysis.summary import summarize_run
from rlmdistill.cli import app
from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room

TURN0 = (
    "```repl\nanswers = llm_query_batched(['q %d' % i for i in range(4)])\nprint(len(answers))\n```"
)
MEMO = "```repl\nFINAL_VAR('memo: ' + ' | '.join(answers[:2]))\n```"
EPISODES = 6
KILL_AFTER = 9
"""Requests the first server answers before it dies (mid-run: the run sends 6 x 6 = 36)."""
DOWN_S = 1.0
"""Seconds with nothing listening on the port."""


def test_server_lost_mid_run_and_back_on_its_port(tmp_path: Path) -> None:
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=5)
    scripted = ScriptedHandler([TURN0, MEMO], lambda p: "answer " + p)
    lock = threading.Lock()
    seen = [0]
    reached = threading.Event()

    def handler(request: dict[str, Any]) -> FakeReply | str:
        with lock:
            seen[0] += 1
            if seen[0] == KILL_AFTER:
                reached.set()
        return scripted(request)

    first = FakeOpenAIServer(handler, latency_s=0.2)
    port, url = first.port, first.base_url
    second: list[FakeOpenAIServer] = []

    def outage() -> None:
        reached.wait(120)
        first.kill()
        threading.Event().wait(DOWN_S)
        second.append(FakeOpenAIServer(handler, port=port, latency_s=0.0))

    saboteur = threading.Thread(target=outage, daemon=True)
    saboteur.start()
    # backoff from 0.25 s doubling, 8 retries: > 30 s of retries at the median, far past the
    # outage, so no request runs out of attempts while the port is dark
    mk = lambda m: OpenAIChatClient(  # noqa: E731
        m, url, api_key="x", max_retries=8, backoff_initial_s=0.25, backoff_max_s=8.0
    )
    root, sub = mk("root"), mk("sub")
    cfg = CollectConfig(
        rooms=[str(room)],
        root=f"openai:root@{url}",
        sub=f"openai:sub@{url}",
        episodes=EPISODES,
        concurrency=3,
        limits=EpisodeLimits(max_turns=3),
    )
    try:
        res = collect(cfg, tmp_path / "run", root, sub, progress=False)
    finally:
        saboteur.join(60)
        root.close()
        sub.close()
        first.close()
        for s in second:
            s.close()
    assert second, "the server never came back"
    n_first, n_second = len(first.requests), len(second[0].requests)
    assert n_first >= KILL_AFTER and n_second > 0  # the run went on past the outage
    assert [s.status for s in res.summaries] == ["completed"] * EPISODES, [
        s.status_detail for s in res.summaries
    ]
    assert sum(s.n_sub_calls for s in res.summaries) == EPISODES * 4
    assert sum(s.n_sub_call_errors for s in res.summaries) == 0
    # every turn and sub-call of the run was answered by one of the two servers (a request
    # cut by the reset may have been answered by the first and sent again to the second)
    assert n_first + n_second >= EPISODES * 6
    summary = summarize_run(tmp_path / "run")
    assert summary.cache_hits is not None
    assert summary.cache_hits.n_unknown_root == EPISODES
    assert summary.cache_hits.n_unknown_sub == EPISODES
    assert summary.cache_hits.root_rate is None and summary.cache_hits.sub_rate is None
    shown = CliRunner().invoke(app, ["show", str(tmp_path / "run")])
    assert shown.exit_code == 0, shown.output
    assert (
        f"root n/a ({EPISODES} episodes did not report it), sub n/a ({EPISODES} episodes"
        in " ".join(shown.output.split())
    )
