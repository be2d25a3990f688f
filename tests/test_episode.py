"""The harness end to end against a fake OpenAI-compatible server over real loopback HTTP.

Scripted root replies drive sub-calls, errors and limits; the server counts tokens with the
real SmolLM2 tokenizer; the room is a real 3-contract CUAD room.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import RunConfigMismatch, collect
from rlmdistill.harness.repl import ReplLimits
from rlmdistill.models.base import Message
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler, fail_if
from rlmdistill.traces.rebuild import root_requests
from rlmdistill.traces.schema import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeSummary,
    SubCallRecord,
    TrajectoryRecord,
    TurnRecord,
)
from rlmdistill.traces.store import parse_records, read_jsonl

EXPLORE = "```repl\ndocs = list_documents()\nfor d in docs:\n    print(d['id'], d['chars'])\n```"
DELEGATE = """```repl
prompts = []
for d in docs:
    hits = search('assign|terminat', doc_id=d['id'], window=200, max_hits=2)
    excerpt = '\\n'.join(h['text'] for h in hits) or read(d['id'], 0, 1500)
    prompts.append('Contract ' + d['id'] + '. Excerpt:\\n' + excerpt + '\\nQuote the assignment clause.')
answers = llm_query_batched(prompts)
memo = '# Memo\\n' + '\\n'.join('## ' + d['id'] + '\\n' + a for d, a in zip(docs, answers))
FINAL_VAR(memo)
```"""


def sub_answer(prompt: str) -> str:
    doc = prompt.split(". Excerpt", 1)[0].removeprefix("Contract ")
    return f"SUB[{doc}] found {prompt.count('assign')} assignment hits"


def make_config(room: Path, url: str, **kw) -> CollectConfig:
    base = dict(
        rooms=[str(room)],
        root=f"openai:root@{url}",
        sub=f"openai:sub@{url}",
        episodes=2,
        concurrency=2,
        prefill="```repl\n",
        limits=EpisodeLimits(max_turns=4),
    )
    base.update(kw)
    return CollectConfig(**base)


def clients(url: str, tokenizer=None):
    count = (lambda s: len(tokenizer.encode(s))) if tokenizer is not None else None
    root = OpenAIChatClient(
        "root",
        url,
        api_key="test",
        max_retries=2,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        timeout_s=10,
        count_tokens=count,
    )
    sub = OpenAIChatClient(
        "sub",
        url,
        api_key="test",
        max_retries=2,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        timeout_s=10,
    )
    return root, sub


def trajectory(run: Path, eid: str) -> list:
    adapter = TypeAdapter(TrajectoryRecord)
    return list(parse_records(run / "trajectories" / f"{eid}.jsonl", adapter))


def one_episode(handler, room, tmp_path, **config):
    """Serve ``handler`` on loopback, collect one episode into ``tmp_path/run``, return its summary."""
    with FakeOpenAIServer(handler) as server:
        root, sub = clients(server.base_url)
        cfg = make_config(room, server.base_url, episodes=1, **config)
        (summary,) = collect(cfg, tmp_path / "run", root, sub, progress=False).summaries
    return summary


def test_episode_with_subcalls_completes_and_trace_rebuilds_exact_prompts(
    cuad_room3, smollm2_tokenizer, tmp_path
):
    handler = ScriptedHandler([EXPLORE, DELEGATE], sub_answer)
    with FakeOpenAIServer(handler, tokenizer=smollm2_tokenizer) as server:
        root, sub = clients(server.base_url)
        res = collect(
            make_config(cuad_room3, server.base_url), tmp_path / "run", root, sub, progress=False
        )
        requests = server.requests
    room = DataRoom.load(cuad_room3)
    doc_ids = [d.id for d in room.documents]
    assert len(res.summaries) == 2
    for s in res.summaries:
        assert s.status == "completed", s.status_detail
        assert s.n_turns == 2
        assert s.n_sub_calls == 3 and s.n_sub_batches == 1 and s.n_sub_call_errors == 0
        assert s.cited_documents == doc_ids
        assert all(f"SUB[{d}]" in s.memo for d in doc_ids)
        assert 0 < s.coverage.overall < 1
        # measured over every model input: each document's excerpt reached a sub-call
        assert s.coverage.method == "shingle-v1"
        assert all(s.coverage.per_document[d] > 0 for d in doc_ids)
        assert s.coverage.covered_chars is not None and s.coverage.unique_chars > 0
        # usage as counted by the server with the real tokenizer: completion tokens of the
        # three sub answers, prompt tokens of the two root requests (+4 per message)
        subs = [
            r for r in trajectory(tmp_path / "run", s.episode_id) if isinstance(r, SubCallRecord)
        ]
        assert s.tokens.sub.completion_tokens == sum(
            len(smollm2_tokenizer.encode(c.response)) for c in subs
        )
        assert s.tokens.root.completion_tokens == sum(
            len(smollm2_tokenizer.encode(t.removeprefix("```repl\n"))) for t in (EXPLORE, DELEGATE)
        )

    s = res.summaries[0]
    records = trajectory(tmp_path / "run", s.episode_id)
    assert isinstance(records[0], EpisodeStart) and isinstance(records[-1], EpisodeEnd)
    turns = [r for r in records if isinstance(r, TurnRecord)]
    subs = [r for r in records if isinstance(r, SubCallRecord)]
    # case R4: sub-calls stored apart, linked to turn 1 block 0, never in the root's messages
    assert [(c.turn, c.block, c.batch_id, c.batch_size) for c in subs] == [(1, 0, 0, 3)] * 3
    assert all(
        c.sources and c.sources[0]["doc_id"] == d
        for c, d in zip(sorted(subs, key=lambda c: c.call_id), doc_ids, strict=True)
    )
    rebuilt = root_requests(records[0], turns)
    sent = [
        [Message(**m) for m in r["messages"][:-1]]  # drop the prefill message the client added
        for r in requests
        if r["model"] == "root"
        and r["messages"][1]["content"] == records[0].initial_messages[1].content
    ]
    assert len(rebuilt) == 2
    assert all(msgs in sent for msgs in rebuilt)  # byte-exact: what the server received
    for msgs in rebuilt:
        assert not any("Quote the assignment clause" in m.content for m in msgs)
    # the REPL output the root saw is in the next request
    assert turns[0].observation.startswith("REPL output (block 0):")
    assert doc_ids[0] in turns[0].observation


def test_one_failing_subcall_fails_only_that_prompt_case_t4(cuad_room3, tmp_path):
    room = DataRoom.load(cuad_room3)
    bad = room.documents[1].id
    handler = fail_if(
        lambda req: req["model"] == "sub" and bad in req["messages"][-1]["content"],
        FakeReply.error(500, "boom"),
        ScriptedHandler([EXPLORE, DELEGATE], sub_answer),
    )
    s = one_episode(handler, cuad_room3, tmp_path)
    assert s.status == "completed"
    assert s.n_sub_calls == 3 and s.n_sub_call_errors == 1
    subs = [r for r in trajectory(tmp_path / "run", s.episode_id) if isinstance(r, SubCallRecord)]
    failed = [c for c in subs if c.error]
    assert len(failed) == 1 and failed[0].error_kind == "retryable" and failed[0].attempts == 3
    assert "[llm_query error (retryable)" in s.memo
    assert f"SUB[{room.documents[0].id}]" in s.memo


def test_context_exceeded_ends_episode_with_status_case_t4(cuad_room3, tmp_path):
    handler = ScriptedHandler([EXPLORE, FakeReply.context_exceeded(4096, 5000)], sub_answer)
    s = one_episode(handler, cuad_room3, tmp_path)
    assert s.status == "context_exceeded"
    assert "maximum context length" in s.status_detail
    assert s.n_turns == 2 and s.memo is None


def test_noop_and_turn_limit_give_no_memo_case_r2(cuad_room3, tmp_path):
    handler = ScriptedHandler(
        ["I will think about it.", EXPLORE], sub_answer, on_exhausted="repeat_last"
    )
    s = one_episode(handler, cuad_room3, tmp_path, prefill=None, limits=EpisodeLimits(max_turns=3))
    assert s.status == "no_memo" and s.n_turns == 3
    turns = [r for r in trajectory(tmp_path / "run", s.episode_id) if isinstance(r, TurnRecord)]
    assert [t.no_op for t in turns] == [True, False, False]
    assert "no ```repl code block" in turns[0].observation


def test_subcall_budget_raises_in_repl_and_memo_still_possible(cuad_room3, tmp_path):
    handler = ScriptedHandler([EXPLORE, DELEGATE, "FINAL(budget hit; partial memo)"], sub_answer)
    s = one_episode(
        handler,
        cuad_room3,
        tmp_path,
        prefill=None,
        limits=EpisodeLimits(max_turns=4, max_sub_calls=2),
    )
    assert s.status == "completed" and s.memo == "budget hit; partial memo"
    assert s.n_sub_calls == 0
    turns = [r for r in trajectory(tmp_path / "run", s.episode_id) if isinstance(r, TurnRecord)]
    assert "sub-call budget spent: 3 requested, 2 of 2 left" in turns[1].observation
    assert turns[2].final_answer_source == "text"


def test_block_timeout_ends_episode_case_t5(cuad_room3, tmp_path):
    handler = ScriptedHandler(["```repl\nwhile True: pass\n```"], sub_answer)
    s = one_episode(handler, cuad_room3, tmp_path, repl=ReplLimits(block_timeout_s=1.0))
    assert s.status == "repl_timeout"
    assert s.wall_time_s < 10
    (turn,) = [r for r in trajectory(tmp_path / "run", s.episode_id) if isinstance(r, TurnRecord)]
    assert turn.blocks[0].timed_out


def test_rerun_skips_finished_episodes_and_refuses_other_config(cuad_room3, tmp_path):
    handler = ScriptedHandler([EXPLORE, DELEGATE], sub_answer)
    with FakeOpenAIServer(handler) as server:
        root, sub = clients(server.base_url)
        cfg = make_config(cuad_room3, server.base_url)
        first = collect(cfg, tmp_path / "run", root, sub, progress=False)
        n_requests = len(server.requests)
        again = collect(
            cfg.model_copy(update={"concurrency": 1}), tmp_path / "run", root, sub, progress=False
        )
        assert len(server.requests) == n_requests
        with pytest.raises(RunConfigMismatch, match="another config"):
            collect(cfg.model_copy(update={"seed": 5}), tmp_path / "run", root, sub, progress=False)
    assert len(first.summaries) == 2 and again.summaries == [] and again.skipped == 2
    lines = read_jsonl(tmp_path / "run" / "episodes.jsonl").records
    assert len(lines) == 2 and len({r["episode_id"] for r in lines}) == 2
    ids = {s.episode_id for s in parse_records(tmp_path / "run" / "episodes.jsonl", EpisodeSummary)}
    assert ids == {s.episode_id for s in first.summaries}
