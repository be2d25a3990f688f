"""Harness overhead: one episode against a loopback server with fixed latency L.

The root makes 2 turns; turn 0 dispatches 64 sub-calls in one ``llm_query_batched`` at
concurrency 64; turn 1 hands back the memo. The critical path is 3L (root, sub batch, root);
we report the wall time from episode start (``EpisodeSummary.started_at``) to its summary line
written in ``episodes.jsonl`` (REPL start-up included; run set-up such as loading the room is
not) divided by 3L. The fake server runs in its own process so its CPU is not the harness's
(on a 2-core machine it still shares the cores: ~65 us of its CPU per reply, a 64-reply burst
~5 ms). Target: <= 1.05 at L = 0.2 s with the default sandbox (bubblewrap). Each repeat is a fresh run (new clients, new
connections, new server process); the median over repeats is the figure to quote.

    python benchmarks/bench_harness_overhead.py [--latency 0.2 1.0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.schema import EpisodeSummary
from rlmdistill.traces.store import parse_records

TURN0 = "```repl\nanswers = llm_query_batched(['question %d' % i for i in range(64)])\nprint(len(answers))\n```"
TURN1 = "```repl\nmemo = 'Findings: ' + ' '.join(answers[:3])\nFINAL_VAR(memo)\n```"


def _answer(prompt: str) -> str:
    return "answer to " + prompt


def _serve(latency: float, urls: mp.Queue, stop: Any) -> None:
    """Run the fake server in its own process, so its CPU time is not the harness's."""
    handler = ScriptedHandler([TURN0, TURN1], _answer)
    with FakeOpenAIServer(handler, latency_s=latency) as server:
        urls.put(server.base_url)
        stop.wait()


def one(latency: float, room: Path, out: Path, sandbox: str = "bwrap") -> float:
    ctx = mp.get_context("spawn")
    urls: mp.Queue = ctx.Queue()
    stop = ctx.Event()
    proc = ctx.Process(target=_serve, args=(latency, urls, stop), daemon=True)
    proc.start()
    url = urls.get(timeout=60)
    try:
        mk = lambda m: OpenAIChatClient(m, url, api_key="x", max_concurrency=64)  # noqa: E731
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{url}",
            sub=f"openai:sub@{url}",
            episodes=1,
            concurrency=1,
            sub_concurrency=64,
            limits=EpisodeLimits(max_turns=3),
            sandbox=sandbox,
        )
        root, sub = mk("root"), mk("sub")
        res = collect(cfg, out, root, sub, progress=False)
        written = time.time()  # collect returns right after appending the summary line
        (s,) = list(parse_records(out / "episodes.jsonl", EpisodeSummary))
        wall = written - s.started_at.timestamp()
        assert s.status == "completed" and s.n_sub_calls == 64, (s.status, s.status_detail)
        assert res.summaries[0].episode_id == s.episode_id
        root.close()
        sub.close()
    finally:
        stop.set()
        proc.join(timeout=10)
    return wall


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, nargs="+", default=[0.2, 1.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sandbox", default="bwrap", choices=["bwrap", "audit", "none"])
    args = ap.parse_args(argv)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
        f" sandbox {args.sandbox}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        room = write_clause_room(Path(tmp) / "room")
        for latency in args.latency:
            walls = [
                one(latency, room, Path(tmp) / f"run-{latency}-{k}", args.sandbox)
                for k in range(args.repeats)
            ]
            ratios = [w / (3 * latency) for w in walls]
            print(
                f"L={latency:.2f}s  critical path 3L={3 * latency:.2f}s  wall median "
                f"{statistics.median(walls):.3f}s  ratio median {statistics.median(ratios):.3f} "
                f"best {min(ratios):.3f} worst {max(ratios):.3f}  (each: "
                + " ".join(f"{r:.3f}" for r in ratios)
                + ")"
            )
            if latency == 0.2:
                print(
                    f"result: harness overhead at L=0.2 s ({args.sandbox}): median "
                    f"{statistics.median(ratios):.3f} over {args.repeats} fresh runs (target <= 1.05)"
                )


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
