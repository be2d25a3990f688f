"""Export selected episodes' root turns as a Hugging Face dataset with validated masks.

Writes ``datasets/NAME/`` (see ``docs/export.md``)::

    data-*.arrow, dataset_info.json, state.json   Dataset.save_to_disk
    README.md                                     dataset card
    export.json                                   ExportManifest

Every episode or example that does not become a row is counted with a reason (and listed in
``export.json``): ``missing_trajectory``, ``invalid_trajectory`` (corrupt record),
``torn_trajectory`` (half-written last line), ``incomplete_trajectory`` (no
``episode_end``), ``prompt_hash_mismatch``, ``no_root_turns``, ``malformed_tool_call``
(tool-call arguments that are not a JSON object), ``template_mismatch`` (with where expected and rendered text first differ),
``too_long`` (no fit under ``max_length`` with the supervised turn kept),
``too_few_supervised``; with ``from_ids``: ``prompt_ids_mismatch`` (recorded ids do not
match their stored hash), ``no_token_ids`` (the turn has no recorded ids).

Reasoning roots: the ``reasoning`` policy (``all``/``last``/``drop``) decides which replies
keep their reasoning; in turn mode every example is checked to be exactly the prompt the
root saw + the reply it produced (:func:`~rlmdistill.export.masks.check_turn_prompt`).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Generator, Iterable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from rlmdistill.export.masks import (
    ConversationInput,
    DefaultSystemPromptError,
    Encoded,
    PromptCut,
    ReasoningTemplateError,
    TemplateError,
    TemplateInfo,
    Tokens,
    TurnPromptCutter,
    check_turn_prompt,
    encode_conversation,
    finish_conversations,
    load_tokenizer,
    probe_template,
    reasoning_support,
    render_conversations,
    tokenize_batch,
    turn_prompt_text,
)
from rlmdistill.export.options import ExportOptions
from rlmdistill.export.render import (
    Conversation,
    RenderFailure,
    drop_leading_turns,
    render_episode,
    turn_reasoning,
)
from rlmdistill.export.tools import ToolCallError, normalize_tool_calls
from rlmdistill.mdtable import Cell, markdown_table
from rlmdistill.provenance import git_state, package_versions
from rlmdistill.traces.artefacts import (
    DroppedItem,
    ExportManifest,
    LengthStats,
    SourceRun,
    TokenizerInfo,
)
from rlmdistill.traces.labels import labels_provenance
from rlmdistill.traces.layout import EXPORT_MANIFEST
from rlmdistill.traces.runs import (
    EpisodeRef,
    Trajectory,
    load_manifest,
    load_summaries,
    load_trajectory,
)
from rlmdistill.traces.store import TraceFileError
from rlmdistill.traces.tokens import prompt_ids

__all__ = [
    "DroppedItem",
    "EmptyExportError",
    "ExportManifest",
    "ExportReport",
    "FilterTimeScores",
    "LengthStats",
    "SourceRun",
    "TokenizerInfo",
    "example_row",
    "export_dataset",
    "rows_to_dataset",
]

_DATASET_FILES = ("dataset_info.json", "state.json", EXPORT_MANIFEST, "README.md")


class EmptyExportError(ValueError):
    """No example survived the export (the message gives the drop counts by reason)."""


class FilterTimeScores(NamedTuple):
    """Scores of one episode at filter time (stored in the ``pass_rate``/``coverage`` columns)."""

    pass_rate: float | None
    coverage: float | None


class ExportReport(BaseModel):
    """What an export did: counts, drops by reason, token-length statistics, speed."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str
    n_episodes: int
    """Episodes asked for."""
    n_episodes_exported: int
    """Episodes with at least one row."""
    n_examples: int
    dropped: dict[str, int]
    """Dropped items (a whole episode, or one example) by reason."""
    dropped_items: list[DroppedItem] = Field(default_factory=list)
    n_truncated: int = 0
    """Examples kept after the ``keep_start`` policy dropped leading turns."""
    n_turns_dropped: int = 0
    """Turns removed from those examples in total."""
    n_appended_closers: int = 0
    """Examples whose last end-of-turn token was appended after the render (GLM-4)."""
    reasoning_policy: str = "last"
    """``all`` / ``last`` / ``drop`` (see :data:`~rlmdistill.export.options.ReasoningPolicy`)."""
    n_reasoning_turns: int = 0
    """Root turns (of exported episodes) that reasoned."""
    n_reasoning_kept: int = 0
    """Assistant messages of the rows that carry their reasoning."""
    from_ids: bool = False
    n_ids_matched: int = 0
    """``from_ids``: examples whose recorded ids equal the re-render's."""
    ids_mismatches: dict[str, int] = Field(default_factory=dict)
    """``from_ids``: examples whose re-render differs, by reason (``prompt_ids_differ``,
    ``completion_ids_differ``, ``rerender_failed``); the row keeps the recorded ids."""
    ids_mismatch_items: list[DroppedItem] = Field(default_factory=list)
    """The mismatches with where they first differ (capped at 200)."""
    tokens: LengthStats
    supervised: LengthStats
    duration_s: float
    examples_per_s: float
    tokens_per_s: float


