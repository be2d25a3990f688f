"""Depth 2: sub-calls run subagents with their own REPL; the trace is a tree."""

from __future__ import annotations

from pydantic import TypeAdapter

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.harness.prompts import SUBAGENT_SYSTEM_PROMPT
from rlmdistill.models.base import Message
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, conversation_turn
from rlmdistill.traces.rebuild import subagent_requests
from rlmdistill.traces.schema import SubagentTurnRecord, SubCallRecord, TrajectoryRecord
from rlmdistill.traces.store import parse_records

ROOT = [
    "```repl\ndocs = list_documents()[:2]\n"
    "answers = llm_query_batched(['Find the assignment clause.\\n' + read(d['id'], 0, 3000) for d in docs])\n"
    "print(answers)\n```",
    "```repl\nmemo = '\\n'.join(d['id'] + ': ' + a for d, a in zip(docs, answers))\nFINAL_VAR(memo)\n```",
]
SUBAGENT = [
    "```repl\nprint(len(context))\nq = llm_query('Summarise: ' + context[:200])\n```",
    "```repl\nFINAL('subagent saw ' + str(len(context)) + ' chars; ' + q)\n```",
]


def handler(req: dict) -> str | FakeReply:
    msgs = req["messages"]
    if req["model"] == "root":
        return ROOT[conversation_turn(req)[1]]
    if msgs[0]["role"] == "system" and msgs[0]["content"] == SUBAGENT_SYSTEM_PROMPT:
        return SUBAGENT[conversation_turn(req)[1]]
    return "leaf answer"


def test_depth2_subagents_form_a_tree_and_prompts_rebuild(cuad_room3, tmp_path):
    with FakeOpenAIServer(handler) as server:
        mk = lambda m: OpenAIChatClient(m, server.base_url, api_key="x", max_retries=0)  # noqa: E731
        cfg = CollectConfig(
            rooms=[str(cuad_room3)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=1,
            depth=2,
            limits=EpisodeLimits(max_turns=3),
        )
        (s,) = collect(cfg, tmp_path / "run", mk("root"), mk("sub"), progress=False).summaries
        requests = server.requests
    assert s.status == "completed", s.status_detail
    assert s.depth == 2
    records = list(
        parse_records(
            tmp_path / "run" / "trajectories" / f"{s.episode_id}.jsonl",
            TypeAdapter(TrajectoryRecord),
        )
    )
    calls = sorted((r for r in records if isinstance(r, SubCallRecord)), key=lambda c: c.call_id)
    agents = [c for c in calls if c.subagent]
    leaves = [c for c in calls if not c.subagent]
    assert [(c.depth, c.turn, c.block, c.parent_call_id) for c in agents] == [(1, 0, 0, None)] * 2
    assert sorted(c.parent_call_id for c in leaves) == [a.call_id for a in agents]
    assert all(
        (c.depth, c.turn, c.block, c.sub_turn, c.sub_block) == (2, 0, 0, 0, 0) for c in leaves
    )
    assert s.n_sub_calls == 4
    for a in agents:
        assert a.response.startswith(f"subagent saw {len(a.prompt)} chars; leaf answer")
    assert s.memo.count("subagent saw") == 2
    # subagent turns are their own records and rebuild exactly what the server received
    sent = [[Message(**m) for m in r["messages"]] for r in requests if r["model"] == "sub"]
    for a in agents:
        turns = [r for r in records if isinstance(r, SubagentTurnRecord) and r.call_id == a.call_id]
        assert [t.turn for t in sorted(turns, key=lambda t: t.turn)] == [0, 1]
        assert all(msgs in sent for msgs in subagent_requests(turns))
        assert turns[0].observation.startswith("REPL output (block 0):")
        assert str(len(a.prompt)) in turns[0].observation
    # token accounting: sub = subagent turns + leaf calls, no double count
    sub_turns = [r for r in records if isinstance(r, SubagentTurnRecord)]
    expected = sum(t.usage.prompt_tokens for t in sub_turns) + sum(
        c.usage.prompt_tokens for c in leaves
    )
    assert s.tokens.sub.prompt_tokens == expected
    assert sum(a.usage.prompt_tokens for a in agents) == sum(
        t.usage.prompt_tokens for t in sub_turns
    )
