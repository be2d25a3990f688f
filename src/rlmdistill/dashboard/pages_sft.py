"""SFT jobs page."""

from __future__ import annotations

import streamlit as st

from rlmdistill.dashboard.data import Workspace


def render(ws: Workspace) -> None:
    """Render the SFT jobs page."""
    st.info("pending")