def _features() -> Any:
    from datasets import Features, Value

    try:
        from datasets import List  # datasets >= 4
    except ImportError:  # datasets 3.x
        from datasets import Sequence as List  # type: ignore[assignment]

    return Features(
        {
            "messages": List({"role": Value("string"), "content": Value("string")}),
            "messages_json": Value("string"),
            "tools": Value("string"),
            "input_ids": List(Value("int32")),
            "assistant_masks": List(Value("int8")),
            "message_weights": List(Value("int8")),
            "n_tokens": Value("int64"),
            "n_supervised": Value("int64"),
            "episode_id": Value("string"),
            "run_id": Value("string"),
            "room_id": Value("string"),
            "task_id": Value("string"),
            "turn": Value("int64"),
            "pass_rate": Value("float64"),
            "coverage": Value("float64"),
        }
    )


def example_row(
    conv: Conversation,
    enc: Encoded,
    *,
    episode_id: str,
    run_id: str,
    room_id: str,
    task_id: str,
    pass_rate: float | None = None,
    coverage: float | None = None,
) -> dict[str, Any]:
    """One dataset row (the columns of ``docs/export.md``) for an encoded conversation.

    Tool-call arguments and other nested fields live only in the ``messages_json`` string
    (Arrow would widen heterogeneous argument dicts); ``messages`` keeps role and content.
    ``message_weights[i]`` is 1 when message ``i`` is an assistant message whose tokens the
    mask supervises (the flags the mask is built from), else 0 (one per message).
    """
    return {
        "messages": [{"role": m["role"], "content": m.get("content") or ""} for m in conv.messages],
        "messages_json": json.dumps(conv.messages, ensure_ascii=False),
        "tools": json.dumps(conv.tools, ensure_ascii=False) if conv.tools else None,
        "input_ids": enc.input_ids,
        "assistant_masks": enc.assistant_masks,
        "message_weights": [int(s) for s in conv.supervised],
        "n_tokens": len(enc.input_ids),
        "n_supervised": sum(enc.assistant_masks),
        "episode_id": episode_id,
        "run_id": run_id,
        "room_id": room_id,
        "task_id": task_id,
        "turn": conv.turn,
        "pass_rate": pass_rate,
        "coverage": coverage,
    }


def rows_to_dataset(rows: list[dict[str, Any]]) -> Any:
    """``datasets.Dataset`` of rows made by :func:`example_row`, with fixed column types
    (``input_ids`` int32, ``assistant_masks`` int8, scores float64 even when all null)."""
    from datasets import Dataset

    return Dataset.from_list(rows, features=_features())


_BATCH_EPISODES = 64
"""Episodes whose examples are rendered and tokenised in one batch (one tokenizer call)."""


class _Prefetched(NamedTuple):
    conv: Conversation
    enc: Encoded | Exception
    check: tuple[str, list[int]] | Exception | None
    """Turn mode: the prompt as seen and the ids of prompt + prefill (or why not)."""


class _PromptCheck(NamedTuple):
    """A turn-mode example's prompt check: the prompt as seen, and where prompt + prefill is
    cut (only its tail is tokenised, see :class:`TurnPromptCutter`)."""

    seen: str
    prompt: str
    cut: PromptCut


class _Batch(NamedTuple):
    """Rendered conversations whose tokens are on their way (see :meth:`_Encoder.start`)."""

    items: list[tuple[Conversation, str]]
    inputs: list[ConversationInput]
    rendered: list[str | Exception]
    checks: list[_PromptCheck | Exception | None]
    tokens: Future[list[Tokens]]


