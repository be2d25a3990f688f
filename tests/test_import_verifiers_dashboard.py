"""The dashboard on a run that ``rlmdistill import verifiers`` wrote (the recorded verifiers
0.4.0 rollouts, ``tests/data/import/``): the Runs page lists it, the Trace page shows the
root's turns (tool calls as repl blocks) and its sub-agents."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE
from rlmdistill.importers.verifiers import import_verifiers
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.runs import load_summaries

VF = Path(__file__).parent / "data" / "import" / "verifiers-0.4.0-rlm.jsonl"
APP = str(Path(app_module.__file__))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    room = write_clause_room(tmp_path / "rooms" / "clauses", n_documents=3, repeats=60)
    import_verifiers([VF], room, tmp_path / "runs" / "from-vf", command=["t"])
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


def test_runs_and_trace_pages_show_an_imported_verifiers_run(workspace: Path) -> None:
    df = _open("runs").dataframe[0].value
    assert list(df["run"]) == ["from-vf"]
    assert df["episodes"].iloc[0] == "2/2" and df["status"].iloc[0] == "completed 2"
    s = load_summaries(workspace / "runs" / "from-vf")[1]
    at = _open("trace", run="from-vf", episode=s.episode_id)
    text = "\n".join(str(x.value) for x in [*at.markdown, *at.code, *at.caption])
    assert "#### Turn 0" in text and "#### Turn 1" in text
    assert "parts = await asyncio.gather(rlm('Find clauses in: '" in text
    assert [m.value for m in at.metric if m.label == "sub-calls"] == ["3"]
