"""Dashboard loading times: open a run of 10,000 episodes, open one trace.

    python benchmarks/bench_dashboard.py [--episodes 10000]

Writes a synthetic run (``rlmdistill.testing.scored_runs.write_scored_run``: 100 rooms x 100
episodes, 10 criteria each, verdicts of one grader) plus one trajectory of 12 turns and 48
sub-calls (2,000-character prompts) written with the schema records, then times the data
functions the pages call, cold (first call, empty cache) and warm (cached, as on a rerun):

- open a run = ``run_table`` (the episode listing with pass rates; Runs page) +
  ``run_overview`` (headline means of room means, computed from the table's columns since
  task dash7; before, from the analysis stage's metrics rows, a second read of the run),
  wall time and CPU seconds (``time.process_time``, the figure to compare on a busy machine);
- open one trace = ``episode_summary`` + ``trajectory`` + ``episode_verdicts`` (Trace viewer);
- a warm rerun of the Trace viewer: the data calls ``pages_trace.render`` makes, with the run
  stamps and file stats they cost (the code before the run view made one stamp per loader;
  run the script on that code, e.g. ``git archive``, for the figure before).

The Compare page's live means need the metrics rows (``RunView.metrics``): timed after the
overview, so since dash7 that figure includes computing them.

``uptime`` is printed before and after: quote the figures with the machine and its load.

Targets (issue #8): a 10,000-episode run opens in <= 2 s, one trace in <= 0.5 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlmdistill.analysis import row_cache
from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces.runs import load_summaries, trajectory_path
from rlmdistill.traces.schema import (
    CodeBlockResult,
    EpisodeEnd,
    EpisodeStart,
    ModelSettings,
    SubCallRecord,
    TurnRecord,
)
from rlmdistill.traces.store import append_records


def _trajectory(run_dir: Path, episode_id: str, run_id: str) -> None:
    s = next(x for x in load_summaries(run_dir) if x.episode_id == episode_id)
    now = dt.datetime.now(dt.UTC)
    ms = ModelSettings(spec="openai:m@http://x", model_id="m", sampling=Sampling())
    recs: list = [  # type: ignore[type-arg]
        EpisodeStart(
            episode_id=episode_id,
            run_id=run_id,
            sample_index=0,
            room=s.room,
            task_id=s.task_id,
            root=ms,
            sub=ms,
            seed=0,
            prompt_version="v1",
            limits={},
            initial_messages=[
                Message(role="system", content="x" * 4000),
                Message(role="user", content="task " * 200),
            ],
        )
    ]
    for t in range(12):
        recs.append(
            TurnRecord(
                episode_id=episode_id,
                turn=t,
                started_at=now,
                n_messages_before=2 + 2 * t,
                prompt_sha256="0" * 64,
                completion="```repl\nprint(1)\n```\n" + "y" * 1500,
                usage=Usage(prompt_tokens=1000, completion_tokens=300),
                latency_s=1.0,
                blocks=[
                    CodeBlockResult(
                        index=0,
                        code="print(1)\n" * 20,
                        stdout_full="z" * 20000,
                        stdout_chars=20000,
                        duration_s=0.5,
                    )
                ],
                observation="REPL output:\n" + "z" * 4000,
            )
        )
        for k in range(4):
            recs.append(
                SubCallRecord(
                    episode_id=episode_id,
                    call_id=4 * t + k,
                    turn=t,
                    block=0,
                    batch_id=t,
                    batch_size=4,
                    prompt="p" * 2000,
                    response="r" * 500,
                )
            )
    recs.append(EpisodeEnd(episode_id=episode_id, status="completed", memo=s.memo))
    append_records(trajectory_path(run_dir, episode_id), recs)


def _time(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _time_cpu(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall seconds, CPU seconds of this process) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


class _Counter:
    """Counts the calls of a module function (the run stamps and file stats a rerun makes)."""

    def __init__(self, module, name: str) -> None:  # type: ignore[no-untyped-def]
        self.module, self.name, self.n = module, name, 0
        self.orig = getattr(module, name)

        def counted(*a, **k):  # type: ignore[no-untyped-def]
            self.n += 1
            return self.orig(*a, **k)

        setattr(module, name, counted)


def _trace_page(data, run_dir: Path, episode_id: str) -> None:  # type: ignore[no-untyped-def]
    """The data calls one rerun of the Trace viewer makes (pages_trace.render)."""
    if hasattr(data, "run_view"):  # this code: one view per rerun, handed to every helper
        view = data.run_view(run_dir)
        view.table()  # the episode picker
        s = view.summary(episode_id)
        data.trajectory(view, episode_id)
        data.episode_verdicts(view, s.episode_id)  # memo tab
        data.episode_summary(view, episode_id)  # coverage tab (coverage_frames)
    else:  # the code before: every helper takes the run folder and makes its own stamp
        data.run_table(run_dir)
        data.episode_summary(run_dir, episode_id)
        data.trajectory(run_dir, episode_id)
        data.episode_summary(run_dir, episode_id)  # _memo
        data.episode_verdicts(run_dir, episode_id)
        data.episode_summary(run_dir, episode_id)  # _coverage
        data.episode_summary(run_dir, episode_id)  # coverage_frames


def main() -> None:
    """Build the synthetic run, time the loaders, print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--reruns", type=int, default=20, help="warm trace-page reruns to time")
    args = ap.parse_args()
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    from rlmdistill.dashboard import data

    print(f"uptime before: {_uptime()}", flush=True)
    n_rooms = 100
    per_room = max(1, args.episodes // n_rooms)
    rooms = [SyntheticRoom(f"room{i:03d}", n_documents=20, n_criteria=10) for i in range(n_rooms)]
    eps = [
        SyntheticEpisode(
            f"ep{r:03d}-{k:04d}",
            f"room{r:03d}",
            n_pass=k % 11,
            coverage=(k % 10) / 10,
            n_turns=1 + k % 12,
            n_sub_calls=k % 40,
        )
        for r in range(n_rooms)
        for k in range(per_room)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        # a row cache of its own (cold, and nothing left in the user's cache), unless set
        os.environ.setdefault(row_cache.ENV, str(Path(tmp) / "metrics-cache"))
        ws = data.Workspace.at(tmp)
        run_dir = ws.runs / "big"
        t0 = time.perf_counter()
        write_scored_run(run_dir, rooms, eps, rooms_dir=ws.rooms)
        episode_id = eps[len(eps) // 2].episode_id
        _trajectory(run_dir, episode_id, "big")
        build_s = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 1e6

        def open_table() -> None:
            data.run_table(run_dir)

        def open_overview() -> None:
            data.run_overview(run_dir)

        def open_trace() -> None:
            data.episode_summary(run_dir, episode_id)
            data.trajectory(run_dir, episode_id)
            data.episode_verdicts(run_dir, episode_id)

        # the trace page first (a cold trace does not read the whole run), then the run
        trace_cold = _time(open_trace)
        trace_warm = _time(open_trace)
        (table_cold, table_cpu), table_warm = _time_cpu(open_table), _time(open_table)
        (overview_cold, overview_cpu), overview_warm = (
            _time_cpu(open_overview),
            _time(open_overview),
        )
        live_s = None
        if hasattr(data, "run_view"):  # the Compare page's live sections (this code only)
            from rlmdistill.dashboard.live import LiveSettings, live_comparison

            live_s = _time(lambda: live_comparison([data.run_view(run_dir)], LiveSettings()))
        _trace_page(data, run_dir, episode_id)  # warm every cache the page uses
        mod = sys.modules.get("rlmdistill.dashboard.runview", data)
        stamps, stats = _Counter(mod, "run_stamp"), _Counter(mod, "file_stamp")
        if mod is not data:  # data.py's own stat calls (trajectory, json) count too
            stats_data = _Counter(data, "file_stamp")
        t0 = time.perf_counter()
        for _ in range(args.reruns):
            _trace_page(data, run_dir, episode_id)
        rerun_s = (time.perf_counter() - t0) / args.reruns
        n_stats = stats.n + (stats_data.n if mod is not data else 0)
        traj_mb = trajectory_path(run_dir, episode_id).stat().st_size / 1e6
    code = "run view" if hasattr(data, "run_view") else "per-loader stamps"
    print(
        f"synthetic run: {len(eps):,} episodes, {n_rooms} rooms, {size_mb:.1f} MB (built in {build_s:.1f} s)"
    )
    print(
        f"open a trace (summary + trajectory {traj_mb:.2f} MB + verdicts): cold {trace_cold:.3f} s, warm {trace_warm:.3f} s  (target <= 0.5 s)"
    )
    print(
        f"run table (episode listing, pass rates):  cold {table_cold:.2f} s, warm {table_warm:.3f} s"
    )
    print(
        f"run overview (headline means):            cold {overview_cold:.2f} s, warm {overview_warm:.3f} s"
    )
    print(
        f"open a run (overview + table):            cold {table_cold + overview_cold:.2f} s  (target <= 2 s); "
        f"CPU {table_cpu + overview_cpu:.2f} s"
    )
    print(
        f"trace page rerun, warm ({code}): {rerun_s * 1e3:.1f} ms; per rerun "
        f"{stamps.n / args.reruns:.0f} run stamps, {n_stats / args.reruns:.0f} file stats"
    )
    if live_s is not None:
        print(
            f"compare page, live per-run means with intervals (B=2000, every report metric): "
            f"{live_s:.2f} s after the overview, computing the metrics rows (cached afterwards)"
        )
    print(f"uptime after: {_uptime()}", flush=True)


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
