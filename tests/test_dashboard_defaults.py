"""The dashboard's defaults follow the workspace's lineage, and its numbers read at a glance
(issue 46), on the finished room_scaling workspace (``docs/results/room_scaling/
workspace.tar.xz``: five evaluation arms on 12 held-out rooms, two training runs); and the
filter page's settings survive a visit to another page (issue 36, item 11)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE
from rlmdistill.dashboard.reports import report_figures
from rlmdistill.dashboard.tables import fmt_difference, fmt_value, is_share
from rlmdistill.stats import Estimate

APP = str(Path(app_module.__file__))
TARBALL = Path(__file__).resolve().parents[1] / "docs/results/room_scaling/workspace.tar.xz"
EVAL_RUNS = ["eval-base", "eval-base-d2", "r1-eval-tuned", "r2-eval-tuned", "r2-eval-tuned-d2"]
TRAIN_RUNS = ["r1-train", "r2-train"]


@pytest.fixture(scope="module")
def room_scaling(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The room_scaling workspace as the loop left it (runs, lineage, split, reports)."""
    out = tmp_path_factory.mktemp("rs")
    with tarfile.open(TARBALL) as tar:
        tar.extractall(out, filter="data")
    return out / "room_scaling"


@pytest.fixture
def ws(room_scaling: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV_WORKSPACE, str(room_scaling))
    return room_scaling


