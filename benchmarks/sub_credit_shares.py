"""The figures behind ``rlmdistill.traces.sub_credit.USED_SHARE``: how much of each sub-call
answer a memo reproduces, in its own episode and in other episodes of the same room.

    tar -C /tmp -xJf docs/results/room_scaling/workspace.tar.xz
    python benchmarks/sub_credit_shares.py /tmp/room_scaling

Per answer of at least 8 words (one ``GRAM_WORDS`` run): the share of its distinct 8-word
runs found in its own episode's memo, and in the memo of every other episode of the same
room (answers those memos never received). Prints both histograms and the counts the
credit rules give (``error``, ``used_in_memo``, ``supports_pass`` under the run's first
grader). Reads the workspace only.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections import Counter
from pathlib import Path

from rlmdistill.traces.runs import (
    grader_ids,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_trajectory,
    load_verdicts,
)
from rlmdistill.traces.scores import current_memo_verdicts
from rlmdistill.traces.sub_credit import USED_SHARE, sub_call_credit, word_runs

BINS = (0.0, 1e-9, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0 - 1e-9, 1.0 + 1e-9)


def histogram(values: list[float]) -> str:
    """Counts per bin of :data:`BINS` (0, (0, 0.1), ..., [0.9, 1), 1), one line."""
    cells = []
    for lo, hi in itertools.pairwise(BINS):
        cells.append(f"[{lo:.2f},{hi:.2f}): {sum(lo <= v < hi for v in values)}")
    return "; ".join(cells)


def main() -> None:
    """Print the shares of every run of the workspace given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path)
    args = parser.parse_args()
    own: list[float] = []
    other: list[float] = []
    credits: Counter[str] = Counter()
    episodes = []
    for run in sorted((args.workspace / "runs").iterdir()):
        summaries = load_summaries(run)
        tasks = load_room_tasks(load_manifest(run), summaries, on_error="report", run_dir=run)
        graders = grader_ids(run)
        verdicts = load_verdicts(run, graders[0]) if graders else []
        for s in summaries:
            traj = load_trajectory(run, s.episode_id)
            mine = current_memo_verdicts(
                [v for v in verdicts if v.episode_id == s.episode_id], s.memo_sha256
            )
            task = tasks.tasks.get(s.room.room_hash)
            for c in sub_call_credit(traj.sub_calls, s.memo, mine, task):
                credits["sub-calls"] += 1
                credits["error"] += c.error
                credits["used_in_memo"] += c.used_in_memo
                credits["supports_pass"] += bool(c.supports_pass)
            texts = [c.response for c in traj.sub_calls if c.error is None and c.response]
            episodes.append((s, [r for a in texts if (r := word_runs(a))]))
    for s, answer_runs in episodes:
        memo_runs = word_runs(s.memo or "")
        for runs in answer_runs:
            own.append(len(runs & memo_runs) / len(runs))
            for s2, _ in episodes:
                same_room = s2.room.room_hash == s.room.room_hash
                if s2.episode_id != s.episode_id and same_room and s2.memo:
                    other.append(len(runs & word_runs(s2.memo)) / len(runs))
    between = [v for v in other if 0.0 < v < 1.0]
    print(f"episodes: {len(episodes)}; {dict(credits)} (USED_SHARE {USED_SHARE})")
    print(f"own memo, {len(own)} answers: {histogram(own)}")
    print(f"other memos of the room, {len(other)} pairs: {histogram(other)}")
    if between:
        print(f"other memos, strictly between 0 and 1: median {statistics.median(between):.3f}")


if __name__ == "__main__":
    main()
