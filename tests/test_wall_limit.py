"""The episode wall limit is a safety net, not a budget (issue 21 item 4).

Outcomes are decided by turns, tokens and sub-calls; ``limits.max_wall_s`` only ends a hung
episode (``timeout``). From fingerprint version 2 it is out of the episode id, so a run
resumes with another wall limit; runs written before versions existed (version 1) keep the
ids they were written with, wall limit included.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rlmdistill.collect.config import (
    DEFAULT_MAX_WALL_S,
    FINGERPRINT_VERSION,
    OPERATIONAL_FIELDS,
    CollectConfig,
    episode_id,
    for_run,
)
from rlmdistill.collect.main import build_config, pending_episodes
from rlmdistill.collect.runner import RunConfigMismatch, collect
from rlmdistill.harness.prompts import PROMPT_VERSION
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.runs import load_summaries

DATA = Path(__file__).with_name("data")
BEFORE = DATA / "collect_config_before_sandbox.json"
TODAY = DATA / "run_73ea734_wall"
"""run.json + episodes.jsonl written by main at 73ea734 (before fingerprint versions):
``rlmdistill collect`` of 2 episodes on ``write_clause_room(n_documents=3, repeats=5)``, root
and sub on the loopback fake server at 127.0.0.1:18631, default limits (max_wall_s 1800)."""
TODAY_URL = "http://127.0.0.1:18631/v1"
DEAD = "http://127.0.0.1:9/v1"  # the discard port: nothing listens


def _settings(room: Path, url: str) -> dict[str, object]:
    """What ``rlmdistill collect --room R --root openai:root@URL --sub openai:sub@URL
    --episodes 2 --concurrency 1 --prefill ''`` passes to build_config."""
    return {
        "rooms": [str(room)],
        "root": f"openai:root@{url}",
        "sub": f"openai:sub@{url}",
        "episodes": 2,
        "concurrency": 1,
        "prefill": "",
    }


def test_version_2_leaves_the_wall_limit_out_and_version_1_hashes_what_it_always_did():
    stored = json.loads(BEFORE.read_text())
    config = stored["config"]

    def with_wall(version: int | None, wall: float) -> CollectConfig:
        data = {**config, "limits": {**config["limits"], "max_wall_s": wall}}
        if version is not None:
            data["fingerprint_version"] = version
        return CollectConfig.model_validate(data)

    legacy = CollectConfig.model_validate(config)  # a stored config without the field: v1
    assert legacy.fingerprint_version == 1
    assert legacy.fingerprint() == stored["fingerprint"] == "6a31d24b9bd63130"
    assert with_wall(None, 60.0).fingerprint() != legacy.fingerprint()  # part of v1 ids
    v2 = with_wall(2, 1800.0)
    assert {with_wall(2, w).fingerprint() for w in (1.0, 1800.0, 1e9)} == {v2.fingerprint()}
    assert v2.fingerprint() != legacy.fingerprint()
    # the v2 hash by hand: the v1 fields without limits.max_wall_s, plus the version
    by_hand = {k: v for k, v in config.items() if k not in {"rooms", *OPERATIONAL_FIELDS}}
    by_hand["limits"] = {k: v for k, v in config["limits"].items() if k != "max_wall_s"}
    by_hand.update(fingerprint_version=2, prompt_version=PROMPT_VERSION)
    blob = json.dumps(by_hand, sort_keys=True).encode()
    assert v2.fingerprint() == hashlib.sha256(blob).hexdigest()[:16]
    assert episode_id(v2, "h", "t", 0) == episode_id(with_wall(2, 5.0), "h", "t", 0)


def test_new_configs_get_the_current_version_and_a_generous_wall_limit(tmp_path: Path):
    cfg = build_config(None, _settings(tmp_path, DEAD))
    assert cfg.fingerprint_version == FINGERPRINT_VERSION == 2
    assert cfg.limits.max_wall_s == DEFAULT_MAX_WALL_S == 6 * 3600
    assert for_run(cfg, tmp_path / "no-run") is cfg  # a new run: nothing to adopt


def test_a_run_json_written_before_versions_resumes_with_nothing_pending(tmp_path: Path):
    """A run.json as the code before this change wrote it (no fingerprint_version, wall limit
    1800 s) resumes under today's defaults (version 2, 6 h) with 0 episodes pending, and is
    left as it was; giving it another wall limit explicitly is the mismatch it always was."""
    old = json.loads((TODAY / "run.json").read_text())
    assert "fingerprint_version" not in old["config"]
    assert old["config"]["limits"]["max_wall_s"] == 1800.0
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=5)
    assert DataRoom.load(room).room_hash == old["rooms"][0]["room_hash"]  # the same room
    run = tmp_path / "run"
    shutil.copytree(TODAY, run)
    cfg = build_config(None, _settings(room, TODAY_URL))
    assert (cfg.fingerprint_version, cfg.limits.max_wall_s) == (2, DEFAULT_MAX_WALL_S)
    assert pending_episodes(cfg, run) == 0
    resumed = for_run(cfg, run)
    assert (resumed.fingerprint_version, resumed.limits.max_wall_s) == (1, 1800.0)
    direct = CollectConfig(rooms=[str(room)], root=f"openai:root@{TODAY_URL}",
                           sub=f"openai:sub@{TODAY_URL}", episodes=2)  # fmt: skip
    assert (direct.fingerprint_version, direct.limits.max_wall_s) == (1, DEFAULT_MAX_WALL_S)
    assert pending_episodes(direct, run) == 0  # the recorded wall limit is kept here too
    never_called = OpenAIChatClient("root", DEAD)  # every episode is done: no request
    res = collect(cfg, run, never_called, never_called, progress=False)
    assert (res.skipped, res.summaries, res.unfinished) == (2, [], ())
    for name in ("run.json", "episodes.jsonl"):
        assert (run / name).read_bytes() == (TODAY / name).read_bytes()
    other = build_config(None, {**_settings(room, TODAY_URL), "limits": {"max_wall_s": 900}})
    assert pending_episodes(other, run) == 2  # in version-1 ids the wall limit is part
    with pytest.raises(RunConfigMismatch):
        collect(other, run, never_called, never_called, progress=False)


def test_a_new_run_resumes_with_another_wall_limit(tmp_path: Path):
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=5)
    run = tmp_path / "run"
    handler = ScriptedHandler(["FINAL('memo')"], lambda p: "ok")
    with FakeOpenAIServer(handler, models=["root", "sub"]) as server:
        settings = _settings(room, server.base_url)
        cfg = build_config(None, {**settings, "limits": {"max_wall_s": 600}})
        client = OpenAIChatClient("root", server.base_url, api_key="x", max_retries=0)
        sub = OpenAIChatClient("sub", server.base_url, api_key="x", max_retries=0)
        first = collect(cfg, run, client, sub, progress=False)
    assert len(first.summaries) == 2
    assert json.loads((run / "run.json").read_text())["config"]["fingerprint_version"] == 2
    never_called = OpenAIChatClient("root", DEAD)
    for wall in (60, 86_400):
        again = build_config(None, {**settings, "limits": {"max_wall_s": wall}})
        assert pending_episodes(again, run) == 0
        res = collect(again, run, never_called, never_called, progress=False)
        assert (res.skipped, res.summaries) == (2, [])
    budget = build_config(None, {**settings, "limits": {"max_turns": 2}})
    assert pending_episodes(budget, run) == 2  # a budget still defines the episodes


def test_the_wall_limit_still_ends_a_hung_episode_as_timeout(tmp_path: Path):
    """The safety net itself: a root reply that takes longer than the whole wall limit ends
    the episode ``timeout`` at the next turn, naming the limit as a safety net."""
    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=5)
    slow = FakeReply(text="```repl\nx = 1\n```", delay_s=1.5)
    handler = ScriptedHandler([slow, slow, slow], lambda p: "ok")
    with FakeOpenAIServer(handler, models=["root", "sub"]) as server:
        cfg = build_config(
            None,
            {**_settings(room, server.base_url), "episodes": 1,
             "limits": {"max_wall_s": 1.0, "max_turns": 3}},
        )  # fmt: skip
        client = OpenAIChatClient("root", server.base_url, api_key="x", max_retries=0)
        collect(cfg, tmp_path / "run", client, client, progress=False)
    (summary,) = load_summaries(tmp_path / "run")
    assert summary.status == "timeout" and summary.n_turns <= 1  # 1 unless the start took 1 s
    assert summary.status_detail is not None and "safety net" in summary.status_detail
