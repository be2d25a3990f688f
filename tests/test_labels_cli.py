"""``rlmdistill labels export|import|show``: CSV round trip, line-numbered errors with nothing
written, stale labels marked."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer
from typer.testing import CliRunner

from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces import labels as lb
from rlmdistill.traces import layout
from rlmdistill.traces.labels_cli import register

T0 = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _run(root: Path) -> Path:
    return write_scored_run(
        root / "runs" / "r",
        [SyntheticRoom("a", n_criteria=2)],
        [SyntheticEpisode("e0", "a", n_pass=1), SyntheticEpisode("e1", "a", n_pass=0)],
    )


def _labels() -> list[lb.Label]:
    return [
        lb.Label(
            episode_id="e0",
            memo_hash=lb.memo_hash("memo of e0"),
            target="criterion",
            criterion_id="c1",
            verdict="FAIL",
            tags=["wrong amount", "other"],
            note='says "$1m", the contract, 2m',
            reviewer="ann",
            time=T0,
        ),
        lb.Label(
            episode_id="e1",
            memo_hash=lb.memo_hash("an older memo"),
            target="episode",
            verdict="reject",
            reviewer="bob",
            time=T0 + dt.timedelta(hours=1),
        ),
    ]


def test_export_import_round_trip(tmp_path: Path) -> None:
    src = _run(tmp_path / "a")
    lb.append_labels(src, _labels())
    csv = tmp_path / "labels.csv"
    res = CliRunner().invoke(_app(), ["labels", "export", str(src), str(csv)])
    assert res.exit_code == 0, res.output
    assert csv.read_text(encoding="utf-8").splitlines()[0] == ",".join(lb.CSV_COLUMNS)
    dst = _run(tmp_path / "b")
    res = CliRunner().invoke(_app(), ["labels", "import", str(dst), str(csv)])
    assert res.exit_code == 0, res.output
    assert lb.read_labels(dst) == _labels()


def test_import_minimal_columns_fill_memo_and_target(tmp_path: Path) -> None:
    run = _run(tmp_path)
    csv = tmp_path / "in.csv"
    csv.write_text("episode_id,criterion_id,verdict,reviewer\ne0,c0,PASS,ann\ne1,,keep,ann\n")
    res = CliRunner().invoke(_app(), ["labels", "import", str(run), str(csv)])
    assert res.exit_code == 0, res.output
    a, b = lb.read_labels(run)
    assert (a.target, a.criterion_id, a.memo_hash) == (
        "criterion",
        "c0",
        lb.memo_hash("memo of e0"),
    )
    assert (b.target, b.criterion_id, b.verdict) == ("episode", None, "keep")
    assert a.time.tzinfo is not None


def test_import_names_every_bad_line_and_writes_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path)
    csv = tmp_path / "bad.csv"
    csv.write_text(
        "episode_id,criterion_id,verdict,tags,reviewer,time\n"
        "e0,c0,PASS,,ann,2026-01-01T10:00:00+00:00\n"  # line 2: fine
        "e0,c1,FAIL,,ann,2026-01-01T10:00:00\n"  # line 3: naive time
        "e9,c0,PASS,,ann,\n"  # line 4: unknown episode
        "e1,c7,PASS,,ann,\n"  # line 5: unknown criterion
        "e1,c0,PASS,typo,ann,\n"  # line 6: unknown tag
        "e1,c0,keep,,ann,\n"  # line 7: an episode verdict on a criterion
    )
    res = CliRunner().invoke(_app(), ["labels", "import", str(run), str(csv)])
    assert res.exit_code == 2
    err = res.stderr
    assert f"{csv}:3: time: Input should have timezone info" in err
    assert f"{csv}:4: unknown episode 'e9'" in err
    assert f"{csv}:5: unknown criterion 'c7'; the episode's rubric has c0, c1" in err
    assert f"{csv}:6: unknown tag(s) 'typo'; allowed tags: invented clause" in err
    assert f"{csv}:7: " in err and "not one of a criterion label's" in err
    assert f"{csv}:2" not in err
    assert "nothing imported" in err
    assert not layout.labels_path(run).exists()


def test_import_unknown_column_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path)
    csv = tmp_path / "bad.csv"
    csv.write_text("episode_id,verdict,reviewer,score\ne0,keep,ann,1\n")
    res = CliRunner().invoke(_app(), ["labels", "import", str(run), str(csv)])
    assert res.exit_code == 2
    assert f"{csv}:1: unknown column(s) score" in res.stderr


def test_show_marks_stale_labels(tmp_path: Path) -> None:
    run = _run(tmp_path)
    lb.append_labels(run, _labels())
    res = CliRunner().invoke(_app(), ["labels", "show", str(run)], terminal_width=200)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    ann = next(line for line in lines if "ann" in line)
    bob = next(line for line in lines if "bob" in line)
    assert "current" in ann and "STALE" not in ann
    assert "STALE (older memo)" in bob
    assert "1 stale: given for an older memo" in res.stdout
