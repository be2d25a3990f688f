"""An RL adapter's per-step log on the dashboard's SFT jobs page (``rl_log.jsonl`` of
``rlmdistill rl``): the table the charts are drawn from, and the page under AppTest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import rlmdistill.dashboard.app as app_module
from rlmdistill.dashboard.data import ENV_WORKSPACE, RL_COLUMNS, rl_log

APP = str(Path(app_module.__file__))

LINES = [
    {"step": 1, "loss": 0.0, "kl": None, "reward_mean": 0.0, "reward_std": 0.0, "groups": 2,
     "zero_variance_groups": 2},
    {"step": 2, "loss": 0.01, "kl": 0.002, "reward_mean": 0.25, "reward_std": 0.5, "groups": 2,
     "zero_variance_groups": 1, "rollout_wall_s": 40.5, "sub_calls_per_rollout": 1.5,
     "staleness": 0.0, "stale_token_share": 0.0, "trl": {"reward": 0.25}},
]  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace with one RL adapter whose log has two steps and a torn tail."""
    adapter = tmp_path / "adapters" / "grpo"
    adapter.mkdir(parents=True)
    text = "".join(json.dumps(x) + "\n" for x in LINES) + '{"step": 3, "rew'
    (adapter / "rl_log.jsonl").write_text(text, encoding="utf-8")
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    return tmp_path


def test_rl_log_table_has_each_step_and_its_zero_variance_share(ws: Path) -> None:
    df = rl_log(ws / "adapters" / "grpo")
    assert list(df.columns) == RL_COLUMNS
    assert df["step"].tolist() == [1, 2]
    assert df["reward_mean"].tolist() == [0.0, 0.25]
    assert df["zero_variance_share"].tolist() == [1.0, 0.5]  # 2/2, 1/2
    assert df["rollout_wall_s"].isna().tolist() == [True, False]
    assert rl_log(ws / "adapters" / "none").empty


def test_sft_jobs_page_shows_the_rl_adapters_curves(ws: Path) -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = "sft"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key="sft_adapter").set_value("grpo").run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["step"] == "2" and metrics["reward mean"] == "0.250"
    assert metrics["zero-variance groups"] == "0.50" and metrics["rollout s"] == "40.5"
    titles = [m.value for m in at.markdown]
    assert "**Reward: mean and mean +- sd**" in titles and "**Sub-calls per rollout**" in titles
