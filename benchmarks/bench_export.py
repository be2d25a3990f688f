"""Export throughput: examples/s and tokens/s for a run of 1,000 synthetic episodes.

Writes a synthetic run (``rlmdistill.testing.trajectory_runs.write_trajectory_run``: the packaged
root prompt with the worked example, ``--turns`` root turns per episode with replies of a
few hundred characters of code and REPL outputs of up to ``--obs-chars`` characters, valid
prompt hashes), then times ``export_dataset`` with the SmolLM2 tokenizer in trajectory and
turn mode (plain style), and tool style in trajectory mode. Writing the run is not timed.

    python benchmarks/bench_export.py [--episodes 1000] [--turns 4] [--obs-chars 1200]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import trl

from rlmdistill.export import ExportOptions, export_dataset
from rlmdistill.models.pull import pull
from rlmdistill.testing.trajectory_runs import write_trajectory_run
from rlmdistill.traces.runs import EpisodeRef


def main() -> None:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--obs-chars", type=int, default=1200)
    args = ap.parse_args()
    tok_dir = pull("smollm2-135m", progress=False)
    qwen_template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
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
        for name, opts in cases:
            out = Path(tmp) / name.replace("/", "-")
            t0 = time.perf_counter()
            report = export_dataset(refs, out, opts)
            wall = time.perf_counter() - t0
            print(
                f"{name:18s} {report.n_examples:5d} examples, {report.tokens.total:>10,} tokens "
                f"(mean {report.tokens.mean:.0f}, max {report.tokens.max}) in {wall:.1f}s: "
                f"{report.n_examples / wall:.1f} examples/s, "
                f"{report.tokens.total / wall:,.0f} tokens/s; dropped {report.dropped or 0}"
            )


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
