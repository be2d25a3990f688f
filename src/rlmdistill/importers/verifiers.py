"""Read the rollouts that ``verifiers`` (PyPI, pinned 0.4.0) writes for its RLM harness.

``vf-eval`` (and ``vf-debug`` / ``vf-replay``) append one ``verifiers.v1.episode.Episode`` per
line to ``traces.jsonl`` (``verifiers.v1.utils.trace_store.write_episode``: the pydantic
JSON of the episode, ``exclude_none``). An episode holds ``traces``: one
``verifiers.v1.trace.Trace`` per agent. A line may also be a bare ``Trace`` record
(``Trace.to_record()``, as prime-rl and custom dumps write). The fields read, at trace
schema version 1 (``verifiers.v1.trace.TRACE_VERSION``, :data:`SUPPORTED_TRACE_VERSIONS`):

- ``version``, ``id``, ``verifiers.version`` (the producer), ``agent.config`` (``model``,
  ``harness``, ``max_turns``...), ``task``, ``rewards``, ``metrics``, ``info``,
  ``root_reply`` (the root agent's answer), ``ok``, ``is_timeout``, ``stop_condition``,
  ``errors``, ``timing``;
- ``nodes``: the message graph, each ``{"parent", "message", "sampled", "timestamp",
  "semantic_parents": [{"node", "type"}], "token_ids", ...}``; a message is ``{"role",
  "content", "tool_calls": [{"id", "name", "arguments"}]?, "reasoning_content"?,
  "tool_call_id"?}``; a sampled node is one model reply;
- ``calls``: one ``ModelCall`` per provider exchange, ``{"node", "model", "sampling",
  "finish_reason", "usage": {"prompt_tokens" (cache reads excluded), "completion_tokens",
  "cached_input_tokens"?}, "time": {"start", "end"}, "error"?, "acp": {"request_id"}?}``.

The RLM harness (``verifiers.v1.harnesses.rlm``) runs nano-rlm over ACP: every model request
of the root agent and of every sub-agent (``await rlm(...)`` in its IPython tool) goes through
verifiers' interception server into the one trace. Agents are told apart by the graph: a
reply continues the agent of the nearest reply on its path; a reply with none starts a new
agent (a ``compaction`` link continues the linked agent). A sub-agent's parent is the turn
named by the ``subagent_call`` link on its first reply (nano-rlm's ACP semantic edges);
without one, the root turn it ran after. Field mapping and what is lost:
``docs/bring-your-traces.md``.

When the ``verifiers`` package is installed (the ``import-test`` extra), every line is first
validated with its own models (``WireEpisode`` / ``WireTrace``) and read back from their
JSON, so defaults are filled as verifiers fills them; without it the pinned field names
above are read directly.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmdistill.importers.common import (
    ImportedEpisode,
    ImportFormatError,
    ImportResult,
    import_files,
    imported_episode_id,
)
from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.traces.rebuild import MessagesHash
from rlmdistill.traces.schema import (
    CodeBlockResult,
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    ModelSettings,
    RoomInfo,
    SubagentTurnRecord,
    SubCallRecord,
    TurnRecord,
)
from rlmdistill.traces.store import read_jsonl

__all__ = [
    "FORMAT",
    "PRODUCER_VERSION",
    "SUPPORTED_TRACE_VERSIONS",
    "import_verifiers",
    "parse_traces_file",
    "render_reply",
    "source_requests",
    "trace_files",
    "verifiers_validator",
]

FORMAT = "verifiers-trace"
"""``run.json`` ``source.format`` of a run imported from verifiers rollouts."""
SUPPORTED_TRACE_VERSIONS = (1,)
"""``Trace.version`` values (verifiers' trace schema) this importer reads."""
PRODUCER_VERSION = "0.4.0"
"""The verifiers release whose field names this importer reads (``TRACE_VERSION`` 1)."""
TRACES_FILE = "traces.jsonl"
"""The rollout file ``vf-eval`` writes into its output folder."""
REPL_TOOL = "ipython"
"""nano-rlm's code tool: its ``code`` argument becomes a ```` ```repl ```` block."""
_BUDGET_STOPS = {"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens"}
_PLACEHOLDER_ROOM = RoomInfo(room_id="", room_hash="", path="", n_documents=0, n_chars=0)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Validator = Callable[[dict[str, Any]], dict[str, Any]]


def trace_files(paths: Iterable[Path]) -> list[Path]:
    """The rollout files named by ``paths``: a file as given; a folder's ``traces.jsonl`` (a
    ``vf-eval`` output folder), else its ``*.jsonl`` files in name order. Raises
    ``FileNotFoundError`` naming a missing path and ``ValueError`` when nothing is found."""
    out: list[Path] = []
    given = [Path(p) for p in paths]
    for p in given:
        if p.is_dir():
            main = p / TRACES_FILE
            out.extend([main] if main.is_file() else sorted(p.glob("*.jsonl")))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such rollout file or folder")
    if not out:
        raise ValueError(f"no .jsonl rollout files in {', '.join(str(p) for p in given)}")
    return out


def verifiers_validator() -> Validator | None:
    """A function that validates one ``traces.jsonl`` line with verifiers' own models
    (``WireEpisode`` for an episode, ``WireTrace`` for a bare trace) and returns it as their
    JSON (defaults filled, raw tensors left out, as ``to_record`` writes); ``None`` when
    the ``verifiers`` package is not installed. Raises ``pydantic.ValidationError`` on a
    record of another shape."""
    try:
        from verifiers.v1.episode import WireEpisode
        from verifiers.v1.trace import EXCLUDE_FIELDS, WireTrace
    except ImportError:
        return None

    def validate(row: dict[str, Any]) -> dict[str, Any]:
        if "traces" in row:
            ep = WireEpisode.model_validate(row)
            return ep.model_dump(
                mode="json", exclude={"traces": {"__all__": EXCLUDE_FIELDS}}, exclude_none=True
            )
        tr = WireTrace.model_validate(row)
        return tr.model_dump(mode="json", exclude=EXCLUDE_FIELDS, exclude_none=True)

    return validate


def _fail(path: Path, line: int | None, what: str) -> ImportFormatError:
    where = f"{path}:{line}" if line is not None else str(path)
    return ImportFormatError(
        f"{where}: {what} (this importer reads verifiers {PRODUCER_VERSION} rollouts, trace "
        f"version {', '.join(map(str, SUPPORTED_TRACE_VERSIONS))})"
    )


def _text(content: Any) -> str:
    """A verifiers message content (a string or typed parts) as text; images are dropped."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "")
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _code(call: dict[str, Any]) -> str | None:
    """The code of an ``ipython`` tool call (its JSON ``code`` argument), else ``None``."""
    if call.get("name") != REPL_TOOL:
        return None
    args = call.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    code = args.get("code") if isinstance(args, dict) else None
    return code if isinstance(code, str) else None


def render_reply(message: dict[str, Any]) -> str:
    """An assistant message as rlmdistill's fenced action format: its text content, then
    each ``ipython`` tool call's code as a ```` ```repl ```` block (blank line between). Other
    tool calls are not rendered (they stay under the turn's ``extra.tool_calls``)."""
    parts = [_text(message.get("content"))] if _text(message.get("content")) else []
    for call in message.get("tool_calls") or []:
        code = _code(call)
        if code is not None:
            parts.append(f"```repl\n{code}\n```")
    return "\n\n".join(parts)


def _usage(raw: Any) -> Usage:
    """verifiers ``Usage`` (``prompt_tokens`` without cache reads) as ours (with them)."""
    if not isinstance(raw, dict):
        return Usage(cached_tokens=None)
    cached = raw.get("cached_input_tokens")
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0) + int(cached or 0),
        cached_tokens=None if cached is None else int(cached),
        completion_tokens=int(raw.get("completion_tokens") or 0),
    )


