"""Read the JSONL logs of the reference RLM implementation (PyPI ``rlms``, alexzhang13/rlm).

The schema is what ``rlm.logger.rlm_logger.RLMLogger`` and the ``to_dict`` methods of
``rlm.core.types`` write at ``rlms`` 0.1.3 (:data:`SUPPORTED_VERSIONS`), not its docs page:

- one ``{"type": "metadata", "timestamp", "root_model", "max_depth", "max_iterations",
  "backend", "backend_kwargs", "environment_type", "environment_kwargs", "other_backends"}``
  line per ``RLM`` object (one log file per object);
- then one ``{"type": "iteration", "iteration", "timestamp", "prompt", "response",
  "code_blocks", "final_answer", "iteration_time"}`` line per root call of the model.
  ``iteration`` restarts at 1 with every ``RLM.completion`` call: each restart is a new
  episode. ``prompt`` is the message list sent; each code block is ``{"code", "result":
  {"stdout", "stderr", "locals", "execution_time", "rlm_calls", "final_answer"}}``;
  each of ``rlm_calls`` is ``{"root_model", "prompt", "response", "usage_summary":
  {"model_usage_summaries": {MODEL: {"total_calls", "total_input_tokens",
  "total_output_tokens", "total_cost"?}}}, "execution_time", "metadata"?, "error"?}``. A call
  that ran a child RLM (``max_depth`` 2, ``rlm_query``) carries the child's trajectory as
  ``metadata = {"run_metadata", "iterations"}``, with the same iteration shape, nested.

The log has no format version. A metadata line that names one (``version``,
``rlm_version``, ``rlms_version``, ``format_version`` or ``schema_version``) must name a
supported one; one that names none is read as the 0.1.3 shape and checked field by field.
Field mapping and what is lost: ``docs/bring-your-traces.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rlmdistill.importers.common import (
    ImportedEpisode,
    ImportFormatError,
    ImportResult,
    import_files,
    imported_episode_id,
    utc_from_local,
)
from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.traces.rebuild import MessagesHash
from rlmdistill.traces.schema import (
    CodeBlockResult,
    EpisodeEnd,
    EpisodeStart,
    ModelSettings,
    RoomInfo,
    SubagentTurnRecord,
    SubCallRecord,
    TurnRecord,
)
from rlmdistill.traces.store import read_jsonl

__all__ = [
    "FORMAT",
    "SUPPORTED_VERSIONS",
    "import_rlm",
    "log_files",
    "parse_log",
    "source_requests",
]

FORMAT = "rlms-log"
"""``run.json`` ``source.format`` of a run imported from ``rlms`` logs."""
SUPPORTED_VERSIONS = ("0.1.3",)
"""``rlms`` versions whose log shape this importer reads."""
_VERSION_KEYS = ("version", "rlm_version", "rlms_version", "format_version", "schema_version")
_ITERATION_KEYS = {
    "type",
    "iteration",
    "timestamp",
    "prompt",
    "response",
    "code_blocks",
    "final_answer",
    "iteration_time",
}
_CALL_KEYS = {
    "root_model",
    "prompt",
    "response",
    "usage_summary",
    "execution_time",
    "metadata",
    "error",
}
_RESULT_KEYS = {"stdout", "stderr", "locals", "execution_time", "rlm_calls", "final_answer"}
_PLACEHOLDER_ROOM = RoomInfo(room_id="", room_hash="", path="", n_documents=0, n_chars=0)
_SAMPLING_KEYS = {"temperature", "top_p", "max_tokens", "seed", "stop"}


def log_files(paths: Iterable[Path]) -> list[Path]:
    """The log files named by ``paths``: a file as given, a folder's ``*.jsonl`` files (not
    recursive) in name order. Raises ``FileNotFoundError`` naming a missing path and
    ``ValueError`` when nothing is found."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(p.glob("*.jsonl")))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such log file or folder")
    if not out:
        raise ValueError(f"no .jsonl log files in {', '.join(str(p) for p in paths)}")
    return out


def _fail(path: Path, line: int | None, what: str) -> ImportFormatError:
    where = f"{path}:{line}" if line is not None else str(path)
    return ImportFormatError(
        f"{where}: {what} (this importer reads the logs of rlms {', '.join(SUPPORTED_VERSIONS)})"
    )


