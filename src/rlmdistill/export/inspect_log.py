"""A run as an Inspect eval log, written by inspect_ai's own writer (``rlmdistill
export-inspect``), so ``inspect view``, Docent and other readers of Inspect logs open our runs.

One log per run (``EvalLog``, format ``eval`` or ``json``; ``inspect_ai.log.write_eval_log``):

- one sample per episode of ``episodes.jsonl`` (id = episode id, epoch 1), in file order;
- its ``messages``: the root's conversation as :func:`rlmdistill.export.render.render_episode`
  renders it in trajectory mode (system prompt, worked example, task, then per root turn the
  reply and the REPL output the root saw: a user message in ``plain`` style, ``repl`` tool
  calls and tool messages in ``tools`` style), the collected system prompt and worked example
  kept, every reply's reasoning kept as a ``ContentReasoning`` part;
- ``input``: the task message; ``target``: the room's rubric criteria (``id: title``);
  ``output``: the memo (the episode's final answer), by the root model;
- ``scores``: per grader with verdicts, ``<grader>`` = the pass rate of the current memo
  (:func:`rlmdistill.traces.scores.run_scores`: PASS / all criteria), its explanation and
  metadata the counts, graded and weighted rates and the label of every criterion; and
  ``<grader>_criteria`` = ``{criterion_id: "C" | "I" | "N"}`` (Inspect's correct /
  incorrect / no-answer: PASS / FAIL / UNGRADABLE or no verdict). An ungraded episode has no
  score of that grader;
- ``metadata``: the episode's status (and detail), room, task, models, depth, seed, turns,
  token usage, wall time, coverage (``Coverage``, whole), and its sub-calls (each
  ``SubCallRecord`` without its prompt and response texts: ids, turn, block, batch, depth,
  parent call, sources, usage, latency, attempts, errors);
- ``events``: one Inspect ``ModelEvent`` per sub-call (``role="sub"``, the sub model; input
  = the prompt as one user message, output = the response, usage, latency, error), which
  the transcript view shows;
- ``model_usage``: root and sub model tokens (Inspect's ``input``/``output`` tokens).

An episode whose trajectory is missing, torn or edited still gets its sample (no messages),
with the reason in ``metadata["messages_error"]``; the run is never refused for one episode.
What the format loses is listed in ``docs/export.md`` (subagent turns, token ids and logprobs
are left out; the prompt hashes are not carried).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from rlmdistill import __version__
from rlmdistill.export.options import ExportStyle, SystemPromptChoice
from rlmdistill.export.render import RenderFailure, render_episode
from rlmdistill.traces.runs import grader_ids, load_manifest, load_summaries, load_trajectory
from rlmdistill.traces.schema import EpisodeSummary, SubCallRecord
from rlmdistill.traces.scores import EpisodeScore, run_scores
from rlmdistill.traces.store import TraceFileError

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ChatMessage

__all__ = [
    "CRITERION_VALUES",
    "InspectExport",
    "InspectFormat",
    "InspectNotInstalledError",
    "build_eval_log",
    "export_inspect",
]

InspectFormat = Literal["eval", "json"]
"""Inspect's two log formats: ``eval`` (zipped, the default of ``inspect eval``) or ``json``."""

CRITERION_VALUES: dict[str, str] = {
    "PASS": "C",
    "FAIL": "I",
    "UNGRADABLE": "N",
    "MISSING": "N",
}
"""A criterion's label -> its value in the ``<grader>_criteria`` score (Inspect's CORRECT,
INCORRECT and NOANSWER); the exact labels are in the pass-rate score's metadata."""


class InspectNotInstalledError(RuntimeError):
    """``inspect_ai`` is not installed (the ``inspect`` extra)."""


class InspectExport(NamedTuple):
    """What :func:`export_inspect` wrote."""

    path: Path
    """The log file."""
    n_samples: int
    """Samples (= episodes of ``episodes.jsonl``)."""
    n_without_messages: int
    """Samples whose trajectory could not be rendered (reason in their metadata)."""
    graders: list[str]
    """Graders whose verdicts became scores."""