def _stamp(seconds: Any) -> dt.datetime | None:
    if not isinstance(seconds, int | float) or seconds <= 0:
        return None
    return dt.datetime.fromtimestamp(float(seconds), dt.UTC)


@dataclass
class _Agent:
    """One agent of a trace: the root or a sub-agent, with its replies (node indices)."""

    index: int
    replies: list[int] = field(default_factory=list)
    parent: int | None = None
    """The parent agent's index (``None`` for the root)."""
    spawn_turn: int = 0
    """The parent's turn that spawned this agent."""
    linked: bool = False
    """The parent comes from a ``subagent_call`` link (else from the order of the nodes)."""
    depth: int = 0
    call_id: int | None = None


class _Graph:
    """The message graph of one trace: paths, replies, agents."""

    def __init__(self, path: Path, line: int, trace: dict[str, Any]) -> None:
        self.source, self.line = path, line
        self.nodes: list[dict[str, Any]] = trace.get("nodes") or []
        for i, n in enumerate(self.nodes):
            if not isinstance(n, dict) or not isinstance(n.get("message"), dict):
                raise _fail(path, line, f"node {i} has no message")
            parent = n.get("parent")
            if parent is not None and not (isinstance(parent, int) and 0 <= parent < i):
                raise _fail(path, line, f"node {i} has parent {parent!r}, not an earlier node")
        self.calls: dict[int, dict[str, Any]] = {}
        for c in trace.get("calls") or []:
            if isinstance(c, dict) and isinstance(c.get("node"), int):
                self.calls[c["node"]] = c
        self.agent_of: dict[int, int] = {}
        self.agents: list[_Agent] = []
        self.n_compactions = 0
        for i, n in enumerate(self.nodes):
            if not (n.get("sampled") and n["message"].get("role") == "assistant"):
                continue
            owner = self._continues(i)
            if owner is None:
                owner = len(self.agents)
                self.agents.append(_Agent(owner))
            self.agent_of[i] = owner
            self.agents[owner].replies.append(i)

    def links(self, node: int, kind: str) -> list[int]:
        return [
            int(link["node"])
            for link in self.nodes[node].get("semantic_parents") or []
            if isinstance(link, dict) and link.get("type") == kind
        ]

    def _continues(self, node: int) -> int | None:
        p = self.nodes[node].get("parent")
        while p is not None:
            if p in self.agent_of:
                return self.agent_of[p]
            p = self.nodes[p].get("parent")
        for src in self.links(node, "compaction"):
            if src in self.agent_of:
                self.n_compactions += 1
                return self.agent_of[src]
        return None

    def path(self, node: int) -> list[int]:
        out: list[int] = []
        p: int | None = node
        while p is not None:
            out.append(p)
            p = self.nodes[p].get("parent")
        return out[::-1]

    def message(self, node: int) -> dict[str, Any]:
        msg: dict[str, Any] = self.nodes[node]["message"]
        return msg

    def wire(self, nodes: list[int]) -> list[Message]:
        """Messages as rlmdistill's (role + text; an assistant rendered as its reply)."""
        out = []
        for i in nodes:
            m = self.message(i)
            role = m.get("role")
            if role == "assistant":
                out.append(Message(role="assistant", content=render_reply(m)))
            elif role in ("system", "user", "tool"):
                out.append(Message(role=role, content=_text(m.get("content"))))
            else:
                raise ValueError(f"message of role {role!r}")
        return out

    def link_parents(self) -> int:
        """Set each sub-agent's parent, spawn turn and depth; returns how many had no
        ``subagent_call`` link."""
        unlinked = 0
        root = self.agents[0] if self.agents else None
        for a in self.agents[1:]:
            first = a.replies[0]
            sources = [
                s
                for s in self.links(first, "subagent_call")
                if s in self.agent_of and self.agent_of[s] < a.index
            ]
            if sources:
                a.parent = self.agent_of[sources[0]]
                a.spawn_turn = self.agents[a.parent].replies.index(sources[0])
                a.linked = True
            else:
                assert root is not None
                unlinked += 1
                a.parent = 0
                before = [t for t, r in enumerate(root.replies) if r < first]
                a.spawn_turn = before[-1] if before else 0
            a.depth = self.agents[a.parent].depth + 1
        return unlinked


