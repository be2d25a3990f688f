"""Export throughput beside the tokenizer's own batch-encode throughput on the same text.

Writes a synthetic run (``rlmdistill.testing.trajectory_runs.write_trajectory_run``: the packaged
root prompt with the worked example, ``--turns`` root turns per episode with replies of a
few hundred characters of code and REPL outputs of up to ``--obs-chars`` characters, valid
prompt hashes), then times ``export_dataset`` with the SmolLM2 tokenizer in trajectory and
turn mode (plain style), and tool style in trajectory mode. Writing the run is not timed.

Beside each export: the tokenizer alone, ``tokenizer(texts, add_special_tokens=False,
return_offsets_mapping=True)`` in ONE call on exactly the texts of the exported examples
(each row's messages rendered again with the chat template), best of ``--repeats``; and the
export's share of it (export tokens/s / tokenizer tokens/s, from the best export of
``--export-repeats``, each followed by its tokenizer runs; the export also reads and checks
every trajectory, renders every conversation, builds masks, writes the dataset, and in turn
mode renders each example's prompt again for its exactness check and tokenises only the
prompt's tail from its last special token, ``TurnPromptCutter``). The export's
wall time includes the first tokenizer load of the process (the first case pays it; the
tokenizer is then cached).

    python benchmarks/bench_export.py [--episodes 1000] [--turns 4] [--obs-chars 1200]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import trl

from rlmdistill.export import ExportOptions, export_dataset, load_messages
from rlmdistill.models.pull import pull
from rlmdistill.testing.trajectory_runs import write_trajectory_run
from rlmdistill.traces.runs import EpisodeRef


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def tokenizer_throughput(
    tokenizer: object, texts: list[str], repeats: int
) -> tuple[int, float, float]:
    """``(tokens, best wall seconds, best CPU seconds of the process)`` of one batched
    ``tokenizer(texts, ...)`` call with offsets."""
    best = best_cpu = float("inf")
    n_tokens = 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        n_tokens = sum(len(ids) for ids in enc["input_ids"])
    return n_tokens, best, best_cpu


def main() -> None:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--obs-chars", type=int, default=1200)
    ap.add_argument("--repeats", type=int, default=3, help="tokenizer-alone repeats (best)")
    ap.add_argument("--export-repeats", type=int, default=1, help="export repeats (best)")
    ap.add_argument("--cases", default="trajectory/plain,turn/plain,trajectory/tools")
    args = ap.parse_args()
    import datasets

    from rlmdistill.export.masks import load_tokenizer

    tok_dir = pull("smollm2-135m", progress=False)
    qwen_template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    print(_load(), "(start)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        ids = write_trajectory_run(run, args.episodes, n_turns=args.turns, obs_chars=args.obs_chars)
        print(
            f"wrote {len(ids)} synthetic episodes x {args.turns} turns in "
            f"{time.perf_counter() - t0:.1f}s"
        )
        refs = [EpisodeRef(run, i) for i in ids]
        cases = [
            ("trajectory/plain", ExportOptions(tokenizer=str(tok_dir))),
            ("turn/plain", ExportOptions(tokenizer=str(tok_dir), mode="turn")),
            (
                "trajectory/tools",
                ExportOptions(
                    tokenizer=str(tok_dir), style="tools", chat_template=str(qwen_template)
                ),
            ),
        ]
        wanted = args.cases.split(",")
        for name, opts in [c for c in cases if c[0] in wanted]:
            tokenizer, _ = load_tokenizer(opts.tokenizer, opts.chat_template)
            best_wall = best_tok = best_cpu = best_tok_cpu = float("inf")
            for rep in range(args.export_repeats):
                out = Path(tmp) / f"{name.replace('/', '-')}-{rep}"
                t0, c0 = time.perf_counter(), time.process_time()
                report = export_dataset(refs, out, opts)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
                print(
                    f"{name:18s} {report.n_examples:5d} examples, {report.tokens.total:>10,} "
                    f"tokens (mean {report.tokens.mean:.0f}, max {report.tokens.max}) in "
                    f"{wall:.1f}s: {report.n_examples / wall:.1f} examples/s, "
                    f"{len(refs) / wall:.1f} trajectories/s, {report.tokens.total / wall:,.0f} "
                    f"tokens/s (CPU {cpu:.1f}s); dropped {report.dropped or 0}; {_load()}",
                    flush=True,
                )
                ds = datasets.load_from_disk(str(out))
                texts = [
                    tokenizer.apply_chat_template(
                        load_messages(row),
                        tools=json.loads(row["tools"]) if row["tools"] else None,
                        tokenize=False,
                    )
                    for row in ds
                ]
                n_tok, secs, tok_cpu = tokenizer_throughput(tokenizer, texts, args.repeats)
                best_tok, best_tok_cpu = min(best_tok, secs), min(best_tok_cpu, tok_cpu)
                print(
                    f"{'':18s} tokenizer alone, one batched call on the same {len(texts)} "
                    f"texts: {n_tok:,} tokens in {secs:.2f}s = {n_tok / secs:,.0f} tokens/s "
                    f"(CPU {tok_cpu:.1f}s); "
                    f"{_load()}",
                    flush=True,
                )
            export_tps, tok_tps = report.tokens.total / best_wall, n_tok / best_tok
            print(
                f"{name:18s} best: export {export_tps:,.0f} tokens/s "
                f"({len(refs) / best_wall:.1f} trajectories/s), tokenizer alone "
                f"{tok_tps:,.0f} tokens/s: export share {export_tps / tok_tps:.0%}; CPU time "
                f"per token, tokenizer / export: {(best_tok_cpu / n_tok) / (best_cpu / report.tokens.total):.0%}",
                flush=True,
            )


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
