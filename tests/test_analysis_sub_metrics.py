"""Sub-call metrics of the report: per episode and per arm, hand-computed.

The run is a copy of ``collected_run`` (2 episodes of the 3-contract CUAD room; each root
sends 3 sub-calls whose answer is the fixed 64-character sentence :data:`SENTENCE`, and pastes
the 3 answers into its memo, one under a heading per document). The copy is edited:

- episode 0: call 0 keeps its answer (in the memo: used); call 1 answers with a verbatim
  span of a contract of the room (quotes the room, not in the memo); call 2 failed (error, no
  response). The grader's verdict of a criterion about that contract is turned to PASS, so
  call 0, whose answer reached the memo paragraph under the contract's heading, supports a
  passed criterion.
- episode 1: no sub-calls at all (its records and counts removed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlmdistill.analysis.main import ReportConfig
from rlmdistill.analysis.main import run as report_stage
from rlmdistill.analysis.metrics import EpisodeMetrics, load_run_metrics
from rlmdistill.analysis.sections import SUB_CALL_ERROR_METRIC, SUB_CALL_METRICS
from rlmdistill.rooms.room import DataRoom

SENTENCE = "The agreement may not be assigned without prior written consent."


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def _target(room: Path) -> tuple[str, str]:
    """``(criterion id, 120-character quote)``: the room's first criterion with evidence
    whose document is long enough, and 120 characters of that document, whitespace runs made
    single spaces (normalised length 120, well above the 79 from which the probe always finds
    it). The room is built from whichever CUAD source the tests have (the shared subset or
    the packaged sample), so neither is named here."""
    loaded = DataRoom.load(room)
    assert loaded.task is not None
    texts = {d.id: " ".join(d.text.split()) for d in loaded.documents}
    for c in loaded.task.criteria:
        docs = c.evidence.documents if c.evidence is not None else []
        if docs and len(texts.get(docs[0], "")) >= 2120:
            return c.id, texts[docs[0]][2000:2120]
    raise AssertionError(f"{room}: no criterion with a long enough evidence document")


def _edited_run(collected_run: Path, dest: Path) -> tuple[Path, str]:
    """The edited copy (module docstring) and the quote of call 1."""
    run = dest / "tuned"
    shutil.copytree(collected_run, run)
    summaries = _lines(run / "episodes.jsonl")
    e0, e1 = summaries[0], summaries[1]
    passed, quote = _target(Path(e0["room"]["path"]))
    assert len(quote) == 120 and quote not in e0["memo"]
    for e, edit in ((e0, "edit"), (e1, "drop")):
        path = next((run / "trajectories").glob(e["episode_id"] + "*"))
        records = []
        for rec in _lines(path):
            if rec["record_type"] == "sub_call":
                assert rec["response"] == SENTENCE
                if edit == "drop":
                    continue
                if rec["call_id"] == 1:
                    rec["response"] = quote
                elif rec["call_id"] == 2:
                    rec["response"], rec["error"], rec["error_kind"] = None, "timed out", "timeout"
            records.append(rec)
        _write(path, records)
    e0["n_sub_call_errors"] = 1
    e1["n_sub_calls"] = e1["n_sub_call_errors"] = 0
    _write(run / "episodes.jsonl", summaries)
    verdicts = _lines(run / "verdicts" / "reference.jsonl")
    for v in verdicts:
        assert v["verdict"] == "FAIL"
        if v["episode_id"] == e0["episode_id"] and v["criterion_id"] == passed:
            v["verdict"] = "PASS"
    _write(run / "verdicts" / "reference.jsonl", verdicts)
    return run, quote


def _sub(row: EpisodeMetrics) -> dict[str, float | None]:
    return {m.name: m.get(row) for m in SUB_CALL_METRICS}


def test_per_episode_sub_call_metrics(collected_run, tmp_path):
    run, quote = _edited_run(collected_run, tmp_path)
    rows = load_run_metrics(run, row_cache=False).rows
    # episode 0: answers are calls 0 (64 chars) and 1 (120 chars); call 1 quotes the room;
    # call 0 alone is used (1 of 3 calls) and supports the passed criterion
    assert rows[0].n_sub_answers == 2
    assert _sub(rows[0]) == {
        "sub_call_error_share": 1 / 3,
        "sub_answer_chars": (64 + 120) / 2,
        "sub_answer_quote_share": 0.5,
        "sub_used_share": 1 / 3,
        "sub_supports_pass_share": 1 / 3,
    }
    # episode 1: no sub-call, so no value for any of them (left out, not 0)
    assert rows[1].n_sub_answers == 0
    assert set(_sub(rows[1]).values()) == {None}
    # the original run: every answer is the sentence, pasted into the memo; nothing passed
    for row in load_run_metrics(collected_run, row_cache=False).rows:
        assert row.n_sub_answers == 3
        assert _sub(row) == {
            "sub_call_error_share": 0.0,
            "sub_answer_chars": 64.0,
            "sub_answer_quote_share": 0.0,
            "sub_used_share": 1.0,
            "sub_supports_pass_share": 0.0,
        }
    assert SUB_CALL_ERROR_METRIC in SUB_CALL_METRICS
    assert len(quote) == 120


def test_without_the_room_or_verdicts_those_shares_have_no_value(collected_run, tmp_path):
    run, _ = _edited_run(collected_run, tmp_path)
    # the room's folder gone: no documents to quote, no task (so no pass rate either)
    summaries = _lines(run / "episodes.jsonl")
    for e in summaries:
        e["room"]["path"] = "/nonexistent/rooms/cuad3"
    _write(run / "episodes.jsonl", summaries)
    manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
    for r in manifest["rooms"]:
        r["path"] = "/nonexistent/rooms/cuad3"
    (run / "run.json").write_text(json.dumps(manifest), encoding="utf-8")
    row = load_run_metrics(run, row_cache=False).rows[0]
    assert row.pass_rate is None
    assert _sub(row) == {
        "sub_call_error_share": 1 / 3,
        "sub_answer_chars": 92.0,
        "sub_answer_quote_share": None,
        "sub_used_share": 1 / 3,
        "sub_supports_pass_share": None,
    }


def test_trajectory_cache_keeps_the_values_and_verdicts_still_count(collected_run, tmp_path):
    run, _ = _edited_run(collected_run, tmp_path)
    cache = tmp_path / "traj.json"
    first = load_run_metrics(run, row_cache=False, trajectory_cache=cache).rows
    assert cache.is_file()
    # regraded with everything FAIL: the cached trajectory fields give 0 supports
    path = run / "verdicts" / "reference.jsonl"
    _write(path, [{**v, "verdict": "FAIL"} for v in _lines(path)])
    again = load_run_metrics(run, row_cache=False, trajectory_cache=cache).rows
    assert first[0].sub_supports_pass_share == pytest.approx(1 / 3)
    assert again[0].sub_supports_pass_share == 0.0
    assert again[0].sub_used_share == first[0].sub_used_share == pytest.approx(1 / 3)


def test_per_arm_means_and_paired_differences(collected_run, tmp_path):
    run, _ = _edited_run(collected_run, tmp_path)
    out = tmp_path / "report"
    report_stage(
        ReportConfig(runs=[collected_run, run], labels=["base", "tuned"], out=out, draw=False)
    )
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))

    def arm(label: str) -> dict[str, dict]:
        return {m["metric"]: m for m in report["per_arm"][label]}

    base, tuned = arm("base"), arm("tuned")
    # one room: the arm's mean of room means is the room's mean over its episodes with a
    # value (tuned: episode 0 alone, episode 1 has no sub-call)
    want_base = {
        "sub_call_error_share": 0.0,
        "sub_answer_chars": 64.0,
        "sub_answer_quote_share": 0.0,
        "sub_used_share": 1.0,
        "sub_supports_pass_share": 0.0,
    }
    want_tuned = {
        "sub_call_error_share": 1 / 3,
        "sub_answer_chars": 92.0,
        "sub_answer_quote_share": 0.5,
        "sub_used_share": 1 / 3,
        "sub_supports_pass_share": 1 / 3,
    }
    for name in want_base:
        assert base[name]["episodes"]["n"] == 2
        assert tuned[name]["episodes"]["n"] == 1
        assert base[name]["mean"]["value"] == pytest.approx(want_base[name])
        assert tuned[name]["mean"]["value"] == pytest.approx(want_tuned[name])
        assert base[name]["mean"]["unit"] == "rooms"
        assert base[name]["mean"]["reason"]  # one room: no interval, and it says why
    (comparison,) = report["comparisons"]
    diffs = {r["metric"]: r["paired"]["mean_difference"]["value"] for r in comparison["rows"]}
    for name in want_base:
        assert diffs[name] == pytest.approx(want_tuned[name] - want_base[name])
    for name in want_base:
        assert "no value" in report["metric_descriptions"][name] or name == "sub_call_error_share"
    assert "characters" in report["metric_descriptions"]["sub_answer_chars"]
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "sub_supports_pass_share" in md


def test_rows_agree_with_the_credit_of_the_validated_records(collected_run, tmp_path):
    """The report computes the credit on light tuples and all-PASS verdicts, then keeps the
    criteria that passed; the same shares come from :func:`sub_call_credit` on the validated
    records with the grader's verdicts of the current memo."""
    from rlmdistill.rooms.task import load_task
    from rlmdistill.traces.runs import load_trajectory, load_verdicts
    from rlmdistill.traces.sub_credit import sub_call_credit

    run, _ = _edited_run(collected_run, tmp_path)
    rows = {r.episode_id: r for r in load_run_metrics(run, row_cache=False).rows}
    summaries = {e["episode_id"]: e for e in _lines(run / "episodes.jsonl")}
    verdicts = load_verdicts(run, "reference")
    for episode_id, row in rows.items():
        e = summaries[episode_id]
        task = load_task(Path(e["room"]["path"]) / "task.json")
        mine = [v for v in verdicts if v.episode_id == episode_id]
        assert all(v.memo_sha256 == e["memo_sha256"] for v in mine)
        calls = load_trajectory(run, episode_id).sub_calls
        credit = sub_call_credit(calls, e["memo"], mine, task)
        n = len(credit)
        used = sum(c.used_in_memo for c in credit) / n if n else None
        supports = sum(bool(c.supports_pass) for c in credit) / n if n else None
        assert (row.sub_used_share, row.sub_supports_pass_share) == (used, supports)
    assert rows[next(iter(summaries))].sub_supports_pass_share == 1 / 3
