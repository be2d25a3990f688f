"""Episodes per minute on 1, 2 and 3 local Ray nodes, and Ray's overhead per episode next to
the thread executor's.

One ``ray.cluster_utils.Cluster`` on this machine (loopback only) grows from 1 to 3 nodes,
each with ``--slots`` episode slots (custom resource ``slots``). Every episode is the same
scripted 2-turn episode against a loopback fake server (own process) whose every reply takes
``--latency`` L seconds: root turn, one batch of sub-calls, root turn, so its critical path is
3L. L is chosen large enough that the episodes wait on the server, not on the 2 CPU cores
(each episode costs a REPL start and a few ms of collector CPU): ideal throughput is then
``nodes x slots`` episodes per 3L.

Per configuration we run ``nodes x slots x --rounds`` episodes and report:

- episodes per minute over the episodes' span (first dispatch, once every node's worker has
  started, to the last commit; thread executor: first start to last end), and over the wall
  time of the whole ``collect`` call (set-up included: rooms, each node's worker start);
- overhead per episode: slot-seconds each episode took beyond its own ``wall_time_s``,
  ``(span x slots_total / episodes) - mean(wall_time_s)``; for Ray also the driver's
  dispatch-to-commit time minus ``wall_time_s`` (``placement.jsonl``), i.e. shipping the job,
  returning the trajectory and committing it;
- the same for the thread executor at ``concurrency = slots`` (one machine, no Ray).

    python benchmarks/bench_ray_collect.py [--latency 2.0] [--slots 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rlmdistill.collect.config import CollectConfig, EpisodeLimits, RayOptions
from rlmdistill.collect.ray_executor import PLACEMENT_FILE, Placement
from rlmdistill.collect.runner import collect
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.schema import EpisodeSummary
from rlmdistill.traces.store import parse_records

EXPLORE = (
    "```repl\ndocs = list_documents()\n"
    "answers = llm_query_batched(['Summarise ' + d['id'] for d in docs[:8]])\nprint(len(answers))\n```"
)
MEMO = "```repl\nmemo = 'Findings: ' + ' '.join(answers)\nFINAL_VAR(memo)\n```"
OBJECT_STORE = 80 * 1024 * 1024


def _serve(latency: float, urls: Any, stop: Any) -> None:
    """The fake server in its own process, so its CPU is not the collector's."""
    handler = ScriptedHandler([EXPLORE, MEMO], lambda p: "answer to " + p[:30])
    with FakeOpenAIServer(handler, latency_s=latency) as server:
        urls.put(server.base_url)
        stop.wait()


def _config(
    room: Path, url: str, episodes: int, concurrency: int, executor: str, sandbox: str
) -> CollectConfig:
    return CollectConfig(
        rooms=[str(room)],
        root=f"openai:root@{url}",
        sub=f"openai:sub@{url}",
        episodes=episodes,
        concurrency=concurrency,
        sub_concurrency=8,
        limits=EpisodeLimits(max_turns=3),
        sandbox=sandbox,  # type: ignore[arg-type]
        executor=executor,  # type: ignore[arg-type]
        ray=RayOptions(slots_resource="slots"),
    )


def _measure(cfg: CollectConfig, out: Path, url: str, slots_total: int) -> dict[str, float]:
    mk = lambda m: OpenAIChatClient(m, url, api_key="x", max_concurrency=64)  # noqa: E731
    with mk("root") as root, mk("sub") as sub:
        t0 = time.monotonic()
        res = collect(cfg, out, root, sub, progress=False)
        wall = time.monotonic() - t0
    summaries = list(parse_records(out / "episodes.jsonl", EpisodeSummary))
    bad = [s.status for s in summaries if s.status != "completed"]
    assert len(summaries) == cfg.episodes and not bad, bad
    assert len(res.summaries) == cfg.episodes
    ep_wall = statistics.mean(s.wall_time_s for s in summaries)
    # the span of the episodes themselves: first start (thread) / first dispatch (ray, after
    # every node's worker started) to the last summary committed
    first = min(s.started_at for s in summaries).timestamp()
    last = max(s.ended_at for s in summaries).timestamp()
    placements: list[Placement] = []
    if (out / PLACEMENT_FILE).exists():
        placements = list(parse_records(out / PLACEMENT_FILE, Placement))
        first = min(p.dispatched_at for p in placements).timestamp()
        last = max(p.committed_at for p in placements).timestamp()
    span = last - first
    row = {
        "episodes": float(cfg.episodes),
        "wall_s": wall,
        "span_s": span,
        "episodes_per_min": 60.0 * cfg.episodes / span,
        "episodes_per_min_with_setup": 60.0 * cfg.episodes / wall,
        "episode_wall_s": ep_wall,
        "overhead_per_episode_s": span * slots_total / cfg.episodes - ep_wall,
    }
    if placements:
        by_id = {s.episode_id: s.wall_time_s for s in summaries}
        trips = [p.round_trip_s - by_id[p.episode_id] for p in placements]
        row["dispatch_to_commit_minus_wall_s"] = statistics.median(trips)
        row["nodes_used"] = float(len({p.node_id for p in placements}))
    return row


