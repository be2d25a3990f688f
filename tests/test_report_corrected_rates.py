"""The report's corrected pass rates: raw rate beside its Rogan-Gladen value and interval for
an arm whose run has people's labels (hand-computed); absent without labels."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from rlmdistill.analysis.compare import build_report
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces import labels as lb

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _run(root: Path, name: str) -> Path:
    # 10 episodes x 2 criteria: e0-e4 pass c0 only, e5-e9 pass both -> grader passes 15 of 20
    return write_scored_run(
        root / "runs" / name,
        [SyntheticRoom("a", n_criteria=2)],
        [SyntheticEpisode(f"e{i}", "a", n_pass=1 if i < 5 else 2) for i in range(10)],
        run_id=name,
    )


def _label(eid: str, cid: str, verdict: str) -> lb.Label:
    return lb.Label(
        episode_id=eid,
        memo_hash=lb.memo_hash(f"memo of {eid}"),
        target="criterion",
        criterion_id=cid,
        verdict=verdict,  # type: ignore[arg-type]
        reviewer="ann",
        time=T0,
    )


def test_report_shows_raw_and_corrected_rates(tmp_path: Path) -> None:
    base, tuned = _run(tmp_path, "base"), _run(tmp_path, "tuned")
    # labels of `tuned`: c1 of e0-e4 (grader FAIL): person FAIL on e0-e3, PASS on e4;
    # c0 of e0-e4 (grader PASS): person PASS on e0-e2, FAIL on e3-e4
    labels = [_label(f"e{i}", "c1", "FAIL" if i < 4 else "PASS") for i in range(5)]
    labels += [_label(f"e{i}", "c0", "PASS" if i < 3 else "FAIL") for i in range(5)]
    lb.append_labels(tuned, labels)
    out = tmp_path / "report"
    report = build_report([base, tuned], out, trajectories=False, draw=False)
    (row,) = report.corrected_rates
    assert (row.arm, row.grader) == ("tuned", "reference")
    c = row.calibration
    # person PASS: e0-e2 c0 (grader PASS), e4 c1 (grader FAIL) -> q1 = 3/4
    # person FAIL: e0-e3 c1 (grader FAIL), e3-e4 c0 (grader PASS) -> q0 = 4/6
    assert (c.n_pass, c.n, c.true_pass, c.m1, c.true_fail, c.m0) == (15, 20, 3, 4, 4, 6)
    q = row.rate
    assert (q.raw, q.sensitivity, q.specificity) == (0.75, 0.75, pytest.approx(4 / 6))
    # theta = (0.75 + 2/3 - 1) / (2/3 + 3/4 - 1) = (5/12) / (5/12) = 1.0
    assert q.corrected.value == pytest.approx(1.0)
    assert q.corrected.low is not None and q.corrected.low < 1.0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Pass rates corrected for the grader's errors (95% interval)" in md
    assert "| tuned | reference | 0.75 (15/20) | 1 [" in md
    # the agreement table: 10 pairs, TP 3, FN 1, TN 4, FP 2; kappa: grader pass 5 / not 5,
    # person PASS 4 / FAIL 6, p_o = 7/10, p_e = (5*4 + 5*6)/100 = 1/2 -> (0.7 - 0.5)/0.5 = 0.4
    assert "| tuned | reference | unknown | 10 | 0.75 [" in md
    assert md.count("| 0.4 |") == 2  # the criterion type's row and `all`
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert data["corrected_rates"][0]["calibration"]["m0"] == 6


def test_no_labels_no_section(tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = build_report([_run(tmp_path, "base")], out, trajectories=False, draw=False)
    assert report.corrected_rates == []
    assert "corrected_rates" not in json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert "corrected for the grader" not in (out / "report.md").read_text(encoding="utf-8")


def test_too_few_labels_says_undefined(tmp_path: Path) -> None:
    run = _run(tmp_path, "tuned")
    lb.append_labels(run, [_label("e0", "c0", "PASS"), _label("e0", "c1", "FAIL")])
    out = tmp_path / "report"
    build_report([run], out, trajectories=False, draw=False)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert (
        "undefined: too few labels: 1 person-PASS and 1 person-FAIL; need at least 3 of each" in md
    )
