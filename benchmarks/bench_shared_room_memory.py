"""Resident memory of 1, 4 and 16 concurrent REPLs over one large room.

Each REPL memory-maps the room snapshot and scans every document once (a regex ``search``
over the whole room, as a root's code would, for a rare pattern so that results stay small), then we sum the proportional set size (PSS,
shared pages split between the processes that map them) of the REPL processes, plus the
collector's own growth. Target (issue 3): each extra episode adds <= 10% of the room's size.

    python benchmarks/bench_shared_room_memory.py [--room-mb 1024] [--episodes 1 4 16]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import psutil

from rlmdistill.harness.repl import ReplLimits, ReplProcess
from rlmdistill.rooms import DataRoom


def make_room(root: Path, total_mb: int, doc_kb: int = 256) -> Path:
    """Write ``total_mb`` MiB of text as documents of ``doc_kb`` KiB in 16 folders."""
    base = (
        "The Supplier shall deliver the Products. Either party may terminate this Agreement "
        "on a change of control of the other party. Liability is capped at fees paid. "
    ) * 64
    n_docs = total_mb * 1024 // doc_kb
    for i in range(n_docs):
        folder = root / "documents" / f"F{i % 16:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = f"Document {i}.\n" + base
        reps = doc_kb * 1024 // len(body) + 1
        (folder / f"doc{i:05d}.txt").write_text((body * reps)[: doc_kb * 1024])
    return root


def pss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        total += psutil.Process(pid).memory_full_info().pss
    return total / 2**20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--room-mb", type=int, default=1024)
    ap.add_argument("--episodes", type=int, nargs="+", default=[1, 4, 16])
    args = ap.parse_args(argv)
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpus, {psutil.virtual_memory().total / 2**30:.0f} GiB, python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        room = DataRoom.load(make_room(Path(tmp) / "room", args.room_mb))
        index = room.snapshot(Path(tmp) / "cache" / "room.snapshot.json")
        room_mb = index.with_suffix(".bin").stat().st_size / 2**20
        print(
            f"room: {len(room.documents)} documents, {room_mb:.0f} MiB, built in {time.monotonic() - t0:.0f}s"
        )
        del room
        results: dict[int, float] = {}
        for n in args.episodes:
            repls = [
                ReplProcess(index, Path(tmp) / f"s{k}", ReplLimits(memory_limit_mb=None))
                for k in range(n)
            ]
            try:
                idle = pss_mb([r.pid for r in repls])
                for r in repls:
                    out = r.execute(
                        # a regex pass over every document; a rare pattern keeps the result small
                        "print(len(search('Document 4095[.]', window=0, max_hits=10)))",
                        lambda p, s: [],
                    )
                    assert out.error is None, out.error
                busy = pss_mb([r.pid for r in repls])
            finally:
                for r in repls:
                    r.close()
            results[n] = busy
            print(
                f"episodes={n:2d}  REPL PSS idle {idle:7.0f} MiB  after full scan {busy:7.0f} MiB  "
                f"per episode {busy / n:6.0f} MiB = {busy / n / room_mb:5.1%} of the room"
            )
        first = min(results)
        for n, busy in sorted(results.items()):
            if n > first:
                extra = (busy - results[first]) / (n - first)
                print(
                    f"each extra episode (from {first} to {n}) adds {extra:.0f} MiB = {extra / room_mb:.1%} of the room"
                )


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