@dataclass
class _Turn:
    """The fields of one reply, shared by root and subagent turns."""

    started_at: dt.datetime
    n_messages_before: int
    prompt_sha256: str
    completion: str
    usage: Usage
    latency_s: float
    blocks: list[CodeBlockResult]
    observation: str | None
    final_answer_source: str | None
    reasoning: str | None
    finish_reason: str | None
    extra: dict[str, Any]


def _agent_turns(
    g: _Graph, agent: _Agent, inputs: list[str]
) -> tuple[list[Message], list[_Turn], bool]:
    """The initial messages and turns of one agent; ``True`` when its history is not the
    first prompt plus replies and observations (compaction, a rewritten prompt)."""
    replies = agent.replies
    paths = [g.path(r) for r in replies]
    try:
        initial = g.wire(paths[0][:-1])
    except ValueError as exc:
        raise _fail(g.source, g.line, f"agent {agent.index}'s prompt holds a {exc}") from exc
    inputs.extend(m.content for m in initial)
    history = MessagesHash(initial)
    turns: list[_Turn] = []
    mismatch = False
    for t, r in enumerate(replies):
        msg = g.message(r)
        call = g.calls.get(r, {})
        obs_nodes: list[int] | None = None
        if t + 1 < len(replies):
            nxt = paths[t + 1]
            if nxt[: len(paths[t])] == paths[t]:
                obs_nodes = nxt[len(paths[t]) : -1]
            else:
                mismatch = True
                obs_nodes = []
        obs_msgs = [g.message(i) for i in obs_nodes or []]
        results = {m.get("tool_call_id"): _text(m.get("content")) for m in obs_msgs}
        blocks: list[CodeBlockResult] = []
        for tc in msg.get("tool_calls") or []:
            code = _code(tc)
            if code is None:
                continue
            out = results.get(tc.get("id"), "")
            blocks.append(
                CodeBlockResult(
                    index=len(blocks),
                    code=code,
                    stdout_full=out,
                    stdout_chars=len(out),
                    duration_s=0.0,
                )
            )
        observation = "\n\n".join(_text(m.get("content")) for m in obs_msgs) if obs_msgs else None
        time = call.get("time") or {}
        start, end = time.get("start") or 0.0, time.get("end") or 0.0
        started = _stamp(start) or _stamp(g.nodes[r].get("timestamp")) or _EPOCH
        extra: dict[str, Any] = {"node": r}
        if msg.get("tool_calls"):
            extra["tool_calls"] = msg["tool_calls"]
            extra["content"] = msg.get("content")
        if obs_msgs:
            extra["observation_messages"] = obs_msgs
        if call.get("acp"):
            extra["acp_request_id"] = (call.get("acp") or {}).get("request_id")
        if call.get("model"):
            extra["model"] = call["model"]
        if g.nodes[r].get("semantic_parents"):
            extra["semantic_parents"] = g.nodes[r]["semantic_parents"]
        if mismatch:
            extra["prompt_messages"] = [g.message(i) for i in paths[t][:-1]]
        if not call:
            extra["no_model_call"] = True
        completion = render_reply(msg)
        last = t + 1 == len(replies)
        turns.append(
            _Turn(
                started_at=started,
                n_messages_before=len(history),
                prompt_sha256=history.hexdigest(),
                completion=completion,
                usage=_usage(call.get("usage")),
                latency_s=max(0.0, float(end) - float(start)) if end else 0.0,
                blocks=blocks,
                observation=observation,
                final_answer_source="text" if last and not msg.get("tool_calls") else None,
                reasoning=msg.get("reasoning_content") or None,
                finish_reason=call.get("finish_reason"),
                extra=extra,
            )
        )
        history.append(Message(role="assistant", content=completion))
        if observation is not None:
            history.append(Message(role="user", content=observation))
            inputs.append(observation)
    return initial, turns, mismatch


