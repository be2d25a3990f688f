"""One RLM episode: root turns, REPL execution, sub-calls (and subagents), trajectory records.

The root's reply is parsed for fenced code blocks (:mod:`rlmdistill.traces.replies`); each
block runs in the episode's REPL process, whose ``llm_query`` calls come back here and go to
the sub model in parallel. At depth 1 a sub-call is one plain completion. At depth 2 it starts
a **subagent**: the sub model gets its own REPL whose variable ``context`` holds the prompt it
was given, takes up to ``subagent_max_turns`` turns, may make plain sub-calls itself, and hands
back its answer with ``FINAL(...)``. Root turns and subagent turns run through the same
:meth:`Episode._turn_loop`.

The trace is written as the episode runs, through the :class:`~rlmdistill.harness.trace.
TraceWriter` of its :class:`EpisodeSpec` (:class:`EpisodeStart`, then :class:`TurnRecord`,
:class:`SubCallRecord` and :class:`SubagentTurnRecord` records, then :class:`EpisodeEnd`), so
the harness knows nothing of run folders; the returned :class:`EpisodeSummary` is what the
collect stage's runner appends to ``episodes.jsonl``. The settings are read through
:class:`~rlmdistill.harness.settings.EpisodeSettings` (the collect stage's
``CollectConfig``). Sub-calls are stored apart from root turns and linked to the turn, code
block and parent sub-call that made them.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from rlmdistill.coverage.index import CoverageIndex, CoverageProbe
from rlmdistill.harness import prompts
from rlmdistill.harness.dispatch import Dispatch, shared_dispatch
from rlmdistill.harness.repl import (
    BackgroundRepl,
    BlockOutcome,
    LlmHandler,
    Repl,
    ReplDied,
    ReplProcess,
    ReplValueTooLarge,
    SubCallRefused,
)
from rlmdistill.harness.sandbox import SandboxUnavailable
from rlmdistill.harness.settings import EpisodeSettings
from rlmdistill.harness.trace import TraceRecord, TraceWriter
from rlmdistill.models.base import (
    ContextExceededError,
    InfrastructureError,
    Message,
    ModelClient,
    ModelError,
    Sampling,
    Usage,
)
from rlmdistill.models.replicas import affinity
from rlmdistill.rooms.text import cited_documents
from rlmdistill.traces.memo_errors import count_sub_call_error_texts, sub_call_error_text
from rlmdistill.traces.rebuild import messages_sha256
from rlmdistill.traces.replies import parse_reply
from rlmdistill.traces.schema import (
    CodeBlockResult,
    Coverage,
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    EpisodeSummary,
    ModelSettings,
    RoomInfo,
    SubagentTurnRecord,
    SubCallRecord,
    TokenUsage,
    TurnBase,
    TurnRecord,
    utcnow,
)
from rlmdistill.traces.scores import memo_sha256
from rlmdistill.traces.tokens import TokenTrail, note_turn, token_trace

FinalSource = Literal["text", "final_call", "final_var"]

_SENT_WAIT_S = 0.05
"""Longest a batch's records and coverage probe wait for its requests to leave (seconds)."""


_T = TypeVar("_T")

_COMMIT_THREADS = 4
"""Threads that commit (``fsync``) ended episodes' traces, for the whole process."""
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _process_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """The process-wide pool ``name`` (also its threads' name prefix), made on first use."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(threads, thread_name_prefix=name)
        return pool


def _committer() -> ThreadPoolExecutor:
    """The pool that runs :meth:`TraceWriter.commit` beside an ended episode's coverage."""
    return _process_pool("trace-commit", _COMMIT_THREADS)


def _reaper() -> ThreadPoolExecutor:
    """The pool that reaps ended episodes' REPL processes while their summary lines are
    written (as many threads as the commit pool)."""
    return _process_pool("repl-reap", _COMMIT_THREADS)


