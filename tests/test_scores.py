"""traces.scores: the one scoring reading (issue 18), checked on hand-computed values."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_golden import load_fixture

from rlmdistill.traces.runs import load_room_tasks, load_summaries, load_verdicts
from rlmdistill.traces.scores import (
    EpisodeKey,
    GraderChoiceError,
    memo_sha256,
    read_no_memo,
    resolve_grader,
    score_episodes,
)


def test_memo_hash_is_sha256_of_utf8_with_surrogates_kept() -> None:
    assert memo_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert memo_sha256("\ud800") != memo_sha256("?")  # a lone surrogate is hashed, not replaced


def test_read_no_memo_is_coverage_above_zero_without_memo() -> None:
    assert read_no_memo(0.2, has_memo=False) is True
    assert read_no_memo(0.0, has_memo=False) is False
    assert read_no_memo(0.2, has_memo=True) is False
    assert read_no_memo(None, has_memo=False) is None


def test_columnar_rows_and_summaries_score_alike_and_stale_verdicts_do_not_count(
    tmp_path: Path,
) -> None:
    ws = load_fixture(tmp_path)
    run = ws / "runs" / "base"
    summaries = load_summaries(run)
    tasks = load_room_tasks(run, summaries).tasks
    verdicts = load_verdicts(run, "reference")
    by_summary = score_episodes(summaries, verdicts, tasks)
    keys = [EpisodeKey(s.episode_id, s.room.room_hash, s.memo_sha256) for s in summaries]
    grouped: dict[str, list] = {}
    for v in verdicts:
        grouped.setdefault(v.episode_id, []).append(v)
    assert score_episodes(keys, grouped, tasks) == by_summary
    # b-be-1's verdicts grade an older memo: not graded (never 0); by hand: PPF, PFU, PF
    assert sorted(by_summary) == ["b-al-0", "b-al-1", "b-be-0"]
    a0 = by_summary["b-al-0"]
    assert a0.labels == ["PASS", "PASS", "FAIL"] and a0.weights == [1.0, 2.0, 1.0]
    assert a0.rates.pass_rate == 2 / 3 and a0.rates.weighted_pass_rate == 3 / 4
    a1 = by_summary["b-al-1"].rates
    assert (a1.n_pass, a1.n_fail, a1.n_ungradable, a1.graded_pass_rate) == (1, 1, 1, 0.5)


def test_resolve_grader_one_rule_for_every_stage() -> None:
    runs = {"r1": ["reference"], "r2": ["reference", "llm"]}
    with pytest.raises(
        GraderChoiceError, match=r"several graders have verdicts \(llm, reference\)"
    ):
        resolve_grader(runs)
    assert resolve_grader(runs, "llm") == "llm"  # present in one run: enough for a listing
    with pytest.raises(GraderChoiceError, match=r"grader 'llm' has no verdicts in r1"):
        resolve_grader(runs, "llm", required=True)
    with pytest.raises(GraderChoiceError, match=r"grader 'gpt' has no verdicts in r1, r2"):
        resolve_grader(runs, "gpt")
    assert resolve_grader({"r1": []}) is None
    with pytest.raises(GraderChoiceError, match="run `rlmdistill judge RUN` first"):
        resolve_grader({"r1": []}, required=True)
    assert resolve_grader({"r1": ["reference"]}) == "reference"