def _sampling(call: dict[str, Any]) -> Sampling:
    raw = call.get("sampling") or {}
    known = {
        k: raw[k] for k in ("temperature", "top_p", "max_tokens", "seed") if raw.get(k) is not None
    }
    try:
        return Sampling(**known)
    except ValueError:
        return Sampling()


def _status(trace: dict[str, Any], memo: str | None) -> tuple[EpisodeStatus, str | None]:
    stop = trace.get("stop_condition")
    errors = trace.get("errors") or []
    if trace.get("is_timeout"):
        return "timeout", stop
    if errors and not trace.get("ok"):
        last = errors[-1] if isinstance(errors[-1], dict) else {}
        return "error", f"{last.get('type')}: {last.get('message')}"
    if memo is not None:
        return "completed", stop
    if stop in _BUDGET_STOPS:
        return "budget_exceeded", stop
    return "no_memo", stop


def _episode(
    path: Path,
    line: int,
    trace: dict[str, Any],
    episode_id: str,
    sample_index: int,
    parent_episode: dict[str, Any] | None,
) -> tuple[ImportedEpisode, list[str]]:
    notes: list[str] = []
    g = _Graph(path, line, trace)
    if not g.agents:
        raise _fail(path, line, f"trace {trace.get('id')!r} has no model reply (no sampled node)")
    unlinked = g.link_parents()
    inputs: list[str] = []
    root = g.agents[0]
    initial, root_turns, mismatch = _agent_turns(g, root, inputs)
    turns = [
        TurnRecord(episode_id=episode_id, turn=t, duration_s=x.latency_s, **x.__dict__)
        for t, x in enumerate(root_turns)
    ]
    calls: list[SubCallRecord] = []
    sub_turns: list[SubagentTurnRecord] = []
    batches: dict[tuple[int, int], int] = {}
    for a in g.agents[1:]:
        assert a.parent is not None
        a.call_id = len(calls)
        a_initial, a_turns, a_mismatch = _agent_turns(g, a, inputs)
        mismatch = mismatch or a_mismatch
        parent = g.agents[a.parent]
        key = (a.parent, a.spawn_turn)
        batch_id = batches.setdefault(key, a.call_id)
        if parent.call_id is None:  # spawned by the root
            turn, block, sub_turn, parent_call = a.spawn_turn, 0, None, None
        else:
            pc = calls[parent.call_id]
            turn, block, sub_turn, parent_call = pc.turn, pc.block, a.spawn_turn, parent.call_id
        last_msg = g.message(a.replies[-1])
        own = Usage(cached_tokens=None)
        for x in a_turns:
            own = own + x.usage
        times = [g.calls[r].get("time") or {} for r in a.replies if r in g.calls]
        t0 = min((float(t.get("start") or 0) for t in times), default=0.0)
        t1 = max((float(t.get("end") or 0) for t in times), default=0.0)
        brief = "\n\n".join(m.content for m in a_initial if m.role == "user")
        calls.append(
            SubCallRecord(
                episode_id=episode_id,
                call_id=a.call_id,
                turn=turn,
                block=block,
                batch_id=batch_id,
                batch_size=1,
                parent_call_id=parent_call,
                sub_turn=sub_turn,
                sub_block=None if sub_turn is None else 0,
                subagent=True,
                depth=a.depth,
                prompt=brief,
                response=None if last_msg.get("tool_calls") else _text(last_msg.get("content")),
                usage=own,
                latency_s=max(0.0, t1 - t0),
                finish_reason=(g.calls.get(a.replies[-1]) or {}).get("finish_reason"),
                extra={
                    "linked": a.linked,
                    "n_turns": len(a.replies),
                    "first_node": a.replies[0],
                },
            )
        )
        for t, x in enumerate(a_turns):
            sub_turns.append(
                SubagentTurnRecord(
                    episode_id=episode_id,
                    turn=t,
                    call_id=a.call_id,
                    duration_s=x.latency_s,
                    initial_messages=a_initial if t == 0 else None,
                    **x.__dict__,
                )
            )
    sizes: dict[int, int] = {}
    for c in calls:
        sizes[c.batch_id] = sizes.get(c.batch_id, 0) + 1
    calls = [c.model_copy(update={"batch_size": sizes[c.batch_id]}) for c in calls]
    if unlinked:
        notes.append(
            f"{path}:{line}: trace {trace.get('id')}: {unlinked} sub-agents have no "
            "subagent_call link; each is attached to the root turn it ran after"
        )
    if mismatch:
        notes.append(
            f"{path}:{line}: trace {trace.get('id')}: an agent's history is not its first "
            "prompt plus replies and observations (compaction); those turns keep their "
            "prompt under extra.prompt_messages"
        )
    root_msg = g.message(root.replies[-1])
    reply = trace.get("root_reply")
    if isinstance(reply, str):
        memo: str | None = reply
    elif not root_msg.get("tool_calls"):
        memo = _text(root_msg.get("content"))
    else:
        memo = None
    if memo is not None and not memo.strip():
        memo = None
    status, detail = _status(trace, memo)
    first_call = g.calls.get(root.replies[0], {})
    agent_cfg = (trace.get("agent") or {}).get("config") or {}
    root_model = str(first_call.get("model") or agent_cfg.get("model") or "unknown")
    sub_model = root_model
    if len(g.agents) > 1:
        sub_model = str(g.calls.get(g.agents[1].replies[0], {}).get("model") or root_model)
    harness = agent_cfg.get("harness") or {}
    all_times = [c.get("time") or {} for c in trace.get("calls") or [] if isinstance(c, dict)]
    ends = [float(t.get("end") or 0) for t in all_times if t.get("end")]
    timing = trace.get("timing") or {}
    agent_span = timing.get("agent") or {}
    t_start = turns[0].started_at if turns else _EPOCH
    t_end = _stamp(max(ends, default=0)) or t_start
    if agent_span.get("end"):
        wall = max(0.0, float(agent_span["end"]) - float(agent_span.get("start") or 0))
    else:
        wall = max(0.0, (t_end - t_start).total_seconds())
    version = trace.get("version")
    producer = (trace.get("verifiers") or {}).get("version")
    failed_calls = [c for c in trace.get("calls") or [] if isinstance(c, dict) and c.get("error")]
    start_extra: dict[str, Any] = {
        "source_file": str(path),
        "source_line": line,
        "trace_id": trace.get("id"),
        "trace_version": version,
        "verifiers_version": producer,
        "agent": trace.get("agent"),
        "task": trace.get("task"),
        "stop_condition": trace.get("stop_condition"),
        "n_agents": len(g.agents),
        "n_compactions": g.n_compactions,
    }
    if parent_episode is not None:
        start_extra["episode"] = parent_episode
    if failed_calls:
        start_extra["failed_calls"] = failed_calls
    start = EpisodeStart(
        episode_id=episode_id,
        run_id="",
        sample_index=sample_index,
        started_at=t_start,
        room=_PLACEHOLDER_ROOM,
        task_id="",
        root=ModelSettings(
            spec=f"verifiers:{root_model}", model_id=root_model, sampling=_sampling(first_call)
        ),
        sub=ModelSettings(spec=f"verifiers:{sub_model}", model_id=sub_model, sampling=Sampling()),
        depth=2 if len(g.agents) > 1 else 1,
        seed=0,
        prompt_version=f"verifiers-trace-v{version}",
        limits={
            "max_turns": agent_cfg.get("max_turns"),
            "max_total_tokens": agent_cfg.get("max_total_tokens"),
            "max_depth": harness.get("max_depth") if isinstance(harness, dict) else None,
        },
        initial_messages=initial,
        extra=start_extra,
    )
    end = EpisodeEnd(
        episode_id=episode_id, status=status, status_detail=detail, memo=memo, ended_at=t_end
    )
    root_usage = Usage(cached_tokens=None)
    for x in root_turns:
        root_usage = root_usage + x.usage
    extra: dict[str, Any] = {
        "source": FORMAT,
        "source_file": path.name,
        "source_line": line,
        "trace_id": trace.get("id"),
        "rewards": trace.get("rewards") or {},
        "metrics": trace.get("metrics") or {},
    }
    return (
        ImportedEpisode(
            start=start,
            turns=turns,
            calls=calls,
            end=end,
            subagent_turns=sub_turns,
            inputs=inputs,
            wall_time_s=wall,
            root_usage=root_usage,
            extra=extra,
        ),
        notes,
    )


