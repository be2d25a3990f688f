"""Many concurrent episodes on one node, and several servers behind one spec (issue 17).

Each episode: root turn 0 dispatches 64 sub-calls in one ``llm_query_batched`` (sub-concurrency
64), root turn 1 hands back the memo, so its critical path is 3L against a fake server with
fixed latency L (default 1 s) running in its own process (its CPU is not the collector's).
E episodes run at once; the ideal wall time of the run is 3L whatever E. Figures per scenario:

- wall / ideal: ``collect()`` from call to return (room snapshot check and run start
  included) over 3L;
- collector CPU per sub-call: user + system CPU of the collector process over the call
  (REPL processes excluded: they are children) / (E x S: S sub-calls an episode, 64 unless
  the scenario says otherwise);
- peak threads of the collector process (``/proc``, every 10 ms);
- errors: episodes not ``completed`` + sub-call errors + unfinished attempts.

A one-episode warm-up run comes first (not reported). Scenarios: ``16x64``, ``64x64``,
``256x64`` (one server; any ``ExS`` runs E episodes of S sub-calls each, e.g. ``4x8`` for a
smoke test); ``split`` (64 x 64 over two servers behind ``openai:MODEL@URL1,URL2``: requests
per server); ``kill`` (the same, one server SIGKILLed 1.5 L into the run: the run must
complete). ``benchmarks/bench_scale.py`` parses the per-scenario lines.

    python benchmarks/bench_concurrency.py [--latency 1.0] [--only 64x64 split] [--sandbox bwrap]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import resource
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.models.spec import open_client
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room


def turn0(n_sub: int) -> str:
    """Root turn 0: one ``llm_query_batched`` of ``n_sub`` sub-calls."""
    return (
        "```repl\nanswers = llm_query_batched(['question %d' % i for i in range("
        f"{n_sub})])\nprint(len(answers))\n```"
    )


TURN1 = "```repl\nmemo = 'Findings: ' + ' '.join(answers[:3])\nFINAL_VAR(memo)\n```"


def _answer(prompt: str) -> str:
    return "answer to " + prompt


def _serve(latency: float, urls: Any, stop: Any, counts: Any, n_sub: int = 64) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with FakeOpenAIServer(ScriptedHandler([turn0(n_sub), TURN1], _answer), latency_s=latency) as s:
        urls.put(s.base_url)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        stop.wait()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        counts.put((len(s.requests), cpu))


class Servers:
    """``n`` fake servers, each in its own process."""

    def __init__(self, n: int, latency: float, n_sub: int = 64) -> None:
        ctx = mp.get_context("spawn")
        self.procs, self.urls, self.counts, self.stops = [], [], [], []
        for _ in range(n):  # one stop event each: a SIGKILLed waiter would wedge a shared one
            q, c, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
            p = ctx.Process(target=_serve, args=(latency, q, stop, c, n_sub), daemon=True)
            p.start()
            self.procs.append(p)
            self.urls.append(q.get(timeout=60))
            self.counts.append(c)
            self.stops.append(stop)
        self.killed: set[int] = set()

    def kill(self, i: int) -> None:
        self.killed.add(i)
        os.kill(self.procs[i].pid, signal.SIGKILL)

    def close(self) -> tuple[list[int | None], float]:
        """Requests each server received (``None`` for a killed one) and the CPU seconds the
        surviving servers spent."""
        out: list[int | None] = []
        cpu = 0.0
        for i, (p, c, stop) in enumerate(zip(self.procs, self.counts, self.stops, strict=True)):
            if i in self.killed:
                out.append(None)
            else:
                stop.set()
                n, used = c.get(timeout=30)
                out.append(n)
                cpu += used
            p.join(timeout=10)
        return out, cpu


def _peak_threads(stop: threading.Event, peak: list[int]) -> None:
    me = psutil.Process()
    while not stop.wait(0.01):
        peak[0] = max(peak[0], me.num_threads())


def scenario(
    name: str,
    episodes: int,
    latency: float,
    tmp: Path,
    sandbox: str,
    servers: int = 1,
    n_sub: int = 64,
) -> dict[str, Any]:
    room = tmp / "room"
    if not room.exists():
        write_clause_room(room, n_documents=4, repeats=50)
    srv = Servers(servers, latency, n_sub)
    urls = ",".join(srv.urls)
    cfg = CollectConfig(
        rooms=[str(room)],
        root=f"openai:root@{urls}",
        sub=f"openai:sub@{urls}",
        episodes=episodes,
        concurrency=episodes,
        sub_concurrency=n_sub,
        limits=EpisodeLimits(max_turns=3),
        sandbox=sandbox,  # type: ignore[arg-type]
    )
    root, sub = open_client(cfg.root, max_concurrency=64), open_client(cfg.sub, max_concurrency=64)
    peak = [0]
    stop = threading.Event()
    watcher = threading.Thread(target=_peak_threads, args=(stop, peak), daemon=True)
    watcher.start()
    if name == "kill":  # once the sub-call batches are in flight on server 1: kill it

        def kill_when_busy() -> None:
            while not stop.wait(0.005):
                if getattr(sub, "outstanding", [0, 0])[1] >= n_sub:
                    srv.kill(1)
                    return

        threading.Thread(target=kill_when_busy, daemon=True).start()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    run_dir = Path(tempfile.mkdtemp(prefix=f"run-{name}-", dir=tmp))
    res = collect(cfg, run_dir, root, sub, progress=False)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    watcher.join()
    served = getattr(sub, "served", None), getattr(root, "served", None)
    root.close()
    sub.close()
    counts, server_cpu = srv.close()
    n_calls = episodes * n_sub
    error_kinds: dict[str, int] = {}
    for s in res.summaries:
        if s.n_sub_call_errors:
            path = run_dir / "trajectories" / f"{s.episode_id}.jsonl"
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                kind = rec.get("error_kind")
                if kind:
                    if kind not in error_kinds:
                        print(f"  first {kind} sub-call error: {rec.get('error', '')[:400]}")
                    error_kinds[kind] = error_kinds.get(kind, 0) + 1
        elif s.status != "completed":
            error_kinds[s.status] = error_kinds.get(s.status, 0) + 1
    starts = sorted(s.started_at.timestamp() for s in res.summaries)
    walls = sorted(s.wall_time_s for s in res.summaries)
    errors = (
        sum(s.status != "completed" for s in res.summaries)
        + sum(s.n_sub_call_errors for s in res.summaries)
        + len(res.unfinished)
        + res.not_started
    )
    out = {
        "name": name,
        "episodes": episodes,
        "sub_calls": n_sub,
        "completed": sum(s.status == "completed" for s in res.summaries),
        "errors": errors,
        "error_kinds": error_kinds,
        "wall_s": wall,
        "ideal_s": 3 * latency,
        "ratio": wall / (3 * latency),
        "cpu_user_s": r1.ru_utime - r0.ru_utime,
        "cpu_sys_s": r1.ru_stime - r0.ru_stime,
        "cpu_ms_per_sub_call": 1000
        * (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        / n_calls,
        "peak_threads": peak[0],
        "start_spread_s": starts[-1] - starts[0] if starts else 0.0,
        "episode_wall_p50_s": walls[len(walls) // 2] if walls else 0.0,
        "episode_wall_max_s": walls[-1] if walls else 0.0,
        "requests_per_server": counts,
        "server_cpu_s": server_cpu,
        "served_sub": served[0],
        "served_root": served[1],
    }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--sandbox", default="bwrap", choices=["bwrap", "audit", "none"])
    ap.add_argument("--only", nargs="*", default=["16x64", "64x64", "256x64", "split", "kill"])
    args = ap.parse_args(argv)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime before: {load}", flush=True)
    plan = {"split": (64, 2, 64), "kill": (64, 2, 64)}  # name -> (episodes, servers, sub-calls)
    for name in args.only:
        m = re.fullmatch(r"(\d+)x(\d+)", name)
        if m:
            plan[name] = (int(m.group(1)), 1, int(m.group(2)))
        elif name not in plan:
            ap.error(f"--only {name}: not a scenario (ExS, e.g. 16x64; split; kill)")
    with tempfile.TemporaryDirectory() as tmp:
        # warm-up, not reported: the room's snapshot and coverage index, the bwrap check,
        # the event loop and pools (once per process or room, not per run)
        scenario("warm-up", 1, 0.05, Path(tmp), args.sandbox)
        for name in args.only:
            episodes, servers, n_sub = plan[name]
            r = scenario(name, episodes, args.latency, Path(tmp), args.sandbox, servers, n_sub)
            print(
                f"{name:7s} L={args.latency:.1f}s {r['episodes']} episodes x {n_sub} sub-calls: "
                f"completed {r['completed']}, errors {r['errors']} {r['error_kinds'] or ''}, wall {r['wall_s']:.3f}s / "
                f"ideal {r['ideal_s']:.1f}s = {r['ratio']:.3f}; collector CPU "
                f"{r['cpu_user_s']:.2f}s user + {r['cpu_sys_s']:.2f}s sys = "
                f"{r['cpu_ms_per_sub_call']:.3f} ms per sub-call; peak threads "
                f"{r['peak_threads']}; episodes started over {r['start_spread_s']:.2f}s, "
                f"episode wall p50 {r['episode_wall_p50_s']:.2f}s max {r['episode_wall_max_s']:.2f}s; "
                f"fake server CPU {r['server_cpu_s']:.2f}s"
                + (
                    f"; requests per server {r['requests_per_server']}, sub-calls answered "
                    f"per replica {r['served_sub']}, root turns {r['served_root']}"
                    if servers > 1
                    else ""
                ),
                flush=True,
            )
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime after: {load}", flush=True)


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