def _early_coverage_pool() -> ThreadPoolExecutor:
    """One thread for the whole process that computes coverage ahead of an episode's end
    (see :meth:`Episode._start_early_coverage`). One is enough: the computations take turns
    anyway (:meth:`CoverageProbe.detail`), and an episode whose early computation has not
    started when it ends cancels it and computes its own."""
    return _process_pool("coverage-early", 1)


_FINAL_MARK = "FINAL"
"""A root reply holding this (``FINAL(...)``, ``FINAL_VAR(...)``) may end the episode."""


def bounded(text: str, head: int, tail: int) -> str:
    """``text`` if it fits in ``head + tail`` characters, else head + explicit marker + tail.

    The tail is kept so a traceback at the end of a long output stays visible.
    """
    if len(text) <= head + tail:
        return text
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted:,} characters omitted] ...\n{text[len(text) - tail :]}"


@dataclass
class RoomHandle:
    """What an episode needs of a room: its identity, documents and a REPL snapshot file."""

    info: RoomInfo
    snapshot: Path
    documents: list[tuple[str, str, int]]
    """``(doc_id, folder, chars)`` sorted by id."""
    task_id: str
    task_title: str
    task_instructions: str
    coverage_index: CoverageIndex
    """Shingle index of the room for the coverage probe (coverage counts only what the
    collector itself sent to models; nothing the REPL reports)."""


@dataclass
class EpisodeSpec:
    """Identity of one episode inside a run."""

    run_id: str
    episode_id: str
    sample_index: int
    seed: int
    trace: TraceWriter
    """Where the episode's records go (the collect stage: the run's
    ``trajectories/<episode_id>.jsonl``)."""
    scratch_dir: Path
    """The episode's private folder on the host: the root REPL's scratch is ``root/`` inside
    it (its only writable path without bwrap), and each depth-2 subagent gets
    ``subagents/<call_id>/`` (its context snapshot and scratch), out of the root's reach."""


@dataclass(frozen=True)
class _Origin:
    """Where a batch of sub-calls came from (root turn/block; subagent call/turn/block)."""

    turn: int
    block: int
    parent_call_id: int | None = None
    sub_turn: int | None = None
    sub_block: int | None = None

    @property
    def depth(self) -> int:
        return 1 if self.parent_call_id is None else 2


@dataclass
class _Agent:
    """One agent's turn-taking setup: the root, or a depth-2 subagent."""

    model: ModelClient
    sampling: Sampling
    prefill: str | None
    repl: Repl
    on_llm: LlmHandler
    set_block: Callable[[int], None]
    """Told the code block about to run (so sub-calls know where they came from)."""
    tokens: TokenTrail | None = None
    """Records each turn's token ids (``CollectConfig.token_ids``); ``None``: not recorded."""


