"""The Review page under ``streamlit.testing.v1.AppTest`` (no browser): the disagreement queue
over two graders, labels written by the page's buttons with the memo hash and the reviewer,
the focus moving on, refused labels shown and not written, and a room without a task."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE
from rlmdistill.dashboard.pages_review import calibration_table
from rlmdistill.dashboard.review_queue import queue_items, review_queue
from rlmdistill.dashboard.runview import RunView
from rlmdistill.testing.scored_runs import (
    SyntheticEpisode,
    SyntheticRoom,
    write_scored_run,
    write_task_problem_run,
)
from rlmdistill.traces import labels as lb
from rlmdistill.traces import layout
from rlmdistill.traces.runs import load_summaries
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.store import append_records

APP = str(Path(app_module.__file__))


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``runs/r``: 4 episodes of one 3-criterion room graded by ``reference`` (e1 2 PASS, e2 1,
    e3 0, e4 3) and by ``llm``, which agrees on e1 and e4, differs on c0 of e2 and on c0 and
    c1 of e3."""
    run = write_scored_run(
        tmp_path / "runs" / "r",
        [SyntheticRoom("room", n_criteria=3)],
        [
            SyntheticEpisode("e1", "room", n_pass=2),
            SyntheticEpisode("e2", "room", n_pass=1),
            SyntheticEpisode("e3", "room", n_pass=0),
            SyntheticEpisode("e4", "room", n_pass=3),
        ],
    )
    llm = {"e1": "PPF", "e2": "FFF", "e3": "PPF", "e4": "PPP"}
    memo = {s.episode_id: s.memo_sha256 for s in load_summaries(run)}
    append_records(
        layout.verdicts_path(run, "llm"),
        [
            Verdict(
                episode_id=eid,
                grader="llm",
                grader_version="1",
                criterion_id=f"c{i}",
                verdict="PASS" if v == "P" else "FAIL",
                reason=f"llm says {v}",
                memo_sha256=memo[eid],
            )
            for eid, vs in llm.items()
            for i, v in enumerate(vs)
        ],
    )
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    return run


def _open(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.query_params["page"] = "review"
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown) + "\n".join(c.value for c in at.caption)


def test_disagreement_queue_shows_the_most_disagreeing_episode_first(run: Path) -> None:
    at = _open(run="r")
    at.selectbox(key="rv_sampler").set_value("disagreement").run()
    assert [i.value for i in at.info] == [
        "The disagreement queue needs two different graders (Grader, Second grader)."
    ]
    at.selectbox(key="rv_other").set_value("llm").run()
    assert not at.exception
    text = _text(at)
    assert "episode **1** of 2 · `e3`" in text  # e3 differs on 2 criteria, e2 on 1
    assert "llm says P" in text and "`FAIL` (reference): synthetic" in text
    at.button(key="rv_n").click().run()
    assert "episode **2** of 2 · `e2`" in _text(at)


def test_buttons_write_labels_for_the_memo_shown_and_move_the_focus(run: Path) -> None:
    at = _open(run="r", reviewer="ann")
    first = review_queue(queue_items(RunView(run, "t"), "reference"), "random", seed=0)[0]
    assert f"episode **1** of 4 · `{first}`" in _text(at)
    assert "focused criterion: **c0**" in _text(at)
    at.button(key="rv_p").click().run()  # what the key p clicks
    assert "focused criterion: **c1**" in _text(at)
    at.button(key="rv_c2_UNGRADABLE").click().run()  # a card's own button
    at.button(key="rv_r").click().run()
    assert not at.exception
    memo = next(s.memo for s in load_summaries(run) if s.episode_id == first)
    got = lb.read_labels(run)
    assert [(x.episode_id, x.target, x.criterion_id, x.verdict) for x in got] == [
        (first, "criterion", "c0", "PASS"),
        (first, "criterion", "c2", "UNGRADABLE"),
        (first, "episode", None, "reject"),
    ]
    assert {x.memo_hash for x in got} == {lb.memo_hash(memo)}
    assert {x.reviewer for x in got} == {"ann"}
    text = _text(at)
    assert [p.proto.text for p in at.get("progress")] == ["labelled 1 / queue 4"]
    assert "your label: **PASS**" in text and "your label: **UNGRADABLE**" in text
    assert "episode: **reject**" in text


def test_a_label_without_reviewer_is_refused_and_nothing_is_written(run: Path) -> None:
    at = _open(run="r")
    at.text_input(key="rv_reviewer").set_value("").run()
    at.button(key="rv_k").click().run()
    assert [e.value for e in at.error] == ["Type a reviewer name first (the Reviewer box above)."]
    assert not (run / "labels.jsonl").exists()


