"""The dashboard on a run that ``rlmdistill import rlm`` wrote (recorded ``rlms`` 0.1.3 logs,
``tests/data/import/``): the Runs page lists it, the Trace page shows its turns, sub-calls
(the depth-2 child's turns too), verdicts and coverage."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE
from rlmdistill.importers.rlm import import_rlm
from rlmdistill.judge.main import JudgeConfig
from rlmdistill.judge.main import run as judge_stage
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.runs import load_summaries

DATA = Path(__file__).parent / "data" / "import"
APP = str(Path(app_module.__file__))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    room = write_clause_room(tmp_path / "rooms" / "clauses", n_documents=3, repeats=60)
    run = tmp_path / "runs" / "imported"
    import_rlm([DATA / "rlms-0.1.3-depth1.jsonl", DATA / "rlms-0.1.3-depth2.jsonl"], room, run)
    judge_stage(JudgeConfig(run_dir=run))
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


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.code]
    return "\n".join(str(p) for p in parts + [c.value for c in at.caption])


def test_runs_page_lists_the_imported_run(workspace: Path) -> None:
    df = _open("runs").dataframe[0].value
    assert list(df["run"]) == ["imported"]
    assert df["episodes"].iloc[0] == "3/3" and df["status"].iloc[0] == "completed 3"


def test_trace_page_shows_an_imported_depth2_episode(workspace: Path) -> None:
    run = workspace / "runs" / "imported"
    s = next(x for x in load_summaries(run) if x.depth == 2)
    at = _open("trace", run="imported", episode=s.episode_id)
    text = _texts(at)
    assert "#### Turn 0" in text and "#### Turn 1" in text
    assert "rlm_query('Find clauses in: '" in text  # the root's first reply
    assert [m.value for m in at.metric if m.label == "sub-calls"] == ["2"]
    docs = next(d.value for d in at.dataframe if "document" in d.value.columns)
    assert dict(zip(docs["document"], docs["coverage"], strict=True)) == s.coverage.per_document
