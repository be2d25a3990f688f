"""Opening a run in the dashboard reads its files once (task dash7, issue 19's "open a run").

The Runs page's overview (headline means of room means) is computed from the run table's
columns instead of a second, validated read into the analysis stage's metrics rows. These
tests hold it to the metrics rows value for value (bit for bit, ``==``) and to means computed
here by hand, on a run with every case that changes a pass rate or a mean (an ungraded
episode, no memo, no coverage, verdicts of an older memo, a second grader, a room whose
``task.json`` is gone, another task, a room the manifest does not list); and they check that
the fast columnar reads still name the file and line of a broken or invalid record, as the
validated loaders do.
"""

from __future__ import annotations

import gc
import json
import shutil
import weakref
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from rlmdistill.analysis.metrics import load_run_metrics
from rlmdistill.dashboard import data, runview
from rlmdistill.dashboard.live import mean_of_room_means
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces import layout
from rlmdistill.traces.columns import gc_paused
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.store import TraceFileError, append_records

N_CRITERIA = 4
ROOMS = ["r1", "r2", "r3", "r4", "gone", "changed"]

# (episode, room, passes under "reference", passes under "llm", coverage, memo, status)
EPISODES = [
    ("e1", "r1", 1, 2, 0.2, "", "completed"),
    ("e2", "r1", 3, 3, 0.4, "", "completed"),
    ("e3", "r1", None, 1, None, "", "timeout"),  # not graded by reference; no coverage
    ("e4", "r2", 0, 0, 0.5, None, "no_memo"),  # no memo: graded (memo_sha256 null)
    ("e5", "r2", 4, None, 0.7, "", "completed"),  # not graded by llm
    ("e6", "r3", 2, 4, 0.1, "", "completed"),
    ("e7", "r3", 2, 2, None, "", "budget_exceeded"),
    ("e8", "r4", 1, 0, 0.9, "", "completed"),  # r4: not in run.json, found from episodes
    ("e9", "r4", 3, 1, 0.3, "", "completed"),
    ("e10", "gone", 4, 4, 0.6, "", "completed"),  # task.json deleted: no pass rate
    ("e11", "changed", 4, 4, 0.8, "", "completed"),  # another task: no pass rate
]
STALE = "e6"
"""An episode that also has reference verdicts of an older memo (all PASS, to be ignored)."""


def _episodes(grader: str) -> list[SyntheticEpisode]:
    col = 2 if grader == "reference" else 3
    return [
        SyntheticEpisode(
            e[0],
            e[1],
            n_pass=e[col],  # type: ignore[arg-type]
            coverage=e[4],  # type: ignore[arg-type]
            memo=e[5],  # type: ignore[arg-type]
            status=e[6],  # type: ignore[arg-type]
            n_turns=1 + i % 5,
            n_sub_calls=(3 * i) % 7,
        )
        for i, e in enumerate(EPISODES)
    ]


