"""The loop as a table of stages: one executor skips, runs, times and records every row the
same way (``loop.run.Stage``, ``_Loop.execute``), and a workspace written by the loop before it
was a table resumes with every stage skipped, logging and recording what that loop did."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlmdistill.loop.config import load_experiment
from rlmdistill.loop.run import Stage, _Loop
from rlmdistill.traces.lineage import LineageRecord, latest_records, record

REPO = Path(__file__).resolve().parents[1]


def _loop(tmp_path: Path, logs: list[str]) -> _Loop:
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "workspace": "ws",
                "base": "local:/models/base",
                "sub": "openai:sub@http://127.0.0.1:9/v1",
                "train_rooms": ["ws/rooms/a"],
                "holdout_rooms": [str(tmp_path / "given")],
            }
        ),
        encoding="utf-8",
    )
    loop = _Loop(load_experiment(exp), log=logs.append, progress=False)
    loop.ws.mkdir(parents=True)
    return loop


def _lines(ws: Path) -> list[dict[str, object]]:
    path = ws / "lineage.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_a_row_that_is_not_done_runs_on_its_config_and_is_recorded_once(tmp_path: Path) -> None:
    logs: list[str] = []
    loop = _loop(tmp_path, logs)
    out = loop.ws / "datasets" / "r1"
    seen: list[int] = []
    checked: list[int] = []

    def run(config: int) -> int:
        out.mkdir(parents=True)
        seen.append(config)
        return config * 2

    stage: Stage[int, int] = Stage(
        name="filter-r1",
        step="filter",
        kind="dataset",
        round=1,
        config=21,
        inputs=(loop.ws / "runs" / "r1-train",),
        output=out,
        fingerprint="fp1",
        run=run,
        done=lambda: False,
        detail=lambda n: {"examples": n},
        run_line="filter + export runs/r1-train -> datasets/r1",
        ran_lines=lambda n: [f"[ok  ] {n} examples"],
        check=checked.append,
    )
    assert loop.execute(stage) == 42
    assert seen == [21] and checked == [42]
    assert logs == ["[run ] filter + export runs/r1-train -> datasets/r1", "[ok  ] 42 examples"]
    [line] = _lines(loop.ws)
    assert {k: line[k] for k in ("artefact", "kind", "stage", "round", "inputs")} == {
        "artefact": "datasets/r1",
        "kind": "dataset",
        "stage": "filter",
        "round": 1,
        "inputs": ["runs/r1-train"],
    }
    assert (line["fingerprint"], line["detail"]) == ("fp1", {"examples": 42})
    assert set(loop.stage_s) == {"filter-r1"} and loop.stage_s["filter-r1"] >= 0.0


def test_a_done_row_is_skipped_and_its_record_refreshed_only_when_behind(tmp_path: Path) -> None:
    """Done by its own rule (every episode of the run is there) while the newest record carries
    another fingerprint: one record with the skip detail and the current fingerprint; done
    with a current record: nothing appended. The run function is never called."""
    logs: list[str] = []
    loop = _loop(tmp_path, logs)
    out = loop.ws / "runs" / "eval-base"
    out.mkdir(parents=True)
    old = LineageRecord(
        artefact="runs/eval-base",
        kind="run",
        stage="collect-eval",
        fingerprint="old",
        detail={"new_episodes": 2},
    )
    record(loop.ws, old)

    def never(config: str) -> str:
        raise AssertionError("a done row must not run")

    def row(fingerprint: str) -> Stage[str, str]:
        return Stage(
            name="collect-eval-base",
            step="collect-eval",
            kind="run",
            round=0,
            config="c",
            inputs=(),
            output=out,
            fingerprint=fingerprint,
            run=never,
            done=lambda: True,
            detail=lambda r: {"x": r},
            skip_line="runs/eval-base: all 2 episodes done",
            skipped_detail=lambda: {"root": "local:b", "new_episodes": 0},
        )

    assert loop.execute(row("new")) is None
    assert logs == ["[skip] runs/eval-base: all 2 episodes done"]
    rec = latest_records(loop.ws)["runs/eval-base"]
    assert (rec.fingerprint, rec.detail) == ("new", {"root": "local:b", "new_episodes": 0})
    assert loop.execute(row("new")) is None  # now current: skipped, nothing recorded
    assert len(_lines(loop.ws)) == 2 and len(logs) == 2


def test_rows_on_one_clock_add_up_and_a_row_without_detail_is_not_recorded(
    tmp_path: Path,
) -> None:
    """A run's grading counts with its collection in loop_timing.json; a judge that graded
    nothing writes no record (its fingerprint, a hash of the verdicts, is then never read)."""
    logs: list[str] = []
    loop = _loop(tmp_path, logs)

    def unread() -> str:
        raise AssertionError("the fingerprint of an unrecorded row is not read")

    def row(name: str, clock: str, built_at: float) -> Stage[None, int]:
        return Stage(
            name=name,
            step="judge",
            kind="verdicts",
            round=0,
            config=None,
            inputs=(),
            output=loop.ws / "runs" / "eval-base" / "verdicts" / "reference.jsonl",
            fingerprint=unread,
            run=lambda c: 0,
            done=lambda: False,
            detail=lambda n: {"graded": n} if n else None,
            clock=clock,
            built_at=built_at,
        )

    import time

    now = time.monotonic()
    loop.execute(row("collect-eval-base", "", now - 2.0))
    loop.execute(row("judge-eval-base", "collect-eval-base", now - 3.0))
    assert list(loop.stage_s) == ["collect-eval-base"]
    assert loop.stage_s["collect-eval-base"] >= 5.0  # 2 s + 3 s since the rows were built
    assert _lines(loop.ws) == [] and logs == []


def test_loop_run_has_no_format_exemptions_and_no_untyped_stage_results() -> None:
    source = (REPO / "src" / "rlmdistill" / "loop" / "run.py").read_text(encoding="utf-8")
    assert "# fmt: skip" not in source
    assert not re.search(r"\bAny\b", source)


PREVIOUS_LOOP = "e3067b48743b99843105ae6658bc469d4e13f83b"
"""The last commit whose loop called each stage through ``timed(name, fn, *args) -> Any``."""

_RUN_PREVIOUS = """
import sys
from pathlib import Path
from rlmdistill.loop.config import load_experiment
from rlmdistill.loop.run import run_loop
import rlmdistill
assert Path(rlmdistill.__file__).is_relative_to(Path(sys.argv[2])), rlmdistill.__file__
run_loop(load_experiment(Path(sys.argv[1])), log=print, progress=False)
"""


@pytest.mark.slow
def test_workspace_of_the_previous_loop_resumes_as_that_loop_would(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """The loop of :data:`PREVIOUS_LOOP` (its whole source tree, from git) makes a workspace
    and resumes it once; this loop then resumes it: every stage skipped with the same lines
    in the same order, nothing run, and the same lineage records appended (the rooms check)."""
    from conftest import _scripted
    from test_loop import _experiment

    from rlmdistill.loop.run import run_loop
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE
    from rlmdistill.testing.fake_openai import FakeOpenAIServer

    old = tmp_path / "previous"
    old.mkdir()
    try:
        tree = subprocess.run(
            ["git", "-C", str(REPO), "archive", PREVIOUS_LOOP, "src"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"no git checkout holding {PREVIOUS_LOOP}: {e}")
    subprocess.run(["tar", "-x", "-C", str(old)], input=tree, check=True)
    # A new grader version grades every run again on purpose (test_judge_eval's
    # test_ref_v1_verdicts_keep_loading_...): the old tree writes its verdicts under today's
    # version, so that this test compares the loops' stage tables, not the graders.
    from rlmdistill.judge.reference import VERSION

    grader = old / "src" / "rlmdistill" / "judge" / "reference.py"
    code = grader.read_text(encoding="utf-8")
    assert 'VERSION = "ref-v2"' in code
    grader.write_text(code.replace('VERSION = "ref-v2"', f'VERSION = "{VERSION}"'), "utf-8")
    # one CUAD folder that is neither tree's packaged sample, so both log it alike
    source = tmp_path / "cuad"
    shutil.copytree(SAMPLE_SOURCE, source)
    env = {**os.environ, "PYTHONPATH": str(old / "src")}
    with FakeOpenAIServer(_scripted, models=["root", "sub"]) as server:
        exp = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        data = yaml.safe_load(exp.read_text())
        data["rooms"]["source"] = str(source)
        exp.write_text(yaml.safe_dump(data), encoding="utf-8")

        def previous() -> list[str]:
            args = [sys.executable, "-c", _RUN_PREVIOUS, str(exp), str(old / "src")]
            done = subprocess.run(args, env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-3000:]
            return [x for x in done.stdout.splitlines() if x.startswith("[")]

        first = previous()
        ws = tmp_path / "ws"
        assert any(x.startswith("[run ] sft") for x in first), first
        n0 = len(_lines(ws))
        resumed_before = previous()
        n1 = len(_lines(ws))
        logs: list[str] = []
        run_loop(load_experiment(exp), log=logs.append, progress=False)
    assert logs == resumed_before
    assert [x for x in logs if x.startswith("[skip]")] == [
        "[skip] runs/eval-base: all 2 episodes done",
        "[skip] runs/r1-train: all 4 episodes done",
        "[skip] datasets/r1: dataset up to date",
        "[skip] adapters/r1: adapter up to date",
        "[skip] runs/r1-eval-tuned: all 2 episodes done",
        "[skip] reports/r1: report up to date",
    ]
    assert not [x for x in logs if x.startswith("[run ]")]

    def same(rec: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in rec.items() if k != "created_at"}

    lines = _lines(ws)
    by_previous, by_this = lines[n0:n1], lines[n1:]
    assert [r["kind"] for r in by_this] == ["check"]
    assert [same(r) for r in by_this] == [same(r) for r in by_previous]