def _check_version(path: Path, line: int, trace: dict[str, Any], where: str) -> int:
    if "version" not in trace:
        raise _fail(path, line, f"{where} has no 'version' (not a verifiers Trace record)")
    found = trace["version"]
    if found not in SUPPORTED_TRACE_VERSIONS or isinstance(found, bool):
        producer = (trace.get("verifiers") or {}).get("version")
        made = f" (written by verifiers {producer})" if producer else ""
        raise ImportFormatError(
            f"{path}:{line}: unknown verifiers trace version {found!r} (field "
            f"'{where}.version'){made}; supported versions: "
            f"{', '.join(map(str, SUPPORTED_TRACE_VERSIONS))} (verifiers {PRODUCER_VERSION})"
        )
    return int(found)


def parse_traces_file(
    path: Path,
    file_hash: str,
    first_sample_index: int = 0,
    *,
    validator: Validator | None = None,
    on_episode: Callable[[ImportedEpisode], None] | None = None,
) -> tuple[list[ImportedEpisode], list[str]]:
    """Parse one verifiers rollout file (``traces.jsonl``) into episodes, one per trace.

    Args:
        path: the ``.jsonl`` file: ``Episode`` lines (``traces: [...]``) or bare ``Trace``
            lines.
        file_hash: the file's sha256 (episode ids are made from it and the trace's index in
            the file, counting every trace of every line in order).
        first_sample_index: ``sample_index`` of the file's first episode.
        validator: :func:`verifiers_validator` (verifiers' own models), or ``None`` to read
            the pinned field names directly.
        on_episode: called with each episode as soon as it is parsed.

    Returns:
        ``(episodes, warnings)``; a torn last line (a crash mid-write) is left out and
        warned about, as for our own files (:func:`rlmdistill.traces.store.read_jsonl`).

    Raises:
        ImportFormatError: an unknown trace version (names the version found and the ones
            supported), or a record of another shape (names file, line and field).
        rlmdistill.traces.store.TraceFileError: a corrupt line in the middle of the file.
    """
    read = read_jsonl(path)
    notes: list[str] = []
    if read.torn_tail is not None:
        notes.append(
            f"{path}: torn last line ({len(read.torn_tail)} chars, a crash mid-write) left out"
        )
    text = path.read_text(encoding="utf-8", errors="replace")
    numbers = [i + 1 for i, ln in enumerate(text.split("\n")) if ln.strip()]
    if not read.records:
        raise _fail(path, None, "no rollout records")
    episodes: list[ImportedEpisode] = []
    index = 0
    for n, (row, line) in enumerate(zip(read.records, numbers, strict=False)):
        if not isinstance(row, dict):
            raise _fail(path, line, f"line is a {type(row).__name__}, not an object")
        if "traces" in row:
            traces = row["traces"]
            if not isinstance(traces, list):
                raise _fail(path, line, "'traces' is not a list")
            for j, t in enumerate(traces):
                if not isinstance(t, dict):
                    raise _fail(path, line, f"traces[{j}] is not an object")
                _check_version(path, line, t, f"traces[{j}]")
        elif "nodes" in row:
            _check_version(path, line, row, "trace")
        else:
            raise _fail(
                path, line, f"record {n} is neither an Episode (traces) nor a Trace (nodes)"
            )
        if validator is not None:
            try:
                row = validator(row)
            except ValueError as exc:  # pydantic.ValidationError
                first = str(exc).splitlines()[:3]
                raise _fail(
                    path, line, "verifiers' models reject it: " + " | ".join(first)
                ) from exc
        if "traces" in row:
            info: dict[str, Any] | None = {
                k: row.get(k) for k in ("id", "env", "group", "run", "ok", "errors") if k in row
            }
            traces = row["traces"]
            if not traces:
                notes.append(f"{path}:{line}: episode {row.get('id')} has no trace; left out")
        else:
            info, traces = None, [row]
        for t in traces:
            episode_id = imported_episode_id(FORMAT, file_hash, index)
            ep, warned = _episode(path, line, t, episode_id, first_sample_index + index, info)
            episodes.append(ep)
            if on_episode is not None:
                on_episode(ep)
            notes.extend(warned)
            index += 1
    return episodes, notes