def _inspect() -> Any:
    try:
        import inspect_ai
    except ImportError as exc:
        raise InspectNotInstalledError(
            "export-inspect needs inspect_ai: pip install 'rlmdistill[inspect]'"
        ) from exc
    return inspect_ai


def _chat_messages(messages: Sequence[dict[str, Any]], model: str) -> list[ChatMessage]:
    """Our rendered message dicts (``role``, ``content``, optional ``reasoning_content``,
    ``tool_calls``, ``tool_call_id``) as Inspect chat messages."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )
    from inspect_ai.tool import ToolCall

    out: list[ChatMessage] = []
    names: dict[str, str] = {}
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            out.append(ChatMessageSystem(content=content, source="input"))
        elif role == "user":
            out.append(ChatMessageUser(content=content, source="input"))
        elif role == "tool":
            call_id = m.get("tool_call_id")
            out.append(
                ChatMessageTool(
                    content=content, tool_call_id=call_id, function=names.get(call_id or "")
                )
            )
        elif role == "assistant":
            calls = None
            if m.get("tool_calls"):
                calls = []
                for c in m["tool_calls"]:
                    fn = c.get("function", c)
                    names[c["id"]] = fn["name"]
                    calls.append(
                        ToolCall(id=c["id"], function=fn["name"], arguments=fn["arguments"])
                    )
            body: str | list[Any] = content
            if m.get("reasoning_content"):
                body = [
                    ContentReasoning(reasoning=m["reasoning_content"]),
                    ContentText(text=content),
                ]
            out.append(
                ChatMessageAssistant(content=body, tool_calls=calls, model=model, source="generate")
            )
        else:
            raise ValueError(f"message role {role!r} has no Inspect chat message")
    return out


_SUB_CALL_TEXTS = ("prompt", "response")
"""Fields of a sub-call record carried by its model event instead of the sample metadata."""


def _sub_call_events(
    calls: Sequence[SubCallRecord], model: str, at: dt.datetime
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Model events (``role="sub"``: the prompt as one user message, the response as the
    output, usage, latency, error) and the metadata records (every field but the texts) of an
    episode's sub-calls, in record order."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.model import ChatMessageUser, GenerateConfig, ModelOutput, ModelUsage

    events: list[Any] = []
    records: list[dict[str, Any]] = []
    for c in calls:
        out = ModelOutput.from_content(model, c.response or "", error=c.error)
        out.usage = ModelUsage(
            input_tokens=c.usage.prompt_tokens,
            output_tokens=c.usage.completion_tokens,
            total_tokens=c.usage.prompt_tokens + c.usage.completion_tokens,
            input_tokens_cache_read=c.usage.cached_tokens,
        )
        rec = c.model_dump(mode="json", exclude=set(_SUB_CALL_TEXTS))
        events.append(
            ModelEvent(
                timestamp=at,
                working_start=0.0,
                model=model,
                role="sub",
                input=[ChatMessageUser(content=c.prompt)],
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=out,
                retries=c.attempts - 1,
                error=c.error,
                working_time=c.latency_s,
                metadata={"call_id": c.call_id, "turn": c.turn, "depth": c.depth},
            )
        )
        records.append(rec)
    return events, records


def _scores(graded: dict[str, EpisodeScore | None]) -> dict[str, Any]:
    from inspect_ai.scorer import Score

    out: dict[str, Any] = {}
    for grader, score in graded.items():
        if score is None:
            continue
        r = score.rates
        labels = dict(zip(score.criterion_ids, score.labels, strict=True))
        out[grader] = Score(
            value=r.pass_rate if r.pass_rate is not None else 0.0,
            explanation=f"{r.n_pass} of {r.n_criteria} criteria passed ({grader})",
            metadata={
                "pass_rate": r.pass_rate,
                "graded_pass_rate": r.graded_pass_rate,
                "weighted_pass_rate": r.weighted_pass_rate,
                "n_criteria": r.n_criteria,
                "n_pass": r.n_pass,
                "n_fail": r.n_fail,
                "n_ungradable": r.n_ungradable,
                "n_missing": r.n_missing,
                "labels": labels,
            },
        )
        out[f"{grader}_criteria"] = Score(
            value={cid: CRITERION_VALUES[lab] for cid, lab in labels.items()},
            metadata={"labels": labels},
        )
    return out


def _sample(
    run_dir: Path,
    summary: EpisodeSummary,
    *,
    style: ExportStyle,
    graded: dict[str, EpisodeScore | None],
    criteria: list[str],
) -> tuple[EvalSample, bool]:
    """One episode as an Inspect sample; the flag says whether its messages were rendered."""
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage

    eid = summary.episode_id
    messages: list[ChatMessage] = []
    task_text = ""
    error: str | None = None
    sub_calls: list[dict[str, Any]] = []
    events: list[Any] = []
    try:
        traj = load_trajectory(run_dir, eid)
        events, sub_calls = _sub_call_events(traj.sub_calls, summary.sub_model, summary.started_at)
        (item,) = render_episode(
            traj,
            mode="trajectory",
            style=style,
            system=SystemPromptChoice("collected", None, True),
            reasoning="all",
        )
        if isinstance(item, RenderFailure):
            error = f"{item.reason}: {item.detail}"
        else:
            n_head = item.groups[0] if item.groups else len(item.messages)
            task_text = next(
                (m["content"] for m in reversed(item.messages[:n_head]) if m["role"] == "user"), ""
            )
            messages = _chat_messages(item.messages, summary.root_model)
    except (FileNotFoundError, TraceFileError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    tokens = summary.tokens
    usage = {
        summary.root_model: ModelUsage(
            input_tokens=tokens.root.prompt_tokens,
            output_tokens=tokens.root.completion_tokens,
            total_tokens=tokens.root.prompt_tokens + tokens.root.completion_tokens,
            input_tokens_cache_read=tokens.root.cached_tokens,
        )
    }
    if tokens.sub.prompt_tokens or tokens.sub.completion_tokens:
        sub = usage.get(summary.sub_model, ModelUsage())
        usage[summary.sub_model] = ModelUsage(
            input_tokens=sub.input_tokens + tokens.sub.prompt_tokens,
            output_tokens=sub.output_tokens + tokens.sub.completion_tokens,
            total_tokens=sub.total_tokens + tokens.sub.prompt_tokens + tokens.sub.completion_tokens,
        )
    metadata: dict[str, Any] = {
        "run_id": summary.run_id,
        "status": summary.status,
        "status_detail": summary.status_detail,
        "room_id": summary.room.room_id,
        "room_hash": summary.room.room_hash,
        "task_id": summary.task_id,
        "root_model": summary.root_model,
        "sub_model": summary.sub_model,
        "depth": summary.depth,
        "seed": summary.seed,
        "sample_index": summary.sample_index,
        "n_turns": summary.n_turns,
        "n_sub_calls": summary.n_sub_calls,
        "n_sub_call_errors": summary.n_sub_call_errors,
        "tokens": tokens.model_dump(mode="json"),
        "wall_time_s": summary.wall_time_s,
        "memo_sha256": summary.memo_sha256,
        "coverage": summary.coverage.model_dump(mode="json") if summary.coverage else None,
        "sub_calls": sub_calls,
    }
    if error is not None:
        metadata["messages_error"] = error
    sample = EvalSample(
        id=eid,
        epoch=1,
        input=task_text,
        target=criteria,
        messages=messages,
        output=ModelOutput.from_content(summary.root_model, summary.memo or ""),
        scores=_scores(graded) or None,
        metadata=metadata,
        model_usage=usage,
        events=events,
        started_at=summary.started_at.isoformat(),
        completed_at=summary.ended_at.isoformat(),
        total_time=summary.wall_time_s,
    )
    return sample, error is None


def build_eval_log(run_dir: Path, *, style: ExportStyle = "plain") -> tuple[EvalLog, int]:
    """The Inspect ``EvalLog`` of a run (samples included) and how many samples have no
    messages (their trajectory could not be rendered).

    Raises :class:`~rlmdistill.traces.runs.NotARunError` when ``run_dir`` has no
    ``run.json``, :class:`~rlmdistill.traces.store.TraceFileError` naming the file for an
    invalid manifest or ``episodes.jsonl``, and :class:`InspectNotInstalledError` without
    inspect_ai.
    """
    inspect_ai = _inspect()
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage

    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    summaries = load_summaries(run_dir)
    graders = grader_ids(run_dir)
    scored = {g: run_scores(run_dir, g) for g in graders}
    tasks = next(iter(scored.values())).tasks if scored else {}
    samples: list[EvalSample] = []
    n_bad = 0
    for s in summaries:
        task = tasks.get(s.room.room_hash)
        criteria = [f"{c.id}: {c.title}" for c in task.criteria] if task else []
        graded = {g: scored[g].scores.get(s.episode_id) for g in graders}
        sample, ok = _sample(run_dir, s, style=style, graded=graded, criteria=criteria)
        samples.append(sample)
        n_bad += not ok
    results = []
    for g in graders:
        rates = [
            sc.rates.pass_rate for sc in scored[g].scores.values() if sc.rates.pass_rate is not None
        ]
        metrics = {}
        if rates:
            metrics["mean"] = EvalMetric(name="mean", value=sum(rates) / len(rates))
        results.append(
            EvalScore(
                name=g,
                scorer=g,
                scored_samples=len(rates),
                unscored_samples=len(summaries) - len(rates),
                metrics=metrics,
            )
        )
    usage: dict[str, ModelUsage] = {}
    for sample in samples:
        for model, u in sample.model_usage.items():
            usage[model] = usage[model] + u if model in usage else u
    roots = sorted({s.root_model for s in summaries}) or ["unknown"]
    created = manifest.created_at
    ended = max((s.ended_at for s in summaries), default=created)
    digest = hashlib.sha256(f"{manifest.run_id}|{created.isoformat()}".encode()).hexdigest()
    spec = EvalSpec(
        eval_id=digest[:22],
        run_id=manifest.run_id,
        created=created.isoformat(),
        task=f"rlmdistill/{manifest.run_id}",
        task_id=digest[22:44],
        task_description=f"rlmdistill run {run_dir.name}: root-model episodes over data rooms",
        dataset=EvalDataset(
            name=manifest.run_id,
            location=str(run_dir),
            samples=len(samples),
            sample_ids=[s.episode_id for s in summaries],
            shuffled=False,
        ),
        model=roots[0],
        config=EvalConfig(),
        packages={"rlmdistill": __version__, "inspect_ai": inspect_ai.__version__},
        metadata={
            "source": "rlmdistill",
            "run_dir": str(run_dir),
            "run_id": manifest.run_id,
            "root_models": roots,
            "messages_style": style,
            "graders": graders,
        },
    )
    log = EvalLog(
        status="success",
        eval=spec,
        results=EvalResults(
            total_samples=len(samples), completed_samples=len(samples), scores=results
        ),
        stats=EvalStats(
            started_at=created.isoformat(), completed_at=ended.isoformat(), model_usage=usage
        ),
        samples=samples,
    )
    return log, n_bad


def export_inspect(
    run_dir: Path,
    out_dir: Path,
    *,
    style: ExportStyle = "plain",
    fmt: InspectFormat = "eval",
    overwrite: bool = False,
) -> InspectExport:
    """Write ``run_dir`` as one Inspect eval log in ``out_dir`` (see the module docstring).

    The file is ``<created>_rlmdistill-<run name>_<id>.<fmt>`` (Inspect's naming, so
    ``inspect view`` lists it), written by ``inspect_ai.log.write_eval_log``.

    Raises ``FileExistsError`` when that file exists and not ``overwrite``, and what
    :func:`build_eval_log` raises.
    """
    from inspect_ai.log import write_eval_log

    log, n_bad = build_eval_log(run_dir, style=style)
    stamp = dt.datetime.fromisoformat(log.eval.created).strftime("%Y-%m-%dT%H-%M-%S")
    safe = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in Path(run_dir).name)
    path = Path(out_dir) / f"{stamp}_rlmdistill-{safe}_{log.eval.eval_id}.{fmt}"
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists (pass --overwrite to replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(path), format=fmt)
    graders = list(log.eval.metadata["graders"]) if log.eval.metadata else []
    return InspectExport(path, len(log.samples or []), n_bad, graders)
