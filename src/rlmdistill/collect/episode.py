"""One RLM episode (depth 1): root turns, REPL execution, sub-calls, trajectory records.

The root's reply is parsed for fenced code blocks (:mod:`rlmdistill.collect.parsing`); each
block runs in the episode's REPL process, whose ``llm_query`` calls come back here and go to
the sub model in parallel. The trajectory file is appended as the episode runs
(:class:`EpisodeStart`, then :class:`TurnRecord` / :class:`SubCallRecord`, then
:class:`EpisodeEnd`); the returned :class:`EpisodeSummary` is what the runner appends to
``episodes.jsonl``. Sub-calls are stored apart from root turns and linked to the turn and code
block that made them (case R4).
"""

from __future__ import annotations

import hashlib
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmdistill.collect import prompts
from rlmdistill.collect.config import CollectConfig
from rlmdistill.collect.parsing import parse_reply
from rlmdistill.collect.repl import BlockOutcome, ReplDied, ReplProcess, SubCallRefused
from rlmdistill.models.base import (
    ContextExceededError,
    Message,
    ModelClient,
    ModelError,
    Sampling,
    Usage,
)
from rlmdistill.rooms.text import cited_documents
from rlmdistill.traces.rebuild import messages_sha256
from rlmdistill.traces.schema import (
    CodeBlockResult,
    Coverage,
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    EpisodeSummary,
    ModelSettings,
    RoomInfo,
    SubCallRecord,
    TokenUsage,
    TurnRecord,
    utcnow,
)
from rlmdistill.traces.store import append_records


