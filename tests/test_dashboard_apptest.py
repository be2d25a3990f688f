"""Dashboard pages under ``streamlit.testing.v1.AppTest``, on a workspace whose runs are made at
test time by the real collector against the loopback fake server (fixture ``collected_run``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE
from rlmdistill.traces.runs import load_summaries, load_verdicts

APP = str(Path(app_module.__file__))


@pytest.fixture
def workspace(tmp_path: Path, collected_run: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace holding a copy of the collected run as ``runs/base``."""
    shutil.copytree(collected_run, tmp_path / "runs" / "base")
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    return tmp_path


def _open(page: str, **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.query_params["page"] = page
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_runs_page_lists_run_with_episode_count(workspace: Path) -> None:
    at = _open("runs")
    df = at.dataframe[0].value
    assert list(df["run"]) == ["base"]
    assert df["episodes"].iloc[0] == "2/2"
    assert df["status"].iloc[0] == "completed 2"