class _Encoder:
    """Encodes conversations under one tokenizer and the options' length policy.

    :meth:`start` renders many conversations and tokenises them with one tokenizer call (in
    ``pool``'s thread: the Rust tokenizer releases the GIL, so the next batch is read and
    rendered meanwhile); :meth:`finish` builds their masks; :meth:`encode` then hands out
    those results (raising what the unbatched path would raise, at the same point) and
    encodes anything else (a ``keep_start`` candidate) one by one. Both paths give the
    same ids and masks (``test_batched_export_equals_unbatched_export``).
    """

    def __init__(self, tokenizer: Any, info: TemplateInfo, options: ExportOptions) -> None:
        self.tokenizer, self.info, self.options = tokenizer, info, options
        self.cutter = TurnPromptCutter(tokenizer)
        self._ready: dict[int, _Prefetched] = {}

    def start(self, items: list[tuple[Conversation, str]], pool: Executor) -> _Batch:
        """Render ``(conversation, where)`` items and the turn-mode prompt checks' prompts,
        and submit their tokenisation (one call: the examples, and the tail of each prompt
        after its last special token, see :class:`TurnPromptCutter`) to ``pool``."""
        inputs = [
            ConversationInput(c.messages, c.supervised, c.tools, c.prefill_chars, w, c.turn >= 0)
            for c, w in items
        ]
        rendered = render_conversations(
            self.tokenizer, self.info, inputs, default_system=self.options.default_system
        )
        checks: list[_PromptCheck | Exception | None] = []
        for (conv, _), text in zip(items, rendered, strict=True):
            if conv.turn < 0 or conv.n_turns_dropped > 0 or not isinstance(text, str):
                checks.append(None)  # no check (or the render's error is raised first)
                continue
            try:
                seen = turn_prompt_text(self.tokenizer, conv.messages, conv.tools)
            except Exception as exc:  # raised by encode, where the check would raise it
                checks.append(exc)
                continue
            prompt = seen + conv.prefill
            checks.append(_PromptCheck(seen, prompt, self.cutter.cut(text, prompt)))
        texts = [r for r in rendered if isinstance(r, str)]
        texts += [c.cut.tail for c in checks if isinstance(c, _PromptCheck)]
        return _Batch(
            items, inputs, rendered, checks, pool.submit(tokenize_batch, self.tokenizer, texts)
        )

    def finish(self, batch: _Batch) -> None:
        """Masks of a started batch, kept for :meth:`encode`; the prompt ids of each turn-mode
        example from its own tokens and its prompt's tail (the whole prompt tokenised, in
        one more call, only where the cut cannot be proved exact)."""
        tokens = batch.tokens.result()
        n_texts = sum(isinstance(r, str) for r in batch.rendered)
        encs = finish_conversations(
            self.tokenizer, self.info, batch.inputs, batch.rendered, tokens[:n_texts]
        )
        full = iter(tokens[:n_texts])
        tails = iter(tokens[n_texts:])
        ids: list[list[int] | None] = []
        for text, check in zip(batch.rendered, batch.checks, strict=True):
            own = next(full) if isinstance(text, str) else None
            if isinstance(check, _PromptCheck) and own is not None:
                ids.append(self.cutter.prompt_ids(check.cut, own, next(tails).ids))
            else:
                ids.append(None)
        uncut = {
            i: c.prompt
            for i, (c, got) in enumerate(zip(batch.checks, ids, strict=True))
            if isinstance(c, _PromptCheck) and got is None
        }
        if uncut:
            redone = tokenize_batch(self.tokenizer, list(uncut.values()))
            for i, toks in zip(uncut, redone, strict=True):
                ids[i] = toks.ids
        for (conv, _), enc, check, got in zip(batch.items, encs, batch.checks, ids, strict=True):
            ready: tuple[str, list[int]] | Exception | None
            if isinstance(check, _PromptCheck):
                assert got is not None  # cut or tokenised in full above
                ready = (check.seen, got)
            else:
                ready = check
            self._ready[id(conv)] = _Prefetched(conv, enc, ready)

    def clear(self) -> None:
        """Forget prefetched results not handed out."""
        self._ready.clear()

    def encode(self, conv: Conversation, where: str) -> Encoded:
        ready = self._ready.pop(id(conv), None)
        if ready is not None and ready.conv is conv:
            if isinstance(ready.enc, Exception):
                raise ready.enc
            if isinstance(ready.check, Exception):
                raise ready.check
            if ready.check is not None:
                check_turn_prompt(
                    self.tokenizer,
                    conv.messages,
                    ready.enc,
                    tools=conv.tools,
                    prefill=conv.prefill,
                    where=where,
                    seen=ready.check[0],
                    seen_ids=ready.check[1],
                )
            return ready.enc
        enc = encode_conversation(
            self.tokenizer,
            self.info,
            conv.messages,
            conv.supervised,
            tools=conv.tools,
            prefill_chars=conv.prefill_chars,
            default_system=self.options.default_system,
            where=where,
            trim_tail=conv.turn >= 0,
        )
        if conv.turn >= 0 and conv.n_turns_dropped == 0:
            check_turn_prompt(
                self.tokenizer,
                conv.messages,
                enc,
                tools=conv.tools,
                prefill=conv.prefill,
                where=where,
            )
        return enc

    def fit(self, conv: Conversation, where: str) -> tuple[Conversation, Encoded] | None:
        """The conversation under ``max_length`` (after ``keep_start`` drops), or ``None``."""
        enc = self.encode(conv, where)
        limit = self.options.max_length
        if len(enc.input_ids) <= limit:
            return conv, enc
        if self.options.truncation == "drop" or len(conv.groups) < 2:
            return None
        # smallest number of leading turns to drop (binary search; lengths fall as k grows)
        lo, hi = 1, len(conv.groups) - 1
        best = drop_leading_turns(conv, hi)
        best_enc = self.encode(best, where)
        if len(best_enc.input_ids) > limit:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            cand = drop_leading_turns(conv, mid)
            cand_enc = self.encode(cand, where)
            if len(cand_enc.input_ids) <= limit:
                hi, best, best_enc = mid, cand, cand_enc
            else:
                lo = mid + 1
        return best, best_enc


