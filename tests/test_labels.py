"""People's labels (``runs/<run>/labels.jsonl``): schema, checks against the run, staleness,
latest-wins, torn tail, and two processes appending at once."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing as mp
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces import labels as lb
from rlmdistill.traces import layout
from rlmdistill.traces.store import append_records

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _run(tmp_path: Path) -> Path:
    return write_scored_run(
        tmp_path / "runs" / "r",
        [SyntheticRoom("a", n_criteria=3)],
        [SyntheticEpisode("e0", "a", n_pass=1), SyntheticEpisode("e1", "a", n_pass=2)],
    )


def _label(
    eid: str = "e0",
    cid: str | None = "c0",
    verdict: str = "PASS",
    *,
    reviewer: str = "ann",
    memo: str | None = "memo of e0",
    tags: list[str] | None = None,
    time: dt.datetime = T0,
) -> lb.Label:
    return lb.Label(
        episode_id=eid,
        memo_hash=lb.memo_hash(memo),
        target="episode" if cid is None else "criterion",
        criterion_id=cid,
        verdict=verdict,  # type: ignore[arg-type]
        tags=tags or [],
        reviewer=reviewer,
        time=time,
    )


def test_round_trip_and_memo_hash(tmp_path: Path) -> None:
    run = _run(tmp_path)
    a = _label(tags=["wrong amount"])
    b = _label(cid=None, verdict="reject", tags=["no next step"])
    lb.append_labels(run, [a, b])
    assert lb.read_labels(run) == [a, b]
    assert (run / "labels.jsonl") == layout.labels_path(run)
    # the memo hash is the memo's sha256, the same key verdicts carry
    import hashlib

    assert a.memo_hash == hashlib.sha256(b"memo of e0").hexdigest()
    assert lb.memo_hash(None) == lb.NO_MEMO_HASH


def test_schema_refuses_naive_time_and_mismatched_verdict() -> None:
    with pytest.raises(ValidationError, match="timezone"):
        _label(time=dt.datetime(2026, 1, 1))
    with pytest.raises(ValidationError, match="not one of a criterion label's"):
        _label(verdict="keep")
    with pytest.raises(ValidationError, match="not one of a episode label's"):
        _label(cid=None, verdict="PASS")
    with pytest.raises(ValidationError, match="criterion_id must be empty"):
        lb.Label(
            episode_id="e0",
            memo_hash="x",
            target="episode",
            criterion_id="c0",
            verdict="keep",
            reviewer="ann",
            time=T0,
        )


def test_unknown_episode_or_criterion_writes_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with pytest.raises(lb.LabelsError, match=r"unknown episode 'e9'.*nothing written"):
        lb.append_labels(run, [_label(), _label("e9")])
    assert not layout.labels_path(run).exists()
    with pytest.raises(lb.LabelsError, match=r"unknown criterion 'c7'; .* has c0, c1, c2"):
        lb.append_labels(run, [_label(), _label(cid="c7")])
    assert not layout.labels_path(run).exists()


def test_unknown_tag_lists_allowed_tags(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with pytest.raises(lb.LabelsError) as info:
        lb.append_labels(run, [_label(tags=["typo"])])
    assert "unknown tag(s) 'typo'" in str(info.value)
    assert "allowed tags: " + ", ".join(lb.DEFAULT_TAGS) in str(info.value)
    assert not layout.labels_path(run).exists()
    # a run's own list replaces the defaults
    (run / layout.LABELS_TAGS).write_text("# ours\nhallucination\n\ntypo\n", encoding="utf-8")
    assert lb.allowed_tags(run) == ("hallucination", "typo")
    lb.append_labels(run, [_label(tags=["typo"])])
    with pytest.raises(lb.LabelsError, match="allowed tags: hallucination, typo"):
        lb.append_labels(run, [_label(tags=["wrong amount"])])
    assert len(lb.read_labels(run)) == 1


def test_label_on_older_memo_is_kept_and_stale(tmp_path: Path) -> None:
    run = _run(tmp_path)
    old = _label(memo="an earlier memo of e0")
    lb.append_labels(run, [old])
    (got,) = lb.read_labels(run)
    assert got == old
    assert lb.is_stale(got, lb.memo_hash("memo of e0"))
    assert not lb.is_stale(_label(), lb.memo_hash("memo of e0"))


def test_latest_label_wins_ties_by_file_order() -> None:
    first = _label(verdict="PASS", time=T0)
    later = _label(verdict="FAIL", time=T0 + dt.timedelta(seconds=1))
    tie = _label(verdict="UNGRADABLE", time=T0 + dt.timedelta(seconds=1))
    other = _label(verdict="PASS", reviewer="bob")
    got = lb.latest_labels([later, first, tie, other])
    assert got[("ann", "e0", "criterion", "c0")].verdict == "UNGRADABLE"
    assert got[("bob", "e0", "criterion", "c0")].verdict == "PASS"
    assert len(got) == 2


def test_torn_tail_is_skipped_then_closed(tmp_path: Path) -> None:
    run = _run(tmp_path)
    lb.append_labels(run, [_label()])
    with layout.labels_path(run).open("a", encoding="utf-8") as fh:
        fh.write('{"schema_version":1,"episode_id":"e0","memo_ha')  # a crash mid-write
    assert len(lb.read_labels(run)) == 1
    lb.append_labels(run, [_label(verdict="FAIL")])
    assert [x.verdict for x in lb.read_labels(run)] == ["PASS", "FAIL"]


def test_newer_schema_is_refused_naming_the_file(tmp_path: Path) -> None:
    run = _run(tmp_path)
    data = _label().model_dump(mode="json") | {"schema_version": 2}
    append_records(layout.labels_path(run), [data])
    with pytest.raises(lb.LabelsError, match=r"(?s)labels.jsonl: record 1 .*newer"):
        lb.read_labels(run)


def test_provenance_counts_reviewers_and_hash(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert lb.labels_provenance(run) is None
    lb.append_labels(run, [_label(), _label(reviewer="bob"), _label(cid="c1")])
    import hashlib

    prov = lb.labels_provenance(run)
    assert prov is not None
    assert (prov.count, prov.reviewers) == (3, ["ann", "bob"])
    assert prov.sha256 == hashlib.sha256(layout.labels_path(run).read_bytes()).hexdigest()


def _writer(run: str, reviewer: str, n: int, start: mp.synchronize.Event) -> None:
    start.wait()
    for i in range(n):
        label = lb.Label(
            episode_id=f"e{i % 2}",
            memo_hash=lb.memo_hash(f"memo of e{i % 2}"),
            target="criterion",
            criterion_id=f"c{i % 3}",
            verdict="PASS",
            note=f"{reviewer}-{i}" + "x" * 200,  # long lines: a torn write would show
            reviewer=reviewer,
            time=T0,
        )
        lb.append_labels(Path(run), [label])


def test_two_processes_append_500_labels_each(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(run), who, 500, start)) for who in "ab"]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    lines = layout.labels_path(run).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1000
    notes = [json.loads(line)["note"].rstrip("x") for line in lines]  # every line parses
    assert sorted(notes) == sorted(f"{w}-{i}" for w in "ab" for i in range(500))
    assert len(lb.read_labels(run)) == 1000
