"""Show report folders written by the analysis stage (``DIR/reports/<name>/``): the Markdown,
every PNG figure and the JSON of every number, as the analysis stage wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from rlmdistill.analysis import DEFAULT_RESAMPLES
from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.traces import layout


def report_files(report_dir: Path) -> tuple[Path | None, list[Path], Path | None]:
    """``(markdown, pngs, json)`` of a report folder: ``report.md`` (or the first ``*.md``),
    every ``*.png`` (sorted, sub-folders included) and ``report.json`` when present."""
    md: Path | None = report_dir / layout.REPORT_MD
    if md is None or not md.exists():
        md = next(iter(sorted(report_dir.glob("*.md"))), None)
    js = report_dir / layout.REPORT_JSON
    return md, sorted(report_dir.rglob("*.png")), js if js.exists() else None


def report_figures(report_dir: Path, prefix: str) -> list[Path]:
    """The report's PNG figures whose file name starts with ``prefix`` (``"depth_ablation"``
    gives ``depth_ablation_0.png`` but not ``grid_depth1.png``), sorted."""
    return [p for p in report_files(report_dir)[1] if p.name.startswith(prefix)]


def show_report(report_dir: Path, figure_filter: str | None = None) -> None:
    """Render one report folder; ``figure_filter`` keeps only figures whose file name starts
    with it (``"depth_ablation"``: ``depth_ablation_0.png`` but not ``grid_depth1.png``)."""
    md, pngs, js = report_files(report_dir)
    if figure_filter:
        pngs = report_figures(report_dir, figure_filter)
    if md is not None and figure_filter is None:
        with st.expander(f"{md.name}", expanded=False):
            st.markdown(md.read_text(encoding="utf-8"))
    for i in range(0, len(pngs), 2):
        cols = st.columns(2)
        for col, png in zip(cols, pngs[i : i + 2], strict=False):
            col.image(str(png), caption=png.name)
    if js is not None and figure_filter is None:
        with st.expander("report.json"):
            st.json(data.load_json(js))


def pick_report(ws: Workspace, key: str) -> Path | None:
    """A select box over ``DIR/reports/*``; ``None`` (with a caption) when there is none."""
    reports = data.list_reports(ws)
    if not reports:
        st.caption(
            f"No reports in `reports/` of workspace {ws.root.name} (write one with `rlmdistill report`)."
        )
        return None
    name = st.selectbox("Report", [r.name for r in reports], key=key)
    return ws.reports / str(name)


# ------------------------------------------------------------------ analysis-stage reports
def fmt_estimate(e: Any) -> str:
    """``"0.512 [0.401, 0.620]"``; the value alone when no interval; ``"undefined (why)"``
    when there is no value (never a made-up number)."""
    if e.value is None:
        return f"undefined ({e.reason})" if e.reason else "undefined"
    if e.low is None or e.high is None:
        return f"{e.value:.3f}"
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def load_report(report_dir: Path) -> Any | None:
    """The analysis stage's :class:`~rlmdistill.analysis.schema.Report` of ``report.json``
    (cached by path + mtime), ``None`` when the folder has none. Raises ``ValueError`` naming
    the file when it does not validate."""
    from rlmdistill.analysis.schema import Report

    raw = data.load_json(report_dir / layout.REPORT_JSON)
    if raw is None:
        return None
    try:
        return Report.model_validate(raw)
    except ValueError as exc:
        raise ValueError(f"{report_dir / 'report.json'}: not a report: {exc}") from exc


def build_analysis_report(
    run_dirs: list[Path],
    out: Path,
    overwrite: bool,
    *,
    grader: str | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Any:
    """Write a report with the analysis stage :func:`rlmdistill.analysis.main.run` (the
    function behind ``rlmdistill report``; first run = baseline; ``grader``, ``resamples``,
    ``seed`` as its ``--grader``, ``--resamples``, ``--seed``) and return it. Raises what it
    raises (``ValueError``, ``FileExistsError``, ...)."""
    from rlmdistill.analysis.main import ReportConfig, run

    return run(
        ReportConfig(
            runs=run_dirs,
            out=out,
            overwrite=overwrite,
            grader=grader,
            resamples=resamples,
            seed=seed,
        )
    )
