"""``CollectConfig.request_timeout_s``: the per-request timeout of ``openai:`` clients is a
setting of the run (a slow CPU vLLM server needs more than the client's 120 s), and it is
operational: it never changes episode ids, so a run resumes when it changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.collect.config import OPERATIONAL_FIELDS, CollectConfig
from rlmdistill.collect.main import run_collect
from rlmdistill.collect.runner import collect
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.schema import AttemptRecord
from rlmdistill.traces.store import parse_records

OLD_RUN = Path(__file__).parent / "data" / "run_b25d9e7"
"""run.json + episodes.jsonl written by older code (see tests/test_attempts.py)."""


@pytest.fixture()
def room(tmp_path: Path) -> Path:
    return write_clause_room(tmp_path / "room", n_documents=3, repeats=5)


def test_request_timeout_stays_out_of_the_episode_id() -> None:
    base = CollectConfig(rooms=[], root="openai:r@http://127.0.0.1:9/v1", sub="local:x")
    assert "request_timeout_s" in OPERATIONAL_FIELDS
    assert base.model_copy(update={"request_timeout_s": 900.0}).fingerprint() == base.fingerprint()
    with pytest.raises(ValueError, match="request_timeout_s"):
        CollectConfig(rooms=[], root="local:x", sub="local:x", request_timeout_s=0)


def test_an_older_run_json_resumes_with_a_request_timeout(room: Path, tmp_path: Path) -> None:
    old = json.loads((OLD_RUN / "run.json").read_text())
    assert "request_timeout_s" not in old["config"]
    assert DataRoom.load(room).room_hash == old["rooms"][0]["room_hash"]
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    cfg = CollectConfig.model_validate(
        {**old["config"], "rooms": [str(room)], "request_timeout_s": 900.0}
    )
    never_called = OpenAIChatClient("root", "http://127.0.0.1:9/v1")  # all done: no request
    res = collect(cfg, run, never_called, never_called, progress=False)
    assert (res.skipped, res.summaries, res.unfinished) == (2, [], ())
    assert (run / "episodes.jsonl").read_bytes() == (OLD_RUN / "episodes.jsonl").read_bytes()


class SlowRoot:
    """The root's replies come after ``delay_s``; the sub answers at once."""

    def __init__(self, delay_s: float) -> None:
        self.inner = ScriptedHandler(["FINAL(memo)"], lambda p: "ok")
        self.models = self.inner.models
        self.delay_s = delay_s
        self.root_calls = 0

    def __call__(self, request: dict[str, Any]) -> FakeReply | str:
        if request.get("model") == "root":
            self.root_calls += 1
            return FakeReply.hang(self.delay_s)
        return self.inner(request)


def test_request_timeout_reaches_the_openai_clients(room: Path, tmp_path: Path) -> None:
    """A root that answers after 30 s, with request_timeout_s=0.5: each of the 5 HTTP attempts
    (1 + the client's 4 retries) times out after 0.5 s, so the episode is a failed attempt
    (cause ``timeout``) whose message names the 0.5 s timeout, long before 30 s."""
    handler = SlowRoot(delay_s=30.0)
    out = tmp_path / "run"
    with FakeOpenAIServer(handler) as server:
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=1,
            concurrency=1,
            prefill=None,
            request_timeout_s=0.5,
        )
        res = run_collect(cfg, out, progress=False)
    assert res.summaries == [] and len(res.unfinished) == 1
    [attempt] = parse_records(out / "attempts.jsonl", AttemptRecord)
    assert (attempt.cause, attempt.who, attempt.http_attempts) == ("timeout", "root", 5)
    assert "(timeout 0.5s)" in attempt.error
    assert handler.root_calls == 1 + 5  # the sampling probe (one attempt), then the turn
    assert attempt.wall_time_s < 30.0  # every attempt gave up after 0.5 s, not after 30
