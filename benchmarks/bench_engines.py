"""Static vs continuous batching of the in-process back end, replaying a recorded run.

:class:`~rlmdistill.models.local.LocalChatClient` can batch with one ``generate`` call per
group of queued requests (``static``, the default) or with one running batch that requests
join and leave between decode steps (``continuous``, :mod:`rlmdistill.models.continuous`).
Which is faster depends on how far apart the rows of a batch finish, so this replays the
request pattern of a real run instead of a synthetic one: by default the runs of the main job
kept in ``docs/results/quickstart/workspace.tar.xz`` (seed 1).

Each recorded episode is replayed in its own thread, at most ``--concurrency`` at once (the
run's ``concurrency``): for every root turn, the turn's exact prompt ids with the run's root
sampling and the turn's seed, then that turn's sub-calls at once (each as one user message
with the recorded prompt, the run's sub sampling and the call's seed), then the next turn.
The replies are sampled anew, so their lengths differ from the recorded ones and between
the engines; the figures are the wall time and the new tokens per second of each engine on
the same requests, one engine after the other in this process.

    python benchmarks/bench_engines.py [--runs r1-eval-tuned] [--episodes 8] [--max-batch 8]
        [--workspace TARBALL_OR_DIR] [--adapter DIR] [--engines static continuous]
        [--prefix-cache-mb 0 512] [--dtype auto|float32|bfloat16]

``--prefix-cache-mb`` runs the continuous engine once per size of its prefix cache
(:class:`~rlmdistill.models.continuous.PrefixCache`; ``0``: off) and prints the prompt ids
prefilled and those reused. In a replay the reuse is a lower bound of a real run's: a turn's
recorded prompt continues the *recorded* reply, not the one sampled anew, so only their common
start (and the earlier prompt) can come from the cache.

``--workspace`` may be a loop workspace folder (``experiments/quickstart-seed1``) and
``--adapter`` the LoRA adapter its run's root used (e.g. a checkpoint of a check run), loaded
unmerged as ``local:BASE+adapter=DIR`` does.
"""

from __future__ import annotations

import argparse
import os
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlmdistill.hardware import machine_line
from rlmdistill.models.base import Message, Sampling
from rlmdistill.models.local import PREFIX_CACHE_MB, LocalChatClient
from rlmdistill.models.pull import pull
from rlmdistill.traces.runs import load_manifest, load_summaries, load_trajectory
from rlmdistill.traces.tokens import prompt_ids

HERE = Path(__file__).resolve().parent
WORKSPACE = HERE.parent / "docs" / "results" / "quickstart" / "workspace.tar.xz"


def episodes_of(run_dir: Path, limit: int) -> tuple[list[list[Any]], dict[str, Any]]:
    """Per episode (the first ``limit``), its phases in order: ``("root", ids, seed)`` and
    ``("subs", [(prompt, seed), ...])``; and the run's collect config."""
    config = load_manifest(run_dir).config
    out = []
    for s in load_summaries(run_dir)[:limit]:
        traj = load_trajectory(run_dir, s.episode_id)
        ids = prompt_ids(traj.turns)
        phases: list[Any] = []
        for turn, p in zip(sorted(traj.turns, key=lambda t: t.turn), ids, strict=True):
            if p is None:
                raise SystemExit(f"{run_dir}: episode {s.episode_id} turn {turn.turn}: no ids")
            phases.append(("root", p, turn.seed))
            calls = [(c.prompt, c.seed) for c in traj.sub_calls if c.turn == turn.turn]
            if calls:
                phases.append(("subs", calls))
        out.append(phases)
    return out, config.model_dump()


