"""Trace storage: torn tails (T3), surrogates (T2), schema versions."""

import json

import pytest

from rlmdistill.models.base import Usage
from rlmdistill.traces.schema import TurnRecord, upgrade_record, utcnow
from rlmdistill.traces.store import (
    TraceFileError,
    append_records,
    dumps_record,
    parse_records,
    read_jsonl,
)


def _turn(i: int, completion: str = "ok") -> TurnRecord:
    return TurnRecord(
        episode_id="e1",
        turn=i,
        started_at=utcnow(),
        n_messages_before=1,
        prompt_sha256="0" * 64,
        completion=completion,
        usage=Usage(prompt_tokens=3),
        latency_s=0.1,
    )


def test_torn_last_line_is_reported_and_next_append_starts_fresh_case_t3(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"turn":1}\n{"turn":2,"con', encoding="utf-8")
    res = read_jsonl(path)
    assert res.records == [{"turn": 1}]
    assert res.torn_tail == '{"turn":2,"con'
    append_records(path, [{"turn": 3}])
    res = read_jsonl(path)
    assert res.records == [{"turn": 1}, {"turn": 3}]
    assert res.torn_tail is None
    assert res.skipped_torn_lines == 1
    # the torn bytes are still on disk, untouched
    assert '{"turn":2,"con\n' in path.read_text(encoding="utf-8")


def test_corruption_in_the_middle_is_an_error_case_t3(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"turn":1}\n{"turn":2,,}\n{"turn":3}\n', encoding="utf-8")
    with pytest.raises(TraceFileError, match=r"t\.jsonl:2"):
        read_jsonl(path)


def test_unpaired_surrogate_written_read_and_compared_case_t2(tmp_path):
    path = tmp_path / "traj.jsonl"
    rec = _turn(0, "ok \ud83c")
    append_records(path, [rec])
    (back,) = list(parse_records(path, TurnRecord))
    assert back.completion == "ok \ufffd"
    assert back.model_dump(exclude={"completion"}) == rec.model_dump(exclude={"completion"})
    path.read_bytes().decode("utf-8")  # valid UTF-8 on disk


def test_record_line_holds_the_values_json_writes_non_finite_floats_included():
    rec = _turn(0, "é \u2028 \x00 <b>").model_copy(update={"latency_s": 1e-05})
    line = dumps_record(rec)
    assert json.loads(line) == json.loads(json.dumps(rec.model_dump(mode="json")))
    assert "\n" not in line and ", " not in line  # one compact line
    tokens = {"logprobs": [-0.5, float("-inf"), float("nan")], "n": [1.5e300, None]}
    back = json.loads(dumps_record(tokens))
    assert (
        back["logprobs"][:2] == [-0.5, float("-inf")] and back["logprobs"][2] != back["logprobs"][2]
    )
    assert back["n"] == [1.5e300, None]  # a null stays null, a finite float stays itself


def test_validation_error_names_file_and_record(tmp_path):
    path = tmp_path / "traj.jsonl"
    append_records(path, [_turn(0)])
    append_records(path, [{"record_type": "turn", "turn": "x"}])
    with pytest.raises(TraceFileError, match="record 2"):
        list(parse_records(path, TurnRecord))


def test_newer_schema_version_is_refused():
    with pytest.raises(ValueError, match="newer"):
        upgrade_record({"schema_version": 99})


def test_timestamps_are_timezone_aware(tmp_path):
    path = tmp_path / "traj.jsonl"
    append_records(path, [_turn(0)])
    raw = json.loads(path.read_text().splitlines()[0])
    assert raw["started_at"].endswith("Z") or "+00:00" in raw["started_at"]


def test_newer_schema_version_in_a_file_is_refused_with_file_and_line(tmp_path):
    path = tmp_path / "traj.jsonl"
    newer = _turn(1).model_dump(mode="json") | {"schema_version": 99}
    append_records(path, [_turn(0), newer])
    with pytest.raises(TraceFileError, match=r"traj\.jsonl:2: record 2 is invalid: .*newer"):
        list(parse_records(path, TurnRecord))


def test_unsynced_appends_read_back_and_sync_file_is_safe(tmp_path):
    from rlmdistill.traces.store import sync_file

    path = tmp_path / "traj.jsonl"
    sync_file(path)  # missing: no-op
    append_records(path, [_turn(0)], fsync=False)
    append_records(path, [_turn(1)], fsync=False)
    sync_file(path)
    assert [r.turn for r in parse_records(path, TurnRecord)] == [0, 1]
