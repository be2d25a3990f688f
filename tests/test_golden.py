"""Golden comparison on the committed fixture workspace ``tests/data/golden_ws`` (issue 18).

``tests/data/golden_expected.json`` holds what the code produced on that fixture *before* the
read side was unified (recorded with ``RLMDISTILL_GOLDEN_WRITE=1``, commit "tests: golden
fixture ..."): ``report.json`` of ``rlmdistill report`` (base vs deep, training curve of the
adapter), the filter decisions of three rule sets, the ``show`` summary and the dashboard
tables. Each test recomputes one of them with today's code and compares.

Two changes are intended, and every figure they change is listed (:data:`DASHBOARD_CHANGES`,
:data:`STALE_CHANGES`); the test fails on any other difference:

1. "read the room but wrote no memo" has one definition, coverage > 0 with no memo
   (:func:`rlmdistill.traces.scores.read_no_memo`); the dashboard's depth table counted
   sub-calls > 0 with no memo instead.
2. one scoring function (:func:`rlmdistill.traces.scores.score_episodes`): an episode whose
   only verdicts grade an older memo is not graded. The filter and the report already said so;
   ``show`` and the dashboard counted it as graded with pass rate 0.
Report fields added after the recording (issue 21) are set aside by :func:`_before_issue21`
before the comparison; the recorded ones must not change. So are the sub-call metrics of
issue 43 (:func:`_before_issue43`, after checking their values on the fixture by hand): every
recorded value stays as it was. The Spearman interval's method
changed from a percentile bootstrap to Fisher z with the Bonett-Wright standard error: on this
fixture (2 rooms, every Spearman undefined) only its method text differs
(:func:`_spearman_method_change`). The interval of a mean and of a paired difference changed
from a percentile bootstrap over rooms to Student's t over rooms: with 2 rooms every such
interval is undefined, so again only the method texts differ (:func:`_mean_method_change`).
The fixture was built by ``tests/golden/build_fixture.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

FIXTURE = Path(__file__).parent / "data" / "golden_ws"
EXPECTED = Path(__file__).parent / "data" / "golden_expected.json"
WRITE = os.environ.get("RLMDISTILL_GOLDEN_WRITE") == "1"


def _r(x: float) -> float:
    """``x`` rounded as :func:`_clean` rounds (12 significant digits)."""
    return float(f"{x:.12g}")


DASHBOARD_CHANGES: dict[str, dict[Any, Any]] = {
    # (1) "read but wrote no memo" = coverage > 0 and no memo: it changed only the dashboard's own
    #     depth table, which is gone (the Ablations page shows the report's depth ablations,
    #     tests/test_dashboard_analysis.py).
    # (2) b-be-1 (base, beta): its only verdicts grade an older memo -> not graded (was 0.0).
    "run_table:base": {("4", "pass_rate:reference"): (0.0, None)},  # (2) row 4 = b-be-1
    "run_overview:base": {"mean_pass_rate": ({"reference": 0.375}, {"reference": 0.5})},
    # (3) means are means of room means, as in the report: deep's coverage is alpha (0.55 + 0.3 +
    #     0.1) / 3 and beta (0.35 + 0.15) / 2 (d-be-1 has none) -> 0.2833; over episodes 1.45 / 5.
    "run_overview:deep": {"mean_coverage": (0.29, _r((0.95 / 3 + 0.5 / 2) / 2))},
    "runs_frame": {
        ("0", "pass rate (reference)"): ("37.5%", "50.0%"),  # (2)
        ("1", "coverage"): ("29.0%", "28.3%"),  # (3)
    },
}
"""Every dashboard table cell that differs from the recording, ``{(row, column): (before,
after)}`` per table, each for one of the reasons above."""

STALE_CHANGES = {"show:base": "b-be-1"}
"""``show`` counted an episode whose only verdicts grade an older memo as graded with pass rate
0 (the filter, the report and ``export-grpo`` call it not graded). With one scoring function it
is not graded anywhere; the run and episode whose ``show`` figures change."""

_VOLATILE = {"created_at", "versions", "git_commit", "git_dirty", "machine", "duration_s"}


def load_fixture(tmp_path: Path) -> Path:
    """Copy the fixture workspace to ``tmp_path/ws`` with ``@WS@`` replaced by its path."""
    ws = tmp_path / "ws"
    shutil.copytree(FIXTURE, ws)
    for p in ws.rglob("*.json*"):
        text = p.read_text(encoding="utf-8")
        p.write_text(text.replace("@WS@", str(ws)), encoding="utf-8")
    return ws


def _clean(obj: Any, ws: Path) -> Any:
    """JSON-ready copy of ``obj``: workspace paths as ``@WS@``, volatile keys dropped, floats
    rounded to 12 significant digits, NaN as ``None``."""
    if isinstance(obj, dict):
        return {str(k): _clean(v, ws) for k, v in obj.items() if k not in _VOLATILE}
    if isinstance(obj, list | tuple):
        return [_clean(v, ws) for v in obj]
    if isinstance(obj, str):  # UTC times as pydantic writes them ("Z", not "+00:00")
        return re.sub(r"(T\d\d:\d\d:\d\d(?:\.\d+)?)\+00:00$", r"\1Z", obj.replace(str(ws), "@WS@"))
    if isinstance(obj, float):
        return None if math.isnan(obj) else float(f"{obj:.12g}")
    if obj is pd.NA or obj is None:
        return None
    if hasattr(obj, "item"):  # numpy scalars
        return _clean(obj.item(), ws)
    return obj


def _frame(df: pd.DataFrame, ws: Path) -> dict[str, Any]:
    """A table as ``{"columns": [...], "index": [...], "data": [[...]]}`` (NA as None)."""
    df = df.astype(object).where(df.notna(), None)
    return _clean(
        {
            "columns": [str(c) for c in df.columns],
            "index": [str(i) for i in df.index],
            "data": df.values.tolist(),
        },
        ws,
    )


def _compare(name: str, got: Any) -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8")) if EXPECTED.exists() else {}
    if WRITE:
        expected[name] = got
        EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n", "utf-8")
        return
    assert name in expected, f"{EXPECTED} has no {name!r}; record it with RLMDISTILL_GOLDEN_WRITE=1"
    assert got == _clean(expected[name], Path("/nonexistent"))


ISSUE21_REPORT_FIELDS = ("arm_table", "size_correlation_changes", "timeouts", "timeout_flags")
"""Report fields added after the recording (issue 21: the multi-arm table, the change of the
sub-calls/room-size correlation, timeouts); they have defaults, so the recorded report still
loads (tests/test_analysis_arms.py checks them by hand)."""


def _before_issue21(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` without what issue 21 added, everything recorded left as it is: the new
    top-level fields and methods, the ``room_tokens`` size correlations and each record's
    ``rooms_without_size``, the depth table (``metrics``, ``timeouts``) of each depth ablation,
    and the timeout flags' notes."""
    out = {k: v for k, v in report.items() if k not in ISSUE21_REPORT_FIELDS}
    flagged = {f["note"] for f in report.get("timeout_flags", [])}
    out["notes"] = [n for n in report["notes"] if n not in flagged]
    out["methods"] = {
        k: v
        for k, v in report["methods"].items()
        if k not in ("arm_table", "correlation_change", "timeouts")
    }
    out["size_correlations"] = [
        {k: v for k, v in s.items() if k != "rooms_without_size"}
        for s in report["size_correlations"]
        if s["x"] != "room_tokens"
    ]
    out["depth_ablations"] = [
        {k: v for k, v in ab.items() if k not in ("metrics", "timeouts")}
        for ab in report["depth_ablations"]
    ]
    return out


