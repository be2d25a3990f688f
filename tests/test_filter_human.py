"""The filter uses people's labels: ``human_*`` fields in ``where``, a person's reject wins,
and the filter report's reviewed counts and estimated reject share (Wilson, hand-computed)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from rlmdistill.filter.main import FilterConfig
from rlmdistill.filter.main import run as run_stage
from rlmdistill.filter.rules import FilterRules
from rlmdistill.filter.select import select_episodes
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces import labels as lb

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _run(tmp_path: Path) -> Path:
    # e0..e5 pass 1..2 of 2 criteria; all completed with distinct memos
    return write_scored_run(
        tmp_path / "runs" / "r",
        [SyntheticRoom("a", n_criteria=2)],
        [SyntheticEpisode(f"e{i}", "a", n_pass=1 + i % 2) for i in range(6)],
    )


def _ep(
    eid: str,
    verdict: str,
    who: str = "ann",
    tags: list[str] | None = None,
    memo: str | None = None,
    time: dt.datetime = T0,
) -> lb.Label:
    return lb.Label(
        episode_id=eid,
        memo_hash=lb.memo_hash(memo or f"memo of {eid}"),
        target="episode",
        verdict=verdict,  # type: ignore[arg-type]
        tags=tags or [],
        reviewer=who,
        time=time,
    )


def _labelled(tmp_path: Path) -> Path:
    run = _run(tmp_path)
    lb.append_labels(
        run,
        [
            _ep("e0", "reject", tags=["invented clause"]),
            _ep("e1", "keep"),
            _ep("e1", "reject", who="bob"),  # bob's reject wins over ann's keep
            _ep("e2", "keep"),
            _ep("e3", "reject", memo="an older memo"),  # stale: says nothing of this memo
            _ep("e4", "reject", time=T0),
            _ep("e4", "keep", time=T0 + dt.timedelta(minutes=5)),  # ann changed her mind
        ],
    )
    return run


def _kept(run: Path, rules: FilterRules) -> list[str]:
    return [r.episode_id for r in select_episodes([run], rules).kept]


def test_where_not_human_reject(tmp_path: Path) -> None:
    run = _labelled(tmp_path)
    rules = FilterRules(human_reject_wins=False, where=["not human_reject"])
    assert _kept(run, rules) == ["e2", "e3", "e4", "e5"]
    # the other fields, each in a where expression
    assert _kept(run, FilterRules(human_reject_wins=False, where=["human_keep"])) == ["e2", "e4"]
    assert _kept(run, FilterRules(human_reject_wins=False, where=["label_stale"])) == ["e3"]
    tagged = FilterRules(human_reject_wins=False, where=["'invented clause' in human_tags"])
    assert _kept(run, tagged) == ["e0"]
    reviewed = FilterRules(human_reject_wins=False, where=["not human_reviewed"])
    assert _kept(run, reviewed) == ["e3", "e5"]
    # without the rule and without a where, labels change nothing
    assert _kept(run, FilterRules(human_reject_wins=False)) == [f"e{i}" for i in range(6)]


def test_a_persons_reject_wins(tmp_path: Path) -> None:
    run = _labelled(tmp_path)
    # the grader rules keep every episode (pass rate >= 0.5); people's rejects still drop
    sel = select_episodes([run], FilterRules(min_pass_rate=0.5))
    by_id = {d.episode_id: d for d in sel.decisions}
    assert [r.episode_id for r in sel.kept] == ["e2", "e3", "e4", "e5"]
    assert by_id["e0"].primary_reason == "human_reject"
    assert by_id["e0"].details["human_reject"] == (
        "a person rejected this memo (reviewers: ann) (invented clause)"
    )
    assert by_id["e1"].reasons == ["human_reject"] and by_id["e1"].human_verdict == "reject"
    assert by_id["e4"].human_verdict == "keep" and by_id["e3"].human_verdict is None
    # a rule failed earlier stays the primary reason; the reject is recorded too
    strict = select_episodes([run], FilterRules(min_pass_rate=1.0)).decisions
    e0 = next(d for d in strict if d.episode_id == "e0")  # passes 1 of 2
    assert e0.reasons == ["pass_rate", "human_reject"] and e0.primary_reason == "pass_rate"


def test_report_counts_reviewed_and_estimates_reject_share(tmp_path: Path) -> None:
    run = _labelled(tmp_path)
    out = run.parent.parent / "datasets" / "d"
    outcome = run_stage(FilterConfig(runs=[run], out=out)).report
    h = outcome.human
    assert h is not None
    # rules keep all 6; reviewed (current memo): e0 reject, e1 reject, e2 keep, e4 keep
    assert (h.n_rule_kept, h.n_rule_kept_reviewed, h.n_rule_kept_rejected) == (6, 4, 2)
    assert (h.n_kept, h.n_kept_reviewed, h.n_dropped_by_person) == (4, 2, 2)
    # Wilson 2/4: centre (2 + z^2/2)/(4 + z^2) = 0.5, half-width
    # z sqrt(4 * 0.25 + z^2/4) / (4 + z^2) = 1.959964 * 1.400130 / 7.841459 = 0.349961
    assert h.reject_share.value == 0.5
    assert h.reject_share.low == pytest.approx(0.5 - 0.349961, abs=1e-6)
    assert h.reject_share.high == pytest.approx(0.5 + 0.349961, abs=1e-6)
    prov = outcome.runs[0].labels
    assert prov is not None and (prov.count, prov.reviewers) == (7, ["ann", "bob"])
    md = (out / "filter_report.md").read_text(encoding="utf-8")
    assert "2 of 4 kept episodes were reviewed by a person" in md
    assert "would reject an estimated 50.0% of them (95% Wilson interval 15.0% to 85.0%" in md
    assert prov.sha256 in md
