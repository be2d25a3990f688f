"""verifiers' own code (pinned 0.4.0, the ``import-test`` extra) writes the rollouts that
``rlmdistill import verifiers`` reads, and the import must hold what the model server saw and
sent.

What is real and what is not: the records are made by verifiers' interception server
(``verifiers.v1.interception.InterceptionServer``: each request goes through its
``graph.prepare_turn`` / ``commit`` into the ``Trace`` and is recorded as a ``ModelCall``),
its ``Trace.add_semantic_edges``, the RLM harness's own session-snapshot reader
(``RLMHarness._consume_snapshot``) and its episode writer (``trace_store.write_episode``),
against our scripted fake OpenAI server on loopback. The agent is not nano-rlm: nano-rlm is
installed by ``git clone`` at run time and driven over ACP, which cannot run offline here.
:class:`NanoRlmEmulator` stands in for it, making the requests nano-rlm makes (system +
user prompt, one ``ipython`` tool whose code runs with top-level ``await``, ``await rlm(...)``
spawning a sub-agent with its own conversation, ``X-ACP-Model-Request-ID`` on every request,
``subagent_call`` / ``subagent_return`` edges as nano-rlm advertises them).

A second producer runs the real nano-rlm program (set ``RLMDISTILL_NANO_RLM`` to its ``rlm``
executable: a checkout of PrimeIntellect-ai/nano-rlm installed in its own venv; the test
skips without it) headless (``rlm PROMPT``, not over ACP) against the same interception
server: a real agent, its real system prompt, tools and IPython kernel, sub-agents spawned
by ``await rlm(...)`` in the kernel. It is the snapshot that could be read here (commit
``83ef01f``, 2026-08-21), older than the harness's pinned ref: it sends no ACP request ids and
advertises no semantic edges, so its sub-agents have no ``subagent_call`` link.

``python tests/test_import_verifiers_real.py`` rewrites ``tests/data/import/
verifiers-0.4.0-rlm.jsonl`` (and, with ``RLMDISTILL_NANO_RLM`` set,
``verifiers-0.4.0-nano-rlm-83ef01f.jsonl``), which the fast tests
(``test_import_verifiers.py``) read.
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import os
import shutil
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply
from rlmdistill.testing.rooms import write_clause_room

DATA = Path(__file__).parent / "data" / "import"
RECORDED = DATA / "verifiers-0.4.0-rlm.jsonl"
RECORDED_NANO = DATA / "verifiers-0.4.0-nano-rlm-83ef01f.jsonl"
NANO_ENV = "RLMDISTILL_NANO_RLM"
KEY_VAR = "RLMDISTILL_FAKE_VF_KEY"

IPYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "ipython",
        "description": "Run code in the persistent IPython kernel.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    },
}

# Agent scripts: (content, code or None). A reply without code is the agent's answer.
# Episode 0: the root reads a contract, spawns one sub-agent, answers.
ROOT_0 = [
    ("Let me read the first contract.", "text = open(DOCS + '/c0.txt').read()\nprint(text[:300])"),
    ("", "r = await rlm('Quote the clauses of: ' + text[:400])\nprint(r.answer)"),
    (None, None),  # the memo: built from the last tool output
]
# Episode 1: two sub-agents at once (asyncio.gather); the first spawns its own (depth 2).
ROOT_1 = [
    (
        "Two readers in parallel.",
        "import asyncio\ntext = open(DOCS + '/c1.txt').read()\n"
        "parts = await asyncio.gather(rlm('Find clauses in: ' + text[:300]), "
        "rlm('Find dates in: ' + text[300:600]))\nprint(' | '.join(p.answer for p in parts))",
    ),
    (None, None),
]
CHILD_CODE = "print(len(task.split()))"
NESTED_CODE = "r = await rlm('Check: ' + task[-200:])\nprint(r.answer)"


def count(text: str) -> int:
    """The fake server's token counter (whitespace words)."""
    return len(text.split())


def system_prompt(depth: int) -> str:
    """The emulated nano-rlm system prompt of an agent at ``depth`` (0: the root)."""
    who = "the root agent" if depth == 0 else f"a sub-agent at depth {depth}"
    return (
        f"You are rlm, {who}. You have one tool, `ipython`: a persistent IPython kernel. "
        "Call `await rlm(prompt)` in it to spawn a sub-agent. Answer without a tool call "
        "when you are done."
    )


