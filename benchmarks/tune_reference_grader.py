"""Tune the reference grader's paraphrase rule on the ``tune`` part of the CUAD split.

    python benchmarks/tune_reference_grader.py ../shared/data/cuad --out /tmp/judge-tune

Builds the evaluation set of the ``tune`` contracts once (``rlmdistill judge-eval --part
tune``), then grades its paraphrases and its hardest decoys (``unlabelled_nearest``,
``other_clause``, ``neighbour``) again for each point of a grid over :data:`GRID` (the
module constants of :mod:`rlmdistill.judge.reference`), and prints paraphrase recall and
false-pass rates per point. The rule's constants are the point with the highest paraphrase
recall whose false-pass rate on every decoy kind is at most 0.02 on these contracts (ties:
the first in grid order, i.e. the most lenient share); the ``heldout`` contracts are never
graded here. ``--grid NAME=V1,V2`` replaces the values tried for one constant. Prints the table; writes nothing but ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from rlmdistill.judge import reference
from rlmdistill.judge.evaluation import EvalOutcome, JudgeEvalConfig, run
from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Task
from rlmdistill.traces.store import parse_records

GRID: dict[str, list[float]] = {
    "WORD_SHARE": [0.25, 0.35, 0.5, 0.65],
    "MIN_SHARED": [3, 4],
    "FREQUENT_SHARE": [0.05, 0.1, 0.2, 2.0],
    "MIN_DISTINCTIVE": [2, 3],
}
"""Values tried; ``FREQUENT_SHARE`` 2.0 turns the boilerplate filter off."""
KINDS = ("paraphrase", "unlabelled_nearest", "other_clause", "neighbour")
MAX_FALSE_PASS = 0.02


def main() -> None:
    """Parse arguments, build the tune set, grade it per grid point and print a table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("--out", type=Path, default=Path("/tmp/judge-tune"))
    ap.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="replace the values tried for one constant (repeatable)",
    )
    args = ap.parse_args()
    grid = dict(GRID)
    for item in args.grid:
        name, _, values = item.partition("=")
        if name not in GRID:
            ap.error(f"--grid {item}: NAME must be one of {', '.join(GRID)}")
        grid[name] = [float(v) if "." in v else int(v) for v in values.split(",")]
    t0 = time.monotonic()
    run(JudgeEvalConfig(source=args.source, out=args.out, part="tune", n_resamples=100))
    cases = [c for c in parse_records(args.out / "cases.jsonl", EvalOutcome) if c.kind in KINDS]
    rooms = {d.name: DataRoom.load(d) for d in sorted((args.out / "rooms").iterdir()) if d.is_dir()}
    print(f"tune set: {len(cases)} memos of kinds {KINDS} ({time.monotonic() - t0:.0f} s)")
    defaults = {name: getattr(reference, name) for name in grid}
    header = " ".join(f"{k:>14s}" for k in grid) + " " + " ".join(f"{k:>18s}" for k in KINDS)
    print(header)
    best: tuple[float, dict[str, float]] | None = None
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values, strict=True))
        for name, value in point.items():
            setattr(reference, name, value)
        grader = reference.ReferenceGrader()
        passed: dict[str, list[bool]] = {k: [] for k in KINDS}
        for c in cases:
            room = rooms[c.room]
            assert room.task is not None
            task = Task(title="t", instructions="i", criteria=[room.task.criterion(c.criterion_id)])
            (v,) = grader.grade(c.memo, task, room, episode_id=c.case_id, memo_sha256=None)
            passed[c.kind].append(v.verdict == "PASS")
        rates = {k: sum(v) / len(v) for k, v in passed.items() if v}
        print(
            " ".join(f"{v:>14g}" for v in values)
            + " "
            + " ".join(f"{rates.get(k, float('nan')):>18.3f}" for k in KINDS)
        )
        worst = max(rates.get(k, 0.0) for k in KINDS if k != "paraphrase")
        if worst <= MAX_FALSE_PASS and (best is None or rates["paraphrase"] > best[0]):
            best = (rates["paraphrase"], point)
    for name, value in defaults.items():
        setattr(reference, name, value)
    print(f"best (paraphrase recall, false-pass <= {MAX_FALSE_PASS}): {best}")
    print(f"current constants: {defaults}; total {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
