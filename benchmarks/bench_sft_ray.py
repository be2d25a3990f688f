"""SFT under Ray Train: 1 worker against the same training in one plain process (Ray Train's
overhead), and 2 workers against 1 (scaling), all at the same global batch.

One ``ray.cluster_utils.Cluster`` on this machine (loopback only): a head and a second node,
1 CPU each, so each Ray Train worker gets a node and one thread (Ray sets
``OMP_NUM_THREADS=1`` for a 1-CPU worker). The same export-format dataset as
``bench_sft.py`` (synthetic root conversations, the real SmolLM2 tokenizer); the model is
``--base``: ``tiny`` (default: a random Llama, hidden 256, 4 layers, the SmolLM2 vocabulary,
built here) or an embedded name such as ``smollm2-135m``. Three runs of ``--steps`` steps at a
global batch of ``--batch`` rows, LoRA r=16 on the 7 projections, float32, no eval loss, a
checkpoint at the end:

- ``plain``: :func:`rlmdistill.sft.train.train` in a subprocess with 1 thread;
- ``ray-1``: :func:`rlmdistill.sft.ray_train.train_ray`, 1 worker x batch B;
- ``ray-2``: 2 workers x batch B/2 (DDP over gloo, one worker per node).

Prints tokens, the training loop's seconds (the Trainer's ``train_runtime``) and tokens/s, the
wall time of the call (Ray: worker start, model load, checks and saves included), Ray Train's
overhead over ``plain`` in % (tokens/s of the loop, and wall), and the speed-up of 2 workers
over 1. The three runs are repeated ``--repeats`` times, interleaved (plain, ray-1, ray-2,
plain, ...), and the medians shown, with each repeat's tokens/s: on a shared machine the load
changes between runs. The idle Ray cluster stays up during the plain runs.

    python benchmarks/bench_sft_ray.py [--base tiny] [--examples 16] [--steps 8] [--batch 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on loopback
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
OBJECT_STORE = 80 * 1024 * 1024


def tiny_base(out: Path) -> Path:
    """A random Llama (hidden 256, 4 layers, 8 heads) with the SmolLM2 tokenizer, saved."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rlmdistill.models.pull import pull

    tok = AutoTokenizer.from_pretrained(pull("smollm2-135m", progress=False))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def config(data: Path, base: Path, out: Path, steps: int, **kw: Any) -> Any:
    from rlmdistill.sft.config import SFTConfig

    return SFTConfig(
        dataset=data, base=str(base), out=out, lora_r=16, lora_alpha=32, lora_dropout=0.0,
        target_modules=TARGETS, max_steps=steps, save_steps=steps, logging_steps=1, bf16="off",
        eval_fraction=0,  # training only: no eval loss inside the timed loop
        **kw,
    )  # fmt: skip


def child_plain(data: Path, base: Path, out: Path, steps: int, batch: int) -> None:
    """The plain run (own process, 1 thread): prints its figures as one JSON line."""
    import torch

    from rlmdistill.sft.train import train

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    res = train(config(data, base, out, steps, per_device_train_batch_size=batch), progress=False)
    wall = time.perf_counter() - t0
    print(json.dumps({"tokens": res.tokens_seen, "train_s": res.train_runtime_s, "wall_s": wall}))


def run_plain(data: Path, base: Path, out: Path, steps: int, batch: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--data", str(data), "--base", str(base)]
    cmd += ["--out", str(out), "--steps", str(steps), "--batch", str(batch)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"plain run failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_ray(
    data: Path, base: Path, out: Path, steps: int, batch: int, workers: int
) -> dict[str, Any]:
    from rlmdistill.sft.ray_train import train_ray

    # Ray is initialised (the cluster main() joined): train_ray uses it as is
    cfg = config(
        data, base, out, steps, workers=workers, per_device_train_batch_size=batch // workers
    )
    t0 = time.perf_counter()
    res = train_ray(cfg)
    wall = time.perf_counter() - t0
    assert len(set(res.rank_weights_sha256)) == 1, res.rank_weights_sha256
    return {"tokens": res.tokens_seen, "train_s": res.train_runtime_s, "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="tiny", help="tiny, or an embedded model name")
    p.add_argument("--examples", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4, help="global batch (even)")
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats (medians)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child_plain(a.data, Path(a.base), a.out, a.steps, a.batch)
        return
    import ray
    from bench_sft import build_dataset  # the same synthetic conversations
    from ray.cluster_utils import Cluster

    from rlmdistill.models.pull import pull

    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "ray-1": [], "ray-2": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = tiny_base(Path(tmp) / "tiny") if a.base == "tiny" else pull(a.base, progress=False)
        data = Path(tmp) / "ds"
        build_dataset(data, base, a.examples)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "object_store_memory": OBJECT_STORE,
                            "include_dashboard": False},
        )  # fmt: skip
        try:
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)  # workers' logs stay in Ray's
            for rep in range(a.repeats):  # interleaved, so load changes hit every kind alike
                out = Path(tmp) / f"r{rep}"
                runs["plain"].append(run_plain(data, base, out / "plain", a.steps, a.batch))
                for workers in (1, 2):
                    got = run_ray(data, base, out / f"ray{workers}", a.steps, a.batch, workers)
                    runs[f"ray-{workers}"].append(got)
        finally:
            ray.shutdown()
            cluster.shutdown()
    name = "tiny Llama (hidden 256, 4 layers)" if a.base == "tiny" else a.base
    print(
        f"{name} LoRA r=16 (7 projections), float32 CPU, {a.steps} steps x global batch {a.batch}, "
        f"{a.repeats} interleaved repeat(s), medians"
    )
    print(f"{'':8}{'tokens':>8}{'train s':>9}{'tok/s':>8}{'wall s':>8}   tok/s of each repeat")
    med: dict[str, dict[str, float]] = {}
    for kind, rs in runs.items():
        rates = [r["tokens"] / r["train_s"] for r in rs]
        m = med[kind] = {
            "tokens": rs[0]["tokens"],
            "train_s": statistics.median(r["train_s"] for r in rs),
            "rate": statistics.median(rates),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
        }
        each = " ".join(f"{x:.1f}" for x in rates)
        print(
            f"{kind:8}{m['tokens']:>8.0f}{m['train_s']:>9.1f}{m['rate']:>8.1f}{m['wall_s']:>8.1f}"
            f"   {each}"
        )
    plain, one, two = med["plain"], med["ray-1"], med["ray-2"]
    loop = (plain["rate"] / one["rate"] - 1) * 100
    wall = (one["wall_s"] / plain["wall_s"] - 1) * 100
    print(f"result: Ray Train 1 worker vs plain: overhead {loop:+.1f}% tokens/s, {wall:+.1f}% wall")
    print(
        f"result: 2 workers vs 1: tokens/s x{two['rate'] / one['rate']:.2f}, "
        f"wall x{one['wall_s'] / two['wall_s']:.2f} (1-worker wall / 2-worker wall)"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test_sft's writer
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
