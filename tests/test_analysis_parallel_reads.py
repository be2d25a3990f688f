"""The cold report's parallel parts give what the serial ones give: trajectory fields read by
forked workers (same rows, same errors at the same episode), the one-sum finiteness check of
the row cache (same answer as the field-by-field scan), figures drawn by a forked process
(same PNG bytes; a failing figure raises in the caller and leaves no report.json)."""

from __future__ import annotations

import json
import math
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import rlmdistill.analysis.compare as compare_mod
import rlmdistill.analysis.metrics as metrics_mod
from rlmdistill.analysis.compare import build_report
from rlmdistill.analysis.metrics import load_run_metrics, load_runs_metrics
from rlmdistill.traces.store import TraceFileError


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


class _Pools:
    """Counts the worker pools the metrics reader starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = 0
        real = metrics_mod.ProcessPoolExecutor
        outer = self

        class Counting(real):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                outer.started += 1
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(metrics_mod, "ProcessPoolExecutor", Counting)


@pytest.fixture
def parallel(monkeypatch: pytest.MonkeyPatch) -> _Pools:
    """Workers for any run (one trajectory per chunk), even beside the fixtures' threads."""
    monkeypatch.setattr(metrics_mod, "_PARALLEL_MIN", 1)
    monkeypatch.setattr(metrics_mod, "_CHUNK_MIN", 1)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "2")
    return _Pools(monkeypatch)


def _rows(run: Path) -> list[dict[str, Any]]:
    return [r.model_dump() for r in load_run_metrics(run, row_cache=False).rows]


def test_worker_reads_give_the_in_process_rows(
    collected_run: Path, parallel: _Pools, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _rows(collected_run)
    assert parallel.started == 1
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "0")
    assert _rows(collected_run) == got and parallel.started == 1
    assert all(r["answer_reach"] is not None and r["root_batch_sizes"] for r in got)


def test_worker_reads_raise_the_in_process_error_at_the_same_episode(
    collected_run: Path, tmp_path: Path, parallel: _Pools
) -> None:
    """A missing trajectory and an invalid one: the first in episode order is raised, named,
    as the in-process read raises it."""
    run = _copy(collected_run, tmp_path)
    first, second = (json.loads(x)["episode_id"] for x in (run / "episodes.jsonl").open())
    path = run / "trajectories" / f"{second}.jsonl"
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    for rec in lines:
        if rec["record_type"] == "sub_call":
            rec["batch_id"] = "first"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    with pytest.raises(TraceFileError, match=rf"{second}\.jsonl: record \d+ is invalid"):
        load_run_metrics(run, row_cache=False)
    (run / "trajectories" / f"{first}.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=f"no trajectory for episode {first}"):
        load_run_metrics(run, row_cache=False)
    assert parallel.started == 2


def test_read_workers_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "3")
    assert metrics_mod._read_workers(10_000) == 3
    assert metrics_mod._read_workers(metrics_mod._PARALLEL_MIN - 1) == 0
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "0")
    assert metrics_mod._read_workers(10_000) == 0
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # a dashboard's threads
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "3")
    assert metrics_mod._read_workers(10_000) == 0
    monkeypatch.setenv(metrics_mod.READ_WORKERS_ENV, "many")
    with pytest.raises(ValueError, match="RLMDISTILL_READ_WORKERS='many'"):
        metrics_mod._read_workers(10_000)


@pytest.mark.parametrize(
    ("field", "value", "finite"),
    [
        ("pass_rate", math.nan, False),
        ("wall_time_s", math.inf, False),
        ("cost_usd", -math.inf, False),
        ("pass_rate_by_type", {"finding": math.nan}, False),
        ("coverage_per_folder", {"a": 0.5, "b": math.inf}, False),
        ("wall_time_s", 1.7e308, True),  # finite values whose sum overflows
        ("root_cost_usd", None, True),
        ("pass_rate_by_type", {"finding": 0.25}, True),
    ],
)
def test_one_sum_finiteness_equals_the_field_scan(
    collected_run: Path, field: str, value: object, finite: bool
) -> None:
    rows = load_run_metrics(collected_run, row_cache=False, trajectories=False).rows
    rows = [rows[0].model_copy(update={"wall_time_s": 1.7e308}), *rows]
    changed = [*rows, rows[-1].model_copy(update={field: value})]
    scan = all(metrics_mod._finite(v) for r in changed for v in r.__dict__.values())
    assert metrics_mod._all_finite(changed) is scan is finite
    assert metrics_mod._all_finite(rows) is True


def test_every_float_field_is_in_the_sum() -> None:
    """Each field whose annotation holds a float is summed or scanned (a new float field
    cannot slip past the check)."""
    scalar, dicts, other = metrics_mod._float_fields()
    assert {"pass_rate", "cost_usd", "wall_time_s", "answer_reach"} <= set(scalar)
    assert set(dicts) == {"pass_rate_by_type", "coverage_per_folder"}
    assert other == ()
    skipped = set(metrics_mod.EpisodeMetrics.model_fields) - {*scalar, *dicts, *other}
    assert {"n_turns", "root_batch_sizes", "criteria", "run_id", "has_memo"} <= skipped
    assert not skipped & {"coverage", "mean_batch_size", "sub_token_share"}


