"""Episode selection on synthetic runs (hand-computed expectations) and a collected run."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rlmdistill.analysis.summary import summarize_run
from rlmdistill.filter.report import build_report, size_bucket
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.filter.select import Selection, select_episodes
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces.runs import NotARunError
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.store import append_records

E = SyntheticEpisode
ROOM = SyntheticRoom("r4", n_documents=5, n_criteria=4)


def _by_id(sel: Selection) -> dict[str, object]:
    return {d.episode_id: d for d in sel.decisions}


def _kept(sel: Selection) -> list[str]:
    return [d.episode_id for d in sel.decisions if d.kept]


def _quantile_run(tmp_path: Path) -> Path:
    # pass rates 0.25, 0.5, 0.75, 1.0 (+ a timeout scoring 1.0 outside the quantile population)
    return write_scored_run(
        tmp_path / "runs" / "q",
        [ROOM],
        [
            E("a", "r4", n_pass=1, coverage=0.9),
            E("b", "r4", n_pass=2, coverage=0.8),
            E("c", "r4", n_pass=3, coverage=0.1),
            E("d", "r4", n_pass=4, coverage=0.2),
            E("t", "r4", n_pass=4, coverage=0.95, status="timeout"),
        ],
    )


def test_pass_rate_quantile_per_room_linear(tmp_path):
    """q=0.75 over eligible pass rates [0.25, 0.5, 0.75, 1.0], numpy 'linear' (type 7):
    h = 0.75 * 3 = 2.25 -> 0.75 + 0.25 * (1.0 - 0.75) = 0.8125; only d (1.0) reaches it."""
    run = _quantile_run(tmp_path)
    sel = select_episodes([run], FilterRules(min_pass_rate_quantile=0.75))
    (room,) = sel.rooms
    assert room.n_episodes == 5 and room.n_eligible == 4
    assert room.pass_rate_threshold == pytest.approx(0.8125)
    assert _kept(sel) == ["d"]
    c = _by_id(sel)["c"]
    assert c.primary_reason == "pass_rate"  # type: ignore[attr-defined]
    assert c.details["pass_rate"] == "pass_rate 0.75 < 0.8125 (room q0.75)"  # type: ignore[attr-defined]
    assert _by_id(sel)["t"].reasons == ["status"]  # type: ignore[attr-defined]


def test_quantile_method_lower_and_coverage_quantile(tmp_path):
    """'lower' picks the order statistic below: index floor(2.25) = 2 -> 0.75 (c and d kept).
    Coverage q=0.5 over eligible [0.9, 0.8, 0.1, 0.2] (linear) = (0.2 + 0.8) / 2 = 0.5."""
    run = _quantile_run(tmp_path)
    sel = select_episodes([run], FilterRules(min_pass_rate_quantile=0.75, quantile_method="lower"))
    assert sel.rooms[0].pass_rate_threshold == 0.75
    assert _kept(sel) == ["c", "d"]
    sel = select_episodes([run], FilterRules(min_coverage_quantile=0.5))
    assert sel.rooms[0].coverage_threshold == pytest.approx(0.5)
    assert _kept(sel) == ["a", "b"]
    assert _by_id(sel)["d"].details["coverage"] == "coverage 0.2 < 0.5 (room q0.5)"  # type: ignore[attr-defined]


def test_absolute_thresholds_are_inclusive_and_both_apply(tmp_path):
    run = _quantile_run(tmp_path)
    sel = select_episodes([run], FilterRules(min_pass_rate=0.5, min_coverage=0.2))
    assert _kept(sel) == ["b", "d"]  # c: coverage 0.1; a: pass rate 0.25
    sel = select_episodes([run], FilterRules(min_pass_rate=0.5, min_pass_rate_quantile=0.75))
    assert _kept(sel) == ["d"]
    sel = select_episodes(
        [run], FilterRules(pass_rate_field="graded_pass_rate", min_pass_rate=0.75)
    )
    assert _kept(sel) == ["c", "d"]


def test_top_k_per_room_ranks_by_score_then_coverage_then_episode_id(tmp_path):
    run = write_scored_run(
        tmp_path / "runs" / "k",
        [ROOM, SyntheticRoom("r1", n_documents=1, n_criteria=2)],
        [
            E("e5", "r4", n_pass=3, coverage=0.4),
            E("e2", "r4", n_pass=3, coverage=0.6),  # ties e5 on pass rate, wins on coverage
            E("e9", "r4", n_pass=2, coverage=0.9),
            E("e1", "r4", n_pass=None, coverage=1.0),  # ungraded: ranked last
            E("x2", "r1", n_pass=1, coverage=0.5),
            E("x1", "r1", n_pass=1, coverage=0.5),  # full tie: episode_id decides
        ],
    )
    sel = select_episodes([run], FilterRules(top_k_per_room=2))
    by = _by_id(sel)
    assert _kept(sel) == ["e5", "e2", "x2", "x1"]
    ranks = {i: by[i].rank_in_room for i in by}  # type: ignore[attr-defined]
    assert ranks == {"e2": 1, "e5": 2, "e9": 3, "e1": 4, "x1": 1, "x2": 2}
    assert by["e9"].reasons == ["top_k"]  # type: ignore[attr-defined]
    assert by["e9"].details["top_k"] == "rank 3 of 4 in room r4 (top 2 by pass_rate, coverage)"  # type: ignore[attr-defined]
    sel = select_episodes([run], FilterRules(top_k_per_room=1, rank_by=["coverage"]))
    assert _kept(sel) == ["e1", "x1"]
    sel = select_episodes([run], FilterRules(top_k_per_room=1))
    assert _kept(sel) == ["e2", "x1"]


def test_all_reasons_recorded_primary_is_first_in_rule_order(tmp_path):
    run = write_scored_run(
        tmp_path / "runs" / "r",
        [ROOM],
        [
            E("bad", "r4", n_pass=0, coverage=None, status="timeout", memo=None, n_turns=9),
            E("ok", "r4", n_pass=4, coverage=0.5, n_turns=3, n_sub_calls=5),
            E("few", "r4", n_pass=4, coverage=0.5, n_turns=3, n_sub_calls=0),
        ],
    )
    rules = FilterRules(
        max_turns=5, min_sub_calls=1, min_pass_rate=0.5, min_coverage=0.3, where=["depth == 2"]
    )
    by = _by_id(select_episodes([run], rules))
    bad = by["bad"]
    assert bad.reasons == [  # type: ignore[attr-defined]
        "status",
        "no_memo",
        "turns",
        "pass_rate",
        "no_coverage",
        "where",
    ]
    assert bad.primary_reason == "status"  # type: ignore[attr-defined]
    assert bad.details["turns"] == "n_turns 9 > 5"  # type: ignore[attr-defined]
    assert by["few"].reasons == ["sub_calls", "where"]  # type: ignore[attr-defined]
    assert by["ok"].reasons == ["where"]  # type: ignore[attr-defined]
    assert by["ok"].details["where"] == "false: 'depth == 2'"  # type: ignore[attr-defined]
    any_status = select_episodes([run], FilterRules(required_status=[], require_memo=False))
    assert _kept(any_status) == ["bad", "ok", "few"]


def test_where_on_missing_value_drops_with_detail(tmp_path):
    run = write_scored_run(
        tmp_path / "runs" / "w",
        [ROOM],
        [E("cov", "r4", n_pass=1, coverage=0.7), E("nocov", "r4", n_pass=1, coverage=None)],
    )
    sel = select_episodes([run], FilterRules(where=["coverage >= 0.5"]))
    assert _kept(sel) == ["cov"]
    detail = _by_id(sel)["nocov"].details["where"]  # type: ignore[attr-defined]
    assert detail == "false: 'coverage >= 0.5' (no value: coverage)"


def test_dedup_by_memo_keeps_best_ranked(tmp_path):
    run = write_scored_run(
        tmp_path / "runs" / "d",
        [ROOM],
        [
            E("low", "r4", n_pass=1, memo="same memo"),
            E("high", "r4", n_pass=3, memo="same memo"),
            E("other", "r4", n_pass=2),
            E("failed", "r4", n_pass=4, memo="same memo", status="timeout"),
        ],
    )
    sel = select_episodes([run], FilterRules())
    by = _by_id(sel)
    assert _kept(sel) == ["high", "other"]
    assert by["low"].reasons == ["duplicate"]  # type: ignore[attr-defined]
    assert by["low"].duplicate_of == "high"  # type: ignore[attr-defined]
    assert by["failed"].reasons == ["status"]  # dropped earlier: never a duplicate owner
    assert _kept(select_episodes([run], FilterRules(dedup=[]))) == ["low", "high", "other"]


def test_grader_resolution(tmp_path):
    run = _quantile_run(tmp_path)
    append_records(
        run / "verdicts" / "llm.jsonl",
        [
            Verdict(
                episode_id="a",
                grader="llm",
                grader_version="1",
                criterion_id=f"c{i}",
                verdict="PASS",
                reason="x",
                memo_sha256=hashlib.sha256(b"memo of a").hexdigest(),
            )
            for i in range(4)
        ],
    )
    with pytest.raises(FilterRuleError, match=r"several graders.*llm, reference.*--grader"):
        select_episodes([run], FilterRules())
    sel = select_episodes([run], FilterRules(grader="llm", min_pass_rate=1.0))
    assert sel.grader == "llm"
    assert _kept(sel) == ["a"]
    assert _by_id(sel)["b"].primary_reason == "ungraded"  # type: ignore[attr-defined]
    with pytest.raises(FilterRuleError, match=r"grader 'gpt' has no verdicts.*llm"):
        select_episodes([run], FilterRules(grader="gpt"))


def test_pass_rule_without_any_grader_says_to_judge(tmp_path):
    run = write_scored_run(tmp_path / "runs" / "u", [ROOM], [E("a", "r4")])
    with pytest.raises(FilterRuleError, match=r"no run has verdicts.*rlmdistill judge"):
        select_episodes([run], FilterRules(min_pass_rate=0.5))
    sel = select_episodes([run], FilterRules(min_coverage=0.4))
    assert sel.grader is None and _kept(sel) == ["a"]


def test_verdicts_of_another_memo_do_not_count(tmp_path):
    run = write_scored_run(tmp_path / "runs" / "m", [ROOM], [E("a", "r4", n_pass=4)])
    lines = (run / "episodes.jsonl").read_text(encoding="utf-8")
    old = hashlib.sha256(b"memo of a").hexdigest()
    (run / "episodes.jsonl").write_text(lines.replace(old, "0" * 64), encoding="utf-8")
    sel = select_episodes([run], FilterRules(min_pass_rate=0.1))
    assert _by_id(sel)["a"].reasons == ["ungraded"]  # type: ignore[attr-defined]


def test_two_runs_pool_one_room_and_refuse_repeats(tmp_path):
    rooms = tmp_path / "rooms"
    a = write_scored_run(
        tmp_path / "runs" / "a", [ROOM], [E("a1", "r4", n_pass=1)], rooms_dir=rooms
    )
    b = write_scored_run(
        tmp_path / "runs" / "b",
        [ROOM],
        [E("b1", "r4", n_pass=2), E("b2", "r4", n_pass=4)],
        rooms_dir=rooms,
    )
    sel = select_episodes([a, b], FilterRules(min_pass_rate_quantile=0.5))
    assert len(sel.rooms) == 1 and sel.rooms[0].n_episodes == 3
    assert sel.rooms[0].pass_rate_threshold == pytest.approx(0.5)
    assert _kept(sel) == ["b1", "b2"]
    assert [r.run_id for r in sel.runs] == ["a", "b"]
    assert sel.kept[0].run_dir == b
    with pytest.raises(FilterRuleError, match="given twice"):
        select_episodes([a, a], FilterRules())
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(a, copy)
    with pytest.raises(FilterRuleError, match="same run id a"):
        select_episodes([a, copy], FilterRules())
    with pytest.raises(NotARunError):
        select_episodes([tmp_path], FilterRules())


def test_rooms_without_a_usable_task_warn_or_refuse_pass_rules(tmp_path):
    """A room whose task.json is gone or is another task than its episodes ran has no pass
    rates: a warning when no rule needs them, an error naming run, room and file otherwise."""
    rooms = [SyntheticRoom(n, n_criteria=2) for n in ("ok", "gone", "changed")]
    run = write_scored_run(
        tmp_path / "runs" / "t",
        rooms,
        [E("e-ok", "ok", n_pass=1), E("e-gone", "gone", n_pass=2), E("e-changed", "changed", 2)],
    )
    base = tmp_path / "runs" / "rooms"
    (base / "gone" / "task.json").unlink()
    task = json.loads((base / "changed" / "task.json").read_text(encoding="utf-8"))
    task["id"] = "task-new"
    (base / "changed" / "task.json").write_text(json.dumps(task), encoding="utf-8")
    sel = select_episodes([run], FilterRules(min_coverage=0.1))
    assert {d.episode_id: d.pass_rate for d in sel.decisions} == {
        "e-ok": 0.5,
        "e-gone": None,
        "e-changed": None,
    }
    assert sel.runs[0].warnings == [
        f"room gone: {base / 'gone' / 'task.json'}: task file not found; "
        "its episodes have no pass rate",
        f"room changed: {base / 'changed' / 'task.json'}: task task-new, but the run's "
        "episodes in room changed ran task-changed; its episodes have no pass rate",
    ]
    with pytest.raises(
        FilterRuleError,
        match=rf"run {run}, room gone: cannot compute pass rates without the room's task: "
        rf".*gone/task\.json: task file not found",
    ):
        select_episodes([run], FilterRules(min_pass_rate=0.5))
    (base / "gone").mkdir(exist_ok=True)
    (base / "gone" / "task.json").write_text("[]", encoding="utf-8")
    with pytest.raises(FilterRuleError, match=r"room gone: .*a task must be a JSON object"):
        select_episodes([run], FilterRules(min_pass_rate=0.5))
    task["id"] = "task-gone"
    (base / "gone" / "task.json").write_text(json.dumps(task), encoding="utf-8")
    with pytest.raises(FilterRuleError, match=r"room changed: .*task task-new, but the run's"):
        select_episodes([run], FilterRules(min_pass_rate=0.5))


def test_report_counts_buckets_and_distributions(tmp_path):
    run = write_scored_run(
        tmp_path / "runs" / "rep",
        [ROOM, SyntheticRoom("big", n_documents=300, n_criteria=2)],
        [
            E("a", "r4", n_pass=1, coverage=0.2),
            E("b", "r4", n_pass=4, coverage=0.6),
            E("c", "r4", n_pass=4, coverage=0.8, status="timeout"),
            E("x", "big", n_pass=2, coverage=0.4),
            E("y", "big", n_pass=0, coverage=None),
        ],
    )
    report = build_report(select_episodes([run], FilterRules(min_pass_rate=0.5)))
    assert (report.n_total, report.n_kept, report.n_dropped) == (5, 2, 3)
    assert report.dropped_by_reason == {"status": 1, "pass_rate": 2}
    assert report.failed_by_rule == {"status": 1, "pass_rate": 2}
    assert [(b.size_bucket, b.n_total, b.n_kept) for b in report.size_buckets] == [
        ("4-7", 3, 1),
        ("256-511", 2, 1),
    ]
    before = report.pass_rate.before
    assert before.n == 5 and before.mean == pytest.approx((0.25 + 1 + 1 + 1 + 0) / 5)
    assert before.quantiles["0.5"] == 1.0
    after = report.pass_rate.after
    assert after.n == 2 and after.mean == 1.0 and after.sd == 0.0
    assert report.coverage.before.n == 4 and report.coverage.before.n_missing == 1
    assert report.coverage.after.mean == pytest.approx(0.5)
    assert [r.room_id for r in report.rooms] == ["r4", "big"]
    assert report.rooms[1].dropped == {"pass_rate": 1}


@pytest.mark.parametrize(
    ("n", "label"), [(0, "0"), (1, "1"), (2, "2-3"), (3, "2-3"), (4, "4-7"), (300, "256-511")]
)
def test_size_bucket(n, label):
    assert size_bucket(n) == label


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_collected_run_scores_match_run_summary_and_nothing_written(collected_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    before = _tree_bytes(run)
    sel = select_episodes([run], FilterRules(dedup=[]))
    assert _tree_bytes(run) == before
    assert sel.grader == "reference"
    expected = summarize_run(run).graders[0].per_episode
    assert {d.episode_id: d.pass_rate for d in sel.decisions} == expected
    assert sel.n_kept == 2
    assert all(d.coverage is not None and d.coverage > 0 for d in sel.decisions)


def test_collected_run_duplicates_by_completions_case_r4(collected_run, tmp_path):
    """The scripted root writes the same completions in both episodes: dedup on root
    completions (read from the root turns only, never sub-calls, case R4) keeps one."""
    sel = select_episodes([collected_run], FilterRules(dedup=["completions"]))
    assert sel.n_kept == 1
    dropped = [d for d in sel.decisions if not d.kept]
    assert [d.reasons for d in dropped] == [["duplicate"]]
    assert dropped[0].details["duplicate"].startswith("same completions as ")