def _open(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_ablations_default_picks_the_evaluation_runs_only(ws: Path) -> None:
    """Before: every run (training runs included), which paired r1-train with eval runs
    and reversed the report's root x sub result."""
    at = _open("ablations")
    assert at.multiselect(key="ablation_runs").value == EVAL_RUNS
    # the labels say which runs are train and which eval
    assert at.multiselect(key="ablation_runs").format_func("r2-train") == "r2-train · train"
    assert at.multiselect(key="ablation_runs").format_func("eval-base") == "eval-base · eval"


def test_filter_preview_default_picks_the_training_runs_only(ws: Path) -> None:
    at = _open("filter")
    assert at.multiselect(key="f_runs").value == TRAIN_RUNS
    assert not at.warning  # no held-out room among the picked runs


def test_compare_opens_on_the_loop_report_base_against_its_last_tuned_arm(ws: Path) -> None:
    """The loop's newest report (reports/r2) compares base, tuned-r1, tuned-r2, base-d2,
    tuned-r2-d2; the last tuned arm at the base's depth is tuned-r2 (r2-eval-tuned). Its
    headline card gives the report's own figures: pass rate 9.0% against 0.0%, +9.0 points,
    10 of 12 rooms up, 2 tied, Wilcoxon p = 0.001953125 (exact, 10 non-zero differences
    all positive: 2 / 2^10)."""
    at = _open("compare")
    assert at.multiselect(key="compare_runs").value == ["eval-base", "r2-eval-tuned"]
    texts = [m.value for m in at.markdown]
    assert "**pass rate · tuned-r2 9.0% vs base 0.0%**" in texts
    detail = next(t for t in texts if t.startswith("+9.0 points"))
    assert "10 of 12 rooms up, 0 down, 2 tied" in detail
    assert "p = 0.002 (Wilcoxon)" in detail


def test_filter_export_of_a_heldout_run_is_refused_naming_rooms_and_override(ws: Path) -> None:
    at = _open("filter")
    at.multiselect(key="f_runs").set_value(["r2-train", "eval-base"]).run()
    assert any("holdout-0" in w.value for w in at.warning)
    at.text_input(key="f_name").set_value("leak")
    at.button[0].click().run()  # the form's submit button
    errors = [e.value for e in at.error]
    assert len(errors) == 1, errors
    assert "eval-base: holdout-0, holdout-1, holdout-10" in errors[0]
    assert "Export held-out rooms anyway" in errors[0]
    assert not (ws / "datasets" / "leak").exists()


def test_filter_settings_survive_a_visit_to_another_page(ws: Path) -> None:
    """Streamlit forgets the state of widgets a rerun did not draw; the page keeps its own."""
    at = _open("filter")
    at.text_area(key="f_where").set_value("n_turns >= 2")
    at.checkbox(key="f_min_pr_on").check().run()
    at.slider(key="f_min_pr").set_value(0.25)
    at.multiselect(key="f_runs").set_value(["r1-train"])
    at.run()
    assert not at.exception
    at.radio(key="page").set_value("runs").run()
    at.radio(key="page").set_value("filter").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.text_area(key="f_where").value == "n_turns >= 2"
    assert at.checkbox(key="f_min_pr_on").value is True
    assert at.slider(key="f_min_pr").value == 0.25
    assert at.multiselect(key="f_runs").value == ["r1-train"]


def test_depth_table_has_cost_columns_and_only_depth_figures(ws: Path) -> None:
    """The room_scaling depth ablation base vs base-d2: wall time and tokens per episode of
    each depth beside its pass rate; the depth figures are the report's depth_ablation_*.png
    only (before: ``grid_depth*.png`` matched the "depth" filter and showed twice)."""
    from rlmdistill.dashboard.tables import DEPTH_COST_COLUMNS

    at = _open("ablations")
    cost = next(d.value for d in at.dataframe if list(d.value.columns) == DEPTH_COST_COLUMNS)
    assert list(zip(cost["depth 1 arm"], cost["arm"], cost["depth"], strict=True)) == [
        ("eval-base", "eval-base", 1), ("eval-base", "eval-base-d2", 2),
        ("r2-eval-tuned", "r2-eval-tuned", 1), ("r2-eval-tuned", "r2-eval-tuned-d2", 2),
    ]  # fmt: skip
    # the loop's report (reports/r2, arms labelled base, ..., same runs) has the same means
    report = json.loads((ws / "reports/r2/report.json").read_text())
    label = {a["run_id"]: a["label"] for a in report["arms"]}
    for _, row in cost.iterrows():
        means = {m["metric"]: m["mean"]["value"] for m in report["per_arm"][label[row["arm"]]]}
        assert row["wall time (s)"] == pytest.approx(means["wall_time_s"], rel=1e-12)
        assert row["coverage"] == pytest.approx(means["coverage"], rel=1e-12)
    tuned = cost[cost["depth 1 arm"] == "r2-eval-tuned"]["wall time (s)"].tolist()
    assert tuned[1] > 3 * tuned[0]  # tuned-r2 at depth 2 spends over 3x the wall time
    assert (cost["tokens per episode"] > 0).all()
    figures = [p.name for p in report_figures(ws / "reports/r2", "depth_ablation")]
    assert figures == ["depth_ablation_0.png", "depth_ablation_1.png"]
    assert [p.name for p in report_figures(ws / "reports/r2", "grid_")] == [
        "grid_depth1.png",
        "grid_depth2.png",
    ]


def test_values_read_as_percentages_points_and_undefined_with_reason() -> None:
    assert is_share("pass_rate") and is_share("coverage[License]") and is_share("has_memo")
    assert not is_share("n_sub_calls") and not is_share("wall_time_s")
    assert fmt_value("pass_rate", 0.09008) == "9.0%"
    assert fmt_value("memo_chars", 11850.4) == "11,850"
    assert fmt_value("pass_rate", None) == "Undefined"
    e = Estimate(value=-0.09, low=-0.133, high=-0.047, n=12, method="t")
    assert fmt_difference("pass_rate", e) == "-9.0 points [-13.3, -4.7]"
    none = Estimate(value=None, n=0, method="t", reason="no paired rooms")
    assert fmt_difference("pass_rate", none) == "Undefined (no paired rooms)"


def test_sidebar_names_the_workspace_not_its_path(ws: Path) -> None:
    at = _open("runs")
    sidebar = [c.value for c in at.sidebar.caption]
    assert sidebar == ["workspace: **room_scaling**"]


def test_trace_viewer_header_pass_rate_code_once_traceback_as_output_and_boxed_memo(
    ws: Path,
) -> None:
    """r1-eval-tuned episode 0e4e91e9d6205fc1145d: a block of the root's code raised; its
    traceback is drawn as the REPL's output (code), not as an app error box, and each
    block's code appears once (in the completion). The header gives the episode's pass
    rate from the run table."""
    from rlmdistill.dashboard.data import run_table
    from rlmdistill.traces.runs import load_trajectory

    run, eid = ws / "runs" / "r1-eval-tuned", "0e4e91e9d6205fc1145d"
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in {"page": "trace", "run": "r1-eval-tuned", "episode": eid}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = run_table(run).set_index("episode_id")
    want = table.loc[eid, "pass_rate:reference"]
    header = {m.label: m.value for m in at.metric}
    assert header["pass rate (reference)"] == f"{want:.1%}"
    traj = load_trajectory(run, eid)
    errors = [b.error for t in traj.turns for b in t.blocks if b.error]
    assert errors and not at.error  # the root's tracebacks are not app errors
    codes = [c.value.strip() for c in at.code]
    for e in errors:
        assert e.strip() in codes
    for t in traj.turns:
        for b in t.blocks:  # never a code element of the block's code alone
            assert b.code.strip() not in codes


def test_memo_headings_are_demoted_below_the_page_title() -> None:
    from rlmdistill.dashboard.pages_trace import demote_headings

    memo = "# Due-diligence memo\n\n## Findings\n\n```\n# a comment\n```\n#hashtag"
    assert demote_headings(memo) == (
        "#### Due-diligence memo\n\n##### Findings\n\n```\n# a comment\n```\n#hashtag"
    )
    assert demote_headings("##### deep") == "###### deep"


def test_sft_base_defaults_to_what_the_workspace_trained(ws: Path) -> None:
    """room_scaling kept no adapters; its experiment.json trained local:qwen2.5-coder-0.5b."""
    at = _open("sft")
    assert at.text_input(key="sft_base").value == "local:qwen2.5-coder-0.5b"


def test_dashboard_command_hides_the_deploy_button(tmp_path: Path) -> None:
    from rlmdistill.dashboard.cli import dashboard_command

    cmd = dashboard_command(tmp_path, 8501, headless=True)
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "viewer"