class Scripted:
    """Fake-server handler: the reply of every agent, chosen by its conversation; each
    (request, reply message, usage) kept."""

    def __init__(self, root: list[tuple[str | None, str | None]]) -> None:
        self.root = root
        self.seen: list[tuple[dict[str, Any], dict[str, Any], dict[str, int]]] = []
        self._lock = threading.Lock()

    def reply(self, msgs: list[dict[str, Any]]) -> tuple[str, str | None]:
        n = sum(m["role"] == "assistant" for m in msgs)
        system = msgs[0]["content"]
        brief = msgs[1]["content"]
        last_tool = next((m["content"] for m in reversed(msgs) if m["role"] == "tool"), "")
        if "the root agent" in system:
            content, code = self.root[min(n, len(self.root) - 1)]
            if code is None:
                return "MEMO: " + last_tool.strip(), None
            return content or "", code
        if brief.startswith("Find clauses in:"):  # spawns a nested sub-agent, then answers
            if n == 0:
                return "", NESTED_CODE
            return "CLAUSES: " + last_tool.strip(), None
        if brief.startswith("Find dates in:") or brief.startswith("Check:"):
            return "NONE: " + " ".join(brief.split()[:4]), None
        if n == 0:
            return "Counting words.", CHILD_CODE
        return "QUOTED: " + " ".join(brief.split()[4:10]) + f" ({last_tool.strip()} words)", None

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        content, code = self.reply(request["messages"])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        out = count(content)
        if code is not None:
            args = json.dumps({"code": code})
            message["tool_calls"] = [
                {
                    "id": "call_" + uuid.uuid4().hex[:8],
                    "type": "function",
                    "function": {"name": "ipython", "arguments": args},
                }
            ]
            out += count(args)
        prompt = sum(count(str(m.get("content") or "")) + 4 for m in request["messages"])
        usage = {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}
        body = {
            "id": "chatcmpl-" + uuid.uuid4().hex[:12],
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if code is not None else "stop",
                }
            ],
            "usage": usage,
        }
        with self._lock:
            self.seen.append((request, message, usage))
        return FakeReply(raw_body=json.dumps(body))


