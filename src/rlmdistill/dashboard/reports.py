"""Show report folders written by the analysis stage (``DIR/reports/<name>/``): the Markdown,
every PNG figure and the JSON of every number, as the analysis stage wrote them."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace


def report_files(report_dir: Path) -> tuple[Path | None, list[Path], Path | None]:
    """``(markdown, pngs, json)`` of a report folder: ``report.md`` (or the first ``*.md``),
    every ``*.png`` (sorted, sub-folders included) and ``report.json`` when present."""
    md: Path | None = report_dir / "report.md"
    if md is None or not md.exists():
        md = next(iter(sorted(report_dir.glob("*.md"))), None)
    js = report_dir / "report.json"
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