def replay(
    client: LocalChatClient,
    episodes: list[list[Any]],
    config: dict[str, Any],
    concurrency: int,
) -> dict[str, float]:
    """Run every episode's phases; returns wall seconds, prompt and new tokens."""
    root = Sampling.model_validate(config["root_sampling"])
    sub = Sampling.model_validate(config["sub_sampling"])
    lock = threading.Lock()
    totals = {"prompt": 0, "new": 0, "requests": 0}

    def count(results: list[Any]) -> None:
        with lock:
            for r in results:
                totals["prompt"] += r.usage.prompt_tokens
                totals["new"] += r.usage.completion_tokens
                totals["requests"] += 1

    def one(phases: list[Any]) -> None:
        for phase in phases:
            if phase[0] == "root":
                _, ids, seed = phase
                s = root.model_copy(update={"seed": seed})
                room = client.context_window - len(ids)
                count([client._submit(ids, min(s.max_tokens, room), s).result()])
            else:
                futures = []
                for prompt, seed in phase[1]:
                    s = sub.model_copy(update={"seed": seed})
                    ids, max_tokens = client._prepare(
                        [Message(role="user", content=prompt)], s, None
                    )
                    futures.append(client._submit(ids, max_tokens, s))
                count([f.result() for f in futures])

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, episodes))
    wall = time.perf_counter() - started
    return {"wall": wall, **{k: float(v) for k, v in totals.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workspace", type=Path, default=WORKSPACE)
    parser.add_argument("--runs", nargs="+", default=["r1-eval-tuned"])
    parser.add_argument("--episodes", type=int, default=8, help="episodes per run replayed")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--engines", nargs="+", default=["static", "continuous"])
    parser.add_argument("--adapter", type=Path, default=None, help="LoRA adapter of the root")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="compute dtype (float32 with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2: "
        "as on a CPU without native bfloat16)",
    )
    parser.add_argument(
        "--prefix-cache-mb",
        nargs="+",
        type=float,
        default=[PREFIX_CACHE_MB],
        help="prefix cache sizes of the continuous engine, one replay each (0: off)",
    )
    args = parser.parse_args()

    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        if args.workspace.is_dir():
            top = args.workspace
        else:
            with tarfile.open(args.workspace) as tar:
                tar.extractall(tmp, filter="data")
            (top,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        model_dir = pull(args.model, progress=False)
        for name in args.runs:
            episodes, config = episodes_of(top / "runs" / name, args.episodes)
            n_root = sum(1 for e in episodes for p in e if p[0] == "root")
            n_sub = sum(len(p[1]) for e in episodes for p in e if p[0] == "subs")
            print(
                f"run {name}: {len(episodes)} episodes, {n_root} root turns, {n_sub} sub-calls, "
                f"concurrency {config['concurrency']}, root max_tokens "
                f"{config['root_sampling']['max_tokens']}, sub {config['sub_sampling']['max_tokens']}"
            )
            walls = {}
            for engine in args.engines:
                sizes = args.prefix_cache_mb if engine == "continuous" else [0.0]
                for mb in sizes:
                    label = engine + (f" prefix-cache {mb:g} MiB" if engine == "continuous" else "")
                    with LocalChatClient(
                        model_dir,
                        adapter=args.adapter,
                        max_batch=args.max_batch,
                        engine=engine,
                        prefix_cache_mb=mb,
                        dtype=args.dtype,
                    ) as c:
                        load = os.getloadavg()[0]
                        r = replay(c, episodes, config, config["concurrency"])
                        b = getattr(c, "batcher", None)
                        steps = getattr(b, "decode_steps", None)
                        mean = (
                            f", mean rows per decode step {b.row_steps / steps:.1f}"
                            if steps
                            else ""
                        )
                        prefill = (
                            f", prefilled {b.prefill_tokens} prompt ids, {b.reused_tokens} reused"
                            if b is not None
                            else ""
                        )
                        walls[label] = r["wall"]
                        print(
                            f"{name} {label}: {r['wall']:.1f} s for {r['requests']:.0f} requests, "
                            f"{r['prompt']:.0f} prompt + {r['new']:.0f} new tokens = "
                            f"{r['new'] / r['wall']:.1f} new tokens/s{mean}{prefill} "
                            f"(load {load:.2f})",
                            flush=True,
                        )
            base = next(
                (k for k in ("static", "continuous prefix-cache 0 MiB") if k in walls), None
            )
            for label, wall in walls.items():
                if base is not None and label != base:
                    print(
                        f"result: {name}: {label} {wall:.0f} s vs {base} {walls[base]:.0f} s "
                        f"({walls[base] / wall:.2f}x)"
                    )


if __name__ == "__main__":
    main()