class Result:
    """What ``await rlm(...)`` gives back (nano-rlm's ``RLMResult``: ``.answer``)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer


class NanoRlmEmulator:
    """Stands in for nano-rlm: each agent a loop of chat requests with the ``ipython`` tool
    (code run for real, top-level ``await`` allowed, ``rlm`` spawning a sub-agent); every
    request carries an ACP request id; sub-agent edges collected as nano-rlm advertises
    them (``subagent_call``: the spawning request -> the child's first request;
    ``subagent_return``: the child's last request -> the parent's next request)."""

    def __init__(self, client: Any, docs: Path, models: dict[int, str]) -> None:
        self.client = client
        self.docs = str(docs)
        self.models = models
        self.n = 0
        self.edges: list[dict[str, str]] = []
        self.pending_return: dict[int, list[str]] = {}

    def _request_id(self) -> str:
        self.n += 1
        return f"req-{self.n:03d}"

    async def agent(self, prompt: str, depth: int, parent_req: str | None) -> tuple[str, str]:
        """Run one agent to its answer; returns ``(answer, last request id)``."""
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(depth)},
            {"role": "user", "content": prompt},
        ]
        ns: dict[str, Any] = {"DOCS": self.docs, "task": prompt}
        me = id(ns)
        first = True
        while True:
            req = self._request_id()
            if first and parent_req is not None:
                self.edges.append(
                    {
                        "source_request_id": parent_req,
                        "target_request_id": req,
                        "type": "subagent_call",
                    }
                )
            for child_last in self.pending_return.pop(me, []):
                self.edges.append(
                    {
                        "source_request_id": child_last,
                        "target_request_id": req,
                        "type": "subagent_return",
                    }
                )
            first = False
            r = await self.client.chat.completions.create(
                model=self.models[min(depth, 1)],
                messages=msgs,
                tools=[IPYTHON_TOOL],
                extra_headers={"X-ACP-Model-Request-ID": req},
            )
            m = r.choices[0].message
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [tc.model_dump() for tc in m.tool_calls]
            msgs.append(entry)
            if not m.tool_calls:
                return m.content or "", req
            tc = m.tool_calls[0]
            code = json.loads(tc.function.arguments)["code"]
            out = await self.run_cell(code, ns, depth, req, me)
            msgs.append({"role": "tool", "tool_call_id": tc.id, "content": out})

    async def run_cell(self, code: str, ns: dict[str, Any], depth: int, req: str, me: int) -> str:
        buf = io.StringIO()

        def _print(*args: Any) -> None:
            buf.write(" ".join(str(a) for a in args) + "\n")

        async def rlm(prompt: str) -> Result:
            answer, last = await self.agent(prompt, depth + 1, req)
            self.pending_return.setdefault(me, []).append(last)
            return Result(answer)

        ns["print"], ns["rlm"] = _print, rlm
        compiled = compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        coro = eval(compiled, ns)
        if coro is not None:
            await coro
        return buf.getvalue()


async def _rollout(room: Path, script: list[Any], handler: Scripted, base_url: str) -> Any:
    """One rollout through verifiers' interception server; returns the Episode."""
    import openai
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.harnesses.rlm.harness import RLM_SESSION_METADATA_KEY, RLMHarness
    from verifiers.v1.interception import InterceptionServer
    from verifiers.v1.semantic import SemanticEdgeSet
    from verifiers.v1.session import RolloutSession
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    handler.root = script
    config = AgentConfig.model_validate(
        {"harness": {"id": "rlm", "max_depth": 2}, "model": "root", "max_turns": 20}
    )
    task = TraceTask(type="Task", data={"prompt": "Review the contracts."})
    trace: Trace = Trace(task=task, agent=AgentInfo(config=config))
    ctx = ModelContext(
        model="root", client=EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR)
    )
    server = InterceptionServer()
    trace.timing.agent.start = trace.timing.start
    async with server, server.acquire(RolloutSession(ctx=ctx, trace=trace)) as (url, secret, _):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=secret, max_retries=0)
        emu = NanoRlmEmulator(client, room / "documents" / "Contracts", {0: "root", 1: "sub"})
        answer, _ = await emu.agent("Review the contracts.", 0, None)
    import time

    trace.timing.agent.end = time.time()
    trace.split_agent_time()
    trace.root_reply = answer.strip()
    trace.add_semantic_edges(SemanticEdgeSet.model_validate({"edges": emu.edges}))
    snapshot = {
        "session_id": trace.id,
        "metrics": {
            "num_turns": trace.num_turns,
            "num_subagents": sum(e["type"] == "subagent_call" for e in emu.edges),
        },
        "last_stop_reason": "done",
    }
    RLMHarness._consume_snapshot(None, trace, {RLM_SESSION_METADATA_KEY: snapshot})  # type: ignore[arg-type]
    trace.ok = True
    trace.stop("agent_completed")
    trace.record_reward("judge", 1.0)
    return Episode(env=EnvInfo(id="rlm-contracts"), task=trace.task, traces=[trace], ok=True)


def produce(room: Path, out_dir: Path) -> tuple[Path, list[Scripted]]:
    """Run the two scripted rollouts and write them with verifiers' own episode writer to
    ``out_dir/traces.jsonl``; returns the file and each rollout's server log."""
    from verifiers.v1.utils.trace_store import TRACES_FILE, write_episode

    os.environ.setdefault(KEY_VAR, "x")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TRACES_FILE).write_text("")
    logs = []
    for script in (ROOT_0, ROOT_1):
        handler = Scripted(script)
        with FakeOpenAIServer(handler, models=["root", "sub"]) as fake:
            episode = asyncio.run(_rollout(room, script, handler, fake.base_url))
        write_episode(out_dir, episode)
        logs.append(handler)
    return out_dir / TRACES_FILE, logs


def _room(tmp: Path) -> Path:
    return write_clause_room(tmp / "room", n_documents=3, repeats=60)


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


def rendered(message: dict[str, Any]) -> str:
    """The reply as the importer writes it: the text, then each code as a repl block."""
    codes = [json.loads(c["function"]["arguments"])["code"] for c in message.get("tool_calls", [])]
    parts = ([message["content"]] if message["content"] else []) + [
        f"```repl\n{c}\n```" for c in codes
    ]
    return "\n\n".join(parts)