@dataclass
class _State:
    usage: TokenUsage = field(default_factory=TokenUsage)
    n_sub_calls: int = 0
    n_sub_errors: int = 0
    n_batches: int = 0
    error_kinds: set[str] = field(default_factory=set)
    """``error_kind`` of every failed sub-call (their texts went back to the code)."""
    n_truncated_root: int = 0
    """Root turns whose reply ``max_tokens`` cut (``finish_reason == "length"``)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class _TurnEnd(Exception):
    """A model error that ends a turn loop (root: the episode; subagent: its sub-call)."""

    def __init__(self, status: EpisodeStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Episode:
    """Runs one episode; use :meth:`run`. Never raises for model/REPL failures: they become a
    status. The trace is begun afresh (:meth:`TraceWriter.begin`) and committed before the
    summary is returned."""

    def __init__(
        self,
        config: EpisodeSettings,
        spec: EpisodeSpec,
        room: RoomHandle,
        root: ModelClient,
        sub: ModelClient,
        root_spec: str,
        sub_spec: str,
        dispatch: Dispatch | None = None,
    ) -> None:
        self.config = config
        self.spec = spec
        self.room = room
        self.root = root
        self.sub = sub
        self.root_spec = root_spec
        self.sub_spec = sub_spec
        self._dispatch_to = dispatch or shared_dispatch()
        """Where sub-calls and subagents run (bounded, shared by the run's episodes)."""
        self.state = _State()
        self._turn = 0
        self._block = 0
        self._n_turns = 0
        self.probe = CoverageProbe(room.coverage_index)
        self._early: tuple[int, Future[Coverage]] | None = None
        """Coverage computed while the root's last block ran, and the number of inputs it
        covers (:meth:`_start_early_coverage`)."""
        self._t_start = time.monotonic()
        self.infrastructure_failure: tuple[str, str, InfrastructureError] | None = None
        """The serving failure that ended this attempt at a root turn: (``root``, model id,
        error); the runner then records a failed attempt instead of a finished episode
        (collect/attempts). Sub-call failures stay that prompt's error."""

    def _note_failure(self, who: str, model: ModelClient, exc: ModelError) -> None:
        """Remember the first :class:`InfrastructureError` of the episode (thread-safe)."""
        if isinstance(exc, InfrastructureError):
            with self.state.lock:
                if self.infrastructure_failure is None:
                    self.infrastructure_failure = (who, model.model_id, exc)

    # -- trajectory -----------------------------------------------------------------------
    def _write(self, *records: TraceRecord) -> None:
        # not durable per record: the trace is committed once in run(), before the summary
        # (the runner's commit record) exists; an unfinished episode restarts on resume
        self.spec.trace.write(records)

    def _initial_messages(self) -> tuple[list[Message], int]:
        msgs = [Message(role="system", content=prompts.SYSTEM_PROMPT)]
        n_few = 0
        if self.config.few_shot:
            example = prompts.worked_example()
            msgs += example
            n_few = len(example)
        msgs.append(
            Message(
                role="user",
                content=prompts.task_message(
                    self.room.task_instructions,
                    self.room.task_title,
                    self.room.info.n_documents,
                    self.room.info.n_chars,
                    self.room.info.folders,
                    [(d, c) for d, _, c in self.room.documents],
                ),
            )
        )
        return msgs, n_few

    def _observe(self, texts: list[str]) -> None:
        """Feed every model input, exactly as sent, to the coverage probe."""
        for text in texts:
            self.probe.observe(text)

    def _remaining_s(self) -> float:
        return self.config.limits.max_wall_s - (time.monotonic() - self._t_start)

    # -- sub-calls --------------------------------------------------------------------------
    def _sub_seed(self, call_id: int) -> int:
        return (self.spec.seed + 7919 * (call_id + 1)) % 2**31

    def _handler(self, origin_of: Callable[[], _Origin]) -> LlmHandler:
        """The ``llm_query`` handler of a REPL; ``origin_of`` tells where the code is now."""
        return lambda prompts_, sources: self._dispatch(prompts_, sources, origin_of())

    def _dispatch(
        self, prompts_: list[str], sources: list[list[dict[str, Any]]], origin: _Origin
    ) -> list[str]:
        """Run one ``llm_query_batched`` batch in parallel; record and return the answers.

        Raises :class:`SubCallRefused` (shown in the REPL) when the sub-call budget is spent.
        """
        st = self.state
        with st.lock:
            budget = self.config.limits.max_sub_calls - st.n_sub_calls
            if len(prompts_) > budget:
                raise SubCallRefused(
                    f"sub-call budget spent: {len(prompts_)} requested, {max(budget, 0)} of "
                    f"{self.config.limits.max_sub_calls} left"
                )
            first_id = st.n_sub_calls
            st.n_sub_calls += len(prompts_)
            batch_id = st.n_batches
            st.n_batches += 1
        subagents = self.config.depth == 2 and origin.depth == 1

        cap = self.config.repl.max_prompt_chars
        seeds = [self._sub_seed(first_id + i) for i in range(len(prompts_))]
        sent_at = [i for i, p in enumerate(prompts_) if len(p) <= cap]
        pending = None
        if sent_at and not subagents:  # sent first: the records are built while in flight
            base = {k: v for k, v in self.config.sub_sampling.__dict__.items() if k != "seed"}
            pending = self._dispatch_to.chat(
                self.sub,
                [  # model_construct: the fields are sampling's, already validated (~50 us less)
                    (
                        [Message.model_construct(role="user", content=prompts_[i])],
                        Sampling.model_construct(**base, seed=seeds[i]),
                    )
                    for i in sent_at
                ],
                self.config.sub_concurrency,
            )
            # the records and the coverage probe wait until the requests have left (bounded:
            # a slow loop costs only this overlap)
            pending.wait_sent(_SENT_WAIT_S)
        records: list[SubCallRecord] = []
        for i, prompt in enumerate(prompts_):
            rec = SubCallRecord(
                episode_id=self.spec.episode_id,
                call_id=first_id + i,
                turn=origin.turn,
                block=origin.block,
                batch_id=batch_id,
                batch_size=len(prompts_),
                parent_call_id=origin.parent_call_id,
                sub_turn=origin.sub_turn,
                sub_block=origin.sub_block,
                subagent=subagents,
                depth=origin.depth,
                prompt=prompt,
                seed=seeds[i],
                sources=sources[i] if i < len(sources) else [],
            )
            if len(prompt) > cap:  # never sent; the trace keeps head + tail
                rec.prompt = bounded(prompt, 2000, 500)
                rec.error_kind = "prompt_too_large"
                rec.error = (
                    f"prompt of {len(prompt):,} characters is over the limit of {cap:,} "
                    "(ReplLimits.max_prompt_chars); not sent"
                )
            records.append(rec)
        todo = [records[i] for i in sent_at]
        if subagents:

            def run_subagent(rec: SubCallRecord) -> None:
                t0 = time.monotonic()
                self._run_subagent(rec)
                rec.latency_s = time.monotonic() - t0

            # on the shared subagent pool: subagents block on their own model and REPL
            self._dispatch_to.run(run_subagent, todo, self.config.sub_concurrency)
        elif pending is not None:
            self._observe([prompts_[i] for i in sent_at])  # off the requests' path
            for rec, (res, elapsed) in zip(todo, pending.result(), strict=True):
                if isinstance(res, ModelError):
                    rec.error, rec.error_kind = str(res), res.kind
                    rec.attempts, rec.latency_s = res.attempts, elapsed
                else:
                    rec.response, rec.usage = res.text, res.usage
                    rec.attempts, rec.latency_s = res.attempts, res.latency_s
                    rec.finish_reason = res.finish_reason
                    if self.config.token_ids == "all":
                        rec.tokens = token_trace(res)
        with st.lock:
            for rec in records:
                if not rec.subagent:  # a subagent's usage was counted turn by turn
                    st.usage.sub = st.usage.sub + rec.usage
                if rec.error is not None:
                    st.n_sub_errors += 1
                    st.error_kinds.add(str(rec.error_kind))
        self._write(*records)
        return [
            r.response
            if r.response is not None
            else sub_call_error_text(str(r.error_kind), str(r.error))
            for r in records
        ]

    def _run_subagent(self, rec: SubCallRecord) -> None:
        """Depth 2: answer ``rec.prompt`` with a subagent; fills ``rec`` (response or error)."""
        cfg = self.config
        folder = self.spec.scratch_dir / "subagents" / str(rec.call_id)
        scratch = folder / "scratch"
        (folder / "context").mkdir(parents=True, exist_ok=True)
        snapshot = folder / "context" / "context.snapshot.json"
        doc = {"id": "context", "folder": "", "text": rec.prompt}
        snapshot.write_text(
            json.dumps({"room_id": "context", "documents": [doc]}), encoding="utf-8"
        )
        messages = [
            Message(role="system", content=prompts.SUBAGENT_SYSTEM_PROMPT),
            Message(role="user", content=prompts.subagent_task_message(rec.prompt)),
        ]
        where = {"turn": 0, "block": 0}
        handler = self._handler(
            lambda: _Origin(
                turn=rec.turn,
                block=rec.block,
                parent_call_id=rec.call_id,
                sub_turn=where["turn"],
                sub_block=where["block"],
            )
        )

        def make_record(t: int, msgs: list[Message]) -> SubagentTurnRecord:
            where["turn"] = t
            return SubagentTurnRecord(
                episode_id=self.spec.episode_id,
                call_id=rec.call_id,
                turn=t,
                started_at=utcnow(),
                n_messages_before=len(msgs),
                prompt_sha256=messages_sha256(msgs),
                seed=(rec.seed or 0) + 1_000_003 * t,
                prefill=cfg.subagent_prefill,
                completion="",
                usage=Usage(),
                latency_s=0.0,
                initial_messages=list(msgs) if t == 0 else None,
            )

        try:
            with ReplProcess(
                snapshot, scratch, cfg.repl, context_doc="context", sandbox=cfg.sandbox
            ) as repl:
                agent = _Agent(
                    self.sub,
                    cfg.sub_sampling,
                    cfg.subagent_prefill,
                    repl,
                    handler,
                    lambda b: where.__setitem__("block", b),
                    TokenTrail() if cfg.token_ids == "all" else None,
                )
                with affinity(f"{self.spec.episode_id}/{rec.call_id}"):
                    final = self._turn_loop(
                        agent, messages, make_record, cfg.subagent_max_turns, usage_into=rec
                    )
        except _TurnEnd as exc:
            rec.error, rec.error_kind = exc.detail, exc.status
            return
        except ReplDied as exc:
            rec.error = f"subagent REPL: {exc}"
            rec.error_kind = "repl_timeout" if exc.timed_out else "repl_crashed"
            return
        except SandboxUnavailable as exc:
            rec.error, rec.error_kind = f"subagent REPL: {exc}", "repl_crashed"
            return
        except ReplValueTooLarge as exc:
            rec.error, rec.error_kind = f"subagent: {exc}", exc.status
            return
        if final is None:
            rec.error = f"subagent gave no answer in {cfg.subagent_max_turns} turns"
            rec.error_kind = "no_answer"
        else:
            rec.response = final[1]

    # -- turns ------------------------------------------------------------------------------
    def _observation(self, idx: int, out: BlockOutcome) -> str:
        lim = self.config.limits
        body = out.stdout
        if out.error:
            body = (body + "\n" if body else "") + out.error
        shown = bounded(body, lim.observation_head_chars, lim.observation_tail_chars)
        if out.stdout_chars > len(out.stdout):
            shown += f"\n[output was {out.stdout_chars:,} characters in total]"
        return f"REPL output (block {idx}):\n```\n{shown.rstrip() or '(no output)'}\n```"

    def _turn_loop(
        self,
        agent: _Agent,
        messages: list[Message],
        make_record: Callable[[int, list[Message]], TurnBase],
        max_turns: int,
        usage_into: SubCallRecord | None = None,
    ) -> tuple[FinalSource, str] | None:
        """Turns of one agent (root or subagent) until it hands back an answer.

        Returns ``(source, answer)`` or ``None`` when ``max_turns`` ran out. Raises
        :class:`_TurnEnd` on a model error, wall-time or token budget, and
        :class:`~rlmdistill.harness.repl.ReplDied` when a block is killed. Every turn is
        written as the record ``make_record(turn, messages)`` returns.
        """
        for turn in range(max_turns):
            if self._remaining_s() <= 0:
                raise _TurnEnd(  # the safety net, not a budget (EpisodeLimits)
                    "timeout",
                    f"episode wall time {self.config.limits.max_wall_s:.0f}s spent "
                    "(limits.max_wall_s, a safety net against a hung episode)",
                )
            rec = make_record(turn, messages)
            final = self._one_turn(agent, messages, rec)
            if usage_into is not None:
                usage_into.usage = usage_into.usage + rec.usage
                usage_into.attempts = max(usage_into.attempts, rec.attempts)
            if final is not None:
                return final
            used = self.state.usage.root + self.state.usage.sub
            if used.prompt_tokens + used.completion_tokens > self.config.limits.max_tokens:
                raise _TurnEnd(
                    "budget_exceeded", f"token budget {self.config.limits.max_tokens:,} spent"
                )
        return None

    def _one_turn(
        self, agent: _Agent, messages: list[Message], rec: TurnBase
    ) -> tuple[FinalSource, str] | None:
        """One completion + execution. Appends to ``messages`` unless the agent answered."""
        model, sampling, prefill, repl = agent.model, agent.sampling, agent.prefill, agent.repl
        t0 = time.monotonic()
        self._observe([m.content for m in messages] + ([prefill] if prefill else []))
        try:
            res = model.chat(
                messages, sampling.model_copy(update={"seed": rec.seed}), prefill=prefill
            )
        except ModelError as exc:
            if isinstance(rec, TurnRecord):  # a sub-call's failure is only that prompt's (T4)
                self._note_failure("root", model, exc)
            rec.duration_s, rec.attempts = time.monotonic() - t0, exc.attempts
            if isinstance(rec, SubagentTurnRecord):
                rec.error = f"{exc.kind}: {exc}"
            self._write(rec)
            if isinstance(exc, ContextExceededError):
                raise _TurnEnd("context_exceeded", str(exc)) from exc
            if exc.kind == "budget_exceeded":  # the run's spend cap (models.limits)
                raise _TurnEnd("budget_exceeded", str(exc)) from exc
            raise _TurnEnd("model_error", f"{exc.kind}: {exc}") from exc
        rec.completion, rec.usage = res.text, res.usage
        rec.latency_s, rec.attempts = res.latency_s, res.attempts
        rec.finish_reason, rec.text_from_reasoning = res.finish_reason, res.text_from_reasoning
        with self.state.lock:
            if isinstance(rec, TurnRecord):
                self.state.usage.root = self.state.usage.root + res.usage
                self.state.n_truncated_root += res.finish_reason == "length"
            else:
                self.state.usage.sub = self.state.usage.sub + res.usage
        reply = (prefill or "") + res.text
        parsed = parse_reply(note_turn(rec, res, agent.tokens))  # the answer, reasoning apart
        if isinstance(rec, TurnRecord) and _FINAL_MARK in reply:
            self._start_early_coverage()
        observations: list[str] = []
        final: tuple[FinalSource, str] | None = None
        for block in parsed.blocks:
            agent.set_block(block.position)
            timeout = max(1.0, min(self.config.repl.block_timeout_s, self._remaining_s()))
            try:
                out = repl.execute(block.code, agent.on_llm, timeout_s=timeout)
            except ReplDied as exc:
                rec.blocks.append(
                    CodeBlockResult(
                        index=block.position,
                        code=block.code,
                        stdout_full="",
                        stdout_chars=0,
                        error=str(exc),
                        duration_s=time.monotonic() - t0,
                        timed_out=exc.timed_out,
                    )
                )
                rec.duration_s = time.monotonic() - t0
                self._write(rec)
                raise
            rec.blocks.append(
                CodeBlockResult(
                    index=block.position,
                    code=block.code,
                    stdout_full=out.stdout,
                    stdout_chars=out.stdout_chars,
                    error=out.error,
                    duration_s=out.duration_s,
                )
            )
            observations.append(self._observation(block.position, out))
            if out.final_error:
                rec.final_error = out.final_error
            if out.final is not None:
                final = (out.final["source"], out.final["value"])
                break
        if final is None and parsed.final is not None:
            if parsed.final.kind == "text":
                final = ("text", parsed.final.value)
            else:
                name = parsed.final.value
                value = repl.get_var(name)
                if value is None:
                    rec.final_error = f"FINAL_VAR({name}): no variable named {name!r} in the REPL"
                    observations.append(
                        f"Error: {rec.final_error}. Assign it first, then hand it back."
                    )
                else:
                    final = ("final_var", value)
        if not parsed.blocks and parsed.final is None:
            rec.no_op = True
            observations.append(prompts.no_action_message())
        rec.duration_s = time.monotonic() - t0
        if final is not None:
            rec.final_answer_source = final[0]
            self._write(rec)
            return final
        rec.observation = prompts.observation_message(observations)
        self._write(rec)
        messages.append(Message(role="assistant", content=reply))
        messages.append(Message(role="user", content=rec.observation))
        return None

    def _start_early_coverage(self) -> None:
        """Compute coverage now, on another thread, while the REPL runs a root reply that may
        end the episode: its value is the episode's if no model input is observed after
        this point (:meth:`_end_coverage` checks). At most one extra computation per root
        reply that names ``FINAL`` and does not end the episode."""
        if self._early is not None:  # an earlier reply's, not started yet: drop it
            self._early[1].cancel()
        self._early = (self.probe.n_observed, _early_coverage_pool().submit(self._coverage))

    def _end_coverage(self) -> Coverage:
        """The episode's coverage: the early one when it covers every observed input (it
        holds the same value, method ``shingle-v1`` over the same texts), else computed
        now. An early computation not yet started is cancelled instead of waited for."""
        early, self._early = self._early, None
        if early is not None:
            n, fut = early
            if not fut.cancel():
                try:
                    coverage = fut.result()
                except Exception:  # computed again below: it raises here, in the episode
                    pass
                else:
                    if self.probe.n_observed == n:
                        return coverage
        return self._coverage()

    def _coverage(self) -> Coverage:
        """Probe coverage over every model input exactly as sent (``shingle-v1``)."""
        d = self.probe.detail()
        return d.coverage.model_copy(
            update={
                "covered_chars": d.covered_chars,
                "unique_chars": d.unique_chars,
                "duplicate_chars": d.duplicate_chars,
            }
        )

    # -- episode ----------------------------------------------------------------------------
    def run(self) -> EpisodeSummary:
        """Run the episode to an end status and return its summary (already traced); its
        REPL's processes are reaped before it returns."""
        return self.run_then(lambda summary: summary)

    def run_then(self, after: Callable[[EpisodeSummary], _T]) -> _T:
        """Run the episode, then ``after(summary)`` (the executor appends the summary line
        there) while the REPL's processes, killed when the turns ended, are reaped on another
        thread (~0.8 ms off the end of the episode under bubblewrap); returns what ``after``
        returns once both are done. The REPL is reaped in every case, before an error of the
        run or of ``after`` propagates."""
        cfg = self.config
        self._t_start = time.monotonic()
        started_at = utcnow()
        self.spec.trace.begin()  # an interrupted attempt restarts
        messages, n_few = self._initial_messages()
        root_sampling = cfg.root_sampling.model_copy(update={"seed": self.spec.seed})
        self._write(
            EpisodeStart(
                episode_id=self.spec.episode_id,
                run_id=self.spec.run_id,
                sample_index=self.spec.sample_index,
                room=self.room.info,
                task_id=self.room.task_id,
                root=ModelSettings(
                    spec=self.root_spec,
                    model_id=self.root.model_id,
                    sampling=root_sampling,
                    few_shot=cfg.few_shot,
                    prefill=cfg.prefill,
                ),
                sub=ModelSettings(
                    spec=self.sub_spec,
                    model_id=self.sub.model_id,
                    sampling=cfg.sub_sampling,
                    prefill=cfg.subagent_prefill if cfg.depth == 2 else None,
                ),
                depth=cfg.depth,
                seed=self.spec.seed,
                prompt_version=prompts.PROMPT_VERSION
                + (f"+{prompts.SUBAGENT_PROMPT_VERSION}" if cfg.depth == 2 else ""),
                limits={"episode": cfg.limits.model_dump(), "repl": cfg.repl.model_dump()},
                initial_messages=messages,
                n_few_shot_messages=n_few,
            )
        )

        def root_record(turn: int, msgs: list[Message]) -> TurnRecord:
            self._turn, self._n_turns = turn, turn + 1
            return TurnRecord(
                episode_id=self.spec.episode_id,
                turn=turn,
                started_at=utcnow(),
                n_messages_before=len(msgs),
                prompt_sha256=messages_sha256(msgs),
                seed=(self.spec.seed + 1_000_003 * turn) % 2**31,
                prefill=cfg.prefill,
                completion="",
                usage=Usage(),
                latency_s=0.0,
            )

        # TCP set-up of the first sub-call batch overlaps the root's first turn
        self._dispatch_to.prewarm(self.sub, min(cfg.sub_concurrency, cfg.limits.max_sub_calls))
        repl = BackgroundRepl(
            self.room.snapshot, self.spec.scratch_dir / "root", cfg.repl, sandbox=cfg.sandbox
        )
        try:
            summary = self._root_episode(repl, messages, root_record, root_sampling, started_at)
        except BaseException:
            repl.close()
            raise
        reaped = _reaper().submit(repl.close)  # killed when the turns ended
        try:
            return after(summary)
        finally:
            reaped.result()  # raises what close() raised

    def _root_episode(
        self,
        repl: BackgroundRepl,
        messages: list[Message],
        root_record: Callable[[int, list[Message]], TurnRecord],
        root_sampling: Sampling,
        started_at: datetime,
    ) -> EpisodeSummary:
        """The root's turns in ``repl``, then the end record and the summary."""
        cfg = self.config
        status: EpisodeStatus = "no_memo"
        detail: str | None = f"turn limit ({cfg.limits.max_turns}) reached without a memo"
        memo: str | None = None
        try:
            try:
                agent = _Agent(
                    self.root,
                    root_sampling,
                    cfg.prefill,
                    repl,
                    self._handler(lambda: _Origin(turn=self._turn, block=self._block)),
                    lambda b: setattr(self, "_block", b),
                    TokenTrail() if cfg.token_ids != "off" else None,
                )
                with affinity(self.spec.episode_id):  # one replica per episode: prefix cache
                    final = self._turn_loop(agent, messages, root_record, cfg.limits.max_turns)
            finally:  # its processes end while the trace is committed and coverage computed
                repl.signal_kill()
            if final is not None:
                if final[1].strip():
                    status, detail, memo = "completed", None, final[1]
                else:
                    status, detail = "no_memo", "the final answer was empty"
        except _TurnEnd as exc:
            status, detail = exc.status, exc.detail
        except ReplDied as exc:
            status = "repl_timeout" if exc.timed_out else "repl_crashed"
            detail = str(exc)
        except SandboxUnavailable as exc:
            status, detail = "repl_crashed", str(exc)
        except ReplValueTooLarge as exc:
            status, detail = exc.status, str(exc)
        except Exception:  # a harness bug must not take the collector down
            status, detail = "error", traceback.format_exc()
        end = EpisodeEnd(
            episode_id=self.spec.episode_id, status=status, status_detail=detail, memo=memo
        )
        self._write(end)
        # the trace's fsync (~2 ms) runs while coverage is computed; the summary waits for it
        committed = _committer().submit(self.spec.trace.commit)
        doc_ids = [d for d, _, _ in self.room.documents]
        try:
            coverage = self._end_coverage()  # inside wall_time_s: part of the episode's work
        finally:
            committed.result()  # raises what commit() raised (OSError: not durable)
        return EpisodeSummary(
            episode_id=self.spec.episode_id,
            run_id=self.spec.run_id,
            sample_index=self.spec.sample_index,
            room=self.room.info,
            task_id=self.room.task_id,
            root_model=self.root_spec,
            sub_model=self.sub_spec,
            depth=cfg.depth,
            seed=self.spec.seed,
            status=status,
            status_detail=detail,
            n_turns=self._n_turns,
            n_sub_calls=self.state.n_sub_calls,
            n_sub_call_errors=self.state.n_sub_errors,
            n_sub_batches=self.state.n_batches,
            n_truncated_turns=self.state.n_truncated_root,
            memo_sub_call_errors=count_sub_call_error_texts(memo, self.state.error_kinds),
            tokens=self.state.usage,
            wall_time_s=time.monotonic() - self._t_start,
            memo=memo,
            memo_chars=len(memo or ""),
            memo_sha256=memo_sha256(memo) if memo else None,
            cited_documents=cited_documents(memo, doc_ids),
            coverage=coverage,
            started_at=started_at,
            ended_at=end.ended_at,
        )
