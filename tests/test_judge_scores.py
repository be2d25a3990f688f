"""traces.scores.run_scores: the per-episode reading from verdicts to pass rates."""

from __future__ import annotations

from pathlib import Path

from rlmdistill.filter.rules import FilterRules
from rlmdistill.filter.select import select_episodes
from rlmdistill.traces.runs import load_verdicts
from rlmdistill.traces.scores import run_scores


def test_run_scores_agree_with_filter_and_verdict_file(collected_run: Path) -> None:
    rs = run_scores(collected_run, "reference")
    assert (
        rs.problems == []
        and len(rs.summaries) == 2
        and set(rs.scores) == {s.episode_id for s in rs.summaries}
    )
    verdicts = load_verdicts(collected_run, "reference")
    selection = select_episodes([collected_run], FilterRules())
    by_id = {d.episode_id: d for d in selection.decisions}
    for eid, score in rs.scores.items():
        mine = {v.criterion_id: v.verdict for v in verdicts if v.episode_id == eid}
        # labels are the verdict file's, in rubric order, one per criterion
        assert score.labels == [mine.get(c, "MISSING") for c in score.criterion_ids]
        n_pass = score.labels.count("PASS")
        assert score.rates.n_pass == n_pass
        assert score.rates.pass_rate == n_pass / len(score.criterion_ids)
        assert by_id[eid].pass_rate == score.rates.pass_rate


def test_unknown_grader_scores_nothing(collected_run: Path) -> None:
    rs = run_scores(collected_run, "no-such-grader")
    assert rs.scores == {} and len(rs.summaries) == 2