def norm(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Messages as compared: role, text, tool calls (id, name, arguments), tool_call_id."""
    return [
        (
            m["role"],
            m.get("content") or "",
            [
                (c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in m.get("tool_calls") or []
            ],
            m.get("tool_call_id"),
        )
        for m in messages
    ]


def _agent_of(request: dict[str, Any]) -> tuple[str, str]:
    return request["messages"][0]["content"], request["messages"][1]["content"]


@pytest.mark.slow
def test_verifiers_rollouts_import_equals_what_the_server_saw(tmp_path):
    pytest.importorskip("verifiers")
    from rlmdistill.importers.verifiers import import_verifiers, source_requests
    from rlmdistill.traces.rebuild import root_requests, subagent_requests

    room = _room(tmp_path)
    path, logs = produce(room, tmp_path / "vf")
    for use in (True, False):  # verifiers' models and the pinned field names agree
        out = tmp_path / f"run-{use}"
        result = import_verifiers([path.parent], room, out, use_verifiers=use, command=["t"])
        assert result.warnings == []
        assert (result.n_episodes, result.n_turns, result.n_sub_calls) == (2, 5, 4)
        summaries, trajs = _load(out)
        for s, log in zip(summaries, logs, strict=True):
            recs = trajs[s.episode_id]
            start = recs[0]
            assert start.extra["parsed_with"] == (
                "verifiers models" if use else "pinned field names"
            )
            turns = [r for r in recs if r.record_type == "turn"]
            sub_turns = [r for r in recs if r.record_type == "subagent_turn"]
            calls = [r for r in recs if r.record_type == "sub_call"]
            agents: dict[tuple[str, str], list[Any]] = {}
            for q, m, u in log.seen:
                agents.setdefault(_agent_of(q), []).append((q, m, u))
            root_key = next(k for k in agents if "the root agent" in k[0])
            # Every root request: what the server got, the reply it sent, the usage it counted.
            assert len(turns) == len(agents[root_key])
            assert [(m.role, m.content) for m in start.initial_messages] == [
                (x["role"], x["content"]) for x in agents[root_key][0][0]["messages"]
            ]
            for t, (_q, m, u) in zip(turns, agents[root_key], strict=True):
                code = [
                    json.loads(c["function"]["arguments"])["code"] for c in m.get("tool_calls", [])
                ]
                assert [b.code for b in t.blocks] == code
                assert t.completion == rendered(m)
                assert t.extra["tool_calls"] if code else "tool_calls" not in t.extra
                assert (t.usage.prompt_tokens, t.usage.completion_tokens) == (
                    u["prompt_tokens"],
                    u["completion_tokens"],
                )
            for t, (q, _, _) in zip(turns[:-1], agents[root_key][1:], strict=True):
                sent_tool = [x for x in q["messages"] if x["role"] == "tool"][-1]
                assert t.observation == sent_tool["content"] == t.blocks[0].stdout_full
            assert s.memo == log.seen[-1][1]["content"].strip() and s.status == "completed"
            root_requests(start, turns)  # the recorded hashes agree with our own rebuild
            # Every request as the agent sent it, message for message.
            sent = source_requests(start.initial_messages, turns)
            assert [norm(x) for x in sent] == [norm(q["messages"]) for q, _, _ in agents[root_key]]
            # Every sub-agent: its brief, its answer, its own usage, its parent.
            assert len(calls) == len(agents) - 1
            for c in calls:
                key = next(k for k in agents if k[1] == c.prompt)
                seen = agents[key]
                assert c.response == seen[-1][1]["content"]
                assert c.usage.prompt_tokens == sum(u["prompt_tokens"] for _, _, u in seen)
                assert c.usage.completion_tokens == sum(u["completion_tokens"] for _, _, u in seen)
                mine = [st for st in sub_turns if st.call_id == c.call_id]
                assert [st.completion for st in mine] == [rendered(m) for _, m, _ in seen]
                subagent_requests(mine)
                sent = source_requests(mine[0].initial_messages or [], mine)
                assert [norm(x) for x in sent] == [norm(q["messages"]) for q, _, _ in seen]
                assert c.extra["linked"] is True
            # verifiers sends every request to the rollout's model, whatever the agent asked for
            assert {q["model"] for q, _, _ in log.seen} == {"root"}
            assert s.n_sub_calls == len(calls) and s.sub_model == s.root_model == "root"
            assert s.coverage is not None and s.coverage.overall > 0
        s0, s1 = summaries
        (c0,) = [r for r in trajs[s0.episode_id] if r.record_type == "sub_call"]
        assert (c0.turn, c0.block, c0.depth, c0.parent_call_id) == (1, 0, 1, None)
        c1 = [r for r in trajs[s1.episode_id] if r.record_type == "sub_call"]
        (nested,) = [c for c in c1 if c.depth == 2]
        (parent,) = [c for c in c1 if c.call_id == nested.parent_call_id]
        assert parent.prompt.startswith("Find clauses in: Contract 1.")
        assert (nested.turn, nested.sub_turn, nested.sub_block) == (0, 0, 0)
        assert nested.prompt.startswith("Check: ") and parent.response.startswith("CLAUSES: NONE")
        depths = sorted((c.depth, c.parent_call_id is not None) for c in c1)
        assert depths == [(1, False), (1, False), (2, True)]
        top = [c for c in c1 if c.depth == 1]
        assert {c.batch_id for c in top} == {top[0].call_id} and {c.batch_size for c in top} == {2}


class NanoScripted(Scripted):
    """Fake-server handler for the real nano-rlm: agents told apart by their first user
    message (nano-rlm's system prompt is the same at every depth here)."""

    def reply(self, msgs: list[dict[str, Any]]) -> tuple[str, str | None]:
        n = sum(m["role"] == "assistant" for m in msgs)
        brief = next(str(m["content"]) for m in msgs if m["role"] == "user")
        last_tool = next((str(m["content"]) for m in reversed(msgs) if m["role"] == "tool"), "")
        if brief.startswith("Find clauses in:"):  # depth 1 of episode 1: spawns its own
            if n == 0:
                return "", (
                    "t = open('Contracts/c1.txt').read()\n"
                    "r = await rlm('Check: ' + t[300:600])\nprint(r.answer)"
                )
            return "CLAUSES: " + last_tool.strip(), None
        if brief.startswith(("Quote the clauses", "Check:")):
            return "FOUND: " + " ".join(brief.split()[:8]), None
        doc = "c0" if "first" in brief else "c1"
        if n == 0:
            return (
                f"Reading {doc}.",
                f"text = open('Contracts/{doc}.txt').read()\nprint(text[:300])",
            )
        if n == 1:
            ask = "Quote the clauses of: " if doc == "c0" else "Find clauses in: "
            return "", f"r = await rlm({ask!r} + text[:400])\nprint(r.answer)"
        return "MEMO: " + last_tool.strip(), None


async def _nano_rollout(
    room: Path, rlm_bin: str, prompt: str, depth: int, base_url: str, home: Path
) -> Any:
    """One headless run of the real nano-rlm through verifiers' interception server."""
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.interception import InterceptionServer
    from verifiers.v1.session import RolloutSession
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    config = AgentConfig.model_validate(
        {"harness": {"id": "rlm", "max_depth": depth}, "model": "root"}
    )
    trace: Trace = Trace(
        task=TraceTask(type="Task", data={"prompt": prompt}), agent=AgentInfo(config=config)
    )
    ctx = ModelContext(
        model="root", client=EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR)
    )
    trace.timing.agent.start = trace.timing.start
    async with (
        InterceptionServer() as server,
        server.acquire(RolloutSession(ctx=ctx, trace=trace)) as (url, secret, _),
    ):
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env.update(
            RLM_API_KEY=secret,
            RLM_BASE_URL=url + "/v1",
            RLM_MODEL="root",
            RLM_MAX_DEPTH=str(depth),
            RLM_HOME=str(home),
        )
        proc = await asyncio.create_subprocess_exec(
            rlm_bin,
            prompt,
            env=env,
            cwd=str(room / "documents"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        assert proc.returncode == 0, err.decode()[-2000:]
    import time

    trace.timing.agent.end = time.time()
    trace.split_agent_time()
    trace.root_reply = out.decode().strip()  # what the ACP turn's reply would carry
    trace.ok = True
    trace.stop("agent_completed")
    return Episode(env=EnvInfo(id="rlm-contracts"), task=trace.task, traces=[trace], ok=True)


def produce_nano(room: Path, rlm_bin: str, out_dir: Path) -> tuple[Path, list[Scripted]]:
    """Two headless nano-rlm runs (max depth 1, then 2) written with verifiers' episode
    writer to ``out_dir/traces.jsonl``; returns the file and each run's server log."""
    from verifiers.v1.utils.trace_store import TRACES_FILE, write_episode

    os.environ.setdefault(KEY_VAR, "x")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TRACES_FILE).write_text("")
    logs: list[Scripted] = []
    for prompt, depth in (
        ("Review the first contract.", 1),
        ("Review the second contract.", 2),
    ):
        handler = NanoScripted([])
        with FakeOpenAIServer(handler, models=["root"]) as fake:
            episode = asyncio.run(
                _nano_rollout(room, rlm_bin, prompt, depth, fake.base_url, out_dir / "home")
            )
        write_episode(out_dir, episode)
        logs.append(handler)
    return out_dir / TRACES_FILE, logs


@pytest.mark.slow
def test_real_nano_rlm_rollouts_import_equals_what_the_server_saw(tmp_path):
    pytest.importorskip("verifiers")
    rlm_bin = os.environ.get(NANO_ENV)
    if not rlm_bin:
        pytest.skip(f"set {NANO_ENV} to a nano-rlm `rlm` executable")
    from rlmdistill.importers.verifiers import import_verifiers, source_requests

    room = _room(tmp_path)
    path, logs = produce_nano(room, rlm_bin, tmp_path / "vf")
    with pytest.warns(UserWarning, match="no subagent_call link"):
        result = import_verifiers([path], room, tmp_path / "run", command=["t"])
    assert [w.split(": ", 2)[-1][:39] for w in result.warnings] == [
        "1 sub-agents have no subagent_call link",
        "2 sub-agents have no subagent_call link",
    ]
    assert (result.n_episodes, result.n_turns, result.n_sub_calls) == (2, 6, 3)
    summaries, trajs = _load(tmp_path / "run")
    for s, log in zip(summaries, logs, strict=True):
        recs = trajs[s.episode_id]
        start = recs[0]
        turns = [r for r in recs if r.record_type == "turn"]
        calls = [r for r in recs if r.record_type == "sub_call"]
        root = [x for x in log.seen if str(x[0]["messages"][1]["content"]).startswith("Review")]
        first = root[0][0]["messages"]
        assert [(m.role, m.content) for m in start.initial_messages] == [
            (x["role"], x["content"]) for x in first
        ]
        for t, (_q, m, u) in zip(turns, root, strict=True):
            assert t.completion == rendered(m)
            assert (t.usage.prompt_tokens, t.usage.completion_tokens) == (
                u["prompt_tokens"],
                u["completion_tokens"],
            )
        for t, (q, _, _) in zip(turns[:-1], root[1:], strict=True):
            assert t.observation == [x for x in q["messages"] if x["role"] == "tool"][-1]["content"]
        assert s.memo == root[-1][1]["content"] and s.status == "completed"
        # Every root request as nano-rlm sent it, message for message.
        sent = source_requests(start.initial_messages, turns)
        assert [norm(x) for x in sent] == [norm(q["messages"]) for q, _, _ in root]
        for c in calls:
            seen = [x for x in log.seen if x[0]["messages"][1]["content"] == c.prompt]
            assert c.response == seen[-1][1]["content"] and c.extra["linked"] is False
            mine = [t for t in trajs[s.episode_id] if t.record_type == "subagent_turn"]
            mine = [t for t in mine if t.call_id == c.call_id]
            sent = source_requests(mine[0].initial_messages or [], mine)
            assert [norm(x) for x in sent] == [norm(q["messages"]) for q, _, _ in seen]
            assert c.usage.prompt_tokens == sum(u["prompt_tokens"] for _, _, u in seen)
            # without links every sub-agent hangs off the root turn it ran after: turn 1
            assert (c.depth, c.turn, c.parent_call_id) == (1, 1, None)
        assert s.coverage is not None and s.coverage.overall > 0


def record(dest: Path = DATA) -> None:
    """Rewrite the recorded rollouts the fast tests read (needs ``verifiers`` installed)."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / ".recording-vf"
    shutil.rmtree(tmp, ignore_errors=True)
    room = _room(tmp)
    path, _ = produce(room, tmp / "vf")
    text = path.read_text(encoding="utf-8").replace(str(room), "/rooms/clauses")
    (dest / RECORDED.name).write_text(text, encoding="utf-8")
    if os.environ.get(NANO_ENV):
        path, _ = produce_nano(room, os.environ[NANO_ENV], tmp / "nano")
        text = path.read_text(encoding="utf-8").replace(str(tmp), "/tmp/recording")
        (dest / RECORDED_NANO.name).write_text(text, encoding="utf-8")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
