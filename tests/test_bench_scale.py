"""``benchmarks/bench_scale.py``: every scale target in one table. The parser on real output of
``bench_concurrency.py`` and ``bench_lab_room.py`` (recorded on a 2-core AMD EPYC beside other
jobs, 2026-12-04), the met / not met decisions on both sides of each bound, and the command's
table over several repeats (the benchmarks replaced by their recorded output)."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_scale.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


bs = _bench()

# bench_concurrency.py before bench_scale (ratios to 2 decimals), full sizes, L = 1 s, load 5.9
CONC_OLD = """\
machine: AMD EPYC (x86_64), 2 CPUs, torch threads 2, torch capability AVX512, extensions sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16; auto dtype bfloat16
uptime before: 18:59:58 up 13:28,  0 user,  load average: 5.91, 4.18, 3.78
16x64   L=1.0s 16 episodes x 64 sub-calls: completed 16, errors 0 , wall 3.69s / ideal 3.0s = 1.23; collector CPU 0.40s user + 0.12s sys = 0.510 ms per sub-call; peak threads 32; episodes started over 0.04s, episode wall p50 3.63s max 3.66s; fake server CPU 0.29s
64x64   L=1.0s 64 episodes x 64 sub-calls: completed 64, errors 0 , wall 6.66s / ideal 3.0s = 2.22; collector CPU 1.61s user + 0.62s sys = 0.545 ms per sub-call; peak threads 80; episodes started over 0.10s, episode wall p50 6.19s max 6.60s; fake server CPU 1.47s
256x64  L=1.0s 256 episodes x 64 sub-calls: completed 256, errors 0 , wall 30.66s / ideal 3.0s = 10.22; collector CPU 7.59s user + 4.00s sys = 0.707 ms per sub-call; peak threads 272; episodes started over 0.51s, episode wall p50 26.22s max 29.87s; fake server CPU 6.60s
uptime after: 19:00:44 up 13:29,  0 user,  load average: 10.70, 5.67, 4.31
"""

# bench_concurrency.py now (3 decimals), the --quick sizes at L = 0.2 s
CONC_QUICK = """\
4x8     L=0.2s 4 episodes x 8 sub-calls: completed 4, errors 0 , wall 0.673s / ideal 0.6s = 1.122; collector CPU 0.06s user + 0.01s sys = 2.228 ms per sub-call; peak threads 15; episodes started over 0.01s, episode wall p50 0.66s max 0.66s; fake server CPU 0.02s
8x8     L=0.2s 8 episodes x 8 sub-calls: completed 8, errors 0 , wall 0.719s / ideal 0.6s = 1.198; collector CPU 0.07s user + 0.04s sys = 1.752 ms per sub-call; peak threads 23; episodes started over 0.01s, episode wall p50 0.68s max 0.71s; fake server CPU 0.03s
16x8    L=0.2s 16 episodes x 8 sub-calls: completed 16, errors 0 , wall 1.006s / ideal 0.6s = 1.676; collector CPU 0.14s user + 0.06s sys = 1.587 ms per sub-call; peak threads 32; episodes started over 0.03s, episode wall p50 0.92s max 0.95s; fake server CPU 0.05s
"""

# bench_lab_room.py before bench_scale (per extra episode to 0.1%), --docs 200 --length-scale 1
LAB_OLD = """\
room: rooms synth --docs 200 --length-scale 1 --seed 0: 200 documents, 3,317,111 characters, built in 0.2 s
cold: load 0.0 s + snapshot 0.0 s + index 0.6 s = 0.6 s | peak RSS 126 MiB = 39.90x the text (3 MiB UTF-8; 58 MiB at start, 59 MiB after the snapshot) | cache 8 MiB
duplicated text: 184,473 of 3,193,351 normalised characters = 5.8%
warm index: cache load 0.00 s, RSS after load 63 MiB | result() 0.08 s per episode (median of 3: 0.08, 0.08, 0.08; overall coverage 0.2027) | peak RSS 101 MiB
warm, 1 episode(s) at once: 2.6 s, statuses ['completed'] | all 1 live (median of 19 samples at the gate): collector PSS 205 MiB + 3 REPL PSS 10 MiB = 215 MiB = 67.84x the text | peak collector PSS 234 MiB + 0 REPL PSS 0 MiB = 234 MiB = 73.99x | collector peak RSS 279 MiB | coverage [0.2087]
warm, 2 episode(s) at once: 2.7 s, statuses ['completed'] | all 2 live (median of 17 samples at the gate): collector PSS 206 MiB + 6 REPL PSS 20 MiB = 225 MiB = 71.18x the text | peak collector PSS 245 MiB + 0 REPL PSS 0 MiB = 245 MiB = 77.38x | collector peak RSS 290 MiB | coverage [0.19941, 0.20183]
each extra episode (1 -> 2), all live at the gate: 10.6 MiB = 333.8% of the room (by the sampled peaks: 10.7 MiB = 339.3%)
load average after: 4.78 3.71 3.62
"""

# bench_lab_room.py's lines with the figures of docs/results/history.md's session 9 (idle,
# full size: cold 43.0 s, peak 2.86x, 1 episode 0.82x, 8 at once 1.19x, +17.1 MiB = 5.3%,
# result() 0.53 s), in today's format: a run at the targets' size, each on its side.
LAB_FULL = """\
cold: load 0.4 s + snapshot 0.4 s + index 42.2 s = 43.0 s | peak RSS 924 MiB = 2.86x the text (323 MiB UTF-8; 58 MiB at start, 400 MiB after the snapshot) | cache 804 MiB
warm index: cache load 0.07 s, RSS after load 120 MiB | result() 0.53 s per episode (median of 3: 0.55, 0.53, 0.52; overall coverage 0.0031) | peak RSS 300 MiB
warm, 1 episode(s) at once: 9.0 s, statuses ['completed'] | all 1 live (median of 20 samples at the gate): collector PSS 257 MiB + 3 REPL PSS 9 MiB = 266 MiB = 0.82x the text | peak collector PSS 300 MiB + 3 REPL PSS 20 MiB = 320 MiB = 0.99x | collector peak RSS 400 MiB | coverage [0.0031]
warm, 8 episode(s) at once: 12.0 s, statuses ['completed'] | all 8 live (median of 20 samples at the gate): collector PSS 290 MiB + 24 REPL PSS 95 MiB = 385 MiB = 1.19x the text | peak collector PSS 300 MiB + 24 REPL PSS 105 MiB = 405 MiB = 1.25x | collector peak RSS 420 MiB | coverage [0.0031]
each extra episode (1 -> 8), all live at the gate: 17.10 MiB = 5.30% of the room (by the sampled peaks: 12.14 MiB = 3.76%)
"""


def test_parses_concurrency_lines_in_the_old_and_new_format() -> None:
    old = bs.parse_concurrency(CONC_OLD)
    assert set(old) == {"16x64", "64x64", "256x64"}
    assert old["16x64"] == {
        "episodes": 16.0,
        "sub_calls": 64.0,
        "completed": 16.0,
        "errors": 0.0,
        "wall_s": 3.69,
        "ideal_s": 3.0,
        "ratio": 1.23,
        "cpu_ms_per_sub_call": 0.510,
        "peak_threads": 32.0,
    }
    assert old["256x64"]["ratio"] == 10.22 and old["256x64"]["peak_threads"] == 272
    new = bs.parse_concurrency(CONC_QUICK)
    assert [(k, v["ratio"], v["cpu_ms_per_sub_call"]) for k, v in new.items()] == [
        ("4x8", 1.122, 2.228),
        ("8x8", 1.198, 1.752),
        ("16x8", 1.676, 1.587),
    ]
    assert new["16x8"]["sub_calls"] == 8 and new["16x8"]["wall_s"] == 1.006
    # bench_scale passes the lines through with a prefix; its parser reads the raw output
    assert bs.parse_concurrency("  [bench_concurrency] x") == {}


def test_parses_lab_room_lines_in_the_old_and_new_format() -> None:
    assert bs.parse_lab_room(LAB_OLD) == {
        "cold_s": 0.6,
        "cold_peak_mib": 126.0,
        "cold_peak_x": 39.90,
        "result_s": 0.08,
        "warm_1_mib": 215.0,
        "warm_1_x": 67.84,
        "warm_2_mib": 225.0,
        "warm_2_x": 71.18,
        "extra_mib": 10.6,
        "extra_pct": 333.8,
    }
    full = bs.parse_lab_room(LAB_FULL)
    assert (full["cold_s"], full["cold_peak_x"], full["result_s"]) == (43.0, 2.86, 0.53)
    assert (full["warm_1_x"], full["warm_8_x"], full["extra_pct"]) == (0.82, 1.19, 5.30)


def test_the_widest_step_per_extra_episode_and_a_plateau_without_samples() -> None:
    text = (
        "each extra episode (1 -> 4), all live at the gate: 12.00 MiB = 3.70% of the room\n"
        "each extra episode (1 -> 8), all live at the gate: 16.00 MiB = 4.95% of the room\n"
        "warm, 1 episode(s) at once: 1.0 s, statuses ['completed'] | all 1 live (median of 0 "
        "samples at the gate): collector PSS nan MiB + 0 REPL PSS nan MiB = nan MiB = nanx the "
        "text | peak collector PSS 1 MiB"
    )
    got = bs.parse_lab_room(text)
    assert (got["extra_mib"], got["extra_pct"]) == (16.0, 4.95)
    assert math.isnan(got["warm_1_x"])
    t = {x.key: x for x in bs.TARGETS}["warm, 1 episode: collector + REPL PSS / text"]
    assert t.met(got["warm_1_x"]) is False  # no plateau read: the target did not hold


def test_met_decisions_on_recorded_full_size_output() -> None:
    values = bs.figures(bs.parse_concurrency(CONC_OLD), bs.parse_lab_room(LAB_FULL))
    met = {t.key: t.met(values[t.key]) for t in bs.TARGETS}
    assert met == {
        "16 x 64: wall / ideal": False,  # 1.23 > 1.10
        "64 x 64: wall / ideal": False,  # 2.22 > 2.0
        "64 x 64: collector CPU per sub-call": True,  # 0.545 ms <= 1 ms
        "16 x 64: collector CPU per sub-call": None,  # reported only
        "256 x 64: errors": True,  # 0
        "256 x 64: peak threads": True,  # 272 <= 512
        "256 x 64: wall / ideal": None,
        "256 x 64: collector CPU per sub-call": None,
        "cold: load + snapshot + index": True,  # 43.0 s <= 60 s
        "cold: peak RSS / text": True,  # 2.86x <= 3x
        "warm, 1 episode: collector + REPL PSS / text": True,  # 0.82x <= 1.5x
        "warm: each extra episode": False,  # 5.30% > 5%
        "result() per episode": True,  # 0.53 s <= 1 s
    }
    assert values["256 x 64: wall / ideal"] == 10.22


def test_quick_sizes_map_onto_the_targets() -> None:
    values = bs.figures(
        bs.parse_concurrency(CONC_QUICK), bs.parse_lab_room(LAB_OLD), bs.QUICK_SCENARIOS
    )
    assert values["16 x 64: wall / ideal"] == 1.122  # from 4x8
    assert values["64 x 64: collector CPU per sub-call"] == 1.752  # from 8x8
    assert values["256 x 64: peak threads"] == 32  # from 16x8
    assert values["warm: each extra episode"] == 333.8
    # the full-size scenarios were not in this output: missing, and not met
    full = bs.figures(bs.parse_concurrency(CONC_QUICK), {})
    assert full["16 x 64: wall / ideal"] is None and full["cold: peak RSS / text"] is None
    assert not any(t.met(full[t.key]) for t in bs.TARGETS)


@pytest.mark.parametrize(
    ("key", "value", "met"),
    [
        ("16 x 64: wall / ideal", 1.10, True),  # at the bound: held (the docs' "1.10: met")
        ("16 x 64: wall / ideal", 1.104, False),  # what 2 decimals printed as 1.10
        ("256 x 64: errors", 0, True),
        ("256 x 64: errors", 1, False),
        ("256 x 64: peak threads", 513, False),
        ("warm: each extra episode", 5.0, True),
        ("warm: each extra episode", 5.04, False),
        ("result() per episode", float("nan"), False),
        ("result() per episode", None, False),
    ],
)
def test_a_value_on_the_wrong_side_of_its_bound_is_not_met(
    key: str, value: float | None, met: bool
) -> None:
    assert {t.key: t for t in bs.TARGETS}[key].met(value) is met


def test_table_needs_every_repeat() -> None:
    conc, lab = bs.parse_concurrency(CONC_OLD), bs.parse_lab_room(LAB_FULL)
    good = bs.figures(conc, lab)
    good_run = bs.Repeat(good, (0.1, 0.2, 0.3), (0.4, 0.5, 0.6), [])
    bad = dict(good, **{"256 x 64: peak threads": 600.0, "result() per episode": None})
    bad_run = bs.Repeat(bad, (0.4, 0.5, 0.6), (0.7, 0.8, 0.9), ["bench_lab_room exit 1"])
    lines, held, n = bs.table([good_run, bad_run])
    assert n == 10
    assert held == 5  # 64x64 CPU, 256 errors, cold s, cold peak, warm 1 (threads, result fail)
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in lines[2:]}
    assert rows["256 x 64: peak threads"].endswith("| 272 | 600 | no |")
    assert rows["result() per episode (s)"].endswith("| 0.53 | missing | no |")
    assert rows["256 x 64: errors"].endswith("| 0 | 0 | yes |")
    assert rows["16 x 64: collector CPU per sub-call (ms)"].endswith(
        "| reported | 0.510 | 0.510 | - |"
    )
    assert "(issue 17; docs/results/history.md, concurrency table)" in rows["64 x 64: wall / ideal"]
    _, held1, n1 = bs.table([good_run])
    assert (held1, n1) == (7, 10)
    # only one benchmark run: the other's targets are left out of the count
    _, held_c, n_c = bs.table([good_run], ["concurrency"])
    assert (held_c, n_c) == (3, 5)


def test_main_runs_each_benchmark_per_repeat_and_prints_one_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[list[str]] = []
    outputs = {"bench_concurrency": CONC_OLD, "bench_lab_room": LAB_FULL}

    def fake_run(name: str, argv: list[str], echo: Any) -> tuple[str, int]:
        calls.append(argv)
        return outputs[name], 0

    # 1-minute load before and after each repeat: only repeat 2 starts busy
    loads = iter([(x, 0.0, 0.0) for x in (0.2, 0.3, 3.0, 4.0, 0.4, 0.5)])
    # the settle before each benchmark: repeat 3's lab room ran after the wait ran out
    waits = iter([(0.5, True), (2.0, True), (0.5, True), (3.0, True), (1.0, True), (120.0, False)])
    monkeypatch.setattr(bs, "_run", fake_run)
    monkeypatch.setattr(bs, "_load", lambda: next(loads))
    monkeypatch.setattr(bs, "settle", lambda: next(waits))
    bs.main(["--all", "--repeats", "3"])
    out = capsys.readouterr().out.splitlines()
    assert len(calls) == 6
    assert calls[0][:5] == [
        "benchmarks/bench_concurrency.py",
        "--sandbox",
        "bwrap",
        "--only",
        "16x64",
    ]
    assert calls[1] == ["benchmarks/bench_lab_room.py", "--sandbox", "bwrap"]
    assert out[0].startswith("machine: ")
    header = [ln for ln in out if ln.startswith("| figure |")]
    assert header == [
        "| figure | target (source) | repeat 1 | repeat 2 | repeat 3 | met in every repeat |"
    ]
    assert out.count("settle before bench_concurrency: 0.5 s (quiet)") == 2
    assert "settle before bench_lab_room: 120.0 s (not quiet, ran anyway)" in out
    assert out.index("settle before bench_concurrency: 0.5 s (quiet)") < out.index(
        "| figure | target (source) | repeat 1 | repeat 2 | repeat 3 | met in every repeat |"
    )
    assert (
        "repeat 2: load average before 3.00 0.00 0.00, after 4.00 0.00 0.00; settled 0.5 s "
        "before bench_concurrency; settled 3.0 s before bench_lab_room"
    ) in out
    assert out[-1] == (
        "result: 7 of 10 targets held in all 3 repeats (not idle: load >= 1 before repeat 2; "
        "not quiet before a benchmark of repeat 3)"
    )


def test_no_settle_runs_the_benchmarks_back_to_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_wait() -> tuple[float, bool]:
        raise AssertionError("settle called with --no-settle")

    monkeypatch.setattr(bs, "_run", lambda name, argv, echo: (CONC_OLD, 0))
    monkeypatch.setattr(bs, "_load", lambda: (0.1, 0.1, 0.1))
    monkeypatch.setattr(bs, "settle", no_wait)
    bs.main(["--only", "concurrency", "--repeats", "1", "--no-settle"])
    out = capsys.readouterr().out
    assert "settle" not in out and "repeat 1: load average before 0.10 0.10 0.10, after" in out


class _Clock:
    """A fake monotonic clock that ``sleep`` moves forward."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_settle_syncs_then_waits_for_a_quiet_window() -> None:
    """Busy for 2 s (3 runnable), then quiet but for one passing task: quiet once the last
    3 s of reads (30) hold at most 10% busy ones (3)."""
    clock = _Clock()
    synced: list[float] = []
    reads = [3] * 20 + [1] * 10 + [2] + [1] * 100
    it = iter(reads)
    waited, quiet = bs.settle(
        read=lambda: next(it),
        sync=lambda: synced.append(clock.t),
        clock=clock,
        sleep=clock.sleep,
    )
    assert synced == [100.0]
    assert quiet
    # read k (0-based) at 0.1 k s; the window of reads 18..47 holds reads 18, 19 and 30 busy
    assert waited == pytest.approx(4.7)
    assert len(reads) - len(list(it)) == 48


