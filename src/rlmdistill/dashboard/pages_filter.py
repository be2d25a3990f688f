"""Filter preview page (rejection-sampling rules, live kept/dropped counts, export)."""

from __future__ import annotations

import streamlit as st

from rlmdistill.dashboard.data import Workspace


def render(ws: Workspace) -> None:
    """Render the Filter preview page."""
    st.info("pending")
