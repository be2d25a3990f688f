"""Replies of real servers that the collector used to misread (issue: reasoning parser with a
prefill, aborted and truncated replies, a server refusing a sampling parameter) and the fake
server's quiet shutdown. Each test failed on the code before its fix."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import urllib3
from pydantic import TypeAdapter
from typer.testing import CliRunner

from rlmdistill.analysis.summary import summarize_run
from rlmdistill.cli import app
from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.main import run_collect
from rlmdistill.collect.runner import collect
from rlmdistill.filter.fields import episode_fields
from rlmdistill.filter.rules import FilterRules
from rlmdistill.filter.select import select_episodes
from rlmdistill.models.base import Message, ReasoningOnlyError, Sampling
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.preflight import SamplingRefusedError, refused_parameter
from rlmdistill.testing.fake_openai import (
    FakeOpenAIServer,
    FakeReply,
    ScriptedHandler,
    refuse_parameter,
)
from rlmdistill.testing.rooms import write_clause_room
from rlmdistill.traces.memo_errors import count_sub_call_error_texts, sub_call_error_text
from rlmdistill.traces.schema import (
    AttemptRecord,
    EpisodeSummary,
    SubCallRecord,
    TrajectoryRecord,
    TurnRecord,
)
from rlmdistill.traces.store import parse_records

PREFILL = "```repl\n"
MEMO_CODE = "memo = 'Change of control in c0: ' + answer\nFINAL_VAR(memo)\n```"
ONE_TURN = f"{PREFILL}answer = llm_query('Summarise contract c0.')\n{MEMO_CODE}"


@pytest.fixture()
def room(tmp_path: Path) -> Path:
    return write_clause_room(tmp_path / "room", n_documents=3, repeats=5)


def config(room: Path, url: str, **kw: Any) -> CollectConfig:
    base: dict[str, Any] = {
        "rooms": [str(room)],
        "root": f"openai:root@{url}",
        "sub": f"openai:sub@{url}",
        "episodes": 1,
        "concurrency": 1,
        "prefill": PREFILL,
        "limits": EpisodeLimits(max_turns=2),
    }
    base.update(kw)
    return CollectConfig(**base)


def fast(server: FakeOpenAIServer, model: str) -> OpenAIChatClient:
    return OpenAIChatClient(
        model, server.base_url, api_key="k", max_retries=1, backoff_initial_s=0.001,
        backoff_max_s=0.01, timeout_s=5.0,
    )  # fmt: skip


def trajectory(run: Path, episode_id: str) -> list[Any]:
    adapter = TypeAdapter(TrajectoryRecord)
    return list(parse_records(run / "trajectories" / f"{episode_id}.jsonl", adapter))


# ------------------------------------------------------------------ fake server shutdown
def test_fake_server_stops_quietly_with_a_keep_alive_connection_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client keeps its connection open after a reply; closing the server used to log
    asyncio's "Exception in callback ... CancelledError" traceback (Python 3.11)."""
    caplog.set_level(logging.DEBUG, logger="asyncio")
    server = FakeOpenAIServer()
    pool = urllib3.HTTPConnectionPool("127.0.0.1", server.port, maxsize=1)
    body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
    answer = pool.request("POST", "/v1/chat/completions", body=body)
    assert answer.status == 200 and pool.num_connections == 1  # kept alive, idle
    server.close()
    pool.close()
    logged = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert logged == [], [r.getMessage() for r in logged]


# ------------------------------------------------------------------ reasoning parser + prefill
def test_reasoning_parser_returns_a_prefilled_continuation_as_reasoning_and_it_is_the_reply() -> (
    None
):
    """vLLM behind --reasoning-parser answers a continue_final_message request with the
    continuation in ``reasoning`` and ``content: null`` (finish_reason stop): that text is the
    reply. A prefill that opens a <think> block keeps the old reading (reasoning only)."""
    continuation = "print(len(list_documents()))\n```"
    handler = ScriptedHandler([PREFILL + continuation])
    with FakeOpenAIServer(handler, reasoning_parser=True) as server:
        wire = json.loads(
            urllib3.request(
                "POST",
                server.base_url + "/chat/completions",
                body=json.dumps(
                    {
                        "model": "root",
                        "messages": [
                            {"role": "user", "content": "go"},
                            {"role": "assistant", "content": PREFILL},
                        ],
                        "continue_final_message": True,
                    }
                ),
            ).data
        )
        message = wire["choices"][0]["message"]
        assert message["content"] is None and message["reasoning"] == continuation
        assert wire["choices"][0]["finish_reason"] == "stop"
        c = fast(server, "root")
        result = c.chat([Message(role="user", content="go")], Sampling(), prefill=PREFILL)
        assert (result.text, result.reasoning, result.text_from_reasoning) == (
            continuation,
            None,
            True,
        )
        with pytest.raises(ReasoningOnlyError):  # a real thought cut short stays one
            c.chat([Message(role="user", content="go")], Sampling(), prefill="<think>\n")
        c.close()