def test_a_room_without_task_can_be_kept_but_its_criteria_not_labelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_task_problem_run(tmp_path / "runs" / "p")
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    at = _open(run="p", reviewer="ann")
    queue = review_queue(
        queue_items(RunView(tmp_path / "runs" / "p", "t"), "reference"), "random", seed=0
    )
    for _ in queue:
        eid = queue[[f"`{e}`" in _text(at) for e in queue].index(True)]
        if eid != "e-ok":
            assert any("has no usable task.json" in w.value for w in at.warning)
            assert at.button(key="rv_p").disabled
        else:
            assert not at.warning and not at.button(key="rv_p").disabled
        at.button(key="rv_k").click().run()
        at.button(key="rv_n").click().run()
    assert sorted(x.episode_id for x in lb.read_labels(tmp_path / "runs" / "p")) == sorted(queue)


def test_tags_go_with_the_label_and_an_older_memos_label_shows_stale(run: Path) -> None:
    first = review_queue(queue_items(RunView(run, "t"), "reference"), "random", seed=0)[0]
    old = lb.Label(
        episode_id=first,
        memo_hash="0" * 64,  # an earlier memo of the episode
        target="criterion",
        criterion_id="c1",
        verdict="FAIL",
        reviewer="ann",
        time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    lb.append_labels(run, [old])
    at = _open(run="r", reviewer="ann")
    assert "your label: **FAIL** · **stale** (given for an older memo)" in _text(at)
    # stale: not a decision on the memo shown, so c1's evidence stays hidden in blind mode
    hidden = [c for c in at.caption if c.value.startswith("Gold evidence hidden")]
    assert len(hidden) == 3
    assert next(p.proto.text for p in at.get("progress")) == "labelled 0 / queue 4"
    at.multiselect(key=f"rv_tags_{first}_c0").set_value(["invented clause", "other"]).run()
    at.text_input(key=f"rv_note_{first}_c0").set_value("quotes another clause").run()
    at.button(key="rv_f").click().run()
    got = lb.read_labels(run)[-1]
    assert (got.criterion_id, got.verdict, got.tags, got.note) == (
        "c0",
        "FAIL",
        ["invented clause", "other"],
        "quotes another clause",
    )
    assert "your label: **FAIL** · invented clause, other" in _text(at)


def test_a_labels_file_that_does_not_read_is_an_error_naming_it(run: Path) -> None:
    (run / "labels.jsonl").write_text('{"schema_version": 1, "episode_id": "e1"}\n')
    at = _open(run="r")
    assert len(at.error) == 1 and str(run / "labels.jsonl") in at.error[0].value
    assert "record 1 is not a valid label" in at.error[0].value


def test_calibration_table_counts_labels_against_each_grader(run: Path) -> None:
    # reference: e1 PPF, e2 PFF, e3 FFF, e4 PPP -> 6 PASS of 12 criteria (raw 50%).
    # Person PASS on e1 c0, e1 c1, e4 c0 (grader PASS) and e2 c1 (grader FAIL): q1 = 3/4;
    # person FAIL on e3 c0, e3 c1, e2 c2 (grader FAIL) and e4 c2 (grader PASS): q0 = 3/4.
    # Rogan-Gladen: (0.5 + 0.75 - 1) / (0.75 + 0.75 - 1) = 0.5. Wilson 95% of 3/4:
    # centre (3 + 1.92) / (4 + 3.84) = 0.6275, half-width 1.96 sqrt(3/64 + 3.84/64) / 1.96
    # = 0.3269 -> [30.1%, 95.4%].
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    memo = {s.episode_id: s.memo for s in load_summaries(run)}
    marks = {("e1", "c0"): "PASS", ("e1", "c1"): "PASS", ("e4", "c0"): "PASS",
             ("e2", "c1"): "PASS", ("e3", "c0"): "FAIL", ("e3", "c1"): "FAIL",
             ("e2", "c2"): "FAIL", ("e4", "c2"): "FAIL"}  # fmt: skip
    lb.append_labels(
        run,
        [
            lb.Label(
                episode_id=e,
                memo_hash=lb.memo_hash(memo[e]),
                target="criterion",
                criterion_id=c,
                verdict=v,  # type: ignore[arg-type]
                reviewer="ann",
                time=when,
            )
            for (e, c), v in marks.items()
        ],
    )
    table = calibration_table(run, ["reference"])
    # the synthetic verdicts have no criterion type: one "unknown" row, then "all"
    assert list(table["criterion type"]) == ["unknown", "all"]
    row = table.iloc[1].to_dict()
    assert row["n"] == 8
    assert row["sensitivity"] == row["specificity"] == "75.0% [30.1%, 95.4%]"
    # kappa of [[3, 1], [1, 3]]: observed 6/8 = 0.75, chance (4*4 + 4*4) / 64 = 0.5,
    # (0.75 - 0.5) / (1 - 0.5) = 0.5
    assert row["kappa"] == "0.500"
    assert row["raw pass rate"] == "50.0% of 12"
    assert row["corrected pass rate"].startswith("50.0% [")
    assert table.iloc[0]["corrected pass rate"] == ""
    at = _open(run="r")
    shown = next(d.value for d in at.dataframe if "corrected pass rate" in d.value.columns)
    assert list(shown["grader"]) == ["llm", "llm", "reference", "reference"]
    assert shown.iloc[3].to_dict() == row
