"""The per-run cache of whole metrics rows (issue 19 item 2, speed): rows loaded from it equal
computed ones field by field, every keyed input (verdicts, trajectories, task.json) invalidates
it, a torn or corrupt file is recomputed, and nothing is written into the run folder."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_golden import load_fixture

import rlmdistill.analysis.metrics as metrics_mod
from rlmdistill.analysis.metrics import EpisodeMetrics, RunMetrics, load_run_metrics
from rlmdistill.analysis.row_cache import ENV, RACY_NS, metrics_cache_dir

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_report.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_report", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _age(root: Path, seconds: float = 60.0) -> None:
    """Set every file's times ``seconds`` back, as for a run collected earlier (not racy)."""
    old = time.time_ns() - int(seconds * 1e9)
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(old, old))


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _assert_same(got: RunMetrics, want: RunMetrics) -> None:
    """Field by field, with the Python type of each value (1 vs 1.0, list vs tuple)."""
    assert got.grader == want.grader
    assert got.manifest == want.manifest
    assert got.tasks == want.tasks
    assert len(got.rows) == len(want.rows) > 0
    for a, b in zip(got.rows, want.rows, strict=True):
        for name in EpisodeMetrics.model_fields:
            va, vb = getattr(a, name), getattr(b, name)
            assert va == vb, (a.episode_id, name, va, vb)
            assert type(va) is type(vb), (a.episode_id, name, type(va), type(vb))


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make any read of summaries, verdicts or trajectories fail the test."""

    def install() -> None:
        def boom(*_a: object, **_k: object) -> None:
            raise AssertionError("the run's files were read despite a warm row cache")

        for name in ("load_summaries", "_verdict_rows", "_read_trajectory_fields"):
            monkeypatch.setattr(metrics_mod, name, boom)

    return install


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    ws = load_fixture(tmp_path)
    _age(ws)
    return ws


@pytest.fixture(scope="module")
def synth_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic run (bench_report's writer: 3 rooms x 4 episodes, 20 criteria, with
    trajectories); copied per test."""
    bench = _bench()
    root = tmp_path_factory.mktemp("synth")
    rng = np.random.default_rng(7)
    rooms = bench.make_rooms(root / "rooms", 3, rng)
    bench.write_run(root / "runs" / "base", rooms, 4, 0.4, "openai:base@http://127.0.0.1:1/v1", rng)
    return root


@pytest.fixture
def synth(synth_src: Path, tmp_path: Path) -> Path:
    """A copy of the synthetic run (rooms re-pointed at the copy), aged."""
    root = tmp_path / "synth"
    shutil.copytree(synth_src, root)
    for p in [root / "runs" / "base" / "run.json", root / "runs" / "base" / "episodes.jsonl"]:
        p.write_text(p.read_text().replace(str(synth_src), str(root)))
    for p in (root / "runs" / "base" / "trajectories").iterdir():
        p.write_text(p.read_text().replace(str(synth_src), str(root)))
    _age(root)
    return root / "runs" / "base"


def _cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("rows-*") if p.is_file())


@pytest.mark.parametrize("run", ["base", "deep"])
def test_golden_rows_from_cache_equal_computed(
    golden: Path, tmp_path: Path, no_reads: Callable[[], None], run: str
) -> None:
    run_dir = golden / "runs" / run
    cache = tmp_path / "cache"
    want = load_run_metrics(run_dir, trajectories=False, row_cache=False)
    before = _tree(golden)
    cold = load_run_metrics(run_dir, trajectories=False, row_cache=cache)
    _assert_same(cold, want)
    assert len(_cache_files(cache)) == 1
    no_reads()
    warm = load_run_metrics(run_dir, trajectories=False, row_cache=cache)
    _assert_same(warm, want)
    assert _tree(golden) == before  # nothing in the workspace was written or altered


def test_synthetic_rows_with_trajectories_from_cache(
    synth: Path, tmp_path: Path, no_reads: Callable[[], None]
) -> None:
    cache = tmp_path / "cache"
    want = load_run_metrics(synth, row_cache=False)
    assert any(r.answer_reach is not None for r in want.rows)  # trajectory metrics present
    before = _tree(synth)
    _assert_same(load_run_metrics(synth, row_cache=cache), want)
    no_reads()
    _assert_same(load_run_metrics(synth, row_cache=cache), want)
    assert _tree(synth) == before


