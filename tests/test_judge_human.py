"""``judge-agreement --human``: graders against people's labels, hand-computed; the calibration
counts the corrected rate takes; the flip share of an LLM judge graded again without its cache
(on the fake OpenAI server)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlmdistill.cli import app
from rlmdistill.judge.human import human_agreement, rescore_judge
from rlmdistill.testing.fake_openai import FakeOpenAIServer, last_user_message
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces import labels as lb
from rlmdistill.traces import layout
from rlmdistill.traces.calibration import run_calibration
from rlmdistill.traces.runs import load_verdicts
from rlmdistill.traces.store import append_records

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TYPES = {"c0": "existence", "c1": "existence", "c2": "quantification", "c3": "quantification"}


def _run(tmp_path: Path) -> Path:
    """Grader verdicts: e0 passes c0 c1, e1 passes c0, e2 passes c0 c1 c2 (others FAIL)."""
    run = write_scored_run(
        tmp_path / "runs" / "r",
        [SyntheticRoom("a", n_criteria=4)],
        [
            SyntheticEpisode("e0", "a", n_pass=2),
            SyntheticEpisode("e1", "a", n_pass=1),
            SyntheticEpisode("e2", "a", n_pass=3),
        ],
    )
    path = layout.verdicts_path(run, "reference")
    typed = [
        v.model_copy(update={"criterion_type": TYPES[v.criterion_id]})
        for v in load_verdicts(run, "reference")
    ]
    path.unlink()
    append_records(path, typed)
    return run


def _label(eid: str, cid: str, verdict: str, who: str = "ann", memo: str | None = None) -> lb.Label:
    return lb.Label(
        episode_id=eid,
        memo_hash=lb.memo_hash(memo or f"memo of {eid}"),
        target="criterion",
        criterion_id=cid,
        verdict=verdict,  # type: ignore[arg-type]
        reviewer=who,
        time=T0,
    )


def _labelled(tmp_path: Path) -> Path:
    run = _run(tmp_path)
    lb.append_labels(
        run,
        [
            # (grader verdict -> pair kind)
            _label("e0", "c0", "PASS"),  # PASS -> TP existence
            _label("e0", "c1", "FAIL"),  # PASS -> FP existence
            _label("e0", "c2", "FAIL"),  # FAIL -> TN quantification
            _label("e0", "c3", "PASS"),  # FAIL -> FN quantification
            _label("e1", "c0", "PASS"),  # PASS -> TP existence
            _label("e1", "c1", "FAIL"),  # FAIL -> TN existence
            _label("e1", "c2", "UNGRADABLE"),  # person UNGRADABLE: left out
            _label("e1", "c3", "FAIL"),  # FAIL -> TN quantification
            _label("e2", "c0", "PASS"),  # PASS -> TP existence
            _label("e2", "c1", "PASS"),  # PASS -> TP existence
            _label("e2", "c2", "PASS"),  # PASS -> TP quantification
            _label("e2", "c3", "FAIL"),  # FAIL -> TN quantification
            _label("e2", "c3", "PASS", who="bob"),  # FAIL -> FN quantification (2nd reviewer)
            _label("e1", "c0", "FAIL", who="bob", memo="an older memo"),  # stale: not paired
        ],
    )
    return run


def test_human_agreement_by_hand(tmp_path: Path) -> None:
    run = _labelled(tmp_path)
    table = human_agreement(run)
    assert (table.n_labels, table.reviewers) == (14, ["ann", "bob"])
    rows = {r.criterion_type: r for r in table.rows}
    assert [r.criterion_type for r in table.rows] == ["existence", "quantification", "all"]
    ex, qu, al = rows["existence"], rows["quantification"], rows["all"]
    # existence: TP 4, FP 1, TN 1, FN 0. sensitivity 4/4, specificity 1/2.
    # kappa: grader pass 5 / not 1, person PASS 4 / FAIL 2, p_o = 5/6,
    # p_e = (5*4 + 1*2)/36 = 22/36 -> (30 - 22) / (36 - 22) = 8/14
    assert (ex.n, ex.tp, ex.fp, ex.tn, ex.fn) == (6, 4, 1, 1, 0)
    assert ex.sensitivity.value == 1.0 and ex.specificity.value == 0.5
    assert ex.kappa == pytest.approx(8 / 14)
    # Wilson at k = n = 4: low = n / (n + z^2) = 4 / 7.841459 = 0.510109, high = 1
    assert ex.sensitivity.low == pytest.approx(0.510109, abs=1e-6)
    assert ex.sensitivity.high == pytest.approx(1.0)
    # quantification: TP 1, FN 2 (one of them bob's), TN 3, FP 0, 1 person UNGRADABLE.
    # kappa: grader 1 / 5, person 3 / 3, p_o = 4/6, p_e = (1*3 + 5*3)/36 = 1/2 -> 1/3
    assert (qu.n, qu.tp, qu.fp, qu.tn, qu.fn, qu.n_person_ungradable) == (6, 1, 0, 3, 2, 1)
    assert qu.sensitivity.value == pytest.approx(1 / 3) and qu.specificity.value == 1.0
    assert qu.kappa == pytest.approx(1 / 3)
    # all: TP 5, FP 1, FN 2, TN 4; p_o = 9/12, p_e = (6*7 + 6*5)/144 = 1/2 -> kappa 1/2
    assert (al.n, al.tp, al.fp, al.tn, al.fn) == (12, 5, 1, 4, 2)
    assert al.kappa == pytest.approx(0.5)
    assert al.sensitivity.value == pytest.approx(5 / 7) and al.specificity.value == 0.8


def test_calibration_counts_for_the_corrected_rate(tmp_path: Path) -> None:
    cal = run_calibration(_labelled(tmp_path), "reference")
    # grader passed 2 + 1 + 3 = 6 of 12 criteria; pairs as in the table's `all` row
    assert (cal.n_pass, cal.n) == (6, 12)
    assert (cal.true_pass, cal.m1, cal.true_fail, cal.m0) == (5, 7, 4, 5)
    assert (cal.n_person_ungradable, cal.n_stale, cal.n_unmatched) == (1, 1, 0)
    assert cal.reviewers == ["ann", "bob"]


def test_cli_human_json_and_errors(tmp_path: Path) -> None:
    run = _labelled(tmp_path)
    res = CliRunner().invoke(app, ["judge-agreement", str(run), "--human", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [(r["criterion_type"], r["n"], r["tp"]) for r in data["rows"]] == [
        ("existence", 6, 4),
        ("quantification", 6, 1),
        ("all", 12, 5),
    ]
    res = CliRunner().invoke(app, ["judge-agreement", str(run), "--human"])
    assert res.exit_code == 0 and "0.571" in res.stdout
    bare = _run(tmp_path / "bare")
    res = CliRunner().invoke(app, ["judge-agreement", str(bare), "--human"])
    assert res.exit_code == 2
    assert "no labels in labels.jsonl" in res.stderr


class _FlakyJudge:
    """Scripted judge: c1's verdict alternates between calls; every other criterion is PASS."""

    def __init__(self) -> None:
        self.calls = 0
        self.models = ["judge"]  # what GET /v1/models lists (the preflight checks it)

    def __call__(self, request: dict[str, Any]) -> str:
        self.calls += 1
        m = re.search(r"for these \d+ ids: ((?:\"[^\"]*\"(?:, )?)+)", last_user_message(request))
        assert m
        ids = json.loads("[" + m.group(1) + "]")
        flip = "PASS" if self.calls % 2 else "FAIL"
        return json.dumps(
            {
                "verdicts": [
                    {"id": c, "verdict": flip if c == "c1" else "PASS", "reason": "scripted"}
                    for c in ids
                ]
            }
        )


def test_rescore_bypasses_the_cache_and_counts_flips(tmp_path: Path) -> None:
    run = _labelled(tmp_path)
    handler = _FlakyJudge()
    with FakeOpenAIServer(handler) as server:
        spec = f"openai:judge@{server.base_url}"
        report = rescore_judge(run, spec, 3)
    # 3 labelled episodes x 3 gradings, 4 criteria in one request each: every grading asked
    assert handler.calls == 9
    assert (report.n_episodes, report.n_criteria, report.n_flipped) == (3, 12, 3)
    assert report.flip_share == pytest.approx(0.25)
    assert not list((run / "verdicts").glob("llm-*"))  # nothing written to the run
    with pytest.raises(ValueError, match="deterministic"):
        rescore_judge(run, "reference", 3)