ISSUE43_METRICS = (
    "sub_call_error_share",
    "sub_answer_chars",
    "sub_answer_quote_share",
    "sub_used_share",
    "sub_supports_pass_share",
)
"""Report metrics added after the recording (issue 43: sub-call metrics per arm)."""


def _before_issue43(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` without the rows and descriptions of :data:`ISSUE43_METRICS` (per arm, in
    each comparison, in ``metric_descriptions``), everything recorded left as it is, after
    checking the new rows by hand: the fixture's report reads no trajectories, so the four
    trajectory metrics have no episode with a value; the error share comes from the summaries
    (base: 5 episodes with sub-calls, deep: 4; no sub-call failed in either, so 0 in both
    rooms and arms, difference 0)."""
    for arm, n in (("base", 5), ("deep", 4)):
        rows = {m["metric"]: m for m in report["per_arm"][arm] if m["metric"] in ISSUE43_METRICS}
        assert list(rows) == list(ISSUE43_METRICS)
        err = rows.pop("sub_call_error_share")
        assert err["episodes"]["n"] == n and err["mean"]["value"] == 0.0
        assert err["room_means"] == {"alpha": 0.0, "beta": 0.0}
        assert all(m["episodes"]["n"] == 0 and m["mean"]["value"] is None for m in rows.values())
    (comparison,) = report["comparisons"]
    err_row = next(r for r in comparison["rows"] if r["metric"] == "sub_call_error_share")
    assert err_row["paired"]["mean_difference"]["value"] == 0.0
    assert err_row["paired"]["differences"] == [0.0, 0.0]
    assert set(report["metric_descriptions"]) >= set(ISSUE43_METRICS)
    out = dict(report)
    out["per_arm"] = {
        arm: [m for m in ms if m["metric"] not in ISSUE43_METRICS]
        for arm, ms in report["per_arm"].items()
    }
    out["comparisons"] = [
        {**c, "rows": [r for r in c["rows"] if r["metric"] not in ISSUE43_METRICS]}
        for c in report["comparisons"]
    ]
    out["metric_descriptions"] = {
        k: v for k, v in report["metric_descriptions"].items() if k not in ISSUE43_METRICS
    }
    return out


RECORDED_SPEARMAN = (
    "Spearman rho (scipy.stats.spearmanr); two-sided p from the exact permutation distribution "
    "(scipy.stats.permutation_test); interval by percentile bootstrap over pairs, B=200, seed=0",
    "Spearman rho, percentile bootstrap interval over points, scipy.stats.spearmanr",
)
"""The recorded Spearman method texts: of each correlation, and of the report's ``methods``."""


def _spearman_method_change(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with the Spearman method texts as recorded, after checking they are today's
    (Bonett-Wright) and that no Spearman interval was defined on the fixture (so the method is
    the only thing that changed)."""
    from rlmdistill.analysis.sections import METHODS
    from rlmdistill.stats import SPEARMAN_METHOD

    now = SPEARMAN_METHOD.format(
        p="from the exact permutation distribution (scipy.stats.permutation_test)"
    )
    out = dict(report)
    out["size_correlations"] = []
    for s in report["size_correlations"]:
        rho = s["spearman"]
        assert rho["method"] == now and rho["low"] is None and rho["high"] is None, rho
        out["size_correlations"].append({**s, "spearman": {**rho, "method": RECORDED_SPEARMAN[0]}})
    assert report["methods"]["spearman"] == METHODS["spearman"]
    assert "Bonett-Wright" in METHODS["spearman"]
    out["methods"] = {**report["methods"], "spearman": RECORDED_SPEARMAN[1]}
    return out


RECORDED_MEAN_METHODS = {
    "mean": (
        "mean of room means (each room weighs the same); 95% interval by percentile bootstrap "
        "resampling rooms with replacement (cluster bootstrap; Efron & Tibshirani 1993; "
        "Davison & Hinkley 1997 sec. 3.8), scipy.stats.bootstrap"
    ),
    "paired_difference": (
        "per room: mean(B) - mean(A) over rooms both arms ran (paired by room content hash); "
        "mean of the differences with the same percentile bootstrap over rooms"
    ),
}
"""The recorded ``methods`` texts of a mean and a paired difference (percentile bootstrap)."""


def _mean_method_change(obj: Any) -> Any:
    """``obj`` with every mean's method text as recorded (``percentile bootstrap ..., B=200,
    seed=0, over <unit>``), after checking it is today's Student t text and that the interval
    is undefined (2 rooms), so the method is the only thing that changed; and the report's
    ``methods`` texts of a mean and a paired difference as recorded."""
    from rlmdistill.analysis.sections import METHODS
    from rlmdistill.stats import MEAN_METHOD

    if isinstance(obj, list):
        return [_mean_method_change(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _mean_method_change(v) for k, v in obj.items()}
    method = obj.get("method")
    if isinstance(method, str) and method.startswith("Student t interval over "):
        unit = obj["unit"]
        assert method.startswith(MEAN_METHOD.format(unit=unit)), method
        assert obj["low"] is None and obj["high"] is None, obj  # 2 rooms: no interval
        out["method"] = f"percentile bootstrap (scipy.stats.bootstrap), B=200, seed=0, over {unit}"
    if "paired_difference" in obj and "mean" in obj:  # the report's methods
        for key, recorded in RECORDED_MEAN_METHODS.items():
            assert obj[key] == METHODS[key] and "Student" in obj[key]
            out[key] = recorded
    return out


RECORDED_WILCOXON = (
    "Wilcoxon signed-rank test (scipy.stats.wilcoxon), two-sided, zero differences dropped "
    "(zero_method='wilcox'), exact null distribution when n <= 50 without ties, else normal "
    "approximation"
)
"""The recorded Wilcoxon method text (scipy's test, before the exact sign-flip p of our own)."""


def _rate_and_test_method_change(obj: Any) -> Any:
    """``obj`` as recorded before the Korn-Graubard interval of rates, the exact Wilcoxon,
    the equal-values note of correlations and Steiger's test, after checking that only the
    method texts changed on the fixture: every rate's interval is undefined (2 rooms; its
    method becomes today's Student t text of a share, which :func:`_mean_method_change` maps
    to the recorded one), ``one_sided`` is false, every Wilcoxon is undefined (2 rooms) and
    the correlations keep their values."""
    from rlmdistill.stats import (
        EQUAL_VALUES_NOTE,
        MEAN_METHOD,
        WILCOXON_METHOD,
    )

    if isinstance(obj, list):
        return [_rate_and_test_method_change(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _rate_and_test_method_change(v) for k, v in obj.items() if k != "one_sided"}
    if "one_sided" in obj:
        assert obj["one_sided"] is False, obj
    method = obj.get("method")
    if isinstance(method, str) and method.startswith("Korn-Graubard interval over "):
        assert obj["low"] is None and obj["high"] is None, obj  # 2 rooms: no interval
        out["method"] = MEAN_METHOD.format(unit=obj["unit"]) + ", clipped to the range [0, 1]"
    if method == WILCOXON_METHOD:
        assert obj["p_value"] is None, obj
        out["method"] = RECORDED_WILCOXON
    if isinstance(method, str) and method.endswith("; " + EQUAL_VALUES_NOTE):
        out["method"] = method.removesuffix("; " + EQUAL_VALUES_NOTE)
    if obj.get("wilcoxon") == WILCOXON_METHOD:  # the report's methods
        out["wilcoxon"] = RECORDED_WILCOXON
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return load_fixture(tmp_path)


def test_golden_report(ws: Path, tmp_path: Path) -> None:
    from rlmdistill.analysis.main import ReportConfig, run

    run(
        ReportConfig(
            runs=[ws / "runs" / "base", ws / "runs" / "deep"],
            out=tmp_path / "report",
            sft=[ws / "adapters" / "r1"],
            resamples=200,
            seed=0,
            trajectories=False,
            draw=False,
        )
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    report.pop("figures", None)
    got = _clean(report, tmp_path)
    if not WRITE:
        # base: 1 of 6 episodes ended timeout, deep: 0 of 6 -> flagged (issue 21)
        assert [(f["a"], f["b"]) for f in got["timeout_flags"]] == [("base", "deep")]
        got = _mean_method_change(
            _rate_and_test_method_change(
                _spearman_method_change(_before_issue21(_before_issue43(got)))
            )
        )
    _compare("report", _clean(got, ws))


RULE_SETS = {
    "default": {},
    "thresholds": {"min_pass_rate": 0.5, "min_coverage": 0.1, "required_status": ["completed"]},
    "best_of": {
        "require_memo": False,
        "required_status": [],
        "top_k_per_room": 1,
        "min_pass_rate_quantile": 0.5,
    },
}


@pytest.mark.parametrize("rules", sorted(RULE_SETS))
def test_golden_filter_decisions(ws: Path, rules: str) -> None:
    from rlmdistill.filter import FilterRules, select_episodes

    selection = select_episodes(
        [ws / "runs" / "base", ws / "runs" / "deep"], FilterRules.model_validate(RULE_SETS[rules])
    )
    # added after the recording: what people decided (the fixture has no labels.jsonl)
    got = [d.model_dump(mode="json", exclude={"human_verdict"}) for d in selection.decisions]
    assert all(d.human_verdict is None for d in selection.decisions)
    _compare(f"filter:{rules}", _clean(got, ws))


def test_golden_show_summary(ws: Path) -> None:
    from rlmdistill.analysis.summary import Stat, summarize_run

    for run in ("base", "deep"):
        s = summarize_run(ws / "runs" / run).model_dump(mode="json", exclude={"episodes"})
        # added after the recording: no memo of the fixture carries sub-call error text
        assert s.pop("memo_with_sub_call_errors") == 0
        got = _clean(s, ws)
        if f"show:{run}" in STALE_CHANGES and not WRITE:
            g = got["graders"][0]
            # graded now: b-al-0 (PPF; weights 1, 2, 1), b-al-1 (PFU), b-be-0 (PF), by hand
            assert g["per_episode"] == {"b-al-0": _r(2 / 3), "b-al-1": _r(1 / 3), "b-be-0": 0.5}
            assert g["n_episodes"] == 3
            assert g["weighted_pass_rate"]["n"] == 3
            assert g["weighted_pass_rate"]["mean"] == _r((3 / 4 + 1 / 4 + 1 / 2) / 3)
            # back to the recorded figures: b-be-1 counted with pass rate 0, weighted 0
            g["per_episode"][STALE_CHANGES[f"show:{run}"]] = 0.0
            g["n_episodes"] = 4
            g["pass_rate"] = _clean(Stat.of([2 / 3, 1 / 3, 0.5, 0.0]).model_dump(), ws)
            g["weighted_pass_rate"] = _clean(Stat.of([3 / 4, 1 / 4, 0.5, 0.0]).model_dump(), ws)
        _compare(f"show:{run}", got)


def test_golden_dashboard_tables(ws: Path) -> None:
    # The dashboard's depth, grid and shift tables are the report's sections now (compared with
    # the report value by value in tests/test_dashboard_analysis.py), so they are not here.
    from rlmdistill.dashboard import data
    from rlmdistill.dashboard.pages_runs import runs_frame
    from rlmdistill.dashboard.pages_sft import adapters_frame

    w = data.Workspace.at(ws)
    runs = [ws / "runs" / "base", ws / "runs" / "deep"]
    got: dict[str, Any] = {}
    for rd in runs:
        got[f"run_table:{rd.name}"] = _frame(data.run_table(rd), ws)
        got[f"run_overview:{rd.name}"] = _clean(data.run_overview(rd)._asdict(), ws)
        for eid in data.run_table(rd)["episode_id"]:
            got[f"episode_verdicts:{eid}"] = _frame(data.episode_verdicts(rd, eid), ws)
    got["runs_frame"] = _frame(runs_frame(w), ws)
    got["adapters_frame"] = _frame(adapters_frame(w), ws)
    got["train_log"] = _frame(data.train_log(ws / "adapters" / "r1"), ws)
    info = data.adapter_info(ws / "adapters" / "r1")._asdict()
    info["path"] = str(info["path"])
    # the manifest is the typed sft.json now: compare the fields the file holds
    info["manifest"] = info["manifest"].model_dump(mode="json", exclude_unset=True)
    got["adapter_info"] = _clean(info, ws)
    expected = json.loads(EXPECTED.read_text(encoding="utf-8")) if EXPECTED.exists() else {}
    changes = {}
    for name in sorted(got):
        if WRITE:
            _compare(f"dashboard:{name}", got[name])
            continue
        before = _clean(expected[f"dashboard:{name}"], ws)
        if isinstance(before, dict) and "data" in before:
            diff = _cell_changes(before, got[name])
        else:
            diff = {
                k: (before.get(k), got[name].get(k))
                for k in set(before) | set(got[name])
                if before.get(k) != got[name].get(k)
            }
        if diff:
            changes[name] = diff
    assert changes == DASHBOARD_CHANGES


def _cell_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[Any, Any]:
    """``{(row, column): (before, after)}`` of two tables with the same rows and columns."""
    assert before["columns"] == after["columns"] and before["index"] == after["index"]
    out = {}
    for i, (rb, ra) in enumerate(zip(before["data"], after["data"], strict=True)):
        for col, vb, va in zip(before["columns"], rb, ra, strict=True):
            if vb != va:
                out[(before["index"][i], col)] = (vb, va)
    return out