def test_trajectories_off_and_on_are_separate_entries(synth: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    off = load_run_metrics(synth, trajectories=False, row_cache=cache)
    on = load_run_metrics(synth, trajectories=True, row_cache=cache)
    assert len(_cache_files(cache)) == 2
    assert all(
        r.answer_reach is None
        for r in load_run_metrics(synth, trajectories=False, row_cache=cache).rows
    )
    _assert_same(load_run_metrics(synth, trajectories=True, row_cache=cache), on)
    _assert_same(load_run_metrics(synth, trajectories=False, row_cache=cache), off)


def test_setting_change_is_a_miss(synth: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_run_metrics(synth, row_cache=cache)
    strict = load_run_metrics(synth, row_cache=cache, give_up_read_share=1.0)
    want = load_run_metrics(synth, row_cache=False, give_up_read_share=1.0)
    _assert_same(strict, want)
    assert any(r.early_give_up for r in strict.rows)


def test_changed_verdict_file_invalidates(golden: Path, tmp_path: Path) -> None:
    run_dir = golden / "runs" / "base"
    cache = tmp_path / "cache"
    old = load_run_metrics(run_dir, trajectories=False, row_cache=cache)
    path = run_dir / "verdicts" / "reference.jsonl"
    text = path.read_text()
    new = text.replace('"verdict":"PASS"', '"verdict":"FAIL"', 1)  # same size, new content
    assert new != text and len(new) == len(text)
    path.write_text(new)
    got = load_run_metrics(run_dir, trajectories=False, row_cache=cache)
    want = load_run_metrics(run_dir, trajectories=False, row_cache=False)
    _assert_same(got, want)
    assert [r.pass_rate for r in got.rows] != [r.pass_rate for r in old.rows]


def test_changed_task_file_invalidates(golden: Path, tmp_path: Path) -> None:
    run_dir = golden / "runs" / "base"
    cache = tmp_path / "cache"
    old = load_run_metrics(run_dir, trajectories=False, row_cache=cache)
    path = golden / "rooms" / "alpha" / "task.json"
    task = json.loads(path.read_text())
    task["criteria"][1]["weight"] = 5.0  # alpha's weighted pass rates change
    path.write_text(json.dumps(task, indent=2))
    got = load_run_metrics(run_dir, trajectories=False, row_cache=cache)
    want = load_run_metrics(run_dir, trajectories=False, row_cache=False)
    _assert_same(got, want)
    assert [r.weighted_pass_rate for r in got.rows] != [r.weighted_pass_rate for r in old.rows]


def test_changed_trajectory_file_invalidates(synth: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    old = load_run_metrics(synth, row_cache=cache)
    first = old.rows[0]
    path = synth / "trajectories" / f"{first.episode_id}.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    calls = [i for i, line in enumerate(lines) if '"record_type":"sub_call"' in line]
    assert calls, "the synthetic trajectory has sub-calls"
    del lines[calls[-1]]  # one answered sub-call fewer
    path.write_text("".join(lines))
    got = load_run_metrics(synth, row_cache=cache)
    want = load_run_metrics(synth, row_cache=False)
    _assert_same(got, want)
    assert got.rows[0].n_answers == first.n_answers - 1  # type: ignore[operator]


def test_racy_inputs_are_not_stored(synth: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (synth / "episodes.jsonl").touch()  # modified just now: within RACY_NS of the read
    assert RACY_NS > 0
    load_run_metrics(synth, row_cache=cache)
    assert _cache_files(cache) == []


@pytest.mark.parametrize("damage", ["torn", "body", "header", "empty"])
def test_torn_or_corrupt_cache_is_recomputed_and_replaced(
    synth: Path, tmp_path: Path, damage: str
) -> None:
    cache = tmp_path / "cache"
    want = load_run_metrics(synth, row_cache=cache)
    (path,) = _cache_files(cache)
    data = path.read_bytes()
    head, body = data.split(b"\n", 1)
    damaged = {
        "torn": data[: len(data) // 2],
        "body": head + b"\n" + body.replace(b'"status":"completed"', b'"status":"failed!!!"', 1),
        "header": b"{not json\n" + body,
        "empty": b"",
    }[damage]
    assert damaged != data
    path.write_bytes(damaged)
    _assert_same(load_run_metrics(synth, row_cache=cache), want)
    assert path.read_bytes() == data  # rewritten whole
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left


def test_cache_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "mine"))
    assert metrics_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv(ENV, "off")
    assert metrics_cache_dir() is None
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("RLMDISTILL_HOME", str(tmp_path / "home"))
    assert metrics_cache_dir() == tmp_path / "home" / "metrics"


def test_dashboard_run_view_loads_cached_rows(
    synth: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_reads: Callable[[], None]
) -> None:
    """The dashboard's RunView calls load_run_metrics with the default cache: the rows a
    report stored are its rows, without reading the run."""
    from rlmdistill.dashboard.runview import RunView

    monkeypatch.setenv(ENV, str(tmp_path / "user-cache"))
    want = load_run_metrics(synth, trajectories=False)  # e.g. an earlier report, cold
    assert len(_cache_files(tmp_path / "user-cache")) == 1
    no_reads()
    _assert_same(RunView(synth, "stamp").metrics(None), want)


def test_rows_with_nan_are_not_stored(
    synth: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic writes NaN as null: such rows would not read back equal, so they are not
    stored (the scan that decides it is checked on a real row, too)."""
    row = load_run_metrics(synth, row_cache=False).rows[0]
    assert metrics_mod._finite(row.__dict__)
    bad = row.model_copy(update={"coverage_per_folder": {"F0": float("nan")}})
    assert not metrics_mod._finite(bad.__dict__)
    assert not metrics_mod._finite([1, float("inf")])
    real = metrics_mod._episode_row

    def nan_wall_time(*args: Any, **kwargs: Any) -> EpisodeMetrics:
        return real(*args, **kwargs).model_copy(update={"wall_time_s": float("nan")})

    monkeypatch.setattr(metrics_mod, "_episode_row", nan_wall_time)
    cache = tmp_path / "cache"
    got = load_run_metrics(synth, row_cache=cache)
    assert all(r.wall_time_s != r.wall_time_s for r in got.rows)  # NaN kept in the rows
    assert _cache_files(cache) == []