def test_reasoning_parser_root_with_prefill_completes_its_episode(room: Path, tmp_path: Path):
    """Before: "reasoning only: raise max_tokens ..." and a finished ``model_error`` episode."""
    handler = ScriptedHandler([ONE_TURN], lambda p: "<think>read it</think>It has one.")
    run = tmp_path / "run"
    with FakeOpenAIServer(handler, reasoning_parser=True) as server:
        res = collect(
            config(room, server.base_url), run, fast(server, "root"), fast(server, "sub"),
            progress=False,
        )  # fmt: skip
    [summary] = res.summaries
    assert summary.status == "completed", summary.status_detail
    assert summary.memo == "Change of control in c0: It has one."
    [turn] = [r for r in trajectory(run, summary.episode_id) if isinstance(r, TurnRecord)]
    assert turn.text_from_reasoning and turn.reasoning is None
    assert turn.completion == ONE_TURN[len(PREFILL) :]


# ------------------------------------------------------------------ abort and truncation
def test_an_aborted_root_reply_is_a_failed_attempt_and_its_code_never_runs(
    room: Path, tmp_path: Path
) -> None:
    """HTTP 200 with finish_reason "abort" and half a code block: before, the half code ran,
    its SyntaxError was shown to the root and the episode was a finished policy episode."""
    half = FakeReply(text="answer = llm_query('Summ", finish_reason="abort")
    handler = ScriptedHandler([half, ONE_TURN])
    run = tmp_path / "run"
    with FakeOpenAIServer(handler) as server:
        res = collect(
            config(room, server.base_url), run, fast(server, "root"), fast(server, "sub"),
            progress=False,
        )  # fmt: skip
        n_root = sum(1 for r in server.requests if r["model"] == "root")
    assert res.summaries == [] and not (run / "episodes.jsonl").exists()
    [attempt] = parse_records(run / "attempts.jsonl", AttemptRecord)
    assert (attempt.who, attempt.cause, attempt.http_attempts) == ("root", "finish_abort", 2)
    assert n_root == 2  # retried once in the request (max_retries=1), never a second turn
    turns = [r for r in trajectory(run, attempt.episode_id) if isinstance(r, TurnRecord)]
    assert [t.blocks for t in turns] == [[]]  # nothing ran


def test_finish_reason_on_every_turn_and_sub_call_and_truncated_turns_counted(
    room: Path, tmp_path: Path
) -> None:
    """Root turn 0 is cut by max_tokens (fake server: 4 characters a token, 12 tokens = 48
    characters of a 95-character reply): finish_reason "length", counted in the summary."""
    long_turn = PREFILL + "notes = 'x' * 3\nprint(notes)\n" + "# " + "padding " * 8 + "\n```"
    handler = ScriptedHandler([long_turn, ONE_TURN], lambda p: "It has one.")
    run = tmp_path / "run"
    with FakeOpenAIServer(handler) as server:
        cfg = config(room, server.base_url, root_sampling=Sampling(max_tokens=12))
        res = collect(cfg, run, fast(server, "root"), fast(server, "sub"), progress=False)
    [summary] = res.summaries
    records = trajectory(run, summary.episode_id)
    turns = [r for r in records if isinstance(r, TurnRecord)]
    assert [t.finish_reason for t in turns] == ["length", "length"]
    assert summary.n_truncated_turns == 2
    assert episode_fields(summary, None)["truncated_turns"] == 2
    # a turn line written before the field loads, with the reason unknown
    old = turns[0].model_dump(mode="json", exclude={"finish_reason", "text_from_reasoning"})
    assert TurnRecord.model_validate(old).finish_reason is None


def test_sub_call_finish_reason_recorded(room: Path, tmp_path: Path) -> None:
    handler = ScriptedHandler([ONE_TURN], lambda p: "It has one. " * 40)
    run = tmp_path / "run"
    with FakeOpenAIServer(handler) as server:
        cfg = config(room, server.base_url, sub_sampling=Sampling(max_tokens=8))
        res = collect(cfg, run, fast(server, "root"), fast(server, "sub"), progress=False)
    [summary] = res.summaries
    records = trajectory(run, summary.episode_id)
    assert [r.finish_reason for r in records if isinstance(r, SubCallRecord)] == ["length"]
    assert [r.finish_reason for r in records if isinstance(r, TurnRecord)] == ["stop"]
    assert summary.n_truncated_turns == 0


# ------------------------------------------------------------------ refused sampling parameters
def test_refused_parameter_is_named() -> None:
    assert refused_parameter("Unsupported parameter: 'max_tokens' is not supported") == (
        "max_tokens"
    )
    assert refused_parameter("Unsupported value: 'temperature' does not support 0.7") == (
        "temperature"
    )
    assert refused_parameter("Unrecognized request argument supplied: top_p") == "top_p"
    assert refused_parameter("rate limited") is None