@dataclass
class _Episode:
    """One episode between loading and encoding (see ``export_dataset``)."""

    ref: EpisodeRef
    run_id: str
    stopped: tuple[str, str] | None = None
    """``(reason, detail)`` of an episode dropped whole."""
    error: Exception | None = None
    """Raised when the episode's turn comes (a setting problem, e.g. the reasoning template)."""
    traj: Trajectory | None = None
    items: list[Conversation | RenderFailure] = field(default_factory=list)
    n_thought: int = 0
    recorded: dict[int, list[int] | None] = field(default_factory=dict)
    tool_errors: dict[int, ToolCallError] = field(default_factory=dict)
    """``id(conversation)`` -> why its tool calls cannot be used."""

    def stop(self, reason: str, detail: str) -> _Episode:
        self.stopped = (reason, detail)
        return self


def _drop(
    out: list[DroppedItem],
    run_id: str,
    episode_id: str,
    reason: str,
    detail: str,
    turn: int | None = None,
) -> None:
    out.append(
        DroppedItem(
            run_id=run_id, episode_id=episode_id, turn=turn, reason=reason, detail=detail[:500]
        )
    )


def _existing_dataset(out_dir: Path) -> list[str]:
    """Names of dataset files already in ``out_dir`` (other files, e.g. reports, are not)."""
    if not out_dir.is_dir():
        return []
    names = [f for f in _DATASET_FILES if (out_dir / f).exists()]
    return sorted(names + [p.name for p in out_dir.glob("data-*.arrow")])


