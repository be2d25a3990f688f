"""The report's sections (issue 19 item 2): the public section functions give the report's own
records, a section a caller hands in (the loop's adapter check) is stored in ``report.json``,
and ``report.md`` is rendered from ``report.json`` alone. Over the golden fixture workspace
(two runs, depth 1 and depth 2, an adapter's training log)."""

from __future__ import annotations

import json
from pathlib import Path

from test_golden import load_fixture

from rlmdistill.analysis import sections
from rlmdistill.analysis.checks import AdapterCheck
from rlmdistill.analysis.main import ReportConfig, run
from rlmdistill.analysis.markdown import render_markdown
from rlmdistill.analysis.metrics import load_run_metrics
from rlmdistill.analysis.schema import Report

CHECK = AdapterCheck(
    adapter="adapters/r1",
    prompt_source="the first root prompt of episode e1 (runs/base, room alpha)",
    max_new_tokens=32,
    changed=True,
    first_difference=3,
    max_abs_logit_diff=0.123456,
    base_text="base | text",
    tuned_text="tuned text",
)


def _report(ws: Path, out: Path, checks: list[AdapterCheck]) -> tuple[Report, str, str]:
    report = run(
        ReportConfig(
            runs=[ws / "runs" / "base", ws / "runs" / "deep"],
            out=out,
            sft=[ws / "adapters" / "r1"],
            resamples=200,
            trajectories=False,
            draw=False,
            adapter_checks=checks,
        )
    )
    text = (out / "report.json").read_text(encoding="utf-8")
    return report, text, (out / "report.md").read_text(encoding="utf-8")


def test_adapter_check_is_a_section_of_report_json_and_report_md_is_rendered_from_it(
    tmp_path: Path,
) -> None:
    ws = load_fixture(tmp_path)
    _, text, md = _report(ws, tmp_path / "with", [CHECK])
    assert json.loads(text)["adapter_checks"] == [CHECK.model_dump()]
    assert render_markdown(Report.model_validate_json(text)) == md
    assert md.endswith(
        "## Does the adapter change the root?\n\n"
        "Adapter `adapters/r1`: greedy decoding of 32 tokens on the first root prompt of "
        "episode e1 (runs/base, room alpha): **changed** (first difference at token 3); max "
        "|logit difference| at the first position 0.1235.\n\n"  # 4 significant digits
        "- base: `'base | text'`\n- tuned: `'tuned text'`\n"
    )
    # without a check: no key in report.json (a report as earlier versions wrote it), no section
    _, text, md = _report(ws, tmp_path / "without", [])
    assert "adapter_checks" not in json.loads(text)
    assert "Does the adapter change the root?" not in md
    assert render_markdown(Report.model_validate_json(text)) == md


def test_section_functions_give_the_reports_records(tmp_path: Path) -> None:
    """What the dashboard calls (``analysis.sections``) equals what the report stored."""
    ws = load_fixture(tmp_path)
    report, _, _ = _report(ws, tmp_path / "r", [])
    runs = [ws / "runs" / "base", ws / "runs" / "deep"]
    loaded = [load_run_metrics(d, trajectories=False) for d in runs]
    arms = [sections.arm_info(d.name, d, lm) for d, lm in zip(runs, loaded, strict=True)]
    rows = {a.label: lm.rows for a, lm in zip(arms, loaded, strict=True)}
    rooms = sections.room_labels(list(rows.values()))
    ctx = sections.SectionContext(resamples=200, seed=0, confidence=0.95)
    assert arms == report.arms
    assert len(report.depth_ablations) == 1  # the fixture's two runs differ in depth only
    assert sections.depth_ablations(arms, rows, rooms, ctx) == report.depth_ablations
    assert sections.grids(arms, rows, rooms, ctx) == report.grids
    assert sections.size_correlations(arms, rows, rooms, ctx) == report.size_correlations
    assert sections.token_shares(arms, rows) == report.token_shares
    per_arm = sections.per_arm_metrics(arms, rows, rooms, ctx)
    assert per_arm == report.per_arm
    assert sections.comparisons(arms, rows, rooms, ctx) == report.comparisons
    assert sections.comparisons(arms, rows, rooms, ctx, per_arm) == report.comparisons
