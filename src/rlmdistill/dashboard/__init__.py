"""Streamlit dashboard over a workspace's runs, traces, datasets, SFT jobs and reports.

Start it with ``rlmdistill dashboard --workspace DIR`` (see :mod:`rlmdistill.dashboard.cli`);
the pages read the same files the CLI writes, through the cached loaders of
:mod:`rlmdistill.dashboard.data`. See ``docs/dashboard.md``.
"""

ENV_WORKSPACE = "RLMDISTILL_WORKSPACE"
"""Environment variable naming the workspace folder the app serves."""
