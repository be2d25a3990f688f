"""The ``filter`` stage (filter.main.run), output-folder safety, and the typer command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rlmdistill.export.main import ExportConfig
from rlmdistill.export.main import run as export_stage
from rlmdistill.export.options import ExportOptionsError, build_export_options
from rlmdistill.filter.cli import register
from rlmdistill.filter.main import FilterConfig, NothingKeptError, OutputFolderError, run
from rlmdistill.filter.rules import FilterRuleError, FilterRules
from rlmdistill.filter.select import FilterDecision
from rlmdistill.testing.scored_runs import SyntheticEpisode, SyntheticRoom, write_scored_run
from rlmdistill.traces.store import parse_records

E = SyntheticEpisode


def _filter(runs, out, rules, *, force=False):  # type: ignore[no-untyped-def]
    return run(FilterConfig(runs=runs, out=out, rules=rules, force=force))


def _run(tmp_path: Path) -> Path:
    return write_scored_run(
        tmp_path / "runs" / "a",
        [SyntheticRoom("r4", n_documents=5, n_criteria=4)],
        [
            E("a", "r4", n_pass=1, n_sub_calls=3),
            E("b", "r4", n_pass=3, n_sub_calls=3),
            E("c", "r4", n_pass=4, n_sub_calls=0),
            E("t", "r4", n_pass=4, status="timeout"),
        ],
    )


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer in multi-command mode
        """Unused."""

    return app


def test_filter_main_writes_reports_and_decisions(tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "datasets" / "d"
    outcome = _filter([run], out, FilterRules(min_pass_rate=0.5))
    assert sorted(p.name for p in out.iterdir()) == [
        "decisions.jsonl",
        "filter_report.json",
        "filter_report.md",
    ]
    decisions = list(parse_records(out / "decisions.jsonl", FilterDecision))
    assert [(d.episode_id, d.kept, d.primary_reason) for d in decisions] == [
        ("a", False, "pass_rate"),
        ("b", True, None),
        ("c", True, None),
        ("t", False, "status"),
    ]
    report = json.loads((out / "filter_report.json").read_text(encoding="utf-8"))
    assert report["n_kept"] == 2 and report["dropped_by_reason"] == {"status": 1, "pass_rate": 1}
    assert report["rules"]["min_pass_rate"] == 0.5
    assert report["runs"][0]["run_id"] == "a"
    md = (out / "filter_report.md").read_text(encoding="utf-8")
    assert "**2 of 4 episodes kept**" in md and "| pass_rate | 1 | 1 |" in md
    assert outcome.decisions == out / "decisions.jsonl" and outcome.selection.n_kept == 2


def test_output_folder_safety(tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "out"
    _filter([run], out, FilterRules())
    with pytest.raises(OutputFolderError, match="not empty; pass --force"):
        _filter([run], out, FilterRules())
    _filter([run], out, FilterRules(min_sub_calls=1), force=True)
    report = json.loads((out / "filter_report.json").read_text(encoding="utf-8"))
    assert report["n_kept"] == 2  # replaced by the second selection
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(OutputFolderError, match=r"not a dataset folder.*not deleting"):
        _filter([run], foreign, FilterRules(), force=True)
    assert (foreign / "todo.txt").read_text(encoding="utf-8") == "keep me"
    with pytest.raises(OutputFolderError, match="runs are read-only"):
        _filter([run], run / "filtered", FilterRules(), force=True)
    with pytest.raises(OutputFolderError, match="runs are read-only"):
        _filter([run], run.parent, FilterRules(), force=True)
    assert (run / "run.json").exists()


def test_bad_rules_leave_out_untouched(tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(FilterRuleError, match=r"no verdicts/gpt\.jsonl"):
        _filter([run], out, FilterRules(grader="gpt"))
    assert not out.exists()


def test_nothing_kept_writes_reports_then_refuses_export(tmp_path):
    """The filter stage writes its reports whatever it keeps; keeping nothing is an error
    only for an export (``require_kept``), and the command exits 1 before exporting."""
    run = _run(tmp_path)
    out = tmp_path / "out"
    outcome = _filter([run], out, FilterRules(min_pass_rate=1.0, min_sub_calls=5))
    assert (out / "filter_report.md").exists() and outcome.selection.n_kept == 0
    with pytest.raises(
        NothingKeptError, match=r"no episode kept out of 4; see .*filter_report\.md"
    ):
        outcome.require_kept()
    out2 = tmp_path / "out2"
    args = ["filter", str(run), "--out", str(out2), "--where", "n_sub_calls >= 5"]
    args += ["--min-pass-rate", "1.0", "--tokenizer", "never-loaded"]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 1, result.output
    assert "error: no episode kept out of 4" in result.output
    assert sorted(p.name for p in out2.iterdir()) == [
        "decisions.jsonl",
        "filter_report.json",
        "filter_report.md",
    ]


def test_cli_invalid_export_options_exit_2_before_writing(tmp_path):
    run = _run(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        _app(),
        ["filter", str(run), "--out", str(out), "--tokenizer", "t", "--mode", "sideways"],
    )
    assert result.exit_code == 2, result.output
    assert "error: invalid export options: mode:" in result.output
    assert not out.exists()
    with pytest.raises(ExportOptionsError, match="invalid export options: max_length"):
        build_export_options(tokenizer="t", max_length=2)


def test_cli_report_only_with_rules_file_and_overrides(tmp_path):
    run = _run(tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text("min_sub_calls: 1\nwhere: ['n_turns >= 2']\n", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        _app(),
        [
            "filter",
            str(run),
            "--out",
            str(out),
            "--rules",
            str(rules),
            "--min-pass-rate",
            "0.5",
            "--where",
            "depth == 1",
            "--report-only",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "kept 1 of 4 episodes (dropped: status 1, sub_calls 1, pass_rate 1)" in result.output
    report = json.loads((out / "filter_report.json").read_text(encoding="utf-8"))
    assert report["rules"]["where"] == ["n_turns >= 2", "depth == 1"]
    assert report["rules"]["min_sub_calls"] == 1


def test_cli_errors_exit_2_naming_the_problem(tmp_path):
    run = _run(tmp_path)
    app = _app()
    result = CliRunner().invoke(
        app,
        ["filter", str(run), "--out", str(tmp_path / "o"), "--where", "().__class__"],
    )
    assert result.exit_code == 2
    assert "'().__class__'" in result.output and "Attribute is not allowed" in result.output
    result = CliRunner().invoke(app, ["filter", str(run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--tokenizer is needed" in result.output
    result = CliRunner().invoke(
        app, ["filter", str(tmp_path), "--out", str(tmp_path / "o"), "--report-only"]
    )
    assert result.exit_code == 2 and "run.json not found" in result.output
    assert not (tmp_path / "o").exists()


def test_end_to_end_dataset_from_collected_run(collected_run, tmp_path, smollm2_dir):
    """Acceptance (issue 5): filtering a collected run gives a dataset that
    ``datasets.load_from_disk`` opens, with a card and a filter report."""
    import datasets

    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    out = tmp_path / "datasets" / "d"
    options = build_export_options(tokenizer=str(smollm2_dir), max_length=4096)
    outcome = _filter([run], out, FilterRules(dedup=[], min_pass_rate=0.0))
    assert outcome.selection.n_kept == 2
    outcome.require_kept()
    export_stage(
        ExportConfig(
            out=out, options=options, episodes=outcome.decisions, card_extra=outcome.card_section()
        ),
        progress=False,
    )
    ds = datasets.load_from_disk(str(out))
    assert len(ds) == 2
    decisions = {d.episode_id: d for d in outcome.selection.decisions}
    assert set(ds["episode_id"]) == set(decisions)
    for row in ds:
        assert row["pass_rate"] == decisions[row["episode_id"]].pass_rate is not None
        assert row["coverage"] == decisions[row["episode_id"]].coverage
        assert sum(row["assistant_masks"]) > 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Filter (rejection sampling)" in card and "2 of 2 episodes kept" in card
    assert (out / "export.json").exists()
    report = json.loads((out / "filter_report.json").read_text(encoding="utf-8"))
    assert report["n_kept"] == 2 and report["grader"] == "reference"
    assert len((out / "decisions.jsonl").read_text(encoding="utf-8").splitlines()) == 2


def test_cli_end_to_end_with_default_dedup(collected_run, tmp_path, smollm2_dir):
    """Through the typer command: the scripted root wrote the same memo twice, so the
    default memo de-duplication keeps one episode and exports one example."""
    import datasets

    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    out = tmp_path / "ds"
    result = CliRunner().invoke(
        _app(), ["filter", str(run), "--out", str(out), "--tokenizer", str(smollm2_dir)]
    )
    assert result.exit_code == 0, result.output
    assert "kept 1 of 2 episodes (dropped: duplicate 1)" in result.output
    assert len(datasets.load_from_disk(str(out))) == 1
