"""Export for the sub model (``rlmdistill filter --target sub``): the kept sub-calls of a
filter's ``sub_decisions.jsonl`` as an SFT dataset with assistant-only masks.

One example per kept sub-call:

- a plain completion (depth 1, or a depth-2 call made by a subagent's code): ``[user:
  prompt, assistant: answer]``, exactly the one message the harness sent (no system
  message: the chat template's default system prompt, if it has one, is rendered, as the sub
  model saw it; the manifest records ``default_system: allow``); the answer is supervised;
- a subagent (depth 2): its whole trajectory, rebuilt from its turns as the subagent saw it
  (:func:`rlmdistill.traces.rebuild.subagent_requests` checks every request against its
  recorded hash): system prompt and task, then each reply and the REPL output it saw next,
  ending at its last reply; every reply is supervised.

Ids and masks come from the root export's code (one full render, the masks of
:mod:`rlmdistill.export.masks`, the length policy of the root export's encoder), so a sub
example is masked exactly as a root one: the supervised tokens are the answer (reply)
tokens and the end-of-turn token closing each. Options the sub export does not support
(turn mode, tool style, examples from recorded ids) are refused with an error naming them.

Writes the dataset files of ``docs/export.md`` (``export.json`` with ``mode: sub``) with
these columns added: ``call_id``, ``call_depth``, ``subagent``, ``used_in_memo``,
``supports_pass``, ``memo_share`` (filter-time credit, :mod:`rlmdistill.traces.sub_credit`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.export.dataset import (
    EmptyExportError,
    ExportReport,
    _check_reasoning_template,
    _Encoder,
    _existing_dataset,
    _features,
    example_row,
)
from rlmdistill.export.masks import load_tokenizer, probe_template, reasoning_support
from rlmdistill.export.options import ExportOptions
from rlmdistill.export.render import Conversation, turn_reasoning
from rlmdistill.provenance import git_state, package_versions
from rlmdistill.traces.artefacts import (
    ArtefactError,
    DroppedItem,
    ExportManifest,
    LengthStats,
    SourceRun,
    TokenizerInfo,
    read_selection,
)
from rlmdistill.traces.labels import labels_provenance
from rlmdistill.traces.layout import EXPORT_MANIFEST, FILTER_DECISIONS
from rlmdistill.traces.rebuild import subagent_requests
from rlmdistill.traces.runs import Trajectory, load_manifest, load_summaries, load_trajectory
from rlmdistill.traces.schema import SubCallRecord
from rlmdistill.traces.store import TraceFileError
from rlmdistill.traces.sub_credit import METHOD, SubCallDecision, read_sub_decisions

__all__ = ["SUB_MODE", "SubExportConfig", "render_sub_call", "run"]

SUB_MODE = "sub"
"""``export.json``'s ``mode`` of a sub export."""

_SUB_COLUMNS = ("call_id", "call_depth", "subagent", "used_in_memo", "supports_pass", "memo_share")