def bounded(text: str, head: int, tail: int) -> str:
    """``text`` if it fits in ``head + tail`` characters, else head + explicit marker + tail.

    The tail is kept so a traceback at the end of a long output stays visible (case R3).
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


@dataclass
class EpisodeSpec:
    """Identity of one episode inside a run."""

    run_id: str
    episode_id: str
    sample_index: int
    seed: int
    trajectory_path: Path
    scratch_dir: Path


@dataclass
class _State:
    usage: TokenUsage = field(default_factory=TokenUsage)
    n_sub_calls: int = 0
    n_sub_errors: int = 0
    n_batches: int = 0
    covered: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _merge(ranges: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for s, e in sorted(ranges):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _coverage(state: _State, room: RoomHandle) -> Coverage:
    per_doc: dict[str, float] = {}
    per_folder_chars: dict[str, list[int]] = {}
    covered_total = 0
    for doc_id, folder, chars in room.documents:
        got = min(chars, _merge(state.covered.get(doc_id, []))) if chars else 0
        per_doc[doc_id] = got / chars if chars else 0.0
        covered_total += got
        acc = per_folder_chars.setdefault(folder, [0, 0])
        acc[0] += got
        acc[1] += chars
    return Coverage(
        method="provenance-v0",
        overall=covered_total / room.info.n_chars if room.info.n_chars else 0.0,
        per_folder={k: (v[0] / v[1] if v[1] else 0.0) for k, v in per_folder_chars.items()},
        per_document=per_doc,
    )


class Episode:
    """Runs one episode; use :meth:`run`. Never raises for model/REPL failures: they become a
    status. The trajectory file is (re)written from scratch."""

    def __init__(
        self,
        config: CollectConfig,
        spec: EpisodeSpec,
        room: RoomHandle,
        root: ModelClient,
        sub: ModelClient,
        root_spec: str,
        sub_spec: str,
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        self.config = config
        self.spec = spec
        self.room = room
        self.root = root
        self.sub = sub
        self.root_spec = root_spec
        self.sub_spec = sub_spec
        self._pool = pool
        self.state = _State()
        self._turn = 0
        self._block = 0

    # -- trajectory -----------------------------------------------------------------------
    def _write(self, *records: Any) -> None:
        append_records(self.spec.trajectory_path, list(records))

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

    # -- sub-calls --------------------------------------------------------------------------
    def _sub_seed(self, call_id: int) -> int:
        return (self.spec.seed + 7919 * (call_id + 1)) % 2**31

    def _on_llm(self, prompts_: list[str], sources: list[list[dict[str, Any]]]) -> list[str]:
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

        def one(i: int) -> SubCallRecord:
            rec = SubCallRecord(
                episode_id=self.spec.episode_id,
                call_id=first_id + i,
                turn=self._turn,
                block=self._block,
                batch_id=batch_id,
                batch_size=len(prompts_),
                prompt=prompts_[i],
                seed=self._sub_seed(first_id + i),
                sources=sources[i] if i < len(sources) else [],
            )
            t0 = time.monotonic()
            try:
                res = self.sub.chat(
                    [Message(role="user", content=prompts_[i])],
                    self.config.sub_sampling.model_copy(update={"seed": rec.seed}),
                )
                rec.response = res.text
                rec.usage = res.usage
                rec.attempts = res.attempts
                rec.latency_s = res.latency_s
            except ModelError as exc:
                rec.error = str(exc)
                rec.error_kind = exc.kind
                rec.attempts = exc.attempts
                rec.latency_s = time.monotonic() - t0
            return rec

        if len(prompts_) == 1 or self._pool is None:
            records = [one(i) for i in range(len(prompts_))]
        else:
            records = list(self._pool.map(one, range(len(prompts_))))
        with st.lock:
            for rec in records:
                st.usage.sub = st.usage.sub + rec.usage
                if rec.error is not None:
                    st.n_sub_errors += 1
                else:
                    for src in rec.sources:
                        st.covered.setdefault(src["doc_id"], []).append((src["start"], src["end"]))
        self._write(*records)
        return [
            r.response
            if r.response is not None
            else f"[llm_query error ({r.error_kind}): {r.error}]"
            for r in records
        ]

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

    def run(self) -> EpisodeSummary:
        """Run the episode to an end status and return its summary (already traced)."""
        cfg = self.config
        t_start = time.monotonic()
        started_at = utcnow()
        self.spec.trajectory_path.parent.mkdir(parents=True, exist_ok=True)
        self.spec.trajectory_path.unlink(missing_ok=True)  # an interrupted attempt restarts
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
                    spec=self.sub_spec, model_id=self.sub.model_id, sampling=cfg.sub_sampling
                ),
                depth=cfg.depth,
                seed=self.spec.seed,
                prompt_version=prompts.PROMPT_VERSION,
                limits={"episode": cfg.limits.model_dump(), "repl": cfg.repl.model_dump()},
                initial_messages=messages,
                n_few_shot_messages=n_few,
            )
        )
        status: EpisodeStatus = "no_memo"
        detail: str | None = f"turn limit ({cfg.limits.max_turns}) reached without a memo"
        memo: str | None = None
        n_turns = 0
        repl: ReplProcess | None = None
        try:
            repl = ReplProcess(self.room.snapshot, self.spec.scratch_dir, cfg.repl)
            for turn in range(cfg.limits.max_turns):
                elapsed = time.monotonic() - t_start
                if elapsed >= cfg.limits.max_wall_s:
                    status, detail = (
                        "timeout",
                        f"episode wall time {elapsed:.0f}s >= {cfg.limits.max_wall_s:.0f}s",
                    )
                    break
                self._turn = turn
                n_turns = turn + 1
                outcome = self._one_turn(repl, messages, root_sampling, t_start)
                if outcome is not None:
                    status, detail, memo = outcome
                    break
                used = self.state.usage.root + self.state.usage.sub
                if used.prompt_tokens + used.completion_tokens > cfg.limits.max_tokens:
                    status, detail = (
                        "budget_exceeded",
                        f"token budget {cfg.limits.max_tokens:,} spent",
                    )
                    break
        except ReplDied as exc:
            status = "repl_timeout" if exc.timed_out else "repl_crashed"
            detail = str(exc)
        except Exception:  # a harness bug must not take the collector down
            status, detail = "error", traceback.format_exc()
        finally:
            if repl is not None:
                repl.close()
        end = EpisodeEnd(
            episode_id=self.spec.episode_id, status=status, status_detail=detail, memo=memo
        )
        self._write(end)
        doc_ids = [d for d, _, _ in self.room.documents]
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
            n_turns=n_turns,
            n_sub_calls=self.state.n_sub_calls,
            n_sub_call_errors=self.state.n_sub_errors,
            n_sub_batches=self.state.n_batches,
            tokens=self.state.usage,
            wall_time_s=time.monotonic() - t_start,
            memo=memo,
            memo_chars=len(memo or ""),
            memo_sha256=hashlib.sha256(memo.encode("utf-8", "surrogatepass")).hexdigest()
            if memo
            else None,
            cited_documents=cited_documents(memo, doc_ids),
            coverage=_coverage(self.state, self.room),
            started_at=started_at,
            ended_at=end.ended_at,
        )

    def _one_turn(
        self, repl: ReplProcess, messages: list[Message], sampling: Sampling, t_start: float
    ) -> tuple[EpisodeStatus, str | None, str | None] | None:
        """Run one turn; return ``(status, detail, memo)`` when the episode ends, else ``None``."""
        cfg = self.config
        t0 = time.monotonic()
        rec = TurnRecord(
            episode_id=self.spec.episode_id,
            turn=self._turn,
            started_at=utcnow(),
            n_messages_before=len(messages),
            prompt_sha256=messages_sha256(messages),
            prefill=cfg.prefill,
            completion="",
            usage=Usage(),
            latency_s=0.0,
        )
        try:
            turn_sampling = sampling.model_copy(
                update={"seed": (self.spec.seed + 1_000_003 * self._turn) % 2**31}
            )
            rec.seed = turn_sampling.seed
            res = self.root.chat(messages, turn_sampling, prefill=cfg.prefill)
        except ContextExceededError as exc:
            rec.completion, rec.duration_s = "", time.monotonic() - t0
            self._write(rec)
            return "context_exceeded", str(exc), None
        except ModelError as exc:
            rec.duration_s = time.monotonic() - t0
            rec.attempts = exc.attempts
            self._write(rec)
            return "model_error", f"{exc.kind}: {exc}", None
        rec.completion, rec.usage, rec.latency_s, rec.attempts = (
            res.text,
            res.usage,
            res.latency_s,
            res.attempts,
        )
        self.state.usage.root = self.state.usage.root + res.usage
        reply = (cfg.prefill or "") + res.text
        parsed = parse_reply(reply)
        observations: list[str] = []
        final: tuple[str, str] | None = None
        for block in parsed.blocks:
            self._block = block.position
            remaining = cfg.limits.max_wall_s - (time.monotonic() - t_start)
            try:
                out = repl.execute(
                    block.code,
                    self._on_llm,
                    timeout_s=max(1.0, min(cfg.repl.block_timeout_s, remaining)),
                )
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
            if out.stdout_chars == len(out.stdout):
                for src in out.stdout_sources:  # printed room text reached the root in full
                    with self.state.lock:
                        self.state.covered.setdefault(src["doc_id"], []).append(
                            (src["start"], src["end"])
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
                value = repl.get_var(parsed.final.value)
                if value is None:
                    rec.final_error = f"FINAL_VAR({parsed.final.value}): no variable named {parsed.final.value!r} in the REPL"
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
            rec.final_answer_source = final[0]  # type: ignore[assignment]
            self._write(rec)
            memo = final[1]
            if not memo.strip():
                return "no_memo", "the final answer was empty", None
            return "completed", None, memo
        rec.observation = prompts.observation_message(observations)
        self._write(rec)
        messages.append(Message(role="assistant", content=reply))
        messages.append(Message(role="user", content=rec.observation))
        return None
