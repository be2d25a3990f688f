"""The dashboard's depth, grid and comparison tables are the report's (issue 19, item 1).

A report is built with the analysis stage (``rlmdistill.analysis.main.run``, what
``rlmdistill report`` calls) over runs on disk; the dashboard's tables for the same runs --
computed live from its run views (``dashboard.live``) and shown by the Compare and Ablations
pages under ``AppTest`` -- must equal the report's ``report.json`` numbers value by value.
Some values are also computed here by hand from the episodes written, so the test does not
rest on the two sides sharing a bug. The run view (one per run and stamp) is tested too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from test_golden import load_fixture

import rlmdistill.dashboard.app as app_module
from rlmdistill.analysis.main import ReportConfig, run
from rlmdistill.analysis.schema import Report
from rlmdistill.dashboard import data, tables
from rlmdistill.dashboard.live import LiveSettings, live_ablations, live_comparison
from rlmdistill.testing.scored_runs import (
    SyntheticEpisode,
    SyntheticRoom,
    write_scored_run,
    write_task_problem_run,
)
from rlmdistill.traces import layout
from rlmdistill.traces.runs import load_summaries

APP = str(Path(app_module.__file__))
N_CRITERIA = 4

# (room, passes per episode) of each run; 4 criteria per room, 3 episodes per room.
PASSES = {
    "a-base": {"r1": [1, 2, 0], "r2": [2, 2, 3], "r3": [0, 1, 1], "r4": [4, 3, 3]},
    "b-deep": {"r1": [3, 2, 2], "r2": [2, 4, 3], "r3": [1, 0, 0], "r4": [4, 4, 3]},
    "c-root2": {"r1": [0, 0, 1], "r2": [3, 3, 2], "r3": [2, 1, 1], "r4": [2, 3, 4]},
}
CONFIG = {  # (root model, depth) of each run; one sub model
    "a-base": ("root-a", 1),
    "b-deep": ("root-a", 2),
    "c-root2": ("root-b", 1),
}


def _write_runs(ws: Path) -> list[Path]:
    """Three scored runs over 4 rooms: a depth-1 baseline, the same models at depth 2, and
    another root at depth 1 (so there is a depth ablation and a depth-1 root x sub grid)."""
    rooms = [SyntheticRoom(f"r{i}", n_documents=i, n_criteria=N_CRITERIA) for i in range(1, 5)]
    out = []
    for name, by_room in PASSES.items():
        root, depth = CONFIG[name]
        episodes = [
            SyntheticEpisode(
                f"{name}-{room}-{k}",
                room,
                n_pass=p,
                coverage=0.1 * (k + 1),
                memo=None if (name, room, k) == ("a-base", "r3", 0) else "",
                n_sub_calls=p + k,
                depth=depth,
            )
            for room, passes in by_room.items()
            for k, p in enumerate(passes)
        ]
        rd = write_scored_run(ws / "runs" / name, rooms, episodes, rooms_dir=ws / "rooms")
        manifest = json.loads((rd / layout.RUN_MANIFEST).read_text(encoding="utf-8"))
        manifest["config"].update(
            root=f"openai:{root}@http://127.0.0.1:9/v1",
            sub="openai:sub-s@http://127.0.0.1:9/v1",
            depth=depth,
        )
        (rd / layout.RUN_MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        out.append(rd)
    return out


@pytest.fixture
def synthetic_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Report]:
    """The workspace of :func:`_write_runs` with the report over its three runs (``rlmdistill
    report``'s defaults; no trajectories were written, so the report reads none)."""
    ws = tmp_path / "ws"
    runs = _write_runs(ws)
    run(ReportConfig(runs=runs, out=ws / "reports" / "rep", trajectories=False, draw=False))
    report = Report.model_validate_json((ws / "reports" / "rep" / "report.json").read_text())
    monkeypatch.setenv(data.ENV_WORKSPACE, str(ws))
    return ws, report


def _equal(shown: pd.DataFrame, want: pd.DataFrame) -> None:
    """Same columns, rows and values (NaN = NaN); dtypes may differ after the page's Arrow
    round trip, numbers may not."""
    pd.testing.assert_frame_equal(
        shown.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False
    )


def _open(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["page"] = page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _frame_with(at: AppTest, columns: list[str], nth: int = 0) -> pd.DataFrame:
    found = [d.value for d in at.dataframe if list(d.value.columns) == columns]
    assert len(found) > nth, f"no {nth + 1}th table with columns {columns}"
    return found[nth]


def test_live_sections_equal_the_report_value_by_value(synthetic_ws: tuple[Path, Report]) -> None:
    ws, report = synthetic_ws
    views = [data.run_view(ws / "runs" / name) for name in PASSES]
    live = live_comparison(views, LiveSettings())
    ablations = live_ablations(views, LiveSettings())
    # the records themselves are equal: every number, interval, reason and room
    assert live.comparisons == report.comparisons
    assert live.per_arm == report.per_arm
    assert ablations.depth_ablations == report.depth_ablations
    assert ablations.grids == report.grids
    # and so are the tables built from them
    _equal(tables.comparison_frame(live.comparisons), tables.comparison_frame(report.comparisons))
    _equal(
        tables.depth_frame(ablations.depth_ablations), tables.depth_frame(report.depth_ablations)
    )
    _equal(tables.grid_frame(ablations.grids), tables.grid_frame(report.grids))


def test_tables_hold_the_report_numbers_and_hand_computed_room_means(
    synthetic_ws: tuple[Path, Report],
) -> None:
    _, report = synthetic_ws
    comp = tables.comparison_frame(report.comparisons).set_index(["comparison", "metric"])
    for c in report.comparisons:
        for r in c.rows:
            row = comp.loc[(f"{c.b} vs {c.a}", r.metric)]
            for col, v in [
                ("A", r.a.value),
                ("A low", r.a.low),
                ("B", r.b.value),
                ("B high", r.b.high),
                ("B - A", r.paired.mean_difference.value),
                ("B - A low", r.paired.mean_difference.low),
                ("Wilcoxon p", r.paired.wilcoxon.p_value),
            ]:
                assert (math.isnan(row[col]) and v is None) or row[col] == v, (c.b, r.metric, col)
            assert row["rooms paired"] == r.paired.n_pairs
    # pass rate by hand: room mean of passes / 4, then the mean over the 4 rooms
    room_mean = {
        name: {room: sum(p) / len(p) / N_CRITERIA for room, p in by.items()}
        for name, by in PASSES.items()
    }
    mean = {name: sum(m.values()) / 4 for name, m in room_mean.items()}
    pr = comp.xs("pass_rate", level="metric")
    assert pr.loc["b-deep vs a-base", "A"] == pytest.approx(mean["a-base"], abs=1e-12)
    assert pr.loc["b-deep vs a-base", "B"] == pytest.approx(mean["b-deep"], abs=1e-12)
    assert pr.loc["c-root2 vs a-base", "B - A"] == pytest.approx(
        mean["c-root2"] - mean["a-base"], abs=1e-12
    )
    depth = tables.depth_frame(report.depth_ablations).set_index("room")
    for room in ("r1", "r2", "r3", "r4"):
        assert depth.loc[room, "depth 1"] == pytest.approx(room_mean["a-base"][room], abs=1e-12)
        assert depth.loc[room, "change"] == pytest.approx(
            room_mean["b-deep"][room] - room_mean["a-base"][room], abs=1e-12
        )
    summary = tables.depth_summary_frame(report.depth_ablations).iloc[0]
    # by hand: r1 +0.333, r2 +0.167, r3 -0.083, r4 +0.083: 3 improved, 1 declined
    assert (summary["improved"], summary["declined"], summary["tied"]) == (3, 1, 0)
    assert summary["depth 1 read, no memo"] == 1  # a-base r3 #0: coverage 0.1, no memo
    grid = tables.grid_frame(report.grids).set_index(["depth", "root"])
    assert grid.loc[(1, "root-a"), "mean pass rate"] == pytest.approx(mean["a-base"], abs=1e-12)
    assert grid.loc[(1, "root-b"), "mean pass rate"] == pytest.approx(mean["c-root2"], abs=1e-12)
    gaps = tables.gap_frame(report.grids).set_index(["depth", "fixed", "model"])
    assert gaps.loc[(1, "sub", "sub-s"), "gap"] == pytest.approx(
        abs(mean["a-base"] - mean["c-root2"]), abs=1e-12
    )


def test_compare_and_ablations_pages_display_the_report_tables(
    synthetic_ws: tuple[Path, Report],
) -> None:
    _, report = synthetic_ws
    at = _open("compare")
    at.multiselect(key="compare_runs").set_value(list(PASSES)).run()
    assert not at.exception, [e.value for e in at.exception]
    _equal(_frame_with(at, tables.COMPARISON_COLUMNS), tables.comparison_frame(report.comparisons))
    _equal(_frame_with(at, tables.ARM_COLUMNS), tables.arm_frame(report.per_arm))
    at = _open("ablations")
    assert at.multiselect(key="ablation_runs").value == list(PASSES)
    _equal(_frame_with(at, tables.DEPTH_COLUMNS), tables.depth_frame(report.depth_ablations))
    _equal(
        _frame_with(at, tables.DEPTH_SUMMARY_COLUMNS),
        tables.depth_summary_frame(report.depth_ablations),
    )
    _equal(_frame_with(at, tables.GRID_COLUMNS), tables.grid_frame(report.grids))
    _equal(_frame_with(at, tables.GAP_COLUMNS), tables.gap_frame(report.grids))
    # the saved report's own section, shown below the live one, is the same table
    _equal(_frame_with(at, tables.DEPTH_COLUMNS, 1), tables.depth_frame(report.depth_ablations))


def test_golden_fixture_live_tables_equal_its_report(tmp_path: Path) -> None:
    """On the committed golden workspace (2 rooms: no intervals, a depth ablation, a
    comparison of base with deep), with the golden test's report settings."""
    ws = load_fixture(tmp_path)
    runs = [ws / "runs" / "base", ws / "runs" / "deep"]
    report = run(
        ReportConfig(runs=runs, out=tmp_path / "rep", resamples=200, trajectories=False, draw=False)
    )
    settings = LiveSettings(grader="reference", resamples=200)
    views = [data.run_view(rd) for rd in runs]
    live = live_comparison(views, settings)
    ablations = live_ablations(views, settings)
    assert live.comparisons == report.comparisons
    assert ablations.depth_ablations == report.depth_ablations
    assert ablations.grids == report.grids == []
    _equal(tables.comparison_frame(live.comparisons), tables.comparison_frame(report.comparisons))
    depth = tables.depth_frame(ablations.depth_ablations).set_index("room")
    # by hand (tests/test_golden.py): base alpha (2/3 + 1/3) / 2, beta 0.5 (b-be-0 only)
    assert depth.loc["alpha", "depth 1"] == pytest.approx(0.5, abs=1e-12)
    assert depth.loc["beta", "depth 1"] == pytest.approx(0.5, abs=1e-12)


def test_run_view_is_one_object_per_stamp_and_rereads_a_changed_run_case_a3(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    base, *_ = _write_runs(ws)
    view = data.run_view(base)
    assert data.run_view(base) is view  # the same stamp: the same view, parts read once
    assert view.table() is view.table()
    o = data.run_overview(view)
    # means of room means by hand: a-base's pass rates per room, then over the 4 rooms
    want = sum(sum(p) / 3 / N_CRITERIA for p in PASSES["a-base"].values()) / 4
    assert o.mean_pass_rate["reference"] == pytest.approx(want, abs=1e-12)
    assert o.n_episodes == 12
    # a verdict file that changes gives a new stamp and a new view with the new verdicts
    vpath = layout.verdicts_path(base, "reference")
    lines = vpath.read_text(encoding="utf-8").splitlines(keepends=True)
    first = json.loads(lines[0])
    assert first["verdict"] == "PASS"
    eid = first["episode_id"]
    flipped = [
        json.dumps({**json.loads(ln), "verdict": "FAIL", "reason": "flipped by the test"}) + "\n"
        if json.loads(ln)["episode_id"] == eid
        else ln
        for ln in lines
    ]
    vpath.write_text("".join(flipped), encoding="utf-8")
    again = data.run_view(base)
    assert again is not view and again.stamp != view.stamp
    rates = again.table().set_index("episode_id")["pass_rate:reference"]
    assert rates[eid] == 0.0
    assert {r.episode_id: r.pass_rate for r in again.metrics("reference").rows}[eid] == 0.0


def test_runs_page_names_an_invalid_task_and_still_lists_the_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metrics rows refuse a room whose task.json is invalid (as the report does): the
    Runs page names the file and still shows the run's episodes."""
    rd = write_task_problem_run(tmp_path / "runs" / "r", n_criteria=4)
    monkeypatch.setenv(data.ENV_WORKSPACE, str(tmp_path))
    at = _open("runs")
    assert at.error and "broken" in at.error[0].value and "task.json" in at.error[0].value
    listing = at.dataframe[0].value
    assert list(listing["run"]) == ["r"] and "task.json" in listing["error"].iloc[0]
    episodes = next(d.value for d in at.dataframe if "episode_id" in d.value.columns)
    assert sorted(episodes["episode_id"]) == sorted(s.episode_id for s in load_summaries(rd))


def test_trace_page_computes_the_run_stamp_once_per_rerun(
    tmp_path: Path, collected_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rerun of the Trace viewer (episode, memo and verdicts, coverage map, search) makes
    one run stamp and one view; before the run view, each loader made its own."""
    import shutil

    from rlmdistill.dashboard import runview

    shutil.copytree(collected_run, tmp_path / "runs" / "base")
    monkeypatch.setenv(data.ENV_WORKSPACE, str(tmp_path))
    calls: list[Path] = []
    real = runview.run_stamp

    def counted(run_dir: Path) -> str:
        calls.append(Path(run_dir))
        return real(run_dir)

    monkeypatch.setattr(runview, "run_stamp", counted)
    at = _open("trace")
    assert calls == [tmp_path / "runs" / "base"]
    calls.clear()
    at.text_input(key="search:base").set_value("assignment clause").run()
    assert not at.exception
    assert calls == [tmp_path / "runs" / "base"]  # the rerun: one stamp again
    assert "#### Turn 0" in "\n".join(m.value for m in at.markdown)