def _check_version(path: Path, meta: dict[str, Any]) -> str:
    for key in _VERSION_KEYS:
        if key in meta:
            found = str(meta[key])
            if found not in SUPPORTED_VERSIONS:
                raise ImportFormatError(
                    f"{path}:1: unknown rlms log format version {found!r} (field {key!r}); "
                    f"supported versions: {', '.join(SUPPORTED_VERSIONS)}"
                )
            return found
    return SUPPORTED_VERSIONS[-1]


def _usage(summary: Any) -> tuple[Usage, dict[str, Any]]:
    """Total usage of an ``rlms`` ``UsageSummary`` dict (over its models)."""
    usage = Usage(cached_tokens=None)
    cost = 0.0
    has_cost = False
    calls = 0
    models = (summary or {}).get("model_usage_summaries") or {}
    for m in models.values():
        usage = usage + Usage(
            prompt_tokens=int(m.get("total_input_tokens") or 0),
            completion_tokens=int(m.get("total_output_tokens") or 0),
            cached_tokens=None,
        )
        calls += int(m.get("total_calls") or 0)
        if m.get("total_cost") is not None:
            cost += float(m["total_cost"])
            has_cost = True
    info: dict[str, Any] = {"models": sorted(models), "total_calls": calls}
    if has_cost:
        info["total_cost"] = cost
    return usage, info


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False)


def _messages(path: Path, line: int, prompt: Any) -> list[Message]:
    if isinstance(prompt, str):
        return [Message(role="user", content=prompt)]
    if not isinstance(prompt, list):
        raise _fail(path, line, f"iteration prompt is a {type(prompt).__name__}, not messages")
    out = []
    for m in prompt:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise _fail(path, line, f"iteration prompt holds a message of another shape: {m!r}")
        content = m.get("content")
        out.append(Message(role=m["role"], content=content if isinstance(content, str) else ""))
    return out


class _Episode:
    """Mutable state while one episode's records are built."""

    def __init__(self, episode_id: str) -> None:
        self.episode_id = episode_id
        self.calls: list[SubCallRecord] = []
        self.subagent_turns: list[SubagentTurnRecord] = []
        self.inputs: list[str] = []
        self.n_history_mismatch = 0