def test_sub_server_refusing_max_tokens_stops_collect_with_exit_2_and_no_run(
    room: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Before: the episode completed with every sub-call failed and the error texts in its
    memo, exit 0."""
    from rlmdistill.cli import main

    handler = refuse_parameter("max_tokens", ScriptedHandler([ONE_TURN]), models=["sub"])
    out = tmp_path / "run"
    with FakeOpenAIServer(handler, models=["root", "sub"]) as server:
        argv = [
            "collect", "--room", str(room), "--root", f"openai:root@{server.base_url}",
            "--sub", f"openai:sub@{server.base_url}", "--episodes", "1", "--out", str(out),
            "--no-progress", "--prefill", PREFILL,
        ]  # fmt: skip
        monkeypatch.setattr("sys.argv", ["rlmdistill", *argv])
        with pytest.raises(SystemExit) as info:
            main()
        n_sub = sum(1 for r in server.requests if r["model"] == "sub")
    assert info.value.code == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps lines
    assert "--sub" in err and "parameter 'max_tokens'" in err
    assert not out.exists()  # no run.json, no episode
    assert n_sub == 1  # one probe, no retry


def test_root_server_refusing_temperature_is_a_configuration_fault(
    room: Path, tmp_path: Path
) -> None:
    handler = refuse_parameter("temperature", ScriptedHandler([ONE_TURN]), unless=1.0)
    with FakeOpenAIServer(handler, models=["root", "sub"]) as server:
        cfg = config(room, server.base_url)
        with pytest.raises(SamplingRefusedError) as info:
            run_collect(cfg, tmp_path / "run", progress=False)
        ok = config(
            room,
            server.base_url,
            root_sampling=Sampling(temperature=1.0),
            sub_sampling=Sampling(temperature=1.0),
        )
        res = run_collect(ok, tmp_path / "run-ok", progress=False)
    assert (info.value.role, info.value.parameter, info.value.status) == (
        "--root",
        "temperature",
        400,
    )
    assert not (tmp_path / "run").exists()
    assert [s.status for s in res.summaries] == ["completed"]


def test_prefill_with_a_spec_that_sends_none_is_refused_before_the_run(
    room: Path, tmp_path: Path
) -> None:
    with FakeOpenAIServer(ScriptedHandler([ONE_TURN])) as server:
        cfg = config(room, server.base_url).model_copy(
            update={"root": f"openai:root@{server.base_url}+prefill=none"}
        )
        with pytest.raises(SamplingRefusedError, match=r"\+prefill=none"):
            run_collect(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ error text is never kept
def test_filter_never_keeps_a_memo_carrying_sub_call_error_text(room: Path, tmp_path: Path):
    """A sub server that refuses max_tokens mid-run (collect() without the probe): the root
    pastes the error text into its memo, the episode ends ``completed``. The filter's default
    rules used to keep it."""
    handler = refuse_parameter("max_tokens", ScriptedHandler([ONE_TURN]), models=["sub"])
    run = tmp_path / "run"
    with FakeOpenAIServer(handler, models=["root", "sub"]) as server:
        cfg = config(room, server.base_url, episodes=2)
        res = collect(cfg, run, fast(server, "root"), fast(server, "sub"), progress=False)
    assert [s.status for s in res.summaries] == ["completed", "completed"]
    assert [s.memo_sub_call_errors for s in res.summaries] == [1, 1]
    selection = select_episodes([run], FilterRules(dedup=[]))
    decisions = selection.decisions
    assert [d.kept for d in decisions] == [False, False]
    assert [d.primary_reason for d in decisions] == ["sub_call_error_text"] * 2
    # a summary written before the count: the marker in the memo of an episode with a failed
    # sub-call is found the same way
    old = res.summaries[0].model_copy(update={"memo_sub_call_errors": None})
    assert episode_fields(old, None)["memo_sub_call_errors"] == 1
    # show counts them
    assert summarize_run(run).memo_with_sub_call_errors == 2
    shown = CliRunner().invoke(app, ["show", str(run)])
    assert shown.exit_code == 0, shown.output
    assert "memo carrying sub-call error text (never kept by the filter): 2/2" in " ".join(
        shown.output.split()
    )


def test_error_text_marker_counts_only_the_episodes_own_error_kinds() -> None:
    text = sub_call_error_text("fatal", "openai:sub@x: HTTP 400: Unsupported parameter")
    memo = f"Findings: {text[:40]} and {text}"
    assert count_sub_call_error_texts(memo, {"fatal"}) == 2
    assert count_sub_call_error_texts(memo, {"retryable"}) == 0
    assert count_sub_call_error_texts(memo, None) == 2
    assert count_sub_call_error_texts("a clean memo", None) == 0


def test_summary_fields_default_for_old_runs() -> None:
    line = {
        "episode_id": "e", "run_id": "r", "sample_index": 0,
        "room": {"room_id": "x", "room_hash": "h", "path": "p", "n_documents": 1, "n_chars": 1},
        "task_id": "t", "root_model": "m", "sub_model": "m", "seed": 0, "status": "completed",
        "n_turns": 1, "n_sub_calls": 0, "tokens": {}, "wall_time_s": 0.0,
        "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z",
        "schema_version": 2, "record_type": "episode_summary",
    }  # fmt: skip
    s = EpisodeSummary.model_validate(line)
    assert (s.n_truncated_turns, s.memo_sub_call_errors) == (None, None)