def import_verifiers(
    logs: Iterable[Path],
    room: Path,
    out: Path,
    *,
    coverage: bool = True,
    jobs: int = 1,
    use_verifiers: bool | None = None,
    command: list[str] | None = None,
) -> ImportResult:
    """``rlmdistill import verifiers``: verifiers rollouts -> the run folder ``out`` on room
    ``room``.

    Every file is parsed (every trace version checked) before anything is written; episodes
    keep file order. Episode ids: :func:`~rlmdistill.importers.common.imported_episode_id`
    of the file's sha256 and the trace's index in its file. ``use_verifiers``: validate with
    verifiers' own models (``None``: when the package is installed; ``True``: required,
    ``ImportError`` without it; ``False``: read the pinned field names directly).
    ``jobs``: worker processes for the coverage probe (0 = auto).

    Raises:
        ImportFormatError: unknown trace version or shape (nothing written).
        FileNotFoundError: a missing file; FileExistsError: ``out`` is not empty.
        ValueError: the room has no ``task.json``.
    """
    validator = None if use_verifiers is False else verifiers_validator()
    if use_verifiers and validator is None:
        raise ImportError(
            "use_verifiers=True needs the verifiers package (pip install verifiers==0.4.0)"
        )

    def parse(
        f: Path, digest: str, offset: int, emit: Callable[[ImportedEpisode], None]
    ) -> tuple[list[ImportedEpisode], set[str], list[str]]:
        episodes, warned = parse_traces_file(
            f, digest, offset, validator=validator, on_episode=emit
        )
        for ep in episodes:
            assert ep.start.extra is not None
            ep.start.extra["parsed_with"] = (
                "verifiers models" if validator is not None else "pinned field names"
            )
        versions = {str(ep.start.extra["trace_version"]) for ep in episodes if ep.start.extra}
        return episodes, versions, warned

    return import_files(
        trace_files(logs),
        parse,
        room,
        out,
        source_format=FORMAT,
        coverage=coverage,
        jobs=jobs,
        command=command,
    )


