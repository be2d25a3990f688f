"""Local generation speed in float32 and bfloat16 on this CPU, and the dtype ``auto`` picks.

Issue 24: on CPUs without native bfloat16 (AVX2-only), PyTorch emulates bfloat16 matmuls and
``dtype: auto`` used to pick bfloat16 anyway. This prints, on the machine it runs on:

1. the machine (CPU model, vector extensions, torch threads) and what ``auto`` picks and why;
2. an 8x896 @ 896x4864 matmul (one Qwen2.5-0.5B MLP up-projection for 8 tokens) in both
   dtypes, median of ``--matmul-repeats`` (ms), and their ratio;
3. greedy generation with :class:`~rlmdistill.models.local.LocalChatClient` on the embedded
   model (default ``qwen2.5-coder-0.5b``, pulled if needed) for a batch of ``--batch``
   concurrent requests of ``--new-tokens`` tokens each, in both dtypes: new tokens per second
   over the batch (``generate`` time only, model load excluded).

    python benchmarks/bench_local_generation.py [--model qwen2.5-coder-0.5b] [--batch 4]
        [--new-tokens 48] [--matmul-repeats 20] [--json]

The ratio of step 3 is what turns a main-job time measured on one kind of CPU into an estimate
for the other (README, "Measured").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def matmul_ms(dtype: str, repeats: int) -> float:
    """Median wall time (ms) of an 8x896 @ 896x4864 matmul in ``dtype``."""
    import torch

    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(8, 896, generator=gen).to(dt)
    b = torch.randn(896, 4864, generator=gen).to(dt)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def generation_tps(model: str, dtype: str, batch: int, new_tokens: int) -> dict[str, Any]:
    """Greedy generation of ``batch`` concurrent requests: new tokens/s over ``generate`` time."""
    from rlmdistill.models.base import Message, Sampling
    from rlmdistill.models.local import LocalChatClient
    from rlmdistill.models.pull import pull

    directory = pull(model, progress=False)
    prompts = [
        f"Write a Python function that counts clause type {i} in a list of contracts."
        for i in range(batch)
    ]
    sampling = Sampling(temperature=0.0, max_tokens=new_tokens)
    with LocalChatClient(directory, dtype=dtype, max_batch=batch, batch_wait_s=0.2) as client:
        # warm-up: one short request (first-call allocations, thread pools)
        client.chat([Message(role="user", content="hi")], Sampling(temperature=0.0, max_tokens=4))
        before_s, before_calls = client.generate_s, client.generate_calls
        with ThreadPoolExecutor(batch) as ex:
            results = list(
                ex.map(
                    lambda p: client.chat([Message(role="user", content=p)], sampling),
                    prompts,
                )
            )
        gen_s = client.generate_s - before_s
        calls = client.generate_calls - before_calls
    tokens = sum(r.usage.completion_tokens for r in results)
    return {
        "dtype": dtype,
        "batch": batch,
        "new_tokens": tokens,
        "generate_calls": calls,
        "generate_s": round(gen_s, 2),
        "tokens_per_s": round(tokens / gen_s, 2) if gen_s > 0 else None,
    }


def main() -> None:
    """Parse flags, measure, print a table (or JSON with ``--json``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--matmul-repeats", type=int, default=20)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    from rlmdistill.hardware import choose_compute_dtype, machine_info, machine_line

    info = machine_info()
    choice = choose_compute_dtype()
    mm = {d: matmul_ms(d, args.matmul_repeats) for d in ("float32", "bfloat16")}
    gen = {
        d: generation_tps(args.model, d, args.batch, args.new_tokens)
        for d in ("float32", "bfloat16")
    }
    out = {
        "machine": info,
        "auto": {"dtype": choice.dtype, "reason": choice.reason},
        "matmul_ms": {d: round(v, 2) for d, v in mm.items()},
        "matmul_bf16_over_fp32": round(mm["bfloat16"] / mm["float32"], 2),
        "generation": gen,
    }
    fp32, bf16 = gen["float32"]["tokens_per_s"], gen["bfloat16"]["tokens_per_s"]
    if fp32 and bf16:
        out["generation_fp32_over_bf16"] = round(fp32 / bf16, 2)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(machine_line())
    print(f"dtype auto -> {choice.dtype}: {choice.reason}")
    print(
        f"matmul 8x896 @ 896x4864: float32 {mm['float32']:.2f} ms, bfloat16 "
        f"{mm['bfloat16']:.2f} ms (bf16/fp32 {out['matmul_bf16_over_fp32']}x)"
    )
    for d, g in gen.items():
        mark = "  <- auto" if d == choice.dtype else ""
        print(
            f"generation {args.model}, batch {g['batch']}, greedy: {d:8s} "
            f"{g['tokens_per_s']} tokens/s ({g['new_tokens']} tokens in {g['generate_s']} s, "
            f"{g['generate_calls']} generate calls){mark}"
        )
    if "generation_fp32_over_bf16" in out:
        print(f"generation float32/bfloat16 speed ratio: {out['generation_fp32_over_bf16']}x")


if __name__ == "__main__":
    main()
