"""Show report folders written by the analysis stage (``DIR/reports/<name>/``): the Markdown,
every PNG figure and the JSON of every number, as the analysis stage wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

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


def show_report(report_dir: Path, figure_filter: str | None = None) -> None:
    """Render one report folder; ``figure_filter`` keeps only figures whose file name contains
    it (e.g. ``"depth"``)."""
    md, pngs, js = report_files(report_dir)
    if figure_filter:
        pngs = [p for p in pngs if figure_filter in p.name]
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
        st.caption(f"No reports in `{ws.reports}` (write one with `rlmdistill report`).")
        return None
    name = st.selectbox("Report", [r.name for r in reports], key=key)
    return ws.reports / str(name)


# ------------------------------------------------------------------ analysis-stage reports
def fmt_estimate(e: Any) -> str:
    """``"0.512 [0.401, 0.620]"``; the value alone when no interval; ``"undefined (why)"``
    when there is no value (never a made-up number, cases A1/A2)."""
    if e.value is None:
        return f"undefined ({e.reason})" if e.reason else "undefined"
    if e.low is None or e.high is None:
        return f"{e.value:.3f}"
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def load_report(report_dir: Path) -> Any | None:
    """The analysis stage's :class:`~rlmdistill.analysis.compare.Report` of ``report.json``
    (cached by path + mtime), ``None`` when the folder has none. Raises ``ValueError`` naming
    the file when it does not validate."""
    from rlmdistill.analysis.compare import Report

    raw = data.load_json(report_dir / layout.REPORT_JSON)
    if raw is None:
        return None
    try:
        return Report.model_validate(raw)
    except ValueError as exc:
        raise ValueError(f"{report_dir / 'report.json'}: not a report: {exc}") from exc


def comparison_frame(report: Any) -> pd.DataFrame:
    """The behaviour-shift table of a report: one row per (comparison, metric) with arm A and
    B means over rooms (bootstrap interval over rooms), the paired mean difference ``B - A``
    with its interval, the Wilcoxon signed-rank p-value, rooms paired and episodes per arm."""
    rows = []
    for comp in report.comparisons:
        for r in comp.rows:
            p = r.paired.wilcoxon.p_value
            rows.append(
                {
                    "comparison": f"{comp.b} vs {comp.a}",
                    "metric": r.metric,
                    "A": fmt_estimate(r.a),
                    "B": fmt_estimate(r.b),
                    "B - A": fmt_estimate(r.paired.mean_difference),
                    "Wilcoxon p": "undefined" if p is None else f"{p:.3g}",
                    "rooms paired": r.paired.n_pairs,
                    "episodes A": r.n_episodes_a,
                    "episodes B": r.n_episodes_b,
                }
            )
    cols = ["comparison", "metric", "A", "B", "B - A", "Wilcoxon p", "rooms paired"]
    return pd.DataFrame(rows, columns=[*cols, "episodes A", "episodes B"])


def depth_frame(report: Any) -> pd.DataFrame:
    """Depth-1 vs depth-2 ablations of a report: one row per (ablation, room) with the two
    room means and their difference; ``NA`` where a room ran at one depth only."""
    rows = []
    for d in report.depth_ablations:
        for room in sorted(set(d.depth1_room_means) | set(d.depth2_room_means)):
            a, b = d.depth1_room_means.get(room), d.depth2_room_means.get(room)
            rows.append(
                {
                    "depth 1 arm": d.depth1_arm,
                    "depth 2 arm": d.depth2_arm,
                    "room": room,
                    f"depth 1 {d.metric}": a,
                    f"depth 2 {d.metric}": b,
                    "change": None if a is None or b is None else b - a,
                }
            )
    return pd.DataFrame(rows)


def grid_frame(report: Any) -> pd.DataFrame:
    """Root x subagent grids of a report: one row per cell (depth, root, sub, mean pass rate
    with interval, episodes)."""
    rows = [
        {
            "depth": g.depth,
            "root": c.root,
            "sub": c.sub,
            "mean pass rate": fmt_estimate(c.mean),
            "episodes": c.n_episodes,
        }
        for g in report.grids
        for c in g.cells
    ]
    return pd.DataFrame(rows, columns=["depth", "root", "sub", "mean pass rate", "episodes"])


def build_analysis_report(run_dirs: list[Path], out: Path, overwrite: bool) -> Any:
    """Write a report with the analysis stage :func:`rlmdistill.analysis.main.run` (the
    function behind ``rlmdistill report``; first run = baseline) and return it. Raises what
    it raises (``ValueError``, ``FileExistsError``, ...)."""
    from rlmdistill.analysis.main import ReportConfig, run

    return run(ReportConfig(runs=run_dirs, out=out, overwrite=overwrite))