def _wire_call(call: dict[str, Any]) -> dict[str, Any]:
    """A verifiers ``ToolCall`` (``id``, ``name``, ``arguments``) in the OpenAI chat format."""
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call.get("name"), "arguments": call.get("arguments")},
    }


def source_requests(
    initial: list[Message], turns: Sequence[TurnRecord] | Sequence[SubagentTurnRecord]
) -> list[list[dict[str, Any]]]:
    """The message list of every request of one agent of an imported verifiers episode, in
    the OpenAI chat format the agent sent: ``initial`` (``EpisodeStart.initial_messages``, or
    a subagent's turn-0 ``initial_messages``), then per turn the assistant message as the
    model returned it (its text and its tool calls, from ``extra.content`` and
    ``extra.tool_calls``, not the rendered ``completion``) and the messages that followed it
    (``extra.observation_messages``: tool results with their ``tool_call_id``, user turns).

    Shape: ``len(result) == len(turns)``; ``result[t]`` is turn ``t``'s request, each message
    ``{"role", "content"}`` plus ``tool_calls`` / ``tool_call_id`` where the source had them.
    Exact while the agent's history only grew (no compaction).
    """
    history: list[dict[str, Any]] = [{"role": m.role, "content": m.content} for m in initial]
    out: list[list[dict[str, Any]]] = []
    for turn in sorted(turns, key=lambda t: t.turn):
        out.append([dict(m) for m in history])
        extra = turn.extra or {}
        calls = extra.get("tool_calls")
        if calls:
            content = extra.get("content")
            reply: dict[str, Any] = {
                "role": "assistant",
                "content": _text(content) if content is not None else None,
                "tool_calls": [_wire_call(c) for c in calls],
            }
        else:
            reply = {"role": "assistant", "content": turn.completion}
        history.append(reply)
        for m in extra.get("observation_messages") or []:
            entry = {"role": m.get("role"), "content": _text(m.get("content"))}
            if m.get("tool_call_id") is not None:
                entry["tool_call_id"] = m["tool_call_id"]
            history.append(entry)
    return out