@pytest.fixture
def mixed_run(tmp_path: Path) -> Path:
    """A run with every case above, graded by ``reference`` and ``llm``."""
    rooms = [SyntheticRoom(n, n_documents=3, n_criteria=N_CRITERIA) for n in ROOMS]
    ws = tmp_path / "ws"
    rd = write_scored_run(
        ws / "runs" / "mixed", rooms, _episodes("reference"), rooms_dir=ws / "rooms"
    )
    other = write_scored_run(
        tmp_path / "other" / "mixed", rooms, _episodes("llm"), grader="llm", rooms_dir=ws / "rooms"
    )
    shutil.copy(layout.verdicts_path(other, "llm"), layout.verdicts_path(rd, "llm"))
    append_records(
        layout.verdicts_path(rd, "reference"),
        [
            Verdict(
                episode_id=STALE,
                grader="reference",
                grader_version="0",
                criterion_id=f"c{i}",
                verdict="PASS",
                reason="an older memo",
                memo_sha256="0" * 64,
            )
            for i in range(N_CRITERIA)
        ],
    )
    (ws / "rooms" / "gone" / "task.json").unlink()
    task_path = ws / "rooms" / "changed" / "task.json"
    task = json.loads(task_path.read_text(encoding="utf-8"))
    task["id"] = "task-new"
    task_path.write_text(json.dumps(task), encoding="utf-8")
    manifest = json.loads((rd / layout.RUN_MANIFEST).read_text(encoding="utf-8"))
    manifest["rooms"] = [r for r in manifest["rooms"] if r["room_id"] != "r4"]
    (rd / layout.RUN_MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return rd


def _hand_mean(values: dict[str, list[float]]) -> float:
    """Mean over rooms of each room's mean (rooms without a value left out)."""
    means = [sum(v) / len(v) for v in values.values() if v]
    return sum(means) / len(means)


def test_overview_from_the_table_equals_the_metrics_rows_and_hand_means(mixed_run: Path) -> None:
    o = data.run_overview(mixed_run)
    assert o.n_episodes == len(EPISODES)
    assert o.status_counts == dict(Counter(e[6] for e in EPISODES))
    for grader in ("reference", "llm"):
        rows = load_run_metrics(mixed_run, grader, trajectories=False, row_cache=False).rows
        # the metrics rows are what the overview showed before: equal bit for bit
        assert o.mean_pass_rate[grader] == mean_of_room_means(rows, lambda r: r.pass_rate)
        if grader == "reference":
            assert o.mean_coverage == mean_of_room_means(rows, lambda r: r.coverage)
            assert o.mean_turns == mean_of_room_means(rows, lambda r: float(r.n_turns))
            assert o.mean_sub_calls == mean_of_room_means(rows, lambda r: float(r.n_sub_calls))
        # the table's pass rates are the metrics rows' (NA where a row has None)
        table = data.run_table(mixed_run).set_index("episode_id")[f"pass_rate:{grader}"]
        for r in rows:
            got = table[r.episode_id]
            assert (got is pd.NA and r.pass_rate is None) or got == r.pass_rate, r.episode_id
    # the listing before dash7 showed NA for these two: a graded episode without a memo (its
    # null memo hash became NaN in pandas and matched no verdict) and a room run.json lacks
    listing = data.run_table(mixed_run).set_index("episode_id")["pass_rate:reference"]
    assert listing["e4"] == 0.0 and listing["e8"] == 1 / N_CRITERIA
    assert listing["e3"] is pd.NA and listing["e10"] is pd.NA and listing["e11"] is pd.NA
    # by hand: pass rates of scored rooms only (gone and changed have no usable task; r4's
    # task is found from its episodes' room folder); the stale all-PASS verdicts of e6 ignored
    col = {"reference": 2, "llm": 3}
    for grader, c in col.items():
        by_room: dict[str, list[float]] = {}
        for e in EPISODES:
            if e[1] not in ("gone", "changed") and e[c] is not None:
                by_room.setdefault(e[1], []).append(e[c] / N_CRITERIA)  # type: ignore[operator]
        assert o.mean_pass_rate[grader] == pytest.approx(_hand_mean(by_room), abs=1e-12)
    assert o.mean_pass_rate["reference"] == pytest.approx(
        ((1 + 3) / 2 + (0 + 4) / 2 + (2 + 2) / 2 + (1 + 3) / 2) / 4 / N_CRITERIA, abs=1e-12
    )
    cov: dict[str, list[float]] = {}
    for e in EPISODES:
        if e[4] is not None:
            cov.setdefault(e[1], []).append(e[4])  # type: ignore[arg-type]
    assert o.mean_coverage == pytest.approx(_hand_mean(cov), abs=1e-12)


def test_opening_a_run_reads_summaries_as_columns_once(
    mixed_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid run is listed and summarised from its columns: the validated summary loader,
    the metrics rows and a second read of the files are never needed."""

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("a validated or second read of the run")

    monkeypatch.setattr(runview, "load_summaries", boom)
    monkeypatch.setattr(runview.RunView, "metrics", boom)
    reads: list[str] = []
    real = runview.read_table

    def counted(path: Path, schema: object) -> object:
        reads.append(Path(path).name)
        return real(path, schema)  # type: ignore[arg-type]

    monkeypatch.setattr(runview, "read_table", counted)
    view = data.run_view(mixed_run)
    data.run_overview(view)
    data.run_table(view)
    assert reads == ["episodes.jsonl"]  # the verdict files: traces.columns.verdict_rows, once


def test_validated_fallback_gives_the_same_table(
    mixed_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Columns that fail the checks are taken from the validated summaries instead; for a
    valid run both give the same frame, dtypes included."""
    fast = data.run_table(mixed_run)
    monkeypatch.setattr(runview, "episode_columns_ok", lambda _t: False)
    slow = runview.RunView(mixed_run, "fallback").table()
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)


def _rewrite_line(path: Path, lineno: int, edit: object) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[lineno - 1] = edit(lines[lineno - 1]) if callable(edit) else str(edit)
    path.write_text("".join(lines), encoding="utf-8")


def _edit_record(**changes: object) -> object:
    def edit(line: str) -> str:
        rec = json.loads(line)
        for k, v in changes.items():
            if v is None:
                rec.pop(k)
            else:
                rec[k] = v
        return json.dumps(rec) + "\n"

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ('{"episode_id": "e3", "broken\n', r"episodes\.jsonl:3: corrupt JSON line"),
        (_edit_record(status="bogus"), r"episodes\.jsonl:3: record 3 is invalid"),
        (_edit_record(n_turns=None), r"episodes\.jsonl:3: record 3 is invalid"),
        (_edit_record(depth=3), r"episodes\.jsonl:3: record 3 is invalid"),
        (_edit_record(schema_version=99), r"episodes\.jsonl:3: record 3 is invalid.*newer"),
        (_edit_record(n_turns="many"), r"episodes\.jsonl:3: record 3 is invalid"),
    ],
    ids=["corrupt", "status", "missing", "depth", "newer", "type"],
)
def test_a_bad_summary_line_is_named_on_the_fast_path_case_t3(
    mixed_run: Path, edit: object, message: str
) -> None:
    _rewrite_line(mixed_run / layout.EPISODES, 3, edit)
    with pytest.raises(TraceFileError, match=message):
        data.run_table(mixed_run)
    with pytest.raises(TraceFileError, match=message):
        data.run_overview(mixed_run)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ('{"episode_id": "e1", "crit\n', r"reference\.jsonl:2: corrupt JSON line"),
        (_edit_record(verdict="MAYBE"), r"reference\.jsonl:2: record 2 is invalid"),
        (_edit_record(reason=None), r"reference\.jsonl:2: record 2 is invalid"),
    ],
    ids=["corrupt", "label", "missing"],
)
def test_a_bad_verdict_line_is_named_on_the_fast_path_case_t3(
    mixed_run: Path, edit: object, message: str
) -> None:
    _rewrite_line(layout.verdicts_path(mixed_run, "reference"), 2, edit)
    with pytest.raises(TraceFileError, match=message):
        data.run_table(mixed_run)
    with pytest.raises(TraceFileError, match=message):
        data.run_overview(mixed_run)