def _fmt(name: str, row: dict[str, float], ideal: float) -> str:
    text = (
        f"{name:<20} {int(row['episodes']):>3} episodes  {row['episodes_per_min']:6.1f} "
        f"episodes/min (ideal {ideal:5.1f}; {row['episodes_per_min_with_setup']:5.1f} with "
        f"set-up, wall {row['wall_s']:5.1f} s)  episode wall {row['episode_wall_s']:5.2f} s  "
        f"overhead/episode {row['overhead_per_episode_s']:5.2f} s"
    )
    if "dispatch_to_commit_minus_wall_s" in row:
        text += (
            f"  dispatch->commit - wall (median) "
            f"{row['dispatch_to_commit_minus_wall_s'] * 1000:5.0f} ms  nodes used {int(row['nodes_used'])}"
        )
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per server reply (L)")
    ap.add_argument("--slots", type=int, default=4, help="episode slots per node")
    ap.add_argument("--rounds", type=int, default=3, help="episodes per slot")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--sandbox", default="bwrap", choices=["bwrap", "audit", "none"])
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback addresses only
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"ray {ray.__version__}; L = {args.latency} s; {args.slots} slots per node; "
          f"{args.rounds} episodes per slot; sandbox {args.sandbox}; critical path 3L = {3 * args.latency:.1f} s")  # fmt: skip
    ctx = mp.get_context("spawn")
    urls: Any = ctx.Queue()
    stop = ctx.Event()
    server = ctx.Process(target=_serve, args=(args.latency, urls, stop), daemon=True)
    server.start()
    url = urls.get(timeout=60)
    per_min_ideal = lambda slots: 60.0 * slots / (3 * args.latency)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        room = write_clause_room(Path(tmp) / "room", n_documents=8, repeats=200)
        os.environ.setdefault("RLMDISTILL_ROOM_CACHE", str(Path(tmp) / "room-cache"))
        # thread executor first, same workload as one node
        n_ep = args.slots * args.rounds
        cfg = _config(room, url, n_ep, args.slots, "thread", args.sandbox)
        row = _measure(cfg, Path(tmp) / "thread", url, args.slots)
        print(_fmt(f"thread x{args.slots}", row, per_min_ideal(args.slots)), flush=True)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "resources": {"slots": args.slots},
                            "object_store_memory": OBJECT_STORE, "include_dashboard": False},
        )  # fmt: skip
        ray.init(address=cluster.address)
        try:
            n_nodes = 1
            for want in sorted(args.nodes):
                while n_nodes < want:
                    cluster.add_node(num_cpus=1, resources={"slots": args.slots},
                                     object_store_memory=OBJECT_STORE)  # fmt: skip
                    n_nodes += 1
                cluster.wait_for_nodes()
                slots = want * args.slots
                n_ep = slots * args.rounds
                cfg = _config(room, url, n_ep, slots, "ray", args.sandbox)
                cfg = cfg.model_copy(update={"seed": want})  # a new run per size
                row = _measure(cfg, Path(tmp) / f"ray-{want}", url, slots)
                print(
                    _fmt(f"ray {want} node(s) x{args.slots}", row, per_min_ideal(slots)), flush=True
                )
        finally:
            ray.shutdown()
            cluster.shutdown()
            stop.set()
            server.join(timeout=10)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)
    main()
