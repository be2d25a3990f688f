"""The Review page's queue samplers (rlmdistill.dashboard.review_queue), on hand-built items
and on a synthetic run; expected orders and classes computed by hand below."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rlmdistill.dashboard.review_queue import (
    CalibrationCounts,
    QueueItem,
    calibration_counts,
    expected_widths,
    informative_class,
    queue_items,
    review_queue,
)
from rlmdistill.dashboard.runview import run_view
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run


def _item(eid: str, verdicts: str, other: str = "") -> QueueItem:
    """``verdicts``: one letter per criterion c0, c1, ... (P/F/U)."""
    full = {"P": "PASS", "F": "FAIL", "U": "UNGRADABLE"}
    return QueueItem(
        eid,
        {f"c{i}": full[v] for i, v in enumerate(verdicts)},
        {f"c{i}": full[v] for i, v in enumerate(other)},
    )


ITEMS = [_item("a", "PF"), _item("b", "FF"), _item("c", "PP"), _item("d", "UF"), _item("e", "FF")]


def test_random_is_the_seeded_permutation() -> None:
    expected = ["a", "b", "c", "d", "e"]
    random.Random(7).shuffle(expected)
    assert review_queue(ITEMS, "random", seed=7) == expected
    assert review_queue(ITEMS, "random", seed=7) == review_queue(ITEMS, "random", seed=7)
    assert sorted(review_queue(ITEMS, "random", seed=3)) == ["a", "b", "c", "d", "e"]


def test_stratified_alternates_pass_and_fail_strata() -> None:
    # PASS stratum (a PASS verdict): a, c; FAIL stratum: b, d, e. Taken in turn, PASS first:
    # P F P F F.
    q = review_queue(ITEMS, "stratified", seed=1)
    strata = ["P" if e in {"a", "c"} else "F" for e in q]
    assert strata == ["P", "F", "P", "F", "F"]
    assert sorted(q) == ["a", "b", "c", "d", "e"]


def test_disagreement_queues_only_disagreeing_episodes_most_first() -> None:
    items = [
        _item("one", "PF", "PP"),  # 1 criterion differs
        _item("none", "PF", "PF"),  # agree
        _item("two", "PF", "FP"),  # 2 differ
        _item("alone", "PF", ""),  # no second grader's verdicts
    ]
    assert review_queue(items, "disagreement", seed=0) == ["two", "one"]


def test_calibration_counts_join_labels_to_grader_verdicts() -> None:
    human = {("a", "c0"): "PASS", ("a", "c1"): "PASS", ("b", "c0"): "FAIL", ("d", "c0"): "FAIL"}
    # a: c0 grader PASS / person PASS; c1 grader FAIL / person PASS; b c0 FAIL/FAIL;
    # d c0 is the grader's UNGRADABLE: not a pass, so person FAIL / grader did not pass.
    # The grader graded 10 criteria and passed 3.
    assert calibration_counts(ITEMS, human) == CalibrationCounts(1, 1, 2, 0, 3, 10)


def test_informative_class_before_the_interval_is_defined_uses_the_delta_method() -> None:
    # Fewer than 3 labels of a person class: stats.corrected_pass_rate has no interval yet.
    # Few person-PASS labels: n1 = 2 (2 TP), n0 = 22 (20 TN, 2 FP), p = 0.5.
    # q1 = 3/4, q0 = 21/24 = 0.875, J = 0.625, theta = (0.5 + 0.875 - 1) / 0.625 = 0.6;
    # d1 = 0.36 * 0.75 * 0.25 * (1/3 - 1/4) = 0.005625, d0 = 0.16 * 0.875 * 0.125 / 552
    # = 3.2e-5; P(person PASS | grader PASS) = 0.6 * 0.75 / 0.5 = 0.9 -> 0.00507;
    # P(person PASS | grader FAIL) = 0.6 * 0.25 / 0.5 = 0.3 -> 0.00171: label grader PASS.
    assert informative_class(CalibrationCounts(2, 0, 20, 2, 50, 100)) == "PASS"
    # The mirror: n1 = 22, n0 = 2, theta = 0.4: 0.00171 (PASS) vs 0.00507 (FAIL).
    assert informative_class(CalibrationCounts(20, 2, 2, 0, 50, 100)) == "FAIL"


def test_informative_class_with_an_interval_asks_for_the_narrower_expected_interval() -> None:
    # 4 person-PASS labels (3 TP, 1 FN), 66 person-FAIL (60 TN, 6 FP), 30 of 100 passed:
    # stats.corrected_pass_rate gives theta = 0.317, q1 = 0.75, width 0.601. One more label
    # of a criterion the grader passed (a person's PASS with P = 0.317 * 0.75 / 0.3 = 0.79):
    # expected width 0.516; of one it did not pass: 0.623 -> PASS.
    assert expected_widths(CalibrationCounts(3, 1, 60, 6, 30, 100)) == pytest.approx(
        (0.5156, 0.6233), abs=1e-4
    )
    assert informative_class(CalibrationCounts(3, 1, 60, 6, 30, 100)) == "PASS"
    # the mirror image (classes and pass rate swapped) asks for the other class
    assert informative_class(CalibrationCounts(60, 6, 3, 1, 70, 100)) == "FAIL"


def test_informative_puts_reviewed_first_then_most_unlabelled_of_the_class() -> None:
    # 22 person-PASS labels, all on grader FAILs (x0..x10), no person FAIL: no interval yet
    # (no person FAIL), so the delta-method rule: q1 = 1/24, q0 = 1/2, J < 0 -> theta = 0.5;
    # m1 = 23, m0 = 1: d1 = 1.8e-5, d0 = 0.03125. p = 3/32 (3 passed of 32 graded):
    # P(person PASS | grader passed) = 0.5 / 24 / (3/32) = 0.222, P(person PASS | not passed)
    # = 0.5 * 23/24 / (29/32) = 0.529. A person FAIL is needed most, and a criterion the
    # grader passed is the likelier one: gains 0.778 d0 (PASS) > 0.471 d0 (FAIL).
    items = [*ITEMS, *[_item(f"x{i}", "FF") for i in range(11)]]
    human = {(f"x{i}", f"c{j}"): "PASS" for i in range(11) for j in range(2)}
    assert informative_class(calibration_counts(items, human)) == "PASS"
    q = review_queue(items, "informative", seed=0, human=human, reviewed=["e", "x3"])
    assert q[:2] == ["e", "x3"]
    # unlabelled grader-PASS criteria: c has 2, a has 1; everything else 0
    assert q[2:4] == ["c", "a"]
    assert sorted(q) == sorted(i.episode_id for i in items)


def test_unknown_sampler_names_the_choices() -> None:
    with pytest.raises(ValueError, match="random, stratified, disagreement, informative"):
        review_queue(ITEMS, "worst", seed=0)  # type: ignore[arg-type]


def test_queue_items_read_current_memo_verdicts_of_episodes_with_a_memo(tmp_path: Path) -> None:
    run = write_scored_run(
        tmp_path / "runs" / "r",
        [SyntheticRoom("room", n_criteria=3)],
        [
            SyntheticEpisode("e1", "room", n_pass=2),
            SyntheticEpisode("e2", "room", n_pass=0),
            SyntheticEpisode("e3", "room", memo=None, status="no_memo"),
        ],
    )
    items = queue_items(run_view(run), "reference")
    assert [i.episode_id for i in items] == ["e1", "e2"]
    assert items[0].verdicts == {"c0": "PASS", "c1": "PASS", "c2": "FAIL"}
    assert items[1].verdicts == {"c0": "FAIL", "c1": "FAIL", "c2": "FAIL"}
    assert items[0].other == {}