def test_figures_drawn_in_a_forked_process_equal_drawn_here(
    collected_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(compare_mod, "_free_cpu", lambda cpus: True)
    started: list[Any] = []
    real = compare_mod._fork

    def spy(*args: Any) -> Any:
        proc = real(*args)
        started.append(proc)
        return proc

    monkeypatch.setattr(compare_mod, "_fork", spy)
    build_report([collected_run], tmp_path / "forked")
    assert len(started) == 1 and started[0] is not None and started[0].exitcode == 0
    # the helper also wrote the (last and only) run's trajectory cache
    assert any((tmp_path / "forked" / compare_mod.CACHE_DIR).iterdir())
    monkeypatch.setattr(compare_mod, "_free_cpu", lambda cpus: False)  # drawn here
    assert real([object()], tmp_path) is None
    monkeypatch.setattr(compare_mod, "_fork", lambda *a: None)
    build_report([collected_run], tmp_path / "here")
    pngs = sorted(p.name for p in (tmp_path / "here" / "figures").glob("*.png"))
    assert pngs and pngs == sorted(p.name for p in (tmp_path / "forked" / "figures").glob("*.png"))
    for name in pngs:
        here = (tmp_path / "here" / "figures" / name).read_bytes()
        assert (tmp_path / "forked" / "figures" / name).read_bytes() == here


def test_a_figure_failing_in_the_forked_process_raises_here(
    collected_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(compare_mod, "_free_cpu", lambda cpus: True)

    def broken(fig: Any, out: Path) -> Path:
        raise RuntimeError(f"cannot draw {fig.file}")

    monkeypatch.setattr(compare_mod, "render_figure", broken)  # the fork inherits it
    with pytest.raises(RuntimeError, match=r"cannot draw figures/"):
        build_report([collected_run], tmp_path / "r")
    assert not (tmp_path / "r" / "report.json").exists()


def test_runs_read_together_share_one_pool_and_give_each_runs_own_rows(
    collected_run: Path, tmp_path: Path, parallel: _Pools
) -> None:
    other = _copy(collected_run, tmp_path)
    alone = [_rows(collected_run), _rows(other)]
    assert parallel.started == 2
    together = load_runs_metrics([collected_run, other], row_cache=False)
    assert parallel.started == 3  # one pool for both runs
    assert [[r.model_dump() for r in m.rows] for m in together] == alone
    assert [m.rows[0].run_id for m in together] == [alone[0][0]["run_id"], alone[1][0]["run_id"]]
    with pytest.raises(ValueError, match="1 trajectory caches for 2 runs"):
        load_runs_metrics([collected_run, other], trajectory_caches=[None])


def test_a_report_that_fails_after_the_drawer_started_leaves_no_figures_and_no_drawer(
    collected_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(compare_mod, "_free_cpu", lambda cpus: True)
    started: list[tuple[Any, Path]] = []
    real = compare_mod._fork

    def spy(*args: Any) -> Any:
        proc = real(*args)
        started.append((proc, args[1]))
        return proc

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("statistics failed")

    monkeypatch.setattr(compare_mod, "_fork", spy)
    monkeypatch.setattr(compare_mod.arm_sections, "size_correlation_changes", failing)
    with pytest.raises(RuntimeError, match="statistics failed"):
        build_report([collected_run], tmp_path / "r")
    ((helper, scratch),) = started
    assert helper is not None and not helper.is_alive()
    assert not scratch.exists()
    out = tmp_path / "r"  # holds only the trajectory cache written while the runs were read
    assert not (out / "figures").exists() and not (out / "report.json").exists()
    assert any((out / compare_mod.CACHE_DIR).iterdir())  # the caches were still written


def test_a_free_cpu_is_read_from_the_runnable_tasks_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/proc/loadavg``'s "running/total" counts this process: on 2 CPUs, 1 runnable task
    leaves one free whatever the lagging 1-minute average says; 2 or more do not."""
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("1.62 1.10 0.70 1/412 98765\n", encoding="ascii")
    assert compare_mod._free_cpu(2, loadavg)
    loadavg.write_text("0.10 0.10 0.10 2/412 98765\n", encoding="ascii")
    assert not compare_mod._free_cpu(2, loadavg)
    assert compare_mod._free_cpu(4, loadavg)
    monkeypatch.setattr(compare_mod.os, "getloadavg", lambda: (1.7, 1.0, 1.0))
    missing = tmp_path / "none"  # no such file: the 1-minute average decides
    assert compare_mod._free_cpu(2, missing) is False and compare_mod._free_cpu(3, missing)
