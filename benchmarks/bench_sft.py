"""SFT throughput and peak memory: ``rlmdistill.sft.train`` vs a plain TRL script, same data.

Builds a dataset of synthetic root conversations (system, task, 2 assistant turns with a REPL
observation between them) rendered with the real SmolLM2 tokenizer in the export format
(``input_ids`` + ``assistant_masks`` + ``export.json``), then trains LoRA on SmolLM2-135M in
float32 on the CPU twice, each in its own process: once through :func:`rlmdistill.sft.train.train`
(dataset checks, train_log.jsonl callback, checkpoints at the end) and once with a minimal
TRL ``SFTTrainer`` script on the same pre-tokenised rows and the same LoRA/optimiser settings.
Prints tokens/s of the training loop, wall time with set-up, peak resident memory of each
process, and the ratio ours/plain.

    python benchmarks/bench_sft.py [--examples 16] [--steps 8] [--batch 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_dataset(out: Path, base: Path, n: int) -> None:
    """Write ``n`` export-format rows (one full render; masks on assistant turns + <|im_end|>)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_sft import render_row, write_dataset  # the tests' export-format writer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    rows = []
    for i in range(n):
        docs = [f"contracts/c{i}_{k}.txt" for k in range(3 + i % 4)]
        conv = [
            {"role": "system", "content": "You are the root of an RLM due-diligence agent. " * 4},
            {"role": "user", "content": f"Task {i}: find change-of-control clauses in the room."},
            {
                "role": "assistant",
                "content": "```repl\ndocs = list_documents()\nanswers = llm_query_batched("
                "['Quote the change-of-control clause.\\n' + read(d['id'], 0, 3000) for d in docs])"
                "\nprint(answers)\n```",
            },
            {"role": "user", "content": json.dumps({d: "No such clause found." for d in docs})},
            {
                "role": "assistant",
                "content": "```repl\nmemo = '# Memo\\n' + '\\n'.join('## ' + d['id'] + '\\n' + a "
                "for d, a in zip(docs, answers))\nFINAL_VAR(memo)\n```",
            },
        ]
        rows.append(render_row(tok, conv, episode_id=f"ep{i}"))
    write_dataset(out, tok, rows)


def child_ours(data: Path, base: Path, out: Path, steps: int, batch: int) -> dict[str, Any]:
    from rlmdistill.sft.config import SFTConfig
    from rlmdistill.sft.train import train

    cfg = SFTConfig(
        dataset=data,
        base=str(base),
        out=out,
        lora_r=LORA["r"],
        lora_alpha=LORA["lora_alpha"],
        lora_dropout=LORA["lora_dropout"],
        target_modules=TARGETS,
        max_steps=steps,
        per_device_train_batch_size=batch,
        save_steps=steps,
        logging_steps=1,
    )
    res = train(cfg, progress=False)
    return {"tokens": res.tokens_seen, "train_s": res.train_runtime_s}


def child_plain(data: Path, base: Path, out: Path, steps: int, batch: int) -> dict[str, Any]:
    import datasets
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    ds = datasets.load_from_disk(str(data)).select_columns(["input_ids", "assistant_masks"])
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    args = SFTConfig(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=batch,
        learning_rate=2e-4,
        lr_scheduler_type="cosine",
        warmup_steps=0.03,
        gradient_checkpointing=False,
        bf16=False,
        use_cpu=True,
        max_length=None,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        processing_class=AutoTokenizer.from_pretrained(base),
        peft_config=LoraConfig(target_modules=TARGETS, task_type="CAUSAL_LM", **LORA),  # type: ignore[arg-type]
    )
    output = trainer.train()
    return {"tokens": int(trainer._total_train_tokens), "train_s": output.metrics["train_runtime"]}


def run_child(
    kind: str, data: Path, base: Path, out: Path, steps: int, batch: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", kind, "--data", str(data), "--base", str(base)]
    cmd += ["--out", str(out), "--steps", str(steps), "--batch", str(batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - t0
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--child", choices=["ours", "plain"])
    p.add_argument("--data", type=Path)
    p.add_argument("--base", type=Path)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    if a.child:
        fn = child_ours if a.child == "ours" else child_plain
        result = fn(a.data, a.base, a.out, a.steps, a.batch)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return
    from rlmdistill.models.pull import pull

    base = pull("smollm2-135m", progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "ds"
        build_dataset(data, base, a.examples)
        results = {}
        for kind in ("plain", "ours"):
            results[kind] = run_child(kind, data, base, Path(tmp) / kind, a.steps, a.batch)
    print(f"SmolLM2-135M LoRA r=16 (7 projections), float32 CPU, {a.steps} steps x batch {a.batch}")
    print(f"{'':8}{'tokens':>8}{'train s':>9}{'tok/s':>8}{'wall s':>8}{'peak RSS MB':>13}")
    for kind, r in results.items():
        rate = r["tokens"] / r["train_s"]
        r["rate"] = rate
        print(
            f"{kind:8}{r['tokens']:>8}{r['train_s']:>9.1f}{rate:>8.1f}{r['wall_s']:>8.1f}"
            f"{r['peak_rss_mb']:>13.0f}"
        )
    ours, plain = results["ours"], results["plain"]
    print(
        f"ratio ours/plain: tokens/s {ours['rate'] / plain['rate']:.2f}, "
        f"wall {ours['wall_s'] / plain['wall_s']:.2f}, "
        f"peak RSS {ours['peak_rss_mb'] / plain['peak_rss_mb']:.2f}"
    )


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