class SubExportConfig(BaseModel):
    """What :func:`run` exports and where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decisions: Path = Field(description="A filter's sub_decisions.jsonl (--target sub).")
    out: Path = Field(description="Dataset folder to write.")
    options: ExportOptions = Field(description="Tokenizer and length policy (of the sub model).")
    overwrite: bool = Field(False, description="Replace an existing dataset.")
    card_extra: str | None = Field(
        None, description="Markdown section of the dataset card on the selection."
    )


def _check_options(options: ExportOptions) -> None:
    bad = []
    if options.mode != "trajectory":
        bad.append(f"mode={options.mode!r}")
    if options.style != "plain":
        bad.append(f"style={options.style!r}")
    if options.from_ids:
        bad.append("from_ids=True")
    if bad:
        raise ValueError(
            f"--target sub exports one example per sub-call in trajectory mode and plain "
            f"style; not supported: {', '.join(bad)}"
        )


def render_sub_call(
    traj: Trajectory, record: SubCallRecord, options: ExportOptions
) -> Conversation | tuple[str, str]:
    """The conversation of one sub-call (see the module docstring), or ``(reason,
    detail)`` when it has none: ``no_answer`` (a plain call that failed),
    ``no_subagent_turns`` (a subagent without recorded turns), ``prompt_hash_mismatch`` (a
    subagent's rebuilt request does not match its recorded hash).

    Reasoning (``options.reasoning``): a subagent turn's reasoning rides on its reply as
    ``reasoning_content`` (``all``: every reply; ``last``: the last; ``drop``: none), as for
    the root; a plain answer's inline ``<think>`` block is kept in its text, as generated.
    ``supervise_prefill=False`` leaves a subagent reply's prefill unsupervised."""
    if not record.subagent:
        if record.error is not None or record.response is None:
            return "no_answer", f"call {record.call_id} failed: {record.error or 'no response'}"
        messages = [
            {"role": "user", "content": record.prompt},
            {"role": "assistant", "content": record.response},
        ]
        return Conversation(messages, [False, True], [0, 0], [1], -1)
    turns = sorted(
        (t for t in traj.subagent_turns if t.call_id == record.call_id), key=lambda t: t.turn
    )
    if not turns:
        return "no_subagent_turns", f"subagent {record.call_id} has no recorded turns"
    try:
        requests = subagent_requests(turns)
    except ValueError as exc:
        return "prompt_hash_mismatch", str(exc)
    head = [m.model_dump() for m in requests[0]]
    messages, supervised = list(head), [False] * len(head)
    prefill_chars, groups = [0] * len(head), []
    n_reasoning = 0
    for k, t in enumerate(turns):
        thought, reply = turn_reasoning(t)
        msg: dict[str, Any] = {"role": "assistant", "content": reply}
        keep = options.reasoning == "all" or (options.reasoning == "last" and k == len(turns) - 1)
        if keep and thought:
            msg["reasoning_content"] = thought
            n_reasoning += 1
        groups.append(len(messages))
        messages.append(msg)
        supervised.append(True)
        prefill_chars.append(0 if options.supervise_prefill else len(t.prefill or ""))
        if k < len(turns) - 1 and t.observation is not None:
            messages.append({"role": "user", "content": t.observation})
            supervised.append(False)
            prefill_chars.append(0)
    return Conversation(messages, supervised, prefill_chars, groups, -1, n_reasoning=n_reasoning)


def _rows_to_dataset(rows: list[dict[str, Any]]) -> Any:
    from datasets import Dataset, Value

    features = _features()
    features["call_id"] = Value("int64")
    features["call_depth"] = Value("int64")
    features["subagent"] = Value("bool")
    features["used_in_memo"] = Value("bool")
    features["supports_pass"] = Value("bool")
    features["memo_share"] = Value("float64")
    return Dataset.from_list(rows, features=features)


def _card(m: ExportManifest, extra: str) -> str:
    drops = ", ".join(f"{k} {v}" for k, v in m.dropped.items()) or "none"
    srcs = "\n".join(
        f"- `{s.run_dir}` (run `{s.run_id}`): {len(s.episode_ids)} episodes" for s in m.sources
    )
    parts = [
        "---",
        "tags: [rlmdistill, sft, recursive-language-model, sub-model]",
        "---",
        "",
        "# rlmdistill SFT dataset: sub-calls",
        "",
        f"Created {m.created_at.isoformat()} by rlmdistill "
        f"{m.versions.get('rlmdistill', '?')} (commit {m.git_commit or 'unknown'}).",
        "",
        "One example per kept sub-call: a plain completion as prompt -> answer, a subagent as "
        "its whole trajectory (every reply supervised). Credit columns from "
        f"`{METHOD}` (docs/filter.md).",
        "",
        "## Sources",
        "",
        srcs,
        "",
        "## Export settings",
        "",
        f"- tokenizer: `{m.tokenizer.spec}` ({m.tokenizer.path}), chat template "
        f"{m.tokenizer.chat_template_source} sha256 {m.tokenizer.chat_template_sha256[:16]}",
        f"- default system prompt of the template: "
        f"{'none' if m.tokenizer.default_system is None else 'rendered where the harness sent no system message (as the sub model saw it)'}",
        f"- max_length: {m.max_length} tokens, truncation policy: {m.truncation}; "
        f"reasoning policy: {m.reasoning_policy}",
        "",
        "## Counts",
        "",
        f"{m.n_examples} examples from {m.n_episodes} episodes; dropped: {drops}.",
        "",
        "## Columns",
        "",
        "The root export's columns (`docs/export.md`; `turn` is -1) and "
        + ", ".join(f"`{c}`" for c in _SUB_COLUMNS)
        + ".",
        "",
    ]
    if extra.strip():
        parts += ["## Selection", "", extra.strip(), ""]
    return "\n".join(parts)


def _dropped(d: SubCallDecision, reason: str, detail: str) -> DroppedItem:
    """A sub-call that did not become a row (``turn`` holds its ``call_id``)."""
    return DroppedItem(
        run_id=d.run_id, episode_id=d.episode_id, turn=d.call_id, reason=reason, detail=detail[:500]
    )


def _pass_rates(decisions_path: Path) -> dict[tuple[str, str], float | None]:
    """Filter-time pass rates from the ``decisions.jsonl`` beside ``sub_decisions.jsonl``."""
    path = decisions_path.parent / FILTER_DECISIONS
    if not path.is_file():
        return {}
    return {(d.run_dir, d.episode_id): d.pass_rate for d in read_selection(path)}


def run(config: SubExportConfig, *, progress: bool = False) -> ExportReport:
    """Write the sub-call dataset of ``config.decisions``' kept sub-calls into
    ``config.out``; returns the :class:`~rlmdistill.export.dataset.ExportReport`
    (``n_episodes``: episodes with a kept sub-call; ``n_examples``: rows).

    Raises ``ValueError`` for options the sub export does not support,
    ``FileExistsError`` when ``out`` holds a dataset and ``overwrite`` is false,
    :class:`~rlmdistill.traces.artefacts.ArtefactError` for a bad decisions line,
    :class:`~rlmdistill.export.dataset.EmptyExportError` when no example survives, and what
    the root export raises for an unusable tokenizer or template. ``progress`` is accepted
    for the stage shape (nothing is drawn)."""
    del progress
    t0 = time.perf_counter()
    c = config
    out_dir = Path(c.out)
    _check_options(c.options)
    # The sub model was sent no system message: the template's default is what it saw.
    options = c.options.model_copy(update={"default_system": "allow"})
    kept = [d for d in read_sub_decisions(c.decisions) if d.kept]
    if (existing := _existing_dataset(out_dir)) and not c.overwrite:
        raise FileExistsError(
            f"{out_dir} already holds a dataset ({', '.join(existing)}); "
            "pass overwrite=True to replace it"
        )
    tokenizer, tok_dir = load_tokenizer(options.tokenizer, options.chat_template)
    info = probe_template(tokenizer, tok_dir, options.end_of_turn_tokens)
    encoder = _Encoder(tokenizer, info, options)
    renders_last, renders_earlier = reasoning_support(tokenizer)
    pass_rates = _pass_rates(Path(c.decisions))

    by_episode: dict[tuple[str, str], list[SubCallDecision]] = {}
    for d in kept:
        by_episode.setdefault((d.run_dir, d.episode_id), []).append(d)
    summaries = {
        (run_dir, s.episode_id): s
        for run_dir in dict.fromkeys(r for r, _ in by_episode)
        for s in load_summaries(Path(run_dir))
    }
    rows: list[dict[str, Any]] = []
    dropped: list[DroppedItem] = []
    n_truncated = n_appended = n_reasoning = 0
    exported: dict[str, list[str]] = {}
    for (run_dir, episode_id), ds in by_episode.items():
        run_id = ds[0].run_id
        summary = summaries.get((run_dir, episode_id))
        try:
            if summary is None:
                raise ArtefactError(f"{run_dir}: no summary of episode {episode_id}")
            traj = load_trajectory(Path(run_dir), episode_id)
        except (FileNotFoundError, TraceFileError, ArtefactError, ValueError) as exc:
            dropped += [_dropped(d, "missing_trajectory", str(exc)) for d in ds]
            continue
        records = {r.call_id: r for r in traj.sub_calls}
        for d in ds:
            where = f"run {run_id} episode {episode_id} call {d.call_id}"

            record = records.get(d.call_id)
            if record is None:
                dropped.append(_dropped(d, "missing_sub_call", f"{where}: not in the trajectory"))
                continue
            conv = render_sub_call(traj, record, options)
            if isinstance(conv, tuple):
                dropped.append(_dropped(d, *conv))
                continue
            if conv.n_reasoning:
                _check_reasoning_template(options, renders_last, renders_earlier, episode_id)
                n_reasoning += conv.n_reasoning
            fitted = encoder.fit(conv, where)
            if fitted is None:
                dropped.append(_dropped(d, "too_long", f"{where}: over {options.max_length}"))
                continue
            conv, enc = fitted
            n_sup = sum(enc.assistant_masks)
            if n_sup < options.min_supervised_tokens:
                dropped.append(_dropped(d, "too_few_supervised", f"{where}: {n_sup} supervised"))
                continue
            n_truncated += conv.n_turns_dropped > 0
            n_appended += enc.appended_closer
            row = example_row(
                conv,
                enc,
                episode_id=episode_id,
                run_id=run_id,
                room_id=summary.room.room_id,
                task_id=summary.task_id,
                pass_rate=pass_rates.get((run_dir, episode_id)),
                coverage=summary.coverage.overall if summary.coverage is not None else None,
            )
            row.update(
                call_id=d.call_id,
                call_depth=d.call_depth,
                subagent=d.subagent,
                used_in_memo=d.used_in_memo,
                supports_pass=d.supports_pass,
                memo_share=d.memo_share,
            )
            rows.append(row)
            ids = exported.setdefault(run_dir, [])
            if episode_id not in ids:
                ids.append(episode_id)

    counts = dict(Counter(x.reason for x in dropped).most_common())
    if not rows:
        raise EmptyExportError(
            f"no example survived the export of {len(kept)} sub-calls; dropped: {counts}"
        )
    import datasets

    for name in _existing_dataset(out_dir):
        (out_dir / name).unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        _rows_to_dataset(rows).save_to_disk(str(out_dir))
    finally:
        if bars:
            datasets.enable_progress_bars()
    duration = time.perf_counter() - t0
    tok_stats = LengthStats.of([r["n_tokens"] for r in rows])
    sup_stats = LengthStats.of([r["n_supervised"] for r in rows])
    n_episodes = sum(len(v) for v in exported.values())
    report = ExportReport(
        out_dir=str(out_dir),
        n_episodes=len(by_episode),
        n_episodes_exported=n_episodes,
        n_examples=len(rows),
        dropped=counts,
        dropped_items=dropped,
        n_truncated=n_truncated,
        n_turns_dropped=0,
        n_appended_closers=n_appended,
        reasoning_policy=options.reasoning,
        n_reasoning_turns=n_reasoning,
        n_reasoning_kept=n_reasoning,
        tokens=tok_stats,
        supervised=sup_stats,
        duration_s=duration,
        examples_per_s=len(rows) / duration if duration > 0 else 0.0,
        tokens_per_s=tok_stats.total / duration if duration > 0 else 0.0,
    )
    names = info.token_names(tokenizer)
    commit, dirty = git_state()
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
        mode=SUB_MODE,
        style=options.style,
        system_prompt_source="collected",
        system_prompt_sha256=None,
        few_shot_kept=False,
        max_length=options.max_length,
        truncation=options.truncation,
        prefill_supervised=options.supervise_prefill,
        min_supervised_tokens=options.min_supervised_tokens,
        default_system=options.default_system,
        n_examples=len(rows),
        n_episodes=len(by_episode),
        dropped=counts,
        dropped_items=dropped,
        n_truncated=n_truncated,
        n_appended_closers=n_appended,
        reasoning_policy=options.reasoning,
        n_reasoning_turns=n_reasoning,
        n_reasoning_kept=n_reasoning,
        tokens=tok_stats,
        supervised=sup_stats,
        sources=[
            SourceRun(
                run_dir=r,
                run_id=load_manifest(Path(r)).run_id,
                episode_ids=ids,
                labels=labels_provenance(Path(r)),
            )
            for r, ids in exported.items()
        ],
        options={**options.model_dump(), "target": "sub", "credit_method": METHOD},
        versions=package_versions(),
        git_commit=commit,
        git_dirty=dirty,
    )
    (out_dir / EXPORT_MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "README.md").write_text(_card(manifest, c.card_extra or ""), encoding="utf-8")
    return report
