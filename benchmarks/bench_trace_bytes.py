"""Trace size: bytes per root turn with and without recorded token ids, for collected runs.

For every root turn (``TurnRecord``) of the given runs, measures its JSON line as written
(``dumps_record``) and the same record with ``tokens`` set to null, and prints the means, the
share of the ids, and how the prompt-id deltas compare with storing every prompt whole (what
the delta encoding saves: a whole prompt per turn grows quadratically with the turns).

    python benchmarks/bench_trace_bytes.py runs/quickstart [runs/other ...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rlmdistill.hardware import machine_line
from rlmdistill.traces.runs import load_summaries, load_trajectory
from rlmdistill.traces.store import dumps_record


def main() -> None:
    """Measure the runs given on the command line and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    # byte counts do not depend on the machine; the line says where the runs were read
    print(machine_line(), flush=True)
    with_ids: list[int] = []
    without: list[int] = []
    new_ids = whole_ids = completion_ids = 0
    n_episodes = 0
    for run in args.runs:
        for s in load_summaries(run):
            traj = load_trajectory(run, s.episode_id)
            n_episodes += 1
            for t in traj.turns:
                with_ids.append(len(dumps_record(t).encode("utf-8")) + 1)
                without.append(len(dumps_record(t.model_copy(update={"tokens": None}))) + 1)
                if t.tokens is not None:
                    new_ids += len(t.tokens.prompt_new_ids or [])
                    whole_ids += t.tokens.prompt_n or 0
                    completion_ids += len(t.tokens.completion_ids or [])
    if not with_ids:
        raise SystemExit("no root turns in those runs")
    mean_with, mean_without = statistics.mean(with_ids), statistics.mean(without)
    print(f"runs: {', '.join(map(str, args.runs))}: {n_episodes} episodes, {len(with_ids)} turns")
    print(f"bytes per root turn: {mean_with:,.0f} with token ids, {mean_without:,.0f} without")
    print(f"token ids and logprobs: {100 * (1 - mean_without / mean_with):.1f}% of a turn line")
    print(
        f"prompt ids stored: {new_ids:,} (deltas) vs {whole_ids:,} (whole prompt every turn); "
        f"completion ids {completion_ids:,}"
    )


if __name__ == "__main__":
    main()
