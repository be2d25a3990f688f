"""Every scale target of the collector (issue 17) in one run, repeated: one table, all repeats.

Runs ``bench_concurrency.py --only 16x64 64x64 256x64`` and ``bench_lab_room.py`` (their own
command lines, as subprocesses, their output passed through with a ``  [name]`` prefix)
``--repeats`` times in a row, parses every figure from their output lines and prints one
table: the figure, its target and where the target comes from, the value in each repeat, and
whether it held in every repeat; then the machine line
(:func:`rlmdistill.hardware.machine_line`), the 1-, 5- and 15-minute load averages before and
after each repeat, and a last ``result:`` line: how many targets held in all repeats (and
which repeats started at a load of :data:`IDLE_LOAD` or more: not idle). Before each
benchmark it waits for the machine to settle (:func:`settle`: the previous benchmark's files
written back, nothing else runnable) and prints how long it waited. A
figure a benchmark did not print (it failed, or its format changed) reads ``missing`` and
fails its target. The exit status is 0 whatever the figures: this is a benchmark, not a test.

The targets (:data:`TARGETS`): 16 x 64 wall / ideal <= 1.10 and 64 x 64 <= 2.0; collector CPU
<= 1 ms per sub-call (64 x 64); 256 x 64: 0 errors, <= 512 peak threads; the LAB-scale room's
cold set-up (load + REPL snapshot + coverage index, empty cache) <= 60 s at a peak RSS <= 3x
its text; warm, one episode (collector + REPL PSS) <= 1.5x the text, <= 5% of the room per
extra episode; ``result()`` <= 1 s per episode. They are to hold in three repeats in a row
on an idle machine (nothing else running); a busy machine measures its contention too.

``--quick`` runs tiny sizes (4x8, 8x8 and 16x8 episodes x sub-calls at L = 0.2 s; a 200-document
room at length scale 1 with 1 and 2 episodes; about half a minute a repeat) to check that the
command works end to end. Its figures are not the targets' sizes: the table still applies the
targets, but the ``result:`` line says ``quick sizes``.

    python benchmarks/bench_scale.py --all [--repeats 3] [--quick] [--room DIR] [--tmp DIR]
        [--no-settle]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

Suite = Literal["concurrency", "lab_room"]
SUITES: tuple[Suite, ...] = ("concurrency", "lab_room")

CONCURRENCY_SRC = "issue 17; docs/results/history.md, concurrency table"
LAB_ROOM_SRC = "issue 17; bench_lab_room.py docstring, docs/synth.md"

FULL_SCENARIOS = {"16x64": "16x64", "64x64": "64x64", "256x64": "256x64"}
"""The concurrency scenarios the targets name -> the scenario run (full sizes)."""
QUICK_SCENARIOS = {"16x64": "4x8", "64x64": "8x8", "256x64": "16x8"}
"""The same for ``--quick`` (episodes x sub-calls)."""
IDLE_LOAD = 1.0
"""A repeat that starts at a 1-minute load average at or above this is flagged ``not idle``
(on the 2-core machines of the history, 1.0-1.3 read as not fully idle)."""
SETTLE_MAX_S = 120.0
"""The longest :func:`settle` waits before a benchmark runs anyway (and says so)."""
SETTLE_WINDOW_S = 3.0
"""The span over which the machine must read quiet (:func:`settle`)."""
SETTLE_BUSY_SHARE = 0.1
"""The share of reads in that span allowed to catch another runnable task (a kernel thread
passing by); more than that is not quiet."""


@dataclass(frozen=True)
class Target:
    """One figure of the table and its bound.

    ``bound`` is ``None`` for a figure that is only reported (no target). A figure holds when
    ``value <= bound``; a missing or NaN value never holds.
    """

    key: str
    """Name of the figure in the table (and key of :func:`figures`' result)."""
    bound: float | None
    """Upper bound, inclusive, in ``unit``; ``None``: reported only."""
    unit: str
    """Unit of value and bound ("" for a ratio or a count)."""
    source: str
    """Where the target comes from."""
    suite: Suite
    """The benchmark that measures it."""
    fmt: str = "{:.3f}"
    """How a value is printed."""

    def met(self, value: float | None) -> bool | None:
        """Whether ``value`` holds the target (``None`` when there is no target)."""
        if self.bound is None:
            return None
        return value is not None and not math.isnan(value) and value <= self.bound


TARGETS: tuple[Target, ...] = (
    Target("16 x 64: wall / ideal", 1.10, "", CONCURRENCY_SRC, "concurrency"),
    Target("64 x 64: wall / ideal", 2.0, "", CONCURRENCY_SRC, "concurrency"),
    Target("64 x 64: collector CPU per sub-call", 1.0, "ms", CONCURRENCY_SRC, "concurrency"),
    Target("16 x 64: collector CPU per sub-call", None, "ms", "reported", "concurrency"),
    Target("256 x 64: errors", 0, "", CONCURRENCY_SRC, "concurrency", "{:.0f}"),
    Target("256 x 64: peak threads", 512, "", CONCURRENCY_SRC, "concurrency", "{:.0f}"),
    Target("256 x 64: wall / ideal", None, "", "reported", "concurrency"),
    Target("256 x 64: collector CPU per sub-call", None, "ms", "reported", "concurrency"),
    Target("cold: load + snapshot + index", 60.0, "s", LAB_ROOM_SRC, "lab_room", "{:.1f}"),
    Target("cold: peak RSS / text", 3.0, "x", LAB_ROOM_SRC, "lab_room", "{:.2f}"),
    Target(
        "warm, 1 episode: collector + REPL PSS / text", 1.5, "x", LAB_ROOM_SRC, "lab_room", "{:.2f}"
    ),
    Target("warm: each extra episode", 5.0, "% of room", LAB_ROOM_SRC, "lab_room", "{:.2f}"),
    Target("result() per episode", 1.0, "s", LAB_ROOM_SRC, "lab_room", "{:.2f}"),
)
"""Every figure of the table, in its order."""

_NUM = r"(-?\d+(?:\.\d+)?|nan)"
_CONC = re.compile(
    r"^(?P<name>\S+)\s+L=[\d.]+s (?P<episodes>\d+) episodes x (?P<sub>\d+) sub-calls: "
    r"completed (?P<completed>\d+), errors (?P<errors>\d+)\b.*?, wall "
    rf"{_NUM}s / ideal {_NUM}s = {_NUM}; collector CPU .*? = {_NUM} ms per sub-call; "
    r"peak threads (?P<threads>\d+)"
)
_COLD = re.compile(
    rf"^cold: load {_NUM} s \+ snapshot {_NUM} s \+ index {_NUM} s = {_NUM} s \| peak RSS "
    rf"{_NUM} MiB = {_NUM}x the text"
)
_RESULT = re.compile(rf"\bresult\(\) {_NUM} s per episode")
_WARM = re.compile(
    rf"^warm, (\d+) episode\(s\) at once: .*?\| all \d+ live \(.*?\): .*? = {_NUM} MiB = "
    rf"{_NUM}x the text"
)
_EXTRA = re.compile(
    rf"^each extra episode \((\d+) -> (\d+)\), all live at the gate: {_NUM} MiB = {_NUM}% of "
    r"the room"
)


def _num(s: str) -> float:
    return float("nan") if s == "nan" else float(s)


def parse_concurrency(text: str) -> dict[str, dict[str, float]]:
    """Per-scenario figures of ``bench_concurrency.py``'s output.

    Returns ``{scenario: {"episodes", "sub_calls", "completed", "errors", "wall_s", "ideal_s",
    "ratio", "cpu_ms_per_sub_call", "peak_threads"}}`` for every scenario line found (lines
    of other scenarios, such as ``split``, too). ``ratio`` is as printed (3 decimals since
    ``bench_scale`` exists, 2 before).
    """
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = _CONC.match(line.strip())
        if m:
            wall, ideal, ratio, cpu = (_num(g) for g in m.groups()[5:9])
            out[m["name"]] = {
                "episodes": float(m["episodes"]),
                "sub_calls": float(m["sub"]),
                "completed": float(m["completed"]),
                "errors": float(m["errors"]),
                "wall_s": wall,
                "ideal_s": ideal,
                "ratio": ratio,
                "cpu_ms_per_sub_call": cpu,
                "peak_threads": float(m["threads"]),
            }
    return out


def parse_lab_room(text: str) -> dict[str, float]:
    """Figures of ``bench_lab_room.py``'s output (each key only when its line was printed).

    Keys: ``cold_s`` (load + snapshot + index, s), ``cold_peak_mib``, ``cold_peak_x`` (peak
    RSS / the room's UTF-8 text), ``result_s`` (median ``result()`` per episode, s),
    ``warm_<N>_mib`` and ``warm_<N>_x`` (collector + REPL PSS with all N episodes live at the
    gate), ``extra_mib`` and ``extra_pct`` (per
    extra episode, the widest step printed, e.g. 1 -> 8).
    """
    out: dict[str, float] = {}
    widest = -1
    for line in text.splitlines():
        line = line.strip()
        if m := _COLD.match(line):
            out["cold_s"] = _num(m[4])
            out["cold_peak_mib"] = _num(m[5])
            out["cold_peak_x"] = _num(m[6])
        elif m := _WARM.match(line):
            n = int(m[1])
            out[f"warm_{n}_mib"] = _num(m[2])
            out[f"warm_{n}_x"] = _num(m[3])
        elif m := _EXTRA.match(line):
            width = int(m[2]) - int(m[1])
            if width > widest:
                widest = width
                out["extra_mib"] = _num(m[3])
                out["extra_pct"] = _num(m[4])
        if m := _RESULT.search(line):
            out["result_s"] = _num(m[1])
    return out


def figures(
    conc: dict[str, dict[str, float]],
    lab: dict[str, float],
    scenarios: dict[str, str] = FULL_SCENARIOS,
) -> dict[str, float | None]:
    """The value of every :data:`TARGETS` figure (``None``: not printed).

    ``scenarios`` maps the scenario a target names (``16x64``, ``64x64``, ``256x64``) to the
    one that was run (:data:`FULL_SCENARIOS`, or :data:`QUICK_SCENARIOS`).
    """

    def c(name: str, field: str) -> float | None:
        return conc.get(scenarios[name], {}).get(field)

    values: dict[str, float | None] = {
        "16 x 64: wall / ideal": c("16x64", "ratio"),
        "64 x 64: wall / ideal": c("64x64", "ratio"),
        "64 x 64: collector CPU per sub-call": c("64x64", "cpu_ms_per_sub_call"),
        "16 x 64: collector CPU per sub-call": c("16x64", "cpu_ms_per_sub_call"),
        "256 x 64: errors": c("256x64", "errors"),
        "256 x 64: peak threads": c("256x64", "peak_threads"),
        "256 x 64: wall / ideal": c("256x64", "ratio"),
        "256 x 64: collector CPU per sub-call": c("256x64", "cpu_ms_per_sub_call"),
        "cold: load + snapshot + index": lab.get("cold_s"),
        "cold: peak RSS / text": lab.get("cold_peak_x"),
        "warm, 1 episode: collector + REPL PSS / text": lab.get("warm_1_x"),
        "warm: each extra episode": lab.get("extra_pct"),
        "result() per episode": lab.get("result_s"),
    }
    assert set(values) == {t.key for t in TARGETS}
    return values


@dataclass
class Repeat:
    """One repeat: the figures and the 1/5/15-minute load averages before and after."""

    values: dict[str, float | None]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    failed: list[str]
    """Benchmarks that exited non-zero (their name and exit status)."""
    settled: list[tuple[str, float, bool]] = field(default_factory=list)
    """Per benchmark run: its name, the seconds :func:`settle` waited before it, and whether
    the machine read quiet then (``False``: it ran after :data:`SETTLE_MAX_S` anyway)."""


def table(
    repeats: Sequence[Repeat], suites: Sequence[Suite] = SUITES
) -> tuple[list[str], int, int]:
    """The table's lines (Markdown), the number of targets that held in every repeat, and
    the number of targets (figures with a bound), over the figures of ``suites``."""
    head = " | ".join(f"repeat {i + 1}" for i in range(len(repeats)))
    lines = [
        f"| figure | target (source) | {head} | met in every repeat |",
        "|---" * (3 + len(repeats)) + "|",
    ]
    held = n = 0
    for t in TARGETS:
        if t.suite not in suites:
            continue
        cells = []
        oks = []
        for r in repeats:
            v = r.values.get(t.key)
            cells.append("missing" if v is None else t.fmt.format(v))
            oks.append(t.met(v))
        if t.bound is None:
            target, verdict = "reported", "-"
        else:
            n += 1
            unit = t.unit if t.unit in ("", "x") else " " + t.unit
            target = f"<= {t.fmt.format(t.bound)}{unit} ({t.source})"
            ok = bool(repeats) and all(oks)
            held += ok
            verdict = "yes" if ok else "no"
        unit = f" ({t.unit})" if t.unit else ""
        lines.append(f"| {t.key}{unit} | {target} | {' | '.join(cells)} | {verdict} |")
    return lines, held, n


def _run(name: str, argv: list[str], echo: Callable[[str], None]) -> tuple[str, int]:
    """Run ``python benchmarks/<argv...>`` from the checkout's root, passing its output
    through (prefixed with ``[name]``); returns its whole output and its exit status."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        echo(f"  [{name}] {line.rstrip()}")
    return "".join(lines), proc.wait()


def settle(
    max_wait_s: float = SETTLE_MAX_S,
    window_s: float = SETTLE_WINDOW_S,
    interval_s: float = 0.1,
    *,
    read: Callable[[], int | None] | None = None,
    sync: Callable[[], None] = os.sync,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float, bool]:
    """Wait until the machine is quiet, so that a benchmark does not measure what the one
    before it left behind. First ``sync`` (``os.sync``: ``bench_lab_room`` writes a 323 MiB
    room and its index and deletes them; their write-back would otherwise run during the next
    benchmark), then reads of the runnable tasks (``read``, default
    :func:`rlmdistill.hardware.runnable_tasks`, this process among them) every
    ``interval_s`` until, over the last ``window_s`` seconds, at most
    :data:`SETTLE_BUSY_SHARE` of the reads saw another task runnable; at most ``max_wait_s``.

    Returns ``(seconds waited, quiet)``; ``quiet`` is ``False`` when the wait ran out or the
    count cannot be read (not Linux: no wait after the sync)."""
    from rlmdistill.hardware import runnable_tasks

    reader = read or runnable_tasks
    start = clock()
    sync()
    window: deque[bool] = deque(maxlen=max(1, round(window_s / interval_s)))
    while True:
        n = reader()
        if n is None:
            return clock() - start, False
        window.append(n > 1)
        if len(window) == window.maxlen and sum(window) <= SETTLE_BUSY_SHARE * len(window):
            return clock() - start, True
        if clock() - start >= max_wait_s:
            return clock() - start, False
        sleep(interval_s)


def _load() -> tuple[float, float, float]:
    return os.getloadavg()


def _fmt_load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every target (the default)")
    ap.add_argument("--only", nargs="+", choices=SUITES, help="only these benchmarks")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    ap.add_argument("--room", default=None, help="bench_lab_room's --room (built once)")
    ap.add_argument("--tmp", default=None, help="bench_lab_room's --tmp")
    ap.add_argument("--sandbox", choices=["bwrap", "audit", "none"], default="bwrap")
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="run each benchmark right after the one before (no sync, no wait for quiet)",
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    suites: Sequence[Suite] = SUITES if args.all or not args.only else args.only
    scenarios = QUICK_SCENARIOS if args.quick else FULL_SCENARIOS
    conc_argv = ["benchmarks/bench_concurrency.py", "--sandbox", args.sandbox, "--only"]
    conc_argv += list(scenarios.values())
    lab_argv = ["benchmarks/bench_lab_room.py", "--sandbox", args.sandbox]
    if args.quick:
        conc_argv += ["--latency", "0.2"]
        lab_argv += ["--docs", "200", "--length-scale", "1", "--episodes", "1", "2"]
    if args.room:
        lab_argv += ["--room", args.room]
    if args.tmp:
        lab_argv += ["--tmp", args.tmp]

    from rlmdistill.hardware import machine_line

    machine = machine_line()
    print(machine, flush=True)

    def echo(line: str) -> None:
        print(line, flush=True)

    repeats: list[Repeat] = []
    for i in range(args.repeats):
        before = _load()
        print(f"repeat {i + 1} of {args.repeats}: load average {_fmt_load(before)}", flush=True)
        texts = {"concurrency": "", "lab_room": ""}
        failed: list[str] = []
        settled: list[tuple[str, float, bool]] = []
        for suite, name, bench_argv in (
            ("concurrency", "bench_concurrency", conc_argv),
            ("lab_room", "bench_lab_room", lab_argv),
        ):
            if suite not in suites:
                continue
            if not args.no_settle:
                waited, quiet = settle()
                settled.append((name, waited, quiet))
                state = "quiet" if quiet else "not quiet, ran anyway"
                print(f"settle before {name}: {waited:.1f} s ({state})", flush=True)
            texts[suite], rc = _run(name, bench_argv, echo)
            if rc:
                failed.append(f"{name} exit {rc}")
        values = figures(
            parse_concurrency(texts["concurrency"]), parse_lab_room(texts["lab_room"]), scenarios
        )
        repeats.append(Repeat(values, before, _load(), failed, settled))

    lines, held, n = table(repeats, suites)
    print()
    if args.quick:
        print(
            "quick sizes (concurrency "
            + ", ".join(f"{k} -> {v}" for k, v in scenarios.items())
            + " at L = 0.2 s; a 200-document room, 1 and 2 episodes): not the targets' sizes"
        )
    print("\n".join(lines))
    print()
    print(machine)
    for i, r in enumerate(repeats):
        extra = "".join(
            f"; settled {w:.1f} s before {name}{'' if q else ' (not quiet)'}"
            for name, w, q in r.settled
        )
        extra += f"; failed: {', '.join(r.failed)}" if r.failed else ""
        print(
            f"repeat {i + 1}: load average before {_fmt_load(r.load_before)}, after "
            f"{_fmt_load(r.load_after)}{extra}"
        )
    notes = ["quick sizes: not the targets' sizes"] if args.quick else []
    busy = [str(i + 1) for i, r in enumerate(repeats) if r.load_before[0] >= IDLE_LOAD]
    if busy:
        notes.append(f"not idle: load >= {IDLE_LOAD:g} before repeat {', '.join(busy)}")
    unsettled = [str(i + 1) for i, r in enumerate(repeats) if any(not q for _, _, q in r.settled)]
    if unsettled:
        notes.append(f"not quiet before a benchmark of repeat {', '.join(unsettled)}")
    note = f" ({'; '.join(notes)})" if notes else ""
    print(f"result: {held} of {n} targets held in all {len(repeats)} repeats{note}", flush=True)


if __name__ == "__main__":
    main()
