"""GRPO step time with served rollouts (a real vLLM server, adapter reloads, one step of
prefetch) against in-process rollouts (the trainer's own weights), on the same machine.

One vLLM server (the CPU build, ``scripts/vllm_server.sh setup``) serves SmolLM2-135M with
``--enable-lora`` on 127.0.0.1 for the whole benchmark. Both arms train the same trainer
(SmolLM2-135M, float32, LoRA r 8 on q/v) on the same 3-contract CUAD room with the same seeds,
K rollouts per step, ``--steps`` steps, the same root limits, and the same sub: the server's
base model (``openai:``), so the arms differ only in where the root of the rollouts runs:

- ``in_process``: the trainer's current weights generate every rollout inside the step
  (on-policy);
- ``served``: the server generates them with the adapter version loaded every step
  (``sync_every: 1``), step k+1's rollouts generated in the background while step k trains
  (``prefetch: true``, staleness 1).

The reward is ``distinct_root_tokens`` (it varies within a group, so every step has an update).
Prints, per arm: the wall time of :func:`rlmdistill.rl.run` (model load, rollouts, updates,
saves), the seconds between consecutive steps' log lines (steps 2..N: a step's rollouts and
update; step 1 of the served arm cannot have been prefetched) with their median as the
headline, TRL's own ``step_time``, the rollout seconds of each step, and the ratio
served / in-process.
The arms alternate (``--repeats``), the in-process arm first.

    python benchmarks/bench_grpo_served.py [--steps 4] [--k 2] [--max-tokens 24] [--repeats 1]

On 2 cores the server and the trainer share the same cores, so the overlap cannot add compute
there; what the served path saves is the trainer's own (slower) generation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def arm_config(
    arm: str, room: Path, out: Path, base: Path, server_url: str, args: argparse.Namespace
) -> dict[str, Any]:
    """The ``rlmdistill rl`` fields of one arm (``build_config`` overrides)."""
    cfg: dict[str, Any] = {
        "rooms": [str(room)],
        "out": str(out),
        "base": str(base),
        "sub": f"openai:smol@{server_url}",
        "num_generations": args.k,
        "max_steps": args.steps,
        "beta": 0.0,
        "save_steps": 1000,
        "seed": 0,
        "reward": "rlmdistill.testing.rl_rewards:distinct_root_tokens",
        "collect": {
            "limits": {"max_turns": args.turns},
            "root_sampling": {"max_tokens": args.max_tokens, "temperature": 1.0},
            "sub_sampling": {"max_tokens": 8, "temperature": 0.0},
            "few_shot": False,
            "prefill": "```repl\n",
            "request_timeout_s": 600,
        },
    }
    if arm == "served":
        cfg["rollouts"] = "served"
        cfg["serving"] = {"base_url": server_url, "model": "smol"}
        cfg["sync_every"] = 1
        cfg["prefetch"] = True
    return cfg


def run_arm(
    arm: str, room: Path, work: Path, base: Path, url: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Train one arm; its wall seconds and per-step figures from ``rl_log.jsonl``."""
    from rlmdistill.rl import run
    from rlmdistill.rl.config import build_config

    out = work / f"{arm}-{time.monotonic_ns()}"
    cfg = build_config(None, arm_config(arm, room, out, base, url, args))
    t0 = time.monotonic()
    res = run(cfg, progress=False)
    wall = time.monotonic() - t0
    lines = [json.loads(x) for x in (out / "rl_log.jsonl").read_text().splitlines()]
    step_times = [float(r.get("trl", {}).get("step_time") or "nan") for r in lines]
    stamps = [dt.datetime.fromisoformat(r["time"]).timestamp() for r in lines]
    between = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "arm": arm,
        "steps": res.global_step,
        "wall_s": wall,
        "step_time_s": step_times,
        "between_logs_s": between,
        "rollout_wall_s": [r.get("rollout_wall_s") for r in lines],
        "prefetch": [r.get("prefetch") for r in lines],
        "staleness": [r.get("staleness") for r in lines],
        "generated_tokens": [r.get("generated_tokens") for r in lines],
    }


def main() -> None:
    """Parse flags, start the server, run the arms, print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per arm")
    p.add_argument("--k", type=int, default=2, help="rollouts per group (one room, one group)")
    p.add_argument("--turns", type=int, default=2, help="root turns per episode (max)")
    p.add_argument("--max-tokens", type=int, default=24, help="root tokens per turn (max)")
    p.add_argument("--repeats", type=int, default=1, help="alternations in_process, served")
    args = p.parse_args()

    from rlmdistill.hardware import machine_line
    from rlmdistill.models.pull import pull
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE, build_cuad_room
    from rlmdistill.testing.vllm_server import VLLMServer, venv_dir, venv_python

    print(machine_line(), flush=True)
    if venv_python() is None:
        raise SystemExit(f"no vLLM virtualenv at {venv_dir()}: run `scripts/vllm_server.sh setup`")
    base = pull("smollm2-135m", progress=False)
    with tempfile.TemporaryDirectory(prefix="bench-grpo-served-") as tmp:
        work = Path(tmp)
        room = work / "room"
        build_cuad_room(SAMPLE_SOURCE, room, 3, 0)
        server = VLLMServer(base, "smol", max_model_len=2048, max_lora_rank=8)
        server.start()
        print(f"vLLM ready in {server.startup_s:.0f} s at {server.base_url}", flush=True)
        results: list[dict[str, Any]] = []
        try:
            for _ in range(args.repeats):
                for arm in ("in_process", "served"):
                    r = run_arm(arm, room, work, base, server.base_url, args)
                    results.append(r)
                    print(
                        f"{arm}: {r['steps']} steps in {r['wall_s']:.1f} s; TRL step_time "
                        + ", ".join(f"{x:.1f}" for x in r["step_time_s"])
                        + " s; between step logs "
                        + ", ".join(f"{x:.1f}" for x in r["between_logs_s"])
                        + " s; rollouts "
                        + ", ".join(f"{x:.1f}" for x in r["rollout_wall_s"] if x is not None)
                        + f" s; prefetch {r['prefetch']}; staleness {r['staleness']}; "
                        f"generated tokens {r['generated_tokens']}",
                        flush=True,
                    )
        finally:
            server.stop()

    def later(r: dict[str, Any]) -> float:
        return statistics.median(r["between_logs_s"])

    by_arm = {arm: [r for r in results if r["arm"] == arm] for arm in ("in_process", "served")}
    med = {arm: statistics.median(later(r) for r in rs) for arm, rs in by_arm.items()}
    wall = {arm: statistics.median(r["wall_s"] for r in rs) for arm, rs in by_arm.items()}
    print(
        f"steps: {args.steps}, K {args.k}, root {args.turns} turns x {args.max_tokens} tokens, "
        f"repeats {args.repeats}"
    )
    print(
        f"result: GRPO step (median of steps 2..{args.steps}) in process {med['in_process']:.1f} s, "
        f"served with 1-step prefetch {med['served']:.1f} s (served / in process "
        f"{med['served'] / med['in_process']:.2f}); whole run {wall['in_process']:.0f} s vs "
        f"{wall['served']:.0f} s ({wall['served'] / wall['in_process']:.2f})"
    )


if __name__ == "__main__":
    main()
