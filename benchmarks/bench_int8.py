"""Root generation in float32 against dynamic int8 weights (``local:NAME+quant=int8``).

Prints, on the machine it runs on:

1. the machine line;
2. for each of ``float32`` and ``int8``: ``--batch`` concurrent sampled root turns (the
   training collection's settings: temperature 0.7, top-p 0.95, the worked example in the
   prompt, the ``"```repl\\n"`` prefill, at most ``--new-tokens`` tokens) through
   :class:`~rlmdistill.models.local.LocalChatClient` on the embedded model: prompt tokens,
   new tokens, ``generate`` seconds (model load excluded) and new tokens per second;
3. one greedy root turn in both: the index of the first token where int8 differs from
   float32 (int8 is another model, so its episode ids differ; ``docs/models.md``).

    python benchmarks/bench_int8.py [--model qwen2.5-coder-0.5b] [--batch 8] [--new-tokens 128]

A ``result:`` line gives the speed-up of int8 over float32 (generate time, same requests).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def root_messages(i: int) -> list[Any]:
    """The training collection's first root prompt (worked example) for a 2-document room."""
    from rlmdistill.harness import prompts
    from rlmdistill.models.base import Message

    task = prompts.task_message(
        "Review the contracts for change of control, assignment and termination risks.",
        f"Room {i}",
        2,
        50_000 + 1_000 * i,
        {"": 2},
        [(f"contract-{i}-a.txt", 30_000), (f"contract-{i}-b.txt", 20_000 + 1_000 * i)],
    )
    return [
        Message(role="system", content=prompts.SYSTEM_PROMPT),
        *prompts.worked_example(),
        Message(role="user", content=task),
    ]


def run(model: str, quant: str, batch: int, new_tokens: int) -> dict[str, Any]:
    """``batch`` concurrent sampled root turns and one greedy turn on ``quant`` weights."""
    from rlmdistill.models.base import Sampling
    from rlmdistill.models.local import LocalChatClient
    from rlmdistill.models.pull import pull

    directory = pull(model, progress=False)
    sampled = Sampling(temperature=0.7, top_p=0.95, max_tokens=new_tokens, seed=1)
    greedy = Sampling(temperature=0.0, max_tokens=new_tokens)
    with LocalChatClient(
        directory, dtype="float32", quantize=quant, max_batch=batch, batch_wait_s=0.5
    ) as client:
        before = client.generate_s
        with ThreadPoolExecutor(batch) as ex:
            results = list(
                ex.map(
                    lambda i: client.chat(root_messages(i), sampled, prefill="```repl\n"),
                    range(batch),
                )
            )
        gen_s = client.generate_s - before
        reference = client.chat(root_messages(0), greedy, prefill="```repl\n")
    tokens = sum(r.usage.completion_tokens for r in results)
    return {
        "quant": quant,
        "prompt_tokens": sum(r.usage.prompt_tokens for r in results),
        "new_tokens": tokens,
        "generate_s": gen_s,
        "tokens_per_s": tokens / gen_s if gen_s > 0 else float("nan"),
        "greedy_ids": reference.token_ids or [],
    }


def main() -> None:
    """Parse flags, measure both, print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=128)
    args = p.parse_args()

    from rlmdistill.hardware import machine_line

    print(machine_line())
    out = {q: run(args.model, q, args.batch, args.new_tokens) for q in ("none", "int8")}
    for q, r in out.items():
        print(
            f"{'float32' if q == 'none' else 'int8':8s} batch {args.batch}: "
            f"{r['prompt_tokens']} prompt + {r['new_tokens']} new tokens in "
            f"{r['generate_s']:.1f} s generate, {r['tokens_per_s']:.1f} new tokens/s"
        )
    a, b = out["none"]["greedy_ids"], out["int8"]["greedy_ids"]
    first = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    same = "identical" if first is None and len(a) == len(b) else f"first differs at {first}"
    print(f"greedy root turn, int8 against float32: {same} ({len(a)} / {len(b)} tokens)")
    speed = out["none"]["generate_s"] / out["int8"]["generate_s"]
    per_token = out["int8"]["tokens_per_s"] / out["none"]["tokens_per_s"]
    print(
        f"result: int8 generate time x{1 / speed:.2f} of float32 ({speed:.2f}x faster), "
        f"new tokens/s x{per_token:.2f}, batch {args.batch} root turns"
    )


if __name__ == "__main__":
    main()
