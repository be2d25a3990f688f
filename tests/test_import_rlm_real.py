"""A real ``rlms`` RLM (pinned 0.1.3, the ``import-test`` extra) against the scripted
OpenAI-compatible fake server on loopback, at depth 1 and depth 2; its logs imported with
``rlmdistill import rlm`` must hold exactly what the server saw and sent: episodes, root turns,
sub-calls (depth from the nesting), texts and token usage.

``python tests/test_import_rlm_real.py`` rewrites the recorded logs under
``tests/data/import/`` that the fast tests (``test_import_rlm.py``) read.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.testing.fake_openai import FakeOpenAIServer
from rlmdistill.testing.rooms import write_clause_room

DATA = Path(__file__).parent / "data" / "import"

# Root scripts. Depth 1: a single sub-call, a reply without code, a batch, the answer.
ROOT_D1 = [
    "Look first.\n```repl\nchunk = context[:400]\nans = llm_query('Summarise: ' + chunk)\n"
    "print(ans)\n```",
    "I have a summary; next I will quote two parts.",
    "```repl\nparts = llm_query_batched(['Quote A: ' + context[:300], 'Quote B: ' + "
    "context[300:600]])\nprint(parts)\n```",
    "```repl\nanswer['content'] = 'MEMO: ' + ans + ' | ' + ' / '.join(parts)\n"
    "answer['ready'] = True\n```",
]
# Depth 1 for exact usage: rlms gives every call of a batch the batch's last usage, so the
# usage check runs on single calls only.
ROOT_D1_SINGLE = [
    "```repl\nans = llm_query('Summarise: ' + context[:400])\nprint(ans)\n```",
    "No code in this turn.",
    "```repl\nb = llm_query('Quote: ' + context[200:500])\nanswer['content'] = "
    "'MEMO: ' + ans + b\nanswer['ready'] = True\n```",
]
ROOT_D2 = [
    "```repl\nfound = rlm_query('Find clauses in: ' + context[:400])\nprint(found)\n```",
    "```repl\nanswer['content'] = 'MEMO: ' + found\nanswer['ready'] = True\n```",
]
CHILD = [
    "```repl\nx = llm_query('Quote: ' + context[:250])\nprint(x)\n```",
    "```repl\nanswer['content'] = 'CHILD: ' + x\nanswer['ready'] = True\n```",
]
QUESTION = "Review the contracts."


def count(text: str) -> int:
    """The fake server's token counter for these runs (whitespace words)."""
    return len(text.split())


class Recorder:
    """Fake-server handler: scripted agents (root / child RLM by their metadata message),
    plain sub-calls echo a prefix of their prompt; every (request, reply) kept."""

    def __init__(self, root: list[str]) -> None:
        self.root = root
        self.seen: list[tuple[dict[str, Any], str]] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> str:
        msgs = request["messages"]
        if msgs[0]["role"] == "system":
            n = sum(m["role"] == "assistant" for m in msgs)
            child = "Answer the following" not in msgs[1]["content"]
            script = CHILD if child else self.root
            reply = script[min(n, len(script) - 1)]
        else:
            reply = "ANSWER<" + " ".join(msgs[-1]["content"].split()[:6]) + ">"
        with self._lock:
            self.seen.append((request, reply))
        return reply


def context_text(room: Path) -> str:
    docs = sorted((room / "documents" / "Contracts").glob("*.txt"))
    return "\n\n".join(d.read_text() for d in docs)


def run_rlms(
    room: Path, log_dir: Path, root: list[str], depth: int, completions: int = 1
) -> Recorder:
    """Run a real ``rlm.RLM`` (local REPL) ``completions`` times over the room's text."""
    from rlm import RLM
    from rlm.logger import RLMLogger

    rec = Recorder(root)
    with FakeOpenAIServer(rec, tokenizer=count, models=["root", "sub"]) as srv:
        rlm = RLM(
            backend="openai",
            backend_kwargs={"model_name": "root", "base_url": srv.base_url, "api_key": "x"},
            max_depth=depth,
            max_iterations=6,
            other_backends=["openai"],
            other_backend_kwargs=[{"model_name": "sub", "base_url": srv.base_url, "api_key": "x"}],
            logger=RLMLogger(log_dir=str(log_dir)),
        )
        for _ in range(completions):
            rlm.completion(context_text(room), root_prompt=QUESTION)
    return rec


def _room(tmp: Path) -> Path:
    return write_clause_room(tmp / "room", n_documents=3, repeats=60)


def _usage(request: dict[str, Any], reply: str) -> tuple[int, int]:
    prompt = sum(count(str(m.get("content") or "")) + 4 for m in request["messages"])
    return prompt, count(reply)


def _import(logs: Path, room: Path, out: Path) -> Any:
    from rlmdistill.importers.rlm import import_rlm

    return import_rlm([logs], room, out, command=["test"])


def _load(run: Path) -> tuple[list[Any], dict[str, list[Any]]]:
    from pydantic import TypeAdapter

    from rlmdistill.traces.runs import load_summaries
    from rlmdistill.traces.schema import TrajectoryRecord
    from rlmdistill.traces.store import parse_records

    summaries = load_summaries(run)
    adapter: TypeAdapter[Any] = TypeAdapter(TrajectoryRecord)
    trajs = {
        s.episode_id: list(parse_records(run / "trajectories" / f"{s.episode_id}.jsonl", adapter))
        for s in summaries
    }
    return summaries, trajs