def export_dataset(
    episodes: Iterable[EpisodeRef],
    out_dir: Path | str,
    options: ExportOptions,
    *,
    card_extra: str = "",
    scores: Mapping[str, FilterTimeScores] | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> ExportReport:
    """Export the root turns of ``episodes`` to ``out_dir`` as a ``datasets`` dataset.

    ``episodes``: :class:`EpisodeRef` (run directory, episode id), e.g. the filter's kept
    episodes. ``scores``: pass rate and coverage per episode id at filter time; without it
    ``coverage`` comes from ``episodes.jsonl`` and ``pass_rate`` is null. ``card_extra``:
    Markdown added to the dataset card (the filter's rules and counts). Other files in
    ``out_dir`` (e.g. the filter report) are kept.

    Returns the :class:`ExportReport`. Raises ``FileExistsError`` when ``out_dir`` already
    holds a dataset and ``overwrite`` is false; :class:`EmptyExportError` when no example
    survives; :class:`~rlmdistill.export.masks.DefaultSystemPromptError` for a template that
    would inject a default system prompt (a setting problem, not one episode's);
    ``FileNotFoundError`` / :class:`~rlmdistill.export.masks.TemplateError` for a tokenizer
    that cannot be used.
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    refs = list(episodes)
    tokenizer, tok_dir = load_tokenizer(options.tokenizer, options.chat_template)
    info = probe_template(tokenizer, tok_dir, options.end_of_turn_tokens)
    encoder = _Encoder(tokenizer, info, options)
    renders_last, renders_earlier = reasoning_support(tokenizer)
    system = options.system_prompt_choice()
    if (existing := _existing_dataset(out_dir)) and not overwrite:
        raise FileExistsError(
            f"{out_dir} already holds a dataset ({', '.join(existing)}); "
            "pass overwrite=True to replace it"
        )

    run_ids: dict[Path, str] = {}
    coverages: dict[str, float | None] = {}
    for run_dir in dict.fromkeys(Path(r.run_dir) for r in refs):
        run_ids[run_dir] = load_manifest(run_dir).run_id
        for s in load_summaries(run_dir):
            coverages[s.episode_id] = s.coverage.overall if s.coverage is not None else None

    rows: list[dict[str, Any]] = []
    dropped: list[DroppedItem] = []
    mismatches: list[DroppedItem] = []
    n_truncated = n_turns_dropped = n_appended = 0
    n_reasoning_turns = n_reasoning_kept = n_ids_matched = 0
    exported: set[str] = set()

    def prepare(ref: EpisodeRef) -> _Episode:
        """An episode up to its conversations (tool calls normalised), or why it stops; an
        exception is kept and raised in episode order, where the unbatched loop raised it."""
        ep = _Episode(ref, run_ids[Path(ref.run_dir)])
        try:
            return _prepare(ep)
        except Exception as exc:
            ep.error = exc
            return ep

    def _prepare(ep: _Episode) -> _Episode:
        ref = ep.ref
        try:
            traj = load_trajectory(Path(ref.run_dir), ref.episode_id)
        except FileNotFoundError as exc:
            return ep.stop("missing_trajectory", str(exc))
        except TraceFileError as exc:
            return ep.stop("invalid_trajectory", str(exc))
        if traj.torn_tail is not None:
            return ep.stop("torn_trajectory", f"half-written last line: {traj.torn_tail[:80]!r}")
        if traj.end is None:
            return ep.stop(
                "incomplete_trajectory", "no episode_end record (the episode never finished)"
            )
        try:
            items = render_episode(
                traj,
                mode=options.mode,
                style=options.style,
                system=system,
                supervise_prefill=options.supervise_prefill,
                reasoning=options.reasoning,
            )
        except ValueError as exc:
            return ep.stop("prompt_hash_mismatch", str(exc))
        ep.traj = traj
        ep.n_thought = sum(1 for t in traj.turns if turn_reasoning(t)[0])
        if ep.n_thought and options.reasoning != "drop":
            _check_reasoning_template(options, renders_last, renders_earlier, ref.episode_id)
        if options.from_ids:
            try:
                ordered = sorted(traj.turns, key=lambda t: t.turn)
                ep.recorded = dict(zip((t.turn for t in ordered), prompt_ids(ordered), strict=True))
            except ValueError as exc:
                return ep.stop("prompt_ids_mismatch", str(exc))
        ep.items = _truncated_turns(items, traj, options.truncated_turns)
        if not ep.items and items:
            cut = [t.turn for t in traj.turns if t.finish_reason == "length"]
            return ep.stop("truncated_turn", f"root turn(s) {cut} cut by max_tokens")
        items = ep.items
        for item in items:
            if isinstance(item, Conversation):
                try:
                    item.messages = normalize_tool_calls(item.messages, ref.episode_id)
                except ToolCallError as exc:
                    ep.tool_errors[id(item)] = exc
        return ep

    def conversations(batch: list[_Episode]) -> list[tuple[Conversation, str]]:
        return [
            (item, f"episode {ep.ref.episode_id} turn {item.turn}")
            for ep in batch
            for item in ep.items
            if isinstance(item, Conversation) and id(item) not in ep.tool_errors
        ]

    def batches() -> Generator[list[_Episode]]:
        """Batches of prepared episodes, each encoded (masks ready) when it is handed out;
        the next batch is read and rendered while this one is tokenised."""
        with ThreadPoolExecutor(1, thread_name_prefix="rlmd-export-tok") as pool:
            pending: tuple[list[_Episode], _Batch] | None = None
            for lo in range(0, len(refs), _BATCH_EPISODES):
                batch = [prepare(ref) for ref in refs[lo : lo + _BATCH_EPISODES]]
                started = encoder.start(conversations(batch), pool)
                if pending is not None:
                    encoder.finish(pending[1])
                    yield pending[0]
                pending = (batch, started)
            if pending is not None:
                encoder.finish(pending[1])
                yield pending[0]

    bar = tqdm(total=len(refs), desc=f"export {out_dir.name}", unit="ep", disable=not progress)
    with closing(batches()) as gen:  # closed (its thread joined) also when an error stops us
        for batch in gen:
            for ep in batch:
                bar.update(1)
                ref, run_id = ep.ref, ep.run_id
                drop = partial(_drop, dropped, run_id, ref.episode_id)
                if ep.error is not None:
                    raise ep.error
                if ep.stopped is not None:
                    drop(*ep.stopped)
                    continue
                traj, items, recorded = ep.traj, ep.items, ep.recorded
                assert traj is not None
                score = (scores or {}).get(ref.episode_id)
                n_rows_before = len(rows)
                for item in items:
                    if isinstance(item, RenderFailure):
                        drop(item.reason, item.detail, item.turn)
                        continue
                    where = f"episode {ref.episode_id} turn {item.turn}"
                    from_ids: tuple[Conversation, Encoded] | None = None
                    if options.from_ids:
                        turn = next(t for t in traj.turns if t.turn == item.turn)
                        made = _from_recorded(turn, recorded.get(item.turn), item, info)
                        if isinstance(made, str):
                            drop("no_token_ids", made, item.turn)
                            continue
                        from_ids = made
                    try:
                        if id(item) in ep.tool_errors:
                            raise ep.tool_errors[id(item)]
                        fitted = encoder.fit(item, where)
                    except ToolCallError as exc:
                        drop("malformed_tool_call", str(exc), item.turn)
                        continue
                    except DefaultSystemPromptError:
                        raise
                    except TemplateError as exc:
                        if from_ids is None:
                            drop("template_mismatch", str(exc), item.turn)
                            continue
                        _drop(
                            mismatches,
                            run_id,
                            ref.episode_id,
                            "rerender_failed",
                            str(exc),
                            item.turn,
                        )
                        fitted = from_ids
                    if from_ids is not None and fitted is not None and fitted is not from_ids:
                        reason, detail = _compare_ids(tokenizer, from_ids[1], fitted[1])
                        if reason is None:
                            n_ids_matched += (
                                1  # same ids: keep the re-render (its mask covers a prefill)
                            )
                        else:
                            _drop(mismatches, run_id, ref.episode_id, reason, detail, item.turn)
                            fitted = from_ids
                    if from_ids is not None and fitted is None:
                        fitted = (
                            from_ids if len(from_ids[1].input_ids) <= options.max_length else None
                        )
                    if fitted is None:
                        drop(
                            "too_long",
                            f"over max_length={options.max_length} tokens with the supervised turn kept",
                            item.turn,
                        )
                        continue
                    conv, enc = fitted
                    n_sup = sum(enc.assistant_masks)
                    if n_sup < options.min_supervised_tokens:
                        drop("too_few_supervised", f"{n_sup} supervised tokens", item.turn)
                        continue
                    n_truncated += conv.n_turns_dropped > 0
                    n_turns_dropped += conv.n_turns_dropped
                    n_appended += enc.appended_closer
                    n_reasoning_kept += conv.n_reasoning
                    exported.add(ref.episode_id)
                    rows.append(
                        example_row(
                            conv,
                            enc,
                            episode_id=ref.episode_id,
                            run_id=run_id,
                            room_id=traj.start.room.room_id,
                            task_id=traj.start.task_id,
                            pass_rate=score.pass_rate if score else None,
                            coverage=score.coverage if score else coverages.get(ref.episode_id),
                        )
                    )
                if len(rows) > n_rows_before:
                    n_reasoning_turns += ep.n_thought
            encoder.clear()
    bar.close()

    counts = dict(Counter(d.reason for d in dropped).most_common())
    if not rows:
        raise EmptyExportError(
            f"no example survived the export of {len(refs)} episodes; dropped: {counts}"
        )
    import datasets

    for name in _existing_dataset(out_dir):  # replaced only now that the new one is ready
        (out_dir / name).unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    bars = datasets.is_progress_bar_enabled()
    if not progress:
        datasets.disable_progress_bars()
    try:
        rows_to_dataset(rows).save_to_disk(str(out_dir))
    finally:
        if bars and not progress:
            datasets.enable_progress_bars()
    duration = time.perf_counter() - t0
    tok_stats = LengthStats.of([r["n_tokens"] for r in rows])
    report = ExportReport(
        out_dir=str(out_dir),
        n_episodes=len(refs),
        n_episodes_exported=len(exported),
        n_examples=len(rows),
        dropped=counts,
        dropped_items=dropped,
        n_truncated=n_truncated,
        n_turns_dropped=n_turns_dropped,
        n_appended_closers=n_appended,
        reasoning_policy=options.reasoning,
        n_reasoning_turns=n_reasoning_turns,
        n_reasoning_kept=n_reasoning_kept,
        from_ids=options.from_ids,
        n_ids_matched=n_ids_matched,
        ids_mismatches=dict(Counter(d.reason for d in mismatches).most_common()),
        ids_mismatch_items=mismatches[:200],
        tokens=tok_stats,
        supervised=LengthStats.of([r["n_supervised"] for r in rows]),
        duration_s=duration,
        examples_per_s=len(rows) / duration if duration > 0 else 0.0,
        tokens_per_s=tok_stats.total / duration if duration > 0 else 0.0,
    )
    names = info.token_names(tokenizer)
    commit, dirty = git_state()
    sources: dict[Path, list[str]] = {}
    for ref in refs:
        sources.setdefault(Path(ref.run_dir), []).append(ref.episode_id)
    manifest = ExportManifest(
        created_at=dt.datetime.now(dt.UTC),
        tokenizer=TokenizerInfo(
            spec=options.tokenizer,
            path=str(tok_dir),
            name_or_path=str(getattr(tokenizer, "name_or_path", tok_dir)),
            chat_template_source=options.chat_template or "tokenizer",
            chat_template_sha256=info.template_sha256,
            assistant_header=info.assistant_header,
            closer=names["closer"],
            tool_closer=names["tool_closer"],
            end_of_turn=names["end_of_turn"],
            default_system=info.default_system,
            generation_markers=info.generation_markers,
        ),
        mode=options.mode,
        style=options.style,
        system_prompt_source=system.source,
        system_prompt_sha256=system.sha256,
        few_shot_kept=system.keep_few_shot,
        max_length=options.max_length,
        truncation=options.truncation,
        prefill_supervised=options.supervise_prefill,
        min_supervised_tokens=options.min_supervised_tokens,
        default_system=options.default_system,
        n_examples=len(rows),
        n_episodes=len(refs),
        dropped=counts,
        dropped_items=dropped,
        n_truncated=n_truncated,
        n_appended_closers=n_appended,
        reasoning_policy=options.reasoning,
        n_reasoning_turns=n_reasoning_turns,
        n_reasoning_kept=n_reasoning_kept,
        from_ids=options.from_ids,
        n_ids_matched=n_ids_matched,
        ids_mismatches=report.ids_mismatches,
        tokens=report.tokens,
        supervised=report.supervised,
        sources=[
            SourceRun(
                run_dir=str(d), run_id=run_ids[d], episode_ids=ids, labels=labels_provenance(d)
            )
            for d, ids in sources.items()
        ],
        options=options.model_dump(),
        versions=package_versions(),
        git_commit=commit,
        git_dirty=dirty,
    )
    (out_dir / EXPORT_MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "README.md").write_text(_card(manifest, report, card_extra), encoding="utf-8")
    return report


def _truncated_turns(
    items: list[Conversation | RenderFailure], traj: Trajectory, policy: str
) -> list[Conversation | RenderFailure]:
    """Apply the ``truncated_turns`` policy (:data:`~rlmdistill.export.options.TruncatedTurns`)
    to an episode's rendered items: a turn is truncated when its record says
    ``finish_reason == "length"``. Trajectory mode: ``mask`` unsupervises those replies (the
    reply of sorted turn ``k`` is message ``groups[k]``), ``drop`` returns ``[]`` (the
    caller drops the episode); turn mode: the turn's example becomes a
    :class:`RenderFailure` ``truncated_turn``."""
    if policy == "keep":
        return items
    turns = sorted(traj.turns, key=lambda t: t.turn)
    cut = {t.turn for t in turns if t.finish_reason == "length"}
    if not cut:
        return items
    out: list[Conversation | RenderFailure] = []
    for item in items:
        if isinstance(item, RenderFailure):
            out.append(item)
        elif item.turn >= 0:  # turn mode: one example per turn, its reply supervised
            if item.turn in cut:
                detail = f"turn {item.turn} was cut by max_tokens (finish_reason length)"
                out.append(RenderFailure(item.turn, "truncated_turn", detail))
            else:
                out.append(item)
        elif policy == "drop":
            return []
        else:
            for k, t in enumerate(turns):
                if t.turn in cut:
                    item.supervised[item.groups[k]] = False
            out.append(item)
    return out


def _check_reasoning_template(
    options: ExportOptions, renders_last: bool, renders_earlier: bool, episode_id: str
) -> None:
    """Refuse a reasoning policy the chat template cannot honour (a setting problem)."""
    fix = (
        "pass a reasoning template (--chat-template trl/chat_templates/qwen3.jinja or "
        "glm4moe.jinja; their *_training variants for reasoning=all) or reasoning='drop'"
    )
    if not renders_last:
        raise ReasoningTemplateError(
            f"episode {episode_id} has reasoning turns but the chat template ignores "
            f"reasoning_content (reasoning={options.reasoning!r} would lose it); {fix}"
        )
    if options.reasoning == "all" and options.mode == "trajectory" and not renders_earlier:
        raise ReasoningTemplateError(
            "reasoning='all' in trajectory mode needs a template that keeps the reasoning of "
            "earlier turns (e.g. trl/chat_templates/qwen3_training.jinja or "
            "glm4moe_training.jinja); this one drops it"
        )


def _from_recorded(
    turn: Any, prompt: list[int] | None, conv: Conversation, info: TemplateInfo
) -> tuple[Conversation, Encoded] | str:
    """Turn-mode example from recorded ids: prompt as seen + completion as produced
    (supervised; the template's closer appended when generation did not end with one).
    Returns the reason when the turn has no usable ids."""
    tr = turn.tokens
    if tr is None or prompt is None or not tr.completion_ids:
        why = "no token ids recorded" if tr is None else (tr.unavailable or "incomplete ids")
        return f"turn {turn.turn}: {why}"
    completion = list(tr.completion_ids)
    appended = completion[-1] not in info.eot_ids
    if appended:
        completion.append(info.closer_id)
    enc = Encoded(prompt + completion, [0] * len(prompt) + [1] * len(completion), appended, "")
    return conv, enc


def _compare_ids(tokenizer: Any, recorded: Encoded, rendered: Encoded) -> tuple[str | None, str]:
    """``(None, "")`` when the re-render gives the recorded ids, else the reason
    (``prompt_ids_differ`` / ``completion_ids_differ``) and where they first differ."""
    a, b = recorded.input_ids, rendered.input_ids
    if a == b:
        return None, ""
    k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    n_prompt = recorded.assistant_masks.index(1) if 1 in recorded.assistant_masks else len(a)
    reason = "prompt_ids_differ" if k < n_prompt else "completion_ids_differ"
    tokens = tokenizer.convert_ids_to_tokens
    return reason, (
        f"first differing token {k} of {len(a)} recorded / {len(b)} re-rendered "
        f"(text there {tokenizer.decode(a[k : k + 8])!r}): recorded tokens "
        f"{tokens(a[k : k + 4])} {a[k : k + 4]}, re-render tokens {tokens(b[k : k + 4])} "
        f"{b[k : k + 4]}"
    )


def _stats_row(name: str, s: LengthStats) -> list[Cell]:
    if s.n == 0:  # one cell per column (before: 7 cells under 8 headers)
        return [name, 0, "", "", "", "", "", ""]
    return [
        name,
        s.n,
        f"{s.total:,}",
        str(s.min),
        f"{s.mean:.1f}",
        f"{s.p50:.0f}",
        f"{s.p95:.0f}",
        str(s.max),
    ]


_REASONING_NOTES = {
    "all": "every supervised reply keeps its reasoning",
    "last": "only the last reply of each example keeps its reasoning, as the root's "
    "inference template renders it",
    "drop": "answers only; reasoning removed",
}


def _card(m: ExportManifest, r: ExportReport, extra: str) -> str:
    """The dataset card (Markdown)."""
    drops: list[list[Cell]] = [[k, v] for k, v in m.dropped.items()] or [["(none)", 0]]
    srcs = "\n".join(
        f"- `{s.run_dir}` (run `{s.run_id}`): {len(s.episode_ids)} episodes"
        + (
            f"; people's labels used: {s.labels.count} by {', '.join(s.labels.reviewers)} "
            f"(`labels.jsonl` sha256 {s.labels.sha256})"
            if s.labels is not None
            else ""
        )
        for s in m.sources
    )
    sysline = (
        "collected (each episode's own system prompt)"
        if m.system_prompt_sha256 is None
        else f"replaced from `{m.system_prompt_source}` (sha256 {m.system_prompt_sha256[:16]})"
    )
    if m.system_prompt_source == "plain":
        sysline = "plain (the collected system prompt without the worked example)"
    parts = [
        "---",
        "tags: [rlmdistill, sft, recursive-language-model]",
        "---",
        "",
        "# rlmdistill SFT dataset: root turns",
        "",
        f"Created {m.created_at.isoformat()} by rlmdistill "
        f"{m.versions.get('rlmdistill', '?')} (commit {m.git_commit or 'unknown'}).",
        "",
        "## Sources",
        "",
        srcs,
        "",
        "## Export settings",
        "",
        f"- mode: **{m.mode}** ({'one example per episode' if m.mode == 'trajectory' else 'one example per root turn'})",
        f"- style: **{m.style}**",
        f"- system prompt (context distillation): {sysline}",
        f"- worked example (few-shot turns): {'kept, never supervised' if m.few_shot_kept else 'dropped'}",
        f"- reply prefill supervised: {m.prefill_supervised}",
        f"- reasoning policy: **{m.reasoning_policy}** ({_REASONING_NOTES[m.reasoning_policy]}); "
        f"{m.n_reasoning_turns} root turns reasoned, {m.n_reasoning_kept} supervised "
        "replies carry their reasoning",
        *(
            [
                "- approximation: in trajectory mode with reasoning kept in every turn, later "
                "replies are trained with earlier reasoning in their context, which the root "
                "never saw (its template dropped it); turn mode has no such approximation"
            ]
            if m.reasoning_policy == "all" and m.mode == "trajectory" and m.n_reasoning_kept
            else []
        ),
        *(
            [
                f"- built from recorded token ids: {m.n_ids_matched} examples equal a "
                f"re-render; mismatches {m.ids_mismatches or 'none'} (rows keep the recorded ids)"
            ]
            if m.from_ids
            else []
        ),
        f"- max_length: {m.max_length} tokens, truncation policy: {m.truncation}",
        f"- min supervised tokens: {m.min_supervised_tokens}",
        f"- tokenizer: `{m.tokenizer.spec}` ({m.tokenizer.path}), chat template "
        f"{m.tokenizer.chat_template_source} sha256 {m.tokenizer.chat_template_sha256[:16]}",
        f"- end-of-turn tokens supervised: {', '.join(f'`{t}`' for t in m.tokenizer.end_of_turn)}"
        f"; closer appended after the last turn in {m.n_appended_closers} examples",
        "",
        "## Counts",
        "",
        f"{m.n_episodes} episodes asked for, {r.n_episodes_exported} exported, "
        f"{m.n_examples} examples; {m.n_truncated} examples had leading turns dropped "
        f"({r.n_turns_dropped} turns).",
        "",
        *markdown_table(["dropped: reason", "items"], drops),
        "",
        "## Token lengths",
        "",
        *markdown_table(
            ["", "n", "total", "min", "mean", "p50", "p95", "max"],
            [
                _stats_row("tokens per example", m.tokens),
                _stats_row("supervised tokens", m.supervised),
            ],
        ),
        "",
        "## Columns",
        "",
        "`messages` (role/content), `messages_json` (exact message dicts, tool calls included; "
        "use `rlmdistill.export.load_messages`), `tools`, `input_ids`, `assistant_masks`, "
        "`message_weights` (1 per supervised assistant message), `n_tokens`, `n_supervised`, `episode_id`, `run_id`, `room_id`, `task_id`, `turn`, "
        "`pass_rate`, `coverage`.",
        "",
    ]
    if extra.strip():
        parts += ["## Selection", "", extra.strip(), ""]
    return "\n".join(parts)