def test_a_torn_last_line_is_still_skipped_case_t3(mixed_run: Path) -> None:
    with (mixed_run / layout.EPISODES).open("a", encoding="utf-8") as f:
        f.write('{"episode_id": "e12", "tor')
    assert list(data.run_table(mixed_run)["episode_id"]) == [e[0] for e in EPISODES]
    assert data.run_overview(mixed_run).n_episodes == len(EPISODES)


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause found it paused: leaves it so
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # disabled by someone else: stays disabled
    finally:
        gc.enable()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_gc_paused_moves_what_it_made_to_the_oldest_generation_and_keeps_other_freezes() -> None:
    gc.collect()
    with gc_paused():
        made = _Node()
        made.other = _Node()
        made.other.other = made  # a cycle
    assert gc.isenabled()
    assert any(o is made for o in gc.get_objects(generation=2))
    assert not any(o is made for o in gc.get_objects(generation=0))
    ref = weakref.ref(made)
    del made
    assert ref() is not None  # a cycle: refcounting alone does not free it
    gc.collect()
    assert ref() is None  # the next full collection does
    kept = _Node()
    gc.freeze()  # frozen by someone else (e.g. a server before fork)
    try:
        n = gc.get_freeze_count()
        with gc_paused():
            _Node()
        assert gc.get_freeze_count() == n and gc.isenabled()
        assert not any(o is kept for o in gc.get_objects())  # still frozen
    finally:
        gc.unfreeze()


def test_a_run_without_finished_episodes_opens_empty(tmp_path: Path) -> None:
    rd = write_scored_run(tmp_path / "runs" / "empty", [SyntheticRoom("r1")], [])
    (rd / layout.EPISODES).write_text("", encoding="utf-8")
    table = data.run_table(rd)
    assert len(table) == 0 and list(table.columns) == runview.RUN_COLUMNS
    o = data.run_overview(rd)
    assert (o.n_episodes, o.status_counts, o.mean_coverage, o.mean_turns) == (0, {}, None, None)