@pytest.mark.slow
def test_real_rlms_depth1_import_equals_what_the_server_saw(tmp_path):
    pytest.importorskip("rlm")
    from rlmdistill.importers.rlm import source_requests
    from rlmdistill.traces.rebuild import root_requests

    room = _room(tmp_path)
    rec = run_rlms(room, tmp_path / "logs", ROOT_D1_SINGLE, depth=1, completions=2)
    result = _import(tmp_path / "logs", room, tmp_path / "run")
    assert result.warnings == []
    summaries, trajs = _load(tmp_path / "run")
    assert len(summaries) == 2
    root_seen = [(q, r) for q, r in rec.seen if q["model"] == "root"]
    sub_seen = [(q, r) for q, r in rec.seen if q["model"] == "sub"]
    assert len(root_seen) == 2 * len(ROOT_D1_SINGLE) and len(sub_seen) == 4
    for k, s in enumerate(summaries):
        recs = trajs[s.episode_id]
        start = recs[0]
        turns = [r for r in recs if r.record_type == "turn"]
        calls = [r for r in recs if r.record_type == "sub_call"]
        assert s.n_turns == len(turns) == len(ROOT_D1_SINGLE) and s.depth == 1
        mine = root_seen[k * 3 : (k + 1) * 3]
        # Every root request, message for message, and every reply.
        sent = source_requests(start.initial_messages, turns)
        for t, (q, reply) in enumerate(mine):
            assert [m.model_dump() for m in sent[t]] == [
                {"role": m["role"], "content": m["content"]} for m in q["messages"]
            ]
            assert turns[t].completion == reply
        root_requests(start, turns)  # our own rebuild agrees with the recorded hashes
        assert s.memo is not None and s.memo.startswith("MEMO: ANSWER<Summarise:")
        # Sub-calls: prompt, response and usage as the server counted them.
        subs = sub_seen[k * 2 : (k + 1) * 2]
        assert [c.depth for c in calls] == [1, 1] and [c.turn for c in calls] == [0, 2]
        for c, (q, reply) in zip(calls, subs, strict=True):
            assert c.prompt == q["messages"][-1]["content"] and c.response == reply
            p, o = _usage(q, reply)
            assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (p, o)
        assert s.tokens.sub.prompt_tokens == sum(_usage(q, r)[0] for q, r in subs)
        assert s.sub_model == "sub" and s.root_model == "root"
        assert s.coverage is not None and s.coverage.overall > 0


@pytest.mark.slow
def test_real_rlms_depth2_subagent_turns_and_nested_calls(tmp_path):
    pytest.importorskip("rlm")
    from rlmdistill.importers.rlm import source_requests
    from rlmdistill.traces.rebuild import subagent_requests

    room = _room(tmp_path)
    rec = run_rlms(room, tmp_path / "logs", ROOT_D2, depth=2)
    _import(tmp_path / "logs", room, tmp_path / "run")
    summaries, trajs = _load(tmp_path / "run")
    (s,) = summaries
    recs = trajs[s.episode_id]
    turns = [r for r in recs if r.record_type == "turn"]
    sub_turns = [r for r in recs if r.record_type == "subagent_turn"]
    calls = [r for r in recs if r.record_type == "sub_call"]
    assert s.depth == 2 and len(turns) == 2 and len(sub_turns) == 2
    agent = [(q, r) for q, r in rec.seen if q["messages"][0]["role"] == "system"]
    child = [(q, r) for q, r in agent if "Answer the following" not in q["messages"][1]["content"]]
    plain = [(q, r) for q, r in rec.seen if q["messages"][0]["role"] != "system"]
    assert len(child) == 2 and len(plain) == 1
    (top, nested) = calls
    assert top.depth == 1 and top.subagent and top.parent_call_id is None
    assert nested.depth == 2 and nested.parent_call_id == top.call_id
    assert (nested.sub_turn, nested.turn) == (0, 0)
    assert top.prompt.startswith("Find clauses in: Contract 0. Clause text.")
    # The subagent's requests are the child RLM's requests, message for message.
    assert len(subagent_requests(sub_turns)) == 2  # our rebuild agrees with the hashes
    exact = source_requests(sub_turns[0].initial_messages or [], sub_turns)
    for msgs, (q, reply), st in zip(exact, child, sub_turns, strict=True):
        assert [m.model_dump() for m in msgs] == [
            {"role": m["role"], "content": m["content"]} for m in q["messages"]
        ]
        assert st.completion == reply and st.call_id == top.call_id
    (pq, preply) = plain[0]
    assert nested.prompt == pq["messages"][-1]["content"] and nested.response == preply
    assert (nested.usage.prompt_tokens, nested.usage.completion_tokens) == _usage(pq, preply)
    # The subagent's own usage: its two requests (rlms reports them with its nested call).
    own = [_usage(q, r) for q, r in child]
    assert top.usage.prompt_tokens == sum(p for p, _ in own)
    assert top.usage.completion_tokens == sum(o for _, o in own)
    assert top.response == "CHILD: " + preply and s.memo == "MEMO: CHILD: " + preply


def record(dest: Path = DATA) -> None:
    """Rewrite the recorded logs the fast tests read (needs ``rlms`` installed)."""
    import rlm  # noqa: F401

    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / ".recording"
    shutil.rmtree(tmp, ignore_errors=True)
    room = _room(tmp)
    for name, script, depth, n in (
        ("rlms-0.1.3-depth1.jsonl", ROOT_D1, 1, 2),
        ("rlms-0.1.3-depth2.jsonl", ROOT_D2, 2, 1),
    ):
        logs = tmp / name
        run_rlms(room, logs, script, depth, completions=n)
        (log,) = logs.glob("*.jsonl")
        text = log.read_text(encoding="utf-8")
        # The server's port differs each run; the recorded file names a fixed one.
        text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:8000", text)
        (dest / name).write_text(text, encoding="utf-8")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
