"""Golden comparison on the committed fixture workspace ``tests/data/golden_ws`` (issue 18).

``tests/data/golden_expected.json`` holds what the code produced on that fixture *before* the
read side was unified (recorded with ``RLMDISTILL_GOLDEN_WRITE=1``, commit "tests: golden
fixture ..."): ``report.json`` of ``rlmdistill report`` (base vs deep, training curve of the
adapter), the filter decisions of three rule sets, the ``show`` summary and the dashboard
tables. Each test recomputes one of them with today's code and compares.

The one intended change is the definition of "read the room but wrote no memo" (coverage > 0
with no memo, :func:`rlmdistill.traces.readings.read_no_memo`); the dashboard's depth table
counted sub-calls > 0 instead. The rows it changes are listed in :data:`NO_MEMO_CHANGES`.
The fixture was built by ``tests/golden/build_fixture.py``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

FIXTURE = Path(__file__).parent / "data" / "golden_ws"
EXPECTED = Path(__file__).parent / "data" / "golden_expected.json"
WRITE = os.environ.get("RLMDISTILL_GOLDEN_WRITE") == "1"

NO_MEMO_CHANGES: dict[tuple[str, str], tuple[int, int]] = {}
"""(room, column) of the dashboard depth table -> (count before, count after) where the one
"read but wrote no memo" definition changes it (filled in with the change, see module doc)."""

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
    if isinstance(obj, str):
        return obj.replace(str(ws), "@WS@")
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
    assert got == expected[name]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return load_fixture(tmp_path)


def test_golden_report(ws: Path, tmp_path: Path) -> None:
    from rlmdistill.analysis.compare import build_report

    build_report(
        [ws / "runs" / "base", ws / "runs" / "deep"],
        tmp_path / "report",
        sft_dirs=[ws / "adapters" / "r1"],
        n_resamples=200,
        seed=0,
        trajectories=False,
        draw=False,
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    report.pop("figures", None)
    got = _clean(report, tmp_path)
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
    got = [d.model_dump(mode="json") for d in selection.decisions]
    _compare(f"filter:{rules}", _clean(got, ws))


def test_golden_show_summary(ws: Path) -> None:
    from rlmdistill.analysis.summary import summarize_run

    for run in ("base", "deep"):
        s = summarize_run(ws / "runs" / run).model_dump(mode="json", exclude={"episodes"})
        _compare(f"show:{run}", _clean(s, ws))


def test_golden_dashboard_tables(ws: Path) -> None:
    from rlmdistill.dashboard import data
    from rlmdistill.dashboard.pages_ablations import depth_table, grid
    from rlmdistill.dashboard.pages_compare import episodes_of, shift_table
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
    episodes = episodes_of(runs, "reference")
    got["episodes_of"] = _frame(episodes, ws)
    got["shift_table"] = _frame(shift_table(episodes, ["base", "deep"]), ws)
    depth = depth_table(episodes)
    for (room, col), (before, after) in NO_MEMO_CHANGES.items():  # the listed change
        row = depth.index[depth["room"] == room][0]
        assert depth.loc[row, col] == after
        depth.loc[row, col] = before
    got["depth_table"] = _frame(depth, ws)
    got["grid"] = _frame(grid(episodes), ws)
    got["runs_frame"] = _frame(runs_frame(w), ws)
    got["adapters_frame"] = _frame(adapters_frame(w), ws)
    got["train_log"] = _frame(data.train_log(ws / "adapters" / "r1"), ws)
    info = data.adapter_info(ws / "adapters" / "r1")._asdict()
    info["path"] = str(info["path"])
    got["adapter_info"] = _clean(info, ws)
    for name in sorted(got):
        _compare(f"dashboard:{name}", got[name])