def _object(path: Path, line: int, obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(path, line, f"{what} is a {type(obj).__name__}, not an object")
    return obj


def _turns(
    path: Path,
    line: int,
    iterations: list[dict[str, Any]],
    ep: _Episode,
) -> tuple[list[Message], list[dict[str, Any]]]:
    """Initial messages and per-turn fields of one agent (root or child RLM).

    The conversation is rebuilt from the last iteration's prompt (the whole history before
    the last reply; a child RLM's iterations all alias that one list in ``rlms``): the
    messages before the first assistant message are the initial ones, and the messages
    between reply ``t`` and reply ``t + 1`` are turn ``t``'s observation.
    """
    n = len(iterations)
    last = _messages(path, line, iterations[-1].get("prompt"))
    replies = [str(it.get("response") or "") for it in iterations]
    positions = [i for i, m in enumerate(last) if m.role == "assistant"]
    first = _messages(path, line, iterations[0].get("prompt"))
    consistent = len(positions) == n - 1 and all(
        last[p].content == replies[t] for t, p in enumerate(positions)
    )
    if consistent:
        initial = last[: positions[0]] if positions else last
    else:
        ep.n_history_mismatch += 1
        initial = first[: next((i for i, m in enumerate(first) if m.role == "assistant"), None)]
    fields: list[dict[str, Any]] = []
    for t in range(n):
        obs_msgs: list[Message] | None = None
        if t < n - 1:
            if consistent:
                lo = positions[t] + 1
                hi = positions[t + 1] if t + 1 < len(positions) else len(last)
                obs_msgs = last[lo:hi]
            else:
                nxt = _messages(path, line, iterations[t + 1].get("prompt"))
                here = _messages(path, line, iterations[t].get("prompt"))
                obs_msgs = [m for m in nxt[len(here) + 1 :] if m.role == "user"]
        fields.append({"observation_messages": obs_msgs})
    return initial, fields


def _code_blocks(
    path: Path,
    line: int,
    it: dict[str, Any],
    ep: _Episode,
    turn: int,
    parent_call_id: int | None,
    depth: int,
) -> tuple[list[CodeBlockResult], list[Any]]:
    blocks: list[CodeBlockResult] = []
    block_locals: list[Any] = []
    raw = it.get("code_blocks")
    if not isinstance(raw, list):
        raise _fail(path, line, "iteration has no code_blocks list")
    for b_idx, block in enumerate(raw):
        if not isinstance(block, dict) or not isinstance(block.get("result"), dict):
            raise _fail(path, line, f"code block {b_idx} has no result object")
        res = block["result"]
        unknown = set(res) - _RESULT_KEYS
        if "rlm_calls" not in res:
            raise _fail(path, line, f"code block {b_idx} result has no rlm_calls")
        stdout = str(res.get("stdout") or "")
        stderr = res.get("stderr") or None
        blocks.append(
            CodeBlockResult(
                index=b_idx,
                code=str(block.get("code") or ""),
                stdout_full=stdout,
                stdout_chars=len(stdout),
                error=str(stderr) if stderr else None,
                duration_s=float(res.get("execution_time") or 0.0),
            )
        )
        keep = {"locals": res.get("locals")}
        keep.update({k: res[k] for k in unknown})
        block_locals.append(keep)
        for call in res.get("rlm_calls") or []:
            _call(path, line, call, ep, turn, b_idx, parent_call_id, depth)
    return blocks, block_locals


def _call(
    path: Path,
    line: int,
    call: Any,
    ep: _Episode,
    turn: int,
    block: int,
    parent_call_id: int | None,
    depth: int,
) -> None:
    if not isinstance(call, dict) or "prompt" not in call:
        raise _fail(path, line, f"an rlm_calls entry has another shape: {str(call)[:200]!r}")
    call_id = len(ep.calls)
    usage, usage_info = _usage(call.get("usage_summary"))
    prompt = _prompt_text(call.get("prompt"))
    ep.inputs.append(prompt)
    extra: dict[str, Any] = {"root_model": call.get("root_model"), "usage": usage_info}
    if not isinstance(call.get("prompt"), str):
        extra["prompt"] = call.get("prompt")
    extra.update({k: v for k, v in call.items() if k not in _CALL_KEYS})
    child = call.get("metadata")
    record = SubCallRecord(
        episode_id=ep.episode_id,
        call_id=call_id,
        turn=turn if parent_call_id is None else ep.calls[parent_call_id].turn,
        block=block if parent_call_id is None else ep.calls[parent_call_id].block,
        batch_id=call_id,
        batch_size=1,
        parent_call_id=parent_call_id,
        sub_turn=turn if parent_call_id is not None else None,
        sub_block=block if parent_call_id is not None else None,
        subagent=isinstance(child, dict),
        depth=depth,
        prompt=prompt,
        response=None if call.get("response") is None else str(call.get("response")),
        usage=usage,
        latency_s=float(call.get("execution_time") or 0.0),
        error=call.get("error"),
        extra=extra,
    )
    ep.calls.append(record)
    if isinstance(child, dict):
        iterations = child.get("iterations") or []
        first_nested = len(ep.calls)
        if iterations:
            _agent(path, line, iterations, ep, call_id, depth + 1)
        nested = Usage(cached_tokens=None)
        for c in ep.calls[first_nested:]:
            if c.parent_call_id == call_id:
                nested = nested + c.usage
        own = Usage(
            prompt_tokens=max(0, usage.prompt_tokens - nested.prompt_tokens),
            completion_tokens=max(0, usage.completion_tokens - nested.completion_tokens),
            cached_tokens=None,
        )
        extra["reported_usage"] = usage.model_dump()
        extra["run_metadata"] = child.get("run_metadata")
        ep.calls[call_id] = record.model_copy(update={"usage": own, "extra": extra})


def _agent(
    path: Path,
    line: int,
    iterations: list[Any],
    ep: _Episode,
    call_id: int,
    depth: int,
) -> None:
    """A child RLM's iterations as subagent turns of sub-call ``call_id``."""
    its = [_object(path, line, it, "a child RLM's iteration") for it in iterations]
    initial, fields = _turns(path, line, its, ep)
    history = MessagesHash(initial)
    for m in initial:
        ep.inputs.append(m.content)
    for t, it in enumerate(its):
        blocks, block_extra = _code_blocks(path, line, it, ep, t, call_id, depth)
        obs = fields[t]["observation_messages"]
        observation = "\n\n".join(m.content for m in obs) if obs else None
        extra: dict[str, Any] = {"blocks": block_extra}
        if obs is not None and len(obs) > 1:
            extra["observation_messages"] = [m.model_dump() for m in obs]
        completion = str(it.get("response") or "")
        ended = utc_from_local(it.get("timestamp")) or dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        elapsed = float(it.get("iteration_time") or 0.0)
        ep.subagent_turns.append(
            SubagentTurnRecord(
                episode_id=ep.episode_id,
                turn=t,
                call_id=call_id,
                started_at=ended - dt.timedelta(seconds=elapsed),
                n_messages_before=len(history),
                prompt_sha256=history.hexdigest(),
                completion=completion,
                usage=Usage(cached_tokens=None),
                latency_s=elapsed,
                blocks=blocks,
                observation=observation,
                final_answer_source="final_call" if it.get("final_answer") is not None else None,
                duration_s=elapsed,
                initial_messages=list(initial) if t == 0 else None,
                extra=extra,
            )
        )
        history.append(Message(role="assistant", content=completion))
        if observation is not None:
            ep.inputs.append(observation)
            history.append(Message(role="user", content=observation))


def _model_settings(model: str, backend: str, kwargs: dict[str, Any]) -> ModelSettings:
    url = kwargs.get("base_url")
    spec = f"{backend}:{model}" + (f"@{url}" if url else "")
    sampling_args = kwargs.get("sampling_args") or {}
    known = {k: v for k, v in sampling_args.items() if k in _SAMPLING_KEYS and v is not None}
    if isinstance(known.get("stop"), str):
        known["stop"] = [known["stop"]]
    try:
        sampling = Sampling(**known)
    except ValueError:
        sampling = Sampling()
    return ModelSettings(spec=spec, model_id=model, sampling=sampling)


def _seconds_or_none(value: Any) -> bool:
    """Whether an ``iteration_time`` is missing or a finite number of seconds >= 0 (a number,
    or text ``float`` reads as one)."""
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(seconds) and seconds >= 0


def _episode(
    path: Path,
    file_hash: str,
    index: int,
    sample_index: int,
    meta: dict[str, Any],
    version: str,
    lines: list[tuple[int, dict[str, Any]]],
) -> tuple[ImportedEpisode, int]:
    episode_id = imported_episode_id(FORMAT, file_hash, index)
    ep = _Episode(episode_id)
    its = [it for _, it in lines]
    line0 = lines[0][0]
    initial, fields = _turns(path, line0, its, ep)
    root_model = str(meta.get("root_model") or "unknown")
    backend = str(meta.get("backend") or "unknown")
    kwargs = meta.get("backend_kwargs") or {}
    root = _model_settings(root_model, backend, kwargs if isinstance(kwargs, dict) else {})
    others = meta.get("other_backends") or []
    turns: list[TurnRecord] = []
    history = MessagesHash(initial)
    ep.inputs.extend(m.content for m in initial)
    wall = 0.0
    first_stamp: dt.datetime | None = None
    last_stamp: dt.datetime | None = None
    for t, (line, it) in enumerate(lines):
        blocks, block_extra = _code_blocks(path, line, it, ep, t, None, 1)
        obs = fields[t]["observation_messages"]
        observation = "\n\n".join(m.content for m in obs) if obs else None
        extra: dict[str, Any] = {"iteration": it.get("iteration"), "blocks": block_extra}
        if obs is not None and len(obs) > 1:
            extra["observation_messages"] = [m.model_dump() for m in obs]
        extra.update({k: v for k, v in it.items() if k not in _ITERATION_KEYS})
        if ep.n_history_mismatch:
            extra["prompt_messages"] = it.get("prompt")
        completion = str(it.get("response") or "")
        elapsed = float(it.get("iteration_time") or 0.0)
        wall += elapsed
        ended = utc_from_local(it.get("timestamp")) or dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        started = ended - dt.timedelta(seconds=elapsed)
        first_stamp = first_stamp or started
        last_stamp = ended
        final = it.get("final_answer")
        turns.append(
            TurnRecord(
                episode_id=episode_id,
                turn=t,
                started_at=started,
                n_messages_before=len(history),
                prompt_sha256=history.hexdigest(),
                completion=completion,
                usage=Usage(cached_tokens=None),
                latency_s=elapsed,
                blocks=blocks,
                observation=observation,
                final_answer_source=(
                    None
                    if final is None
                    else ("text" if not it.get("code_blocks") else "final_call")
                ),
                duration_s=elapsed,
                extra=extra,
            )
        )
        history.append(Message(role="assistant", content=completion))
        if observation is not None:
            history.append(Message(role="user", content=observation))
            ep.inputs.append(observation)
    memo_raw = its[-1].get("final_answer")
    memo = None if memo_raw is None else str(memo_raw)
    sub_model = root_model
    for c in ep.calls:
        if c.depth == 1 and c.extra and c.extra.get("root_model"):
            sub_model = str(c.extra["root_model"])
            break
    sub_backend = str(others[0]) if others else backend
    sub = _model_settings(sub_model, sub_backend, {})
    max_depth = meta.get("max_depth")
    depth = 2 if isinstance(max_depth, int) and max_depth >= 2 else 1
    t0 = first_stamp or dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    start_extra: dict[str, Any] = {
        "source_file": str(path),
        "source_line": line0,
        "metadata": {k: v for k, v in meta.items() if k != "type"},
        "rlms_version": version,
    }
    if ep.n_history_mismatch:
        start_extra["history_mismatch"] = True
    start = EpisodeStart(
        episode_id=episode_id,
        run_id="",
        sample_index=sample_index,
        started_at=t0,
        room=_PLACEHOLDER_ROOM,
        task_id="",
        root=root,
        sub=sub,
        depth=depth,
        seed=0,
        prompt_version=f"rlms-{version}",
        limits={"max_iterations": meta.get("max_iterations"), "max_depth": max_depth},
        initial_messages=initial,
        extra=start_extra,
    )
    end = EpisodeEnd(
        episode_id=episode_id,
        status="completed" if memo is not None else "no_memo",
        memo=memo,
        ended_at=last_stamp or t0,
    )
    imported = ImportedEpisode(
        start=start,
        turns=turns,
        calls=ep.calls,
        end=end,
        subagent_turns=ep.subagent_turns,
        inputs=ep.inputs,
        wall_time_s=wall,
        root_usage=Usage(cached_tokens=None),
        extra={"source": FORMAT, "source_file": path.name, "source_index": index},
    )
    return imported, ep.n_history_mismatch


def parse_log(
    path: Path,
    file_hash: str,
    first_sample_index: int = 0,
    on_episode: Callable[[ImportedEpisode], None] | None = None,
) -> tuple[list[ImportedEpisode], str, list[str]]:
    """Parse one ``rlms`` log file into episodes.

    Args:
        path: the ``.jsonl`` log (``RLMLogger(log_dir=...)`` writes one per ``RLM`` object).
        file_hash: the file's sha256 (episode ids are made from it and the episode's index).
        first_sample_index: ``sample_index`` of the file's first episode.
        on_episode: called with each episode as soon as it is parsed.

    Returns:
        ``(episodes, version, warnings)``: the format version read (a supported one), and
        what was repaired (a torn last line is dropped, as for our own files:
        :func:`rlmdistill.traces.store.read_jsonl`).

    Raises:
        ImportFormatError: no metadata line first, an unknown format version, or a record
            that is not of the supported shape (names file, line and field).
        rlmdistill.traces.store.TraceFileError: a corrupt line in the middle of the file.
    """
    read = read_jsonl(path)
    notes: list[str] = []
    if read.torn_tail is not None:
        notes.append(
            f"{path}: torn last line ({len(read.torn_tail)} chars, a crash mid-write) left out"
        )
    records = read.records
    if not records:
        raise _fail(path, None, "empty log (no metadata line)")
    meta = records[0]
    if meta.get("type") != "metadata":
        raise _fail(path, 1, f"first line is of type {meta.get('type')!r}, not the metadata line")
    version = _check_version(path, meta)
    missing = {"root_model", "max_depth", "backend"} - set(meta)
    if missing:
        raise _fail(path, 1, f"metadata line lacks {sorted(missing)}")
    groups: list[list[tuple[int, dict[str, Any]]]] = []
    bad_times = 0
    for n, rec in enumerate(records[1:], start=2):
        kind = rec.get("type")
        if kind == "metadata":
            continue
        if kind != "iteration":
            raise _fail(path, n, f"record of unknown type {kind!r}")
        lacking = {"prompt", "response", "code_blocks"} - set(rec)
        if lacking:
            raise _fail(path, n, f"iteration lacks {sorted(lacking)}")
        if not _seconds_or_none(rec.get("iteration_time")):
            # not a duration (NaN, inf, negative, text): read as missing, kept as written
            raw = json.dumps(rec["iteration_time"])  # its JSON text: NaN stays NaN
            rec = {**rec, "iteration_time": None, "iteration_time_raw": raw}
            bad_times += 1
        if rec.get("iteration") == 1 or not groups:
            groups.append([])
        groups[-1].append((n, rec))
    episodes: list[ImportedEpisode] = []
    mismatched = 0
    for i, group in enumerate(groups):
        ep, n_mis = _episode(path, file_hash, i, first_sample_index + i, meta, version, group)
        episodes.append(ep)
        if on_episode is not None:
            on_episode(ep)
        mismatched += n_mis
    if bad_times:
        notes.append(
            f"{path}: {bad_times} iteration_time values are not a number of seconds >= 0 "
            "(NaN, infinite, negative or text): read as missing (0 s), each kept as its JSON "
            "text under its turn's extra.iteration_time_raw"
        )
    if mismatched:
        notes.append(
            f"{path}: {mismatched} agent histories are not the first prompt plus replies and "
            "observations (compaction, or rlms's default answer after max_iterations); each "
            "turn keeps its own prompt under extra.prompt_messages"
        )
    return episodes, version, notes


def import_rlm(
    logs: Iterable[Path],
    room: Path,
    out: Path,
    *,
    coverage: bool = True,
    jobs: int = 1,
    command: list[str] | None = None,
) -> ImportResult:
    """``rlmdistill import rlm``: ``rlms`` logs -> the run folder ``out`` on room ``room``.

    Every file is parsed (and every version checked) before anything is written; episodes
    keep file order (files in the order given, a folder's files by name). Episode ids:
    :func:`~rlmdistill.importers.common.imported_episode_id` of the file's sha256 and the
    episode's index in its file. ``jobs``: worker processes for the coverage probe
    (:func:`~rlmdistill.importers.common.resolve_jobs`; 0 = auto, the command's default).
    Workers are forked on Linux; where only spawn is offered (macOS, Windows), a script that
    calls this with ``jobs != 1`` needs the usual ``if __name__ == "__main__":`` guard.

    Raises:
        ImportFormatError: unknown format version or shape (nothing written).
        FileNotFoundError: a missing log; FileExistsError: ``out`` is not empty.
        ValueError: the room has no ``task.json``.
    """

    def parse(
        f: Path, digest: str, offset: int, emit: Callable[[ImportedEpisode], None]
    ) -> tuple[list[ImportedEpisode], set[str], list[str]]:
        episodes, version, warned = parse_log(f, digest, offset, emit)
        return episodes, {version}, warned

    return import_files(
        log_files(logs),
        parse,
        room,
        out,
        source_format=FORMAT,
        coverage=coverage,
        jobs=jobs,
        command=command,
    )


def source_requests(
    initial: list[Message], turns: Sequence[TurnRecord] | Sequence[SubagentTurnRecord]
) -> list[list[Message]]:
    """The message list of every request of one agent exactly as ``rlms`` sent it, from an
    imported episode's records: like :func:`rlmdistill.traces.rebuild.root_requests` (root:
    ``initial`` = ``EpisodeStart.initial_messages``) and
    :func:`~rlmdistill.traces.rebuild.subagent_requests` (a subagent: turn 0's
    ``initial_messages``), but a turn whose observation joined several user messages (the REPL
    output and the next ``Turn k/N`` prompt) gives them back apart, from
    ``extra.observation_messages``.

    Shape: ``len(result) == len(turns)``; ``result[t]`` is what turn ``t`` sent.
    """
    history = list(initial)
    out: list[list[Message]] = []
    for turn in sorted(turns, key=lambda t: t.turn):
        out.append(list(history))
        history.append(Message(role="assistant", content=(turn.prefill or "") + turn.completion))
        split = (turn.extra or {}).get("observation_messages")
        if split:
            history.extend(Message.model_validate(m) for m in split)
        elif turn.observation is not None:
            history.append(Message(role="user", content=turn.observation))
    return out