def test_settle_gives_up_after_its_limit_and_without_a_count() -> None:
    clock = _Clock()
    waited, quiet = bs.settle(
        max_wait_s=5.0, read=lambda: 2, sync=lambda: None, clock=clock, sleep=clock.sleep
    )
    assert not quiet and waited == pytest.approx(5.0, abs=0.11)  # 0.1 s reads: 5.0 or 5.1
    waited, quiet = bs.settle(read=lambda: None, sync=lambda: None, clock=clock, sleep=clock.sleep)
    assert (waited, quiet) == (0.0, False)


def test_runnable_tasks_reads_the_fourth_field_of_loadavg(tmp_path: Path) -> None:
    from rlmdistill.hardware import runnable_tasks

    f = tmp_path / "loadavg"
    f.write_text("0.52 1.45 1.57 3/412 98765\n", encoding="ascii")
    assert runnable_tasks(f) == 3
    f.write_text("garbage\n", encoding="ascii")
    assert runnable_tasks(f) is None
    assert runnable_tasks(tmp_path / "absent") is None


def test_quick_passes_tiny_sizes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[list[str]] = []

    def fake_run(name: str, argv: list[str], echo: Any) -> tuple[str, int]:
        calls.append(argv)
        return (CONC_QUICK if name == "bench_concurrency" else LAB_OLD), 0

    monkeypatch.setattr(bs, "_run", fake_run)
    monkeypatch.setattr(bs, "_load", lambda: (0.1, 0.1, 0.1))
    monkeypatch.setattr(bs, "settle", lambda: (0.0, True))
    bs.main(["--quick", "--repeats", "1"])
    assert calls[0] == [
        "benchmarks/bench_concurrency.py",
        "--sandbox",
        "bwrap",
        "--only",
        "4x8",
        "8x8",
        "16x8",
        "--latency",
        "0.2",
    ]
    assert calls[1][3:] == ["--docs", "200", "--length-scale", "1", "--episodes", "1", "2"]
    last = capsys.readouterr().out.splitlines()[-1]
    # 4x8 1.122 > 1.10, 8x8 1.198 <= 2, 8x8 CPU 1.752 > 1, 0 errors, 32 threads; cold 0.6 s,
    # 39.90x > 3x, 67.84x > 1.5x, 333.8% > 5%, result() 0.08 s
    assert (
        last
        == "result: 5 of 10 targets held in all 1 repeats (quick sizes: not the targets' sizes)"
    )


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux-only")
def test_quick_run_end_to_end_reads_every_figure() -> None:
    """The two benchmarks' real output, at tiny sizes, parses into every figure: a change of
    their printed lines that the parser no longer reads shows here as ``missing``."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(BENCH), "--all", "--quick", "--repeats", "1"],
        cwd=BENCH.parents[1],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.splitlines()
    rows = [ln for ln in out if ln.startswith("| ") and not ln.startswith("| figure")]
    assert len(rows) == len(bs.TARGETS)
    assert not [ln for ln in rows if "missing" in ln], "\n".join(out[-40:])
    assert "failed:" not in proc.stdout
    assert re.fullmatch(
        r"result: \d+ of 10 targets held in all 1 repeats \(quick sizes: not the targets' "
        r"sizes(; not idle: load >= 1 before repeat 1)?\)",
        out[-1],
    )
    # the tiny room can never hold 3x its text (the interpreter alone is ~60 MiB)
    assert next(ln for ln in rows if ln.startswith("| cold: peak RSS / text")).endswith("| no |")
