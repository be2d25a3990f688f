"""Cost of episode selection (``filter/select.py``) and its report over a large run.

Writes a synthetic run of ``--episodes`` episode summaries (default 10,000, seeded) over
``--rooms`` rooms (default 100, 2-512 documents, 8 criteria each) with one grader's verdicts
(8 per graded episode; 5% ungraded, 10% not completed, 3% duplicate memos), then times:

1. ``select_episodes`` with every kind of rule at once (status, memo, turns, sub-calls,
   absolute and per-room quantile pass rate, coverage, two ``where`` expressions, memo
   de-duplication, top-k per room) -- what a dashboard preview pays per change;
2. ``select_episodes`` with the default rules;
3. ``build_report`` + ``render_markdown``;

and, for scale, reading ``episodes.jsonl`` and the verdicts alone with the shared loaders
(``traces.runs``), which every selection pays.

Target (filter issue): a preview over 10,000 episodes fast enough for a dashboard (a few
seconds on 2 cores). Each timing is the best of ``--repeat`` runs, wall and CPU (the CPU
figure is this process alone, so it holds on a machine shared with other jobs).

    python benchmarks/bench_filter.py [--episodes 10000] [--rooms 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmdistill.filter.report import build_report, render_markdown
from rlmdistill.filter.rules import FilterRules
from rlmdistill.filter.select import select_episodes
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces.runs import load_summaries, load_verdicts


class _Timing:
    """Best wall and CPU seconds (CPU = this process; the machine may be shared)."""

    def __init__(self, wall: float, cpu: float) -> None:
        self.wall, self.cpu = wall, cpu

    def __str__(self) -> str:
        return f"{self.wall:.2f} s wall, {self.cpu:.2f} s CPU"


def _best(fn: Callable[[], Any], repeat: int) -> tuple[_Timing, Any]:
    wall = cpu = float("inf")
    result = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return _Timing(wall, cpu), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--rooms", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rooms = [
        SyntheticRoom(f"room{i:03d}", n_documents=2 ** rng.randint(1, 9), n_criteria=8)
        for i in range(args.rooms)
    ]
    episodes = []
    for i in range(args.episodes):
        room = rooms[i % len(rooms)]
        status = "completed" if rng.random() > 0.1 else rng.choice(["timeout", "no_memo"])
        memo = "shared memo" if rng.random() < 0.03 else ""
        episodes.append(
            SyntheticEpisode(
                episode_id=f"ep{i:06d}",
                room=room.name,
                n_pass=None if rng.random() < 0.05 else rng.randint(0, 8),
                coverage=round(rng.random(), 4),
                status=status,  # type: ignore[arg-type]
                memo=memo,
                n_turns=rng.randint(1, 12),
                n_sub_calls=rng.randint(0, 40),
            )
        )
    rules = FilterRules(
        min_turns=2,
        max_turns=10,
        min_sub_calls=1,
        min_pass_rate=0.25,
        min_pass_rate_quantile=0.5,
        min_coverage=0.1,
        top_k_per_room=10,
        where=["n_sub_calls >= 2 and coverage > 0.05", "startswith(room_id, 'room')"],
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = write_scored_run(Path(tmp) / "runs" / "bench", rooms, episodes)
        t_write = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) / 1e6
        t_load, _ = _best(
            lambda: (load_summaries(run), load_verdicts(run, "reference")), args.repeat
        )
        t_all, sel = _best(lambda: select_episodes([run], rules), args.repeat)
        t_default, sel_default = _best(lambda: select_episodes([run], FilterRules()), args.repeat)
        t_report, md = _best(lambda: render_markdown(build_report(sel)), args.repeat)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}"
    )
    print(
        f"run: {args.episodes} episodes, {args.rooms} rooms, {size_mb:.1f} MB on disk "
        f"(written in {t_write:.1f} s)"
    )
    print(f"select, all rule kinds: {t_all} ({sel.n_kept} kept)")
    print(f"select, default rules:  {t_default} ({sel_default.n_kept} kept)")
    print(f"  reading episodes.jsonl + verdicts alone (traces.runs loaders): {t_load}")
    print(f"report (json model + markdown, {len(md)} chars): {t_report}")


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
