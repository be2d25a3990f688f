"""Time to build a behaviour-shift report (``rlmdistill report``) over 10,000 episodes.

Writes two synthetic runs with the schema models (``RunManifest``, ``EpisodeSummary``,
``Verdict``; a ``task.json`` per room; small trajectories: ``EpisodeStart``, two
``TurnRecord``s, the sub-calls, ``EpisodeEnd``), ``--episodes`` episodes in all (default
10,000: 5,000 per run over ``--rooms`` rooms, 20 criteria each, so 200,000 verdicts), then
times :func:`rlmdistill.analysis.compare.build_report`:

1. summaries + verdicts only (``trajectories=False``), figures drawn;
2. with every trajectory read (batch sizes, answer reach, memo timing), figures drawn: the
   full report, as ``rlmdistill report`` builds it by default, into a new folder;
3. the full report again into another new folder, the row cache warm (cold: steps 1-2 start
   with an empty row cache; warm: the rows of step 2 are in it,
   :mod:`rlmdistill.analysis.row_cache`, which answers instead of the run's files);
4. the full report rebuilt in the folder of step 2 with nothing changed (row cache warm).

Each report's line gives its wall time, the CPU seconds of this process and of the worker
processes the report forks (trajectory readers, ``RLMDISTILL_READ_WORKERS``; the figure
drawer), and the load average: on a busy machine the wall time says little, while the
CPU of this process bounds what an idle machine with enough cores could reach.

It also times loading the metrics of one run alone (no row cache), to show where the time
goes. The row cache is a fresh folder under the work folder (``RLMDISTILL_METRICS_CACHE``),
never the user's; the runs are written, then the benchmark waits out
:data:`~rlmdistill.analysis.row_cache.RACY_NS` (rows read from files modified within it are
not stored), as a run collected earlier is.

    python benchmarks/bench_report.py [--episodes 10000] [--rooms 500] [--seed 0] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import platform
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from rlmdistill.analysis.compare import build_report
from rlmdistill.analysis.metrics import load_run_metrics
from rlmdistill.analysis.row_cache import ENV, RACY_NS
from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.rooms.task import Criterion, Task, save_task
from rlmdistill.traces.schema import (
    CodeBlockResult,
    Coverage,
    EpisodeEnd,
    EpisodeStart,
    EpisodeSummary,
    ModelSettings,
    RoomInfo,
    RunManifest,
    SubCallRecord,
    TokenUsage,
    TurnRecord,
    Verdict,
)
from rlmdistill.traces.store import dumps_record

N_CRITERIA = 20
TYPES = ["finding", "citation", "quantification", "recommendation", "missing-evidence"]
ANSWER = "The agreement may not be assigned without the prior written consent of the other party."


def make_rooms(root: Path, n_rooms: int, rng: np.random.Generator) -> list[RoomInfo]:
    """``n_rooms`` rooms (task.json only; no documents are needed to report)."""
    rooms = []
    for i in range(n_rooms):
        path = root / f"room{i:04d}"
        path.mkdir(parents=True)
        criteria = [
            Criterion(
                id=f"c{j:02d}",
                title=f"criterion {j}",
                match_criteria="PASS if ...",
                type=TYPES[j % 5],
            )
            for j in range(N_CRITERIA)
        ]
        save_task(
            Task(id=f"task{i}", title=f"Room {i}", instructions="Review.", criteria=criteria),
            path / "task.json",
        )
        n_docs = int(rng.integers(2, 60))
        folders = {f"F{k}": 0 for k in range(min(5, n_docs))}
        for d in range(n_docs):
            folders[f"F{d % len(folders)}"] += 1
        rooms.append(
            RoomInfo(
                room_id=f"room{i:04d}",
                room_hash=hashlib.sha256(f"room{i}".encode()).hexdigest()[:16],
                path=str(path),
                n_documents=n_docs,
                n_chars=n_docs * int(rng.integers(5_000, 40_000)),
                folders=folders,
            )
        )
    return rooms


def write_run(
    out: Path,
    rooms: list[RoomInfo],
    episodes_per_room: int,
    skill: float,
    root: str,
    rng: np.random.Generator,
) -> None:
    """One synthetic run: summaries, reference verdicts and small trajectories."""
    (out / "trajectories").mkdir(parents=True)
    (out / "verdicts").mkdir()
    run_id = out.name
    now = dt.datetime.now(dt.UTC)
    sub = "openai:sub@http://127.0.0.1:8000/v1"
    manifest = RunManifest(
        run_id=run_id,
        config={"root": root, "sub": sub, "depth": 1, "episodes": episodes_per_room},
        config_hash="bench",
        versions={},
        rooms=rooms,
    )
    (out / "run.json").write_text(manifest.model_dump_json(indent=1), encoding="utf-8")
    summaries, verdicts = [], []
    for room in rooms:
        for k in range(episodes_per_room):
            eid = hashlib.sha256(f"{run_id}:{room.room_id}:{k}".encode()).hexdigest()[:20]
            n_calls = max(1, int(rng.poisson(room.n_documents * 0.8)))
            batch = int(rng.integers(1, 9))
            memo = f"# Memo {eid}\n" + ANSWER * int(rng.integers(1, 4))
            sha = hashlib.sha256(memo.encode()).hexdigest()
            per_doc = {
                f"F{d % 5}/doc{d}.txt": float(rng.random() < 0.7) * float(rng.random())
                for d in range(room.n_documents)
            }
            root_usage = Usage(
                prompt_tokens=int(rng.integers(5_000, 50_000)), completion_tokens=800
            )
            sub_usage = Usage(prompt_tokens=n_calls * 3_000, completion_tokens=n_calls * 120)
            summaries.append(
                EpisodeSummary(
                    episode_id=eid,
                    run_id=run_id,
                    sample_index=k,
                    room=room,
                    task_id=f"task{room.room_id[4:].lstrip('0') or '0'}",
                    root_model=root,
                    sub_model=sub,
                    seed=k,
                    status="completed",
                    n_turns=2,
                    n_sub_calls=n_calls,
                    n_sub_batches=-(-n_calls // batch),
                    tokens=TokenUsage(root=root_usage, sub=sub_usage),
                    wall_time_s=float(rng.gamma(4, 30)),
                    memo=memo,
                    memo_chars=len(memo),
                    memo_sha256=sha,
                    coverage=Coverage(
                        method="synthetic",
                        overall=float(np.mean(list(per_doc.values()))),
                        per_folder={f: float(rng.random()) for f in room.folders},
                        per_document=per_doc,
                    ),
                    started_at=now,
                    ended_at=now,
                )
            )
            p = min(0.95, max(0.02, skill + rng.normal(0, 0.1)))
            for j in range(N_CRITERIA):
                verdicts.append(
                    Verdict(
                        episode_id=eid,
                        grader="reference",
                        grader_version="bench",
                        criterion_id=f"c{j:02d}",
                        criterion_type=TYPES[j % 5],
                        verdict="PASS" if rng.random() < p else "FAIL",
                        reason="synthetic",
                        memo_sha256=sha,
                    )
                )
            write_trajectory(out, eid, run_id, room, root, sub, memo, n_calls, batch, now)
    with (out / "episodes.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(dumps_record(s) + "\n" for s in summaries)
    with (out / "verdicts" / "reference.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(dumps_record(v) + "\n" for v in verdicts)


def write_trajectory(
    out: Path,
    eid: str,
    run_id: str,
    room: RoomInfo,
    root: str,
    sub: str,
    memo: str,
    n_calls: int,
    batch: int,
    now: dt.datetime,
) -> None:
    """EpisodeStart, a reading turn with its sub-calls, a memo turn, EpisodeEnd."""
    settings = lambda spec: ModelSettings(spec=spec, model_id=spec, sampling=Sampling())  # noqa: E731
    records: list = [
        EpisodeStart(
            episode_id=eid,
            run_id=run_id,
            sample_index=0,
            room=room,
            task_id="t",
            root=settings(root),
            sub=settings(sub),
            seed=0,
            prompt_version="bench",
            limits={},
            initial_messages=[Message(role="system", content="You are the lead reviewer.")],
        )
    ]
    code = "answers = llm_query_batched([read(d) for d in docs])"
    for t, (c, final) in enumerate(
        ((code, None), (f"memo = {memo!r}\nFINAL_VAR(memo)", "final_var"))
    ):
        records.append(
            TurnRecord(
                episode_id=eid,
                turn=t,
                started_at=now,
                n_messages_before=2 + 2 * t,
                prompt_sha256="0" * 64,
                completion=f"```repl\n{c}\n```",
                usage=Usage(prompt_tokens=1000, completion_tokens=100),
                latency_s=1.0,
                blocks=[
                    CodeBlockResult(index=0, code=c, stdout_full="", stdout_chars=0, duration_s=0.1)
                ],
                final_answer_source=final,  # type: ignore[arg-type]
            )
        )
    for i in range(n_calls):
        records.append(
            SubCallRecord(
                episode_id=eid,
                call_id=i,
                turn=0,
                block=0,
                batch_id=i // batch,
                batch_size=batch,
                prompt="Quote the assignment clause. " * 20,
                sources=[{"doc_id": f"doc{i}", "start": 0, "end": 2000}],
                response=ANSWER,
            )
        )
    records.append(EpisodeEnd(episode_id=eid, status="completed", memo=memo))
    (out / "trajectories" / f"{eid}.jsonl").write_text(
        "".join(dumps_record(r) + "\n" for r in records), encoding="utf-8"
    )


def uptime() -> str:
    """The machine's load as `uptime` prints it (every figure is printed beside it)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds() -> tuple[float, float]:
    """``(this process, its finished child processes)`` CPU seconds (user + system) so far:
    the report's trajectory readers and figure drawer are child processes."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def timed_line(t: float, cpu: tuple[float, float]) -> str:
    """Wall seconds since ``t``, the CPU seconds of this process and of its children since
    ``cpu`` (:func:`cpu_seconds`), and the 1-minute load average."""
    me, kids = cpu_seconds()
    return (
        f"{time.perf_counter() - t:.2f} s (CPU: this process {me - cpu[0]:.2f} s, worker "
        f"processes {kids - cpu[1]:.2f} s; load {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10_000, help="Episodes over both runs.")
    ap.add_argument("--rooms", type=int, default=500, help="Rooms (each run covers all).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="Write runs/report here and keep them.")
    ap.add_argument(
        "--full-only",
        action="store_true",
        help="Time only the full report (trajectories read, figures drawn), e.g. under py-spy.",
    )
    args = ap.parse_args()
    per_room = max(1, args.episodes // (2 * args.rooms))
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    rng = np.random.default_rng(args.seed)
    try:
        t0 = time.perf_counter()
        runs = [work / "runs" / "base", work / "runs" / "tuned"]
        if not (runs[1] / "episodes.jsonl").exists():  # --keep DIR: reuse the runs written
            rooms = make_rooms(work / "rooms", args.rooms, rng)
            write_run(runs[0], rooms, per_room, 0.35, "openai:base@http://127.0.0.1:8000/v1", rng)
            write_run(runs[1], rooms, per_room, 0.45, "openai:tuned@http://127.0.0.1:8000/v1", rng)
        # --keep DIR run again: the reports (and their .cache) go, so "the full report" is
        # built into a new folder, as `rlmdistill report` into a new folder does
        shutil.rmtree(work / "reports", ignore_errors=True)
        shutil.rmtree(work / "metrics-cache", ignore_errors=True)  # cold: an empty row cache
        os.environ[ENV] = str(work / "metrics-cache")
        time.sleep(RACY_NS / 1e9 + 0.1)  # the runs are not "racy" (see the docstring)
        n = 2 * args.rooms * per_room
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}")
        print(
            f"wrote 2 runs, {n} episodes, {n * N_CRITERIA} verdicts, {args.rooms} rooms in {time.perf_counter() - t0:.1f} s"
        )
        print(f"uptime: {uptime()}", flush=True)
        if not args.full_only:
            for traj in (False, True):
                t = time.perf_counter()
                load_run_metrics(runs[0], trajectories=traj, row_cache=False)
                print(
                    f"metrics of one run ({n // 2} episodes, no row cache), trajectories={traj}: "
                    f"{time.perf_counter() - t:.2f} s"
                )
            one = work / "one-run-cache"  # its own folder: the reports below start cold
            shutil.rmtree(one, ignore_errors=True)
            for state in ("cold (computed and stored)", "warm"):
                t = time.perf_counter()
                load_run_metrics(runs[0], trajectories=True, row_cache=one)
                print(
                    f"metrics of one run, trajectories=True, row cache {state}: "
                    f"{time.perf_counter() - t:.2f} s"
                )
        for traj in (False, True) if not args.full_only else (True,):
            t, cpu = time.perf_counter(), cpu_seconds()
            report = build_report(
                runs, work / "reports" / f"traj-{traj}", trajectories=traj, overwrite=True
            )
            took = timed_line(t, cpu)
            rows = len(report.comparisons[0].rows)
            print(
                f"report over {n} episodes (trajectories={traj}{', the full report' if traj else ''}"
                f", new folder, row cache cold): "
                f"{took} ({rows} metrics compared, {len(report.figures)} figures drawn)",
                flush=True,
            )
        t, cpu = time.perf_counter(), cpu_seconds()
        build_report(runs, work / "reports" / "warm", trajectories=True, overwrite=True)
        print(
            f"the full report into another new folder, row cache warm: {timed_line(t, cpu)}",
            flush=True,
        )
        print(f"uptime: {uptime()}", flush=True)
        t, cpu = time.perf_counter(), cpu_seconds()
        build_report(runs, work / "reports" / "traj-True", trajectories=True, overwrite=True)
        print(
            f"the full report rebuilt in its folder, nothing changed (row cache warm): "
            f"{timed_line(t, cpu)}",
            flush=True,
        )
        print(f"uptime: {uptime()}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
