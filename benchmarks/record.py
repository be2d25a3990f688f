"""Run one benchmark and keep its result file (``benchmarks/results/<name>.json``).

    python benchmarks/record.py bench_decode.py --kib 1024 --repeat 5

runs ``python benchmarks/bench_decode.py --kib 1024 --repeat 5``, passing its output through,
and when it exits 0 writes ``benchmarks/results/bench_decode.json`` (:class:`BenchmarkResult`):
the command, the figure, the machine, the load average, the date, the commit and the whole
output. The figure is
the benchmark's lines that start with ``result:`` (a benchmark may print one to name its
headline), else its last output line. The machine is its ``machine: ...`` line (every
benchmark prints one, :func:`rlmdistill.hardware.machine_line`), else this process's. One file
per benchmark: the last run replaces the one before (git keeps the history).
``scripts/gen_docs.py`` builds the Benchmarks page of the docs from these files.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RESULT_SCHEMA_VERSION = 1
"""Version of a result file."""
MAX_OUTPUT_LINES = 400
"""Output lines kept in a result file (the last ones)."""


class BenchmarkResult(BaseModel):
    """``benchmarks/results/<benchmark>.json``: one benchmark run, as the docs show it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = RESULT_SCHEMA_VERSION
    benchmark: str = Field(description="Script name without .py, e.g. 'bench_decode'.")
    command: str = Field(description="The command as run, from the checkout's root.")
    figure: str = Field(description="The headline: `result:` lines, else the last line.")
    machine: str = Field(description="The machine line (CPU, vector extensions, threads).")
    date: dt.datetime = Field(description="When the run ended (UTC).")
    commit: str = Field(description="Short git commit of the checkout ('+dirty' if changed).")
    wall_s: float = Field(description="Wall time of the whole benchmark process (seconds).")
    load: tuple[float, float] | None = Field(
        None, description="1-minute load average at the start and at the end of the run."
    )
    output: list[str] = Field(description="The benchmark's stdout, its last lines.")


def headline(lines: list[str]) -> str:
    """The figure of an output: its ``result:`` lines joined, else its last non-empty line.

    Raises:
        ValueError: the output is empty (nothing to record).
    """
    picked = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("result:")]
    if picked:
        return "; ".join(picked)
    rest = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("machine:")]
    if not rest:
        raise ValueError("the benchmark printed nothing to record")
    return rest[-1]


def machine_of(lines: list[str]) -> str:
    """The benchmark's own ``machine:`` line, else this process's machine line."""
    for ln in lines:
        if ln.startswith("machine:"):
            return ln.split(":", 1)[1].strip()
    from rlmdistill.hardware import machine_line

    return machine_line().split(":", 1)[1].strip()


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=HERE, capture_output=True, text=True, check=False
        ).stdout.strip()

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def main(argv: list[str] | None = None) -> int:
    """Run ``argv`` (``bench_NAME.py [ARGS]``), write its result file on success; exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or not argv[0].endswith(".py") or not (HERE / Path(argv[0]).name).is_file():
        print("usage: python benchmarks/record.py bench_NAME.py [ARGS...]", file=sys.stderr)
        return 2
    script = HERE / Path(argv[0]).name
    cmd = [sys.executable, str(script), *argv[1:]]
    start, load0 = dt.datetime.now(dt.UTC), os.getloadavg()[0]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line.rstrip("\n"))
    rc = proc.wait()
    end = dt.datetime.now(dt.UTC)
    if rc != 0:
        print(f"record: {script.name} exited {rc}; no result file written", file=sys.stderr)
        return rc
    result = BenchmarkResult(
        benchmark=script.stem,
        command=shlex.join(["python", f"benchmarks/{script.name}", *argv[1:]]),
        figure=headline(lines),
        machine=machine_of(lines),
        date=end,
        commit=_commit(),
        wall_s=round((end - start).total_seconds(), 3),
        load=(round(load0, 2), round(os.getloadavg()[0], 2)),
        output=lines[-MAX_OUTPUT_LINES:],
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{script.stem}.json"
    out.write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")
    print(f"record: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
