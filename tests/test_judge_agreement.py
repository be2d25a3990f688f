"""Judge agreement: pairing of two graders' verdicts and Cohen's kappa (hand-computed values)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from rlmdistill.judge.agreement import (
    TooFewGradersError,
    agreement_table,
    cohen_kappa,
    run_agreement,
)
from rlmdistill.judge.cli import list_graders, register, render_agreement
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.store import append_records


def v(
    grader: str, ep: str, cid: str, label: str, ctype: str = "finding", sha: str | None = "m"
) -> Verdict:
    return Verdict(
        episode_id=ep,
        grader=grader,
        grader_version="1",
        criterion_id=cid,
        criterion_type=ctype,
        verdict=label,  # type: ignore[arg-type]
        reason="r",
        memo_sha256=sha,
    )


# ----------------------------------------------------------------------------- kappa
@pytest.mark.parametrize(
    ("confusion", "kappa"),
    [
        # n=50, p_o=0.7, p_e=(25*30+25*20)/2500=0.5 -> (0.7-0.5)/0.5
        ([[20, 5], [10, 15]], 0.4),
        # n=100, p_o=0.6, p_e=(60*70+40*30)/1e4=0.54 -> 0.06/0.46
        ([[45, 15], [25, 15]], 0.06 / 0.46),
        # n=100, p_o=0.6, p_e=(60*30+40*70)/1e4=0.46 -> 0.14/0.54
        ([[25, 35], [5, 35]], 0.14 / 0.54),
        # perfect disagreement: p_o=0, p_e=0.5 -> -1
        ([[0, 5], [5, 0]], -1.0),
        # one grader always PASS, the other mixed: p_o=0.6, p_e=(5*3)/25=0.6 -> 0
        ([[3, 2], [0, 0]], 0.0),
        # perfect agreement with both labels used
        ([[4, 0], [0, 6]], 1.0),
    ],
)
def test_cohen_kappa_matches_hand_computed_values(confusion, kappa):
    got = cohen_kappa(np.array(confusion))
    assert got.reason is None and got.value == pytest.approx(kappa, abs=1e-12)


def test_cohen_kappa_degenerate_cases_are_undefined_not_nan_case_a1():
    """Case A1: no variance (every pair PASS by both) or no pairs -> undefined with a reason."""
    all_pass = cohen_kappa(np.array([[7, 0], [0, 0]]))
    assert all_pass.value is None and "same single label (PASS)" in (all_pass.reason or "")
    all_fail = cohen_kappa(np.array([[0, 0], [0, 3]]))
    assert all_fail.value is None and "(FAIL)" in (all_fail.reason or "")
    empty = cohen_kappa(np.zeros((2, 2)))
    assert empty == (None, "no pairs graded PASS/FAIL by both graders")
    with pytest.raises(ValueError, match="square"):
        cohen_kappa(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="negative"):
        cohen_kappa(np.array([[1, -1], [0, 1]]))


# ----------------------------------------------------------------------------- table
def test_agreement_table_pairs_per_type_and_counts_ungradable_apart():
    a = [
        v("ref", "e1", "c1", "PASS"),
        v("ref", "e1", "c2", "FAIL"),
        v("ref", "e1", "c3", "PASS", "citation"),
        v("ref", "e1", "c4", "UNGRADABLE", "citation"),
        v("ref", "e2", "c1", "FAIL"),
        v("ref", "e2", "c1", "PASS"),  # the last verdict per (episode, criterion) counts
        v("ref", "e3", "c1", "PASS", sha="old"),  # another memo: not paired
        v("ref", "e4", "c9", "FAIL"),  # only a
    ]
    b = [
        v("llm", "e1", "c1", "PASS"),
        v("llm", "e1", "c2", "PASS"),
        v("llm", "e1", "c3", "PASS", "citation"),
        v("llm", "e1", "c4", "PASS", "citation"),
        v("llm", "e2", "c1", "PASS", sha=None),  # unknown memo hash on one side: paired
        v("llm", "e3", "c1", "PASS", sha="new"),
    ]
    table = agreement_table(a, b, grader_a="ref", grader_b="llm")
    rows = {r.criterion_type: r for r in table.rows}
    assert [r.criterion_type for r in table.rows] == ["citation", "finding", "all"]
    cit, fin, total = rows["citation"], rows["finding"], rows["all"]
    assert (cit.n, cit.n_ungradable, cit.both_pass, cit.agreement) == (1, 1, 1, 1.0)
    assert cit.kappa is None and "PASS" in (cit.kappa_undefined or "")
    # finding: (PASS,PASS) e1c1, (FAIL,PASS) e1c2, (PASS,PASS) e2c1
    assert (fin.n, fin.both_pass, fin.a_fail_b_pass, fin.a_pass_b_fail) == (3, 2, 1, 0)
    assert fin.agreement == pytest.approx(2 / 3)
    # p_o=2/3, rows (2,1), cols (3,0): p_e=6/9=2/3 -> kappa 0
    assert fin.kappa == pytest.approx(0.0)
    assert (total.n, total.n_ungradable, total.both_pass) == (4, 1, 3)
    assert total.agreement == pytest.approx(3 / 4)
    assert (table.n_only_a, table.n_only_b) == (2, 1)
    assert "NaN" not in table.model_dump_json()


def test_agreement_of_empty_inputs_is_undefined():
    table = agreement_table([], [], grader_a="a", grader_b="b")
    (row,) = table.rows
    assert (row.criterion_type, row.n, row.agreement, row.kappa) == ("all", 0, None, None)
    assert row.kappa_undefined == "no pairs graded PASS/FAIL by both graders"


def test_kappa_of_a_mixed_table_through_verdicts():
    """20/5/10/15 pairs (kappa 0.4 by hand) built as verdict records."""
    a, b = [], []
    k = 0
    cells = [("PASS", "PASS", 20), ("PASS", "FAIL", 5), ("FAIL", "PASS", 10), ("FAIL", "FAIL", 15)]
    for la, lb, count in cells:
        for _ in range(count):
            a.append(v("a", f"e{k}", "c", la))
            b.append(v("b", f"e{k}", "c", lb))
            k += 1
    row = agreement_table(a, b, grader_a="a", grader_b="b").rows[-1]
    assert row.n == 50 and row.agreement == pytest.approx(0.7)
    assert row.kappa is not None and math.isclose(row.kappa, 0.4)


# ----------------------------------------------------------------------------- run + CLI
def write_run(tmp_path, graders: dict[str, list[Verdict]]):
    run = tmp_path / "run"
    (run / "verdicts").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    for name, verdicts in graders.items():
        append_records(run / "verdicts" / f"{name}.jsonl", verdicts)
    (run / "verdicts" / "llm-x.cache.jsonl").write_text("")
    (run / "verdicts" / "llm-x.usage.jsonl").write_text("")
    return run


def test_run_agreement_picks_the_other_grader_and_ignores_side_files(tmp_path):
    run = write_run(
        tmp_path,
        {
            "reference": [v("reference", "e", "c1", "PASS"), v("reference", "e", "c2", "FAIL")],
            "llm-x": [v("llm-x", "e", "c1", "PASS"), v("llm-x", "e", "c2", "PASS")],
        },
    )
    assert list_graders(run) == ["llm-x", "reference"]
    table = run_agreement(run)
    assert (table.grader_a, table.grader_b) == ("reference", "llm-x")
    assert table.rows[-1].agreement == 0.5
    assert run_agreement(run, "llm-x").grader_b == "reference"
    with pytest.raises(FileNotFoundError, match="graders with verdicts: llm-x, reference"):
        run_agreement(run, "reference", "llm-y")
    append_records(run / "verdicts" / "llm-y.jsonl", [v("llm-y", "e", "c1", "FAIL")])
    with pytest.raises(ValueError, match="pick the second grader with --b"):
        run_agreement(run)


def test_agreement_command_prints_table_and_undefined_kappa(tmp_path):
    run = write_run(
        tmp_path,
        {
            "reference": [v("reference", "e", "c1", "PASS")],
            "llm-x": [v("llm-x", "e", "c1", "PASS")],
        },
    )
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["judge-agreement", str(run)])
    assert res.exit_code == 0, res.output
    assert "undefined" in res.output and "no variance" in res.output
    res = CliRunner().invoke(app, ["judge-agreement", str(run), "--json"])
    data = json.loads(res.output)
    assert data["rows"][-1]["kappa"] is None and data["rows"][-1]["n"] == 1
    res = CliRunner().invoke(app, ["judge-agreement", str(run), "--b", "nope"])
    assert res.exit_code != 0 and "nope" in res.output
    console = Console(record=True, width=140)
    render_agreement(run_agreement(run), console)
    assert "1.000" in console.export_text()


def test_agreement_with_fewer_than_two_graders_names_the_judge_command(tmp_path):
    app = typer.Typer()
    register(app)
    run = write_run(tmp_path, {"reference": [v("reference", "e", "c1", "PASS")]})
    res = CliRunner().invoke(app, ["judge-agreement", str(run)], env={"COLUMNS": "80"})
    assert res.exit_code == 1  # nothing to compare, as `filter` when nothing is kept
    assert res.output.splitlines() == [
        f"{run}: judge agreement needs verdicts from two graders; this run has one (reference). "
        "Add a second, then run judge-agreement again:",
        f"  rlmdistill judge {run} --judge openai:MODEL@URL"
        "   (or --judge local:qwen2.5-coder-1.5b)",
    ]
    (run / "verdicts" / "reference.jsonl").rename(run / "verdicts" / "llm-x.jsonl")
    res = CliRunner().invoke(app, ["judge-agreement", str(run), "--b", "llm-x"])
    assert res.exit_code == 1 and "has one (llm-x)" in res.output
    assert res.output.splitlines()[-1] == f"  rlmdistill judge {run}"
    (run / "verdicts" / "llm-x.jsonl").unlink()
    with pytest.raises(TooFewGradersError, match=r"has none yet\. Grade it with the reference"):
        run_agreement(run)
    res = CliRunner().invoke(app, ["judge-agreement", str(tmp_path)])
    assert res.exit_code == 2 and "a run directory?" in " ".join(res.output.split())
