"""The shared run loader (traces/runs.py) over a run made by the real collector."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlmdistill.rooms.task import TaskError
from rlmdistill.testing.scored_runs import (
    write_task_problem_run,
)
from rlmdistill.traces.rebuild import root_requests
from rlmdistill.traces.runs import (
    NotARunError,
    RoomTaskError,
    grader_ids,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_trajectory,
    load_verdicts,
)
from rlmdistill.traces.store import TraceFileError


def test_loads_manifest_summaries_verdicts_and_trajectories(collected_run):
    manifest = load_manifest(collected_run)
    summaries = load_summaries(collected_run)
    assert len(summaries) == 2
    assert {s.status for s in summaries} == {"completed"}
    assert manifest.run_id == summaries[0].run_id
    assert grader_ids(collected_run) == ["reference"]
    verdicts = load_verdicts(collected_run, "reference")
    n_criteria = len({v.criterion_id for v in verdicts})
    assert len(verdicts) == 2 * n_criteria > 0
    for s in summaries:
        traj = load_trajectory(collected_run, s.episode_id)
        assert traj.start.episode_id == s.episode_id
        assert len(traj.turns) == s.n_turns == 2
        assert len(traj.sub_calls) == s.n_sub_calls == 3
        assert traj.subagent_turns == []
        assert traj.end is not None and traj.end.memo == s.memo
        assert traj.torn_tail is None
        assert len(root_requests(traj.start, traj.turns)) == 2


def test_torn_tail_reported_and_foreign_record_refused(collected_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    eid = load_summaries(run)[0].episode_id
    path = run / "trajectories" / f"{eid}.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.write('{"record_type": "turn", "epis')
    traj = load_trajectory(run, eid)
    assert traj.torn_tail == '{"record_type": "turn", "epis'
    assert len(traj.turns) == 2
    other = load_summaries(run)[1].episode_id
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1].replace(eid, other)
    path.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(TraceFileError, match=rf"{eid}.jsonl: record 2 belongs to episode {other}"):
        load_trajectory(run, eid)


def test_not_a_run(tmp_path):
    with pytest.raises(NotARunError, match=r"run\.json not found"):
        load_summaries(tmp_path)
    with pytest.raises(FileNotFoundError, match="no trajectory for episode abc"):
        load_trajectory(tmp_path, "abc")


def test_single_episode_reads_match_the_full_loaders(collected_run):
    from rlmdistill.traces.runs import load_summary

    summaries = load_summaries(collected_run)
    verdicts = load_verdicts(collected_run, "reference")
    for s in summaries:
        assert load_summary(collected_run, s.episode_id) == s
        mine = [v for v in verdicts if v.episode_id == s.episode_id]
        assert load_verdicts(collected_run, "reference", s.episode_id) == mine
    with pytest.raises(KeyError, match="episode nope has no line"):
        load_summary(collected_run, "nope")


def test_columnar_read_matches_validated_summaries_and_handles_torn_tail(collected_run, tmp_path):
    from rlmdistill.traces.columns import EPISODE_COLUMNS, VERDICT_COLUMNS, read_table

    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    with (run / "episodes.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"episode_id": "torn')
    table = read_table(run / "episodes.jsonl", EPISODE_COLUMNS)
    assert table is not None
    rows = table.to_pylist()
    summaries = load_summaries(run)
    assert [r["episode_id"] for r in rows] == [s.episode_id for s in summaries]
    assert [r["coverage"]["overall"] for r in rows] == [s.coverage.overall for s in summaries]
    assert [r["tokens"]["sub"]["prompt_tokens"] for r in rows] == [
        s.tokens.sub.prompt_tokens for s in summaries
    ]
    v = read_table(run / "verdicts" / "reference.jsonl", VERDICT_COLUMNS)
    assert v is not None and v.column("verdict").to_pylist() == [
        x.verdict for x in load_verdicts(run, "reference")
    ]
    (run / "episodes.jsonl").write_text('{"n_turns": 1}\n{"n_turns": "x"}\n')
    assert read_table(run / "episodes.jsonl", EPISODE_COLUMNS) is None  # caller falls back


def test_grader_side_files_are_not_graders(collected_run, tmp_path):
    from rlmdistill.analysis.summary import summarize_run

    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    (run / "verdicts" / "llm-x.cache.jsonl").write_text('{"key": "k", "verdict": "PASS"}\n')
    (run / "verdicts" / "llm-x.usage.jsonl").write_text('{"prompt_tokens": 3}\n')
    assert grader_ids(run) == ["reference"]
    assert [g.grader for g in summarize_run(run).graders] == ["reference"]


def test_rooms_without_criteria_are_skipped_by_judge_not_regraded(collected_run, tmp_path):

    from rlmdistill.judge.reference import ReferenceGrader
    from rlmdistill.judge.run import judge_run

    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    room = Path(load_summaries(run)[0].room.path)
    empty_room = tmp_path / "room"
    shutil.copytree(room, empty_room)
    task = json.loads((empty_room / "task.json").read_text())
    task["criteria"] = []
    (empty_room / "task.json").write_text(json.dumps(task))
    # point the run at a copy of its room whose task has no criteria (new content hash)
    from rlmdistill.rooms import DataRoom

    assert DataRoom.load(empty_room).task.criteria == []
    lines = (run / "episodes.jsonl").read_text().splitlines()
    (run / "episodes.jsonl").write_text(
        "\n".join(line.replace(str(room), str(empty_room)) for line in lines) + "\n"
    )
    (run / "verdicts" / "reference.jsonl").unlink()
    new_hash = DataRoom.load(empty_room).room_hash
    text = (run / "episodes.jsonl").read_text()
    old_hash = load_summaries(collected_run)[0].room.room_hash
    (run / "episodes.jsonl").write_text(text.replace(old_hash, new_hash))
    for _ in range(2):
        res = judge_run(run, ReferenceGrader())
        assert (res.graded, res.skipped) == (0, 2)
    assert not (run / "verdicts" / "reference.jsonl").exists() or not load_verdicts(
        run, "reference"
    )


def _four_room_run(tmp_path: Path) -> Path:
    """A run of rooms ok, gone (no task.json), broken (invalid) and changed (another task id)."""
    return write_task_problem_run(tmp_path / "runs" / "r", n_criteria=3)


def test_load_room_tasks_reports_each_problem(tmp_path):
    run = _four_room_run(tmp_path)
    rooms = tmp_path / "runs" / "rooms"
    got = load_room_tasks(run, load_summaries(run), on_error="report")
    hashes = {r.room_id: r.room_hash for r in load_manifest(run).rooms}
    assert list(got.tasks) == [hashes["ok"]]
    assert got.tasks[hashes["ok"]].id == "task-ok"
    assert [c.id for c in got.tasks[hashes["ok"]].criteria] == ["c0", "c1", "c2"]
    assert [(p.room_id, p.room_hash, p.kind, p.path) for p in got.problems] == [
        ("gone", hashes["gone"], "missing", rooms / "gone" / "task.json"),
        ("broken", hashes["broken"], "invalid", rooms / "broken" / "task.json"),
        ("changed", hashes["changed"], "task_mismatch", rooms / "changed" / "task.json"),
    ]
    gone, broken, changed = (p.message for p in got.problems)
    assert gone == f"{rooms / 'gone' / 'task.json'}: task file not found"
    assert broken.startswith(f"{rooms / 'broken' / 'task.json'}: cannot read task JSON: ")
    assert changed == (
        f"{rooms / 'changed' / 'task.json'}: task task-new, but the run's episodes in room "
        "changed ran task-changed"
    )
    # the same check from task ids by room hash (no summaries at hand)
    from_ids = load_room_tasks(
        run, task_ids={hashes["changed"]: ["task-changed"]}, on_error="report"
    )
    assert from_ids == got
    # without the episodes there is no task-id check; the manifest alone gives the rooms
    manifest_only = load_room_tasks(load_manifest(run), on_error="report")
    assert set(manifest_only.tasks) == {hashes["ok"], hashes["changed"]}
    assert [p.kind for p in manifest_only.problems] == ["missing", "invalid"]


def test_load_room_tasks_error_policies(tmp_path):
    run = _four_room_run(tmp_path)
    summaries = load_summaries(run)
    # raise: the first problem of any kind, in room order (here: the missing file)
    with pytest.raises(RoomTaskError, match=r"gone/task\.json: task file not found") as info:
        load_room_tasks(run, summaries, on_error="raise")
    assert (info.value.problem.room_id, info.value.problem.kind) == ("gone", "missing")
    assert isinstance(info.value, TaskError) and isinstance(info.value, ValueError)
    # raise_invalid: the missing room is reported, the invalid file raises
    with pytest.raises(RoomTaskError, match=r"broken/task\.json: cannot read task JSON") as info:
        load_room_tasks(run, summaries, on_error="raise_invalid")
    assert info.value.problem.kind == "invalid"
    # raise_invalid without the invalid room: missing and mismatch are reported, not raised
    rooms = tmp_path / "runs" / "rooms"
    (rooms / "broken" / "task.json").write_text(
        (rooms / "ok" / "task.json").read_text(encoding="utf-8").replace("task-ok", "task-broken"),
        encoding="utf-8",
    )
    got = load_room_tasks(run, summaries, on_error="raise_invalid")
    assert sorted(t.id for t in got.tasks.values()) == ["task-broken", "task-ok"]
    assert [(p.room_id, p.kind) for p in got.problems] == [
        ("gone", "missing"),
        ("changed", "task_mismatch"),
    ]
    # a run whose rooms are all fine raises nothing under the strictest policy
    (rooms / "gone" / "task.json").write_text(
        (rooms / "ok" / "task.json").read_text(encoding="utf-8").replace("task-ok", "task-gone"),
        encoding="utf-8",
    )
    (rooms / "changed" / "task.json").write_text(
        (rooms / "ok" / "task.json").read_text(encoding="utf-8").replace("task-ok", "task-changed"),
        encoding="utf-8",
    )
    strict = load_room_tasks(run, summaries, on_error="raise")
    assert strict.problems == []
    assert sorted(t.id for t in strict.tasks.values()) == [
        "task-broken",
        "task-changed",
        "task-gone",
        "task-ok",
    ]
    with pytest.raises(NotARunError):
        load_room_tasks(tmp_path / "nothing")


def test_load_room_tasks_adds_rooms_only_episodes_name(tmp_path):
    run = _four_room_run(tmp_path)
    manifest = load_manifest(run)
    ok = next(r for r in manifest.rooms if r.room_id == "ok")
    manifest.rooms = [r for r in manifest.rooms if r.room_id != "ok"]
    got = load_room_tasks(manifest, load_summaries(run), on_error="report")
    assert got.tasks[ok.room_hash].id == "task-ok"
    assert [p.room_id for p in got.problems] == ["gone", "broken", "changed"]


def test_show_summary_scores_only_rooms_with_their_task(tmp_path):
    from rlmdistill.analysis.summary import summarize_run

    run = _four_room_run(tmp_path)
    rooms = tmp_path / "runs" / "rooms"
    with pytest.raises(RoomTaskError, match=r"broken/task\.json: cannot read task JSON"):
        summarize_run(run)
    (rooms / "broken" / "task.json").unlink()
    summary = summarize_run(run)
    assert summary.graders[0].per_episode == {"e-ok": pytest.approx(1 / 3)}
    assert summary.task_problems == [
        f"{rooms / 'gone' / 'task.json'}: task file not found",
        f"{rooms / 'broken' / 'task.json'}: task file not found",
        f"{rooms / 'changed' / 'task.json'}: task task-new, but the run's episodes in room "
        "changed ran task-changed",
    ]


def test_show_prints_the_unscored_rooms(tmp_path):
    from rich.console import Console

    from rlmdistill.analysis.render import render_summary
    from rlmdistill.analysis.summary import summarize_run

    run = _four_room_run(tmp_path)
    (tmp_path / "runs" / "rooms" / "broken" / "task.json").unlink()
    console = Console(record=True, width=300)
    render_summary(summarize_run(run), console, per_episode=False)
    lines = [ln for ln in console.export_text().splitlines() if ln.startswith("unscored room:")]
    assert len(lines) == 3
    assert lines[0].endswith("gone/task.json: task file not found")
    assert lines[2].endswith(
        "task task-new, but the run's episodes in room changed ran task-changed"
    )
