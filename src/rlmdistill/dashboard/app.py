"""Streamlit entry of the dashboard: ``streamlit run app.py -- --workspace DIR``.

One page at a time, chosen in the sidebar; the page is also a URL query parameter
(``?page=trace&run=<run>&episode=<id>``) so every view can be linked and loaded directly.
The workspace comes from ``--workspace DIR`` after ``--`` or the ``RLMDISTILL_WORKSPACE``
environment variable (see :func:`rlmdistill.dashboard.data.workspace_from_env`).
"""

from __future__ import annotations

import streamlit as st

from rlmdistill.dashboard import (
    pages_ablations,
    pages_compare,
    pages_filter,
    pages_review,
    pages_runs,
    pages_sft,
    pages_trace,
)
from rlmdistill.dashboard.data import workspace_from_env

# Page slug (URL ``?page=``) -> (title, render function).
PAGES = {
    "runs": ("Runs", pages_runs.render),
    "compare": ("Compare", pages_compare.render),
    "trace": ("Trace viewer", pages_trace.render),
    "filter": ("Filter preview", pages_filter.render),
    "review": ("Review", pages_review.render),
    "sft": ("SFT jobs", pages_sft.render),
    "ablations": ("Ablations", pages_ablations.render),
}


def main() -> None:
    """Render the sidebar page picker and the chosen page."""
    st.set_page_config(page_title="rlmdistill", layout="wide")
    ws = workspace_from_env()
    slugs = list(PAGES)
    wanted = st.query_params.get("page", "runs")
    if "page" not in st.session_state:
        st.session_state["page"] = wanted if wanted in PAGES else "runs"
    st.sidebar.title("rlmdistill")
    slug = st.sidebar.radio(
        "Page", slugs, key="page", format_func=lambda s: PAGES[s][0], label_visibility="collapsed"
    )
    st.sidebar.caption(f"workspace: **{ws.root.name}**", help=str(ws.root))
    if st.query_params.get("page") != slug:
        st.query_params["page"] = slug
    title, render = PAGES[slug]
    st.title(title)
    render(ws)


main()
