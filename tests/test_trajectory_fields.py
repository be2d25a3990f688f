"""The report's fast trajectory decoder (``analysis/trajectory_fields.py``): for every file it
accepts it gives exactly what the careful readers give; anything not as the schema writes it
is refused (``None``), so the careful reader answers or names the bad record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmdistill.analysis import metrics as metrics_mod
from rlmdistill.analysis.trajectory_fields import light_fields
from rlmdistill.traces.runs import load_trajectory
from rlmdistill.traces.store import append_records, read_jsonl


def _key(out):
    turns, calls = out
    return turns, [
        (c.depth, c.batch_id, c.error, c.response, c.has_sources, c.call_id, c.subagent)
        for c in calls
    ]


def _files(run: Path) -> list[Path]:
    return sorted((run / "trajectories").glob("*.jsonl"))


def test_a_collected_run_reads_the_same_as_through_pydantic(collected_run: Path) -> None:
    files = _files(collected_run)
    assert len(files) == 2
    for path in files:
        eid = path.stem
        fast = light_fields(path.read_bytes(), eid)
        assert fast is not None
        careful = metrics_mod._light(load_trajectory(collected_run, eid))
        assert _key(fast) == _key(careful)
        turns, calls = fast
        assert len(calls) == 3 and all(c.has_sources for c in calls)  # one batch of 3 reads
        assert [t.turn for t in turns] == list(range(len(turns)))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


@pytest.mark.parametrize(
    "change",
    [
        "bool depth",
        "float batch id",
        "string call id",
        "other episode",
        "newer schema",
        "unknown record type",
        "no leading start",
        "two starts",
        "bad final source",
        "block without code",
        "sources not objects",
        "record split over two lines",
        "torn last line",
        "empty",
    ],
)
def test_anything_not_as_written_is_refused(collected_run: Path, change: str) -> None:
    path = _files(collected_run)[0]
    eid = path.stem
    recs = _lines(path)
    sub = next(r for r in recs if r["record_type"] == "sub_call")
    turn = next(r for r in recs if r["record_type"] == "turn")
    raw = None
    if change == "bool depth":
        sub["depth"] = True
    elif change == "float batch id":
        sub["batch_id"] = 0.0
    elif change == "string call id":
        sub["call_id"] = "0"
    elif change == "other episode":
        sub["episode_id"] = "someone-else"
    elif change == "newer schema":
        turn["schema_version"] = 99
    elif change == "unknown record type":
        recs.append({"record_type": "note", "episode_id": eid})
    elif change == "no leading start":
        recs = recs[1:]
    elif change == "two starts":
        recs.append(recs[0])
    elif change == "bad final source":
        turn["final_answer_source"] = "memo"
    elif change == "block without code":
        turn["blocks"] = [{"index": 0}]
    elif change == "sources not objects":
        sub["sources"] = ["Contracts/a.txt"]
    elif change == "record split over two lines":
        text = json.dumps(sub)
        cut = text.index(', "call_id"')
        lines = [json.dumps(r) for r in recs]
        lines[recs.index(sub)] = text[:cut] + "\n" + text[cut + 2 :]
        raw = ("\n".join(lines) + "\n").encode()
    elif change == "torn last line":
        raw = _bytes(recs)[:-40]
    elif change == "empty":
        raw = b""
    assert light_fields(_bytes(recs) if raw is None else raw, eid) is None


def test_blank_lines_and_a_closed_torn_tail(collected_run: Path, tmp_path: Path) -> None:
    """Blank lines are skipped as the careful reader skips them; a torn line closed off by a
    later append (marker line) is refused here, and the careful reader skips it."""
    path = _files(collected_run)[0]
    eid = path.stem
    recs = _lines(path)
    want = _key(light_fields(path.read_bytes(), eid))
    blank = "\n".join(json.dumps(r) for r in recs[:2]) + "\n\n  \n" + _bytes(recs[2:]).decode()
    assert _key(light_fields(blank.encode(), eid)) == want

    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    torn = run / "trajectories" / path.name
    torn.write_bytes(_bytes(recs[:-1]) + b'{"record_type": "episo')
    append_records(torn, [recs[-1]], fsync=False)  # closes the torn line with a marker
    assert read_jsonl(torn).skipped_torn_lines == 1 and b"torn_tail" in torn.read_bytes()
    assert light_fields(torn.read_bytes(), eid) is None
    assert _key(metrics_mod._read_trajectory_fields(run, eid)) == want
