"""REPL start-up plus one block, per sandbox mode (``bwrap``, ``audit``, ``none``).

Each repeat starts a fresh :class:`~rlmdistill.harness.repl.ReplProcess` over a small room
snapshot, runs ``print(len(room))`` and closes it; the median over repeats is the figure the
docs/sandbox.md quotes. As root, ``bwrap`` includes making and removing the REPL's cgroups (pids,
memory, freezer) and the start through ``setpriv``; the first start of a process also makes the
root collector's user namespace (once per process, outside the median).

    python benchmarks/bench_sandbox_startup.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rlmdistill.collect.prepare import ensure_snapshot
from rlmdistill.hardware import machine_line
from rlmdistill.harness.repl import ReplLimits, ReplProcess
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.rooms import write_clause_room


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    print(machine_line(), flush=True)  # the machine every figure below was measured on
    with tempfile.TemporaryDirectory() as tmp:
        room = DataRoom.load(write_clause_room(Path(tmp) / "room"))
        snap = ensure_snapshot(room, Path(tmp) / "cache" / f"{room.snapshot_key}.snapshot.json")
        for mode in ("none", "audit", "bwrap"):
            times = []
            for k in range(args.repeats):
                t0 = time.perf_counter()
                with ReplProcess(
                    snap, Path(tmp) / f"s-{mode}-{k}", ReplLimits(), sandbox=mode
                ) as r:
                    out = r.execute("print(len(room))", lambda p, s: [])
                times.append(time.perf_counter() - t0)
                assert out.stdout == "20\n", out
            print(
                f"{mode:6s} start + one block + close: median {statistics.median(times) * 1000:.1f} ms"
                f"  best {min(times) * 1000:.1f} ms  worst {max(times) * 1000:.1f} ms"
                f"  ({args.repeats} repeats)"
            )


if __name__ == "__main__":
    main()
