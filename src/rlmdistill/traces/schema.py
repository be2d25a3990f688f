"""The one schema module: every record written under ``runs/<run>/``.

Files and their records (all JSON Lines except ``run.json``):

- ``run.json``: :class:`RunManifest` (resolved config, versions, seeds, git commit).
- ``episodes.jsonl``: one :class:`EpisodeSummary` per finished episode; appended, never rewritten.
- ``attempts.jsonl``: one :class:`AttemptRecord` per episode attempt cut short by the serving
  infrastructure (server down, unknown model, refused key, retries spent); appended.
- ``trajectories/<episode_id>.jsonl``: :class:`EpisodeStart`, then :class:`TurnRecord` and
  :class:`SubCallRecord` lines as the episode runs, then :class:`EpisodeEnd`.
- ``verdicts/<grader>.jsonl``: one :class:`Verdict` per (episode, criterion) grading.
- ``verdicts/<grader>.cache.jsonl`` / ``verdicts/<grader>.usage.jsonl`` (LLM judges only):
  :class:`JudgeCacheEntry` per cached PASS/FAIL, :class:`JudgeRequestRecord` per judge request.

Every record carries ``schema_version`` and ``record_type``; timestamps are timezone-aware
UTC. Old shapes are upgraded by :func:`upgrade_record` before validation.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.provenance import Provenance

SCHEMA_VERSION = 2
"""Bump when a record changes shape; add the upgrade step to :func:`upgrade_record`.

History: 1 = first shape; 2 = turns keep ``reasoning`` and ``tokens`` (:class:`TokenTrace`),
sub-calls ``tokens`` (all optional: a version-1 record loads unchanged, as version 1)."""

EpisodeStatus = Literal[
    "completed",  # a memo was handed back
    "no_memo",  # turn limit or the root stopped without a memo
    "timeout",  # episode wall-time limit
    "repl_timeout",  # one code block exceeded its time limit; REPL killed
    "repl_crashed",  # REPL process died (memory limit, segfault, ...)
    "context_exceeded",  # root history no longer fits the root's context window
    "budget_exceeded",  # token or sub-call budget of the episode spent
    "model_error",  # root request failed after bounded retries, or fatally
    "memo_too_large",  # a FINAL value over ReplLimits.max_value_chars
    "variable_too_large",  # a variable read back for FINAL_VAR over ReplLimits.max_value_chars
    "error",  # harness bug or unexpected exception (traceback in the trajectory)
]

ActionFormat = Literal["fenced_code"]
VerdictLabel = Literal["PASS", "FAIL", "UNGRADABLE"]


def utcnow() -> dt.datetime:
    """Timezone-aware current time in UTC."""
    return dt.datetime.now(dt.UTC)


def _unset(value: Any) -> bool:
    return value is None


def _extra_field() -> Any:
    """An optional ``extra`` dict, left out of the written record when unset (so records of
    our own collector keep their bytes and old records load unchanged)."""
    return Field(default=None, exclude_if=_unset)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    """Version of the record shape (see :data:`SCHEMA_VERSION`)."""


class TokenUsage(BaseModel):
    """Token usage of one episode split by who spent it."""

    model_config = ConfigDict(extra="forbid")

    root: Usage = Field(default_factory=Usage)
    """Root model requests."""
    sub: Usage = Field(default_factory=Usage)
    """All sub-call requests."""


class RoomInfo(BaseModel):
    """Identity and size of the data room an episode ran on."""

    model_config = ConfigDict(extra="forbid")

    room_id: str
    """Folder name of the room (human label)."""
    room_hash: str
    """sha256 over document ids and texts (first 16 hex chars): changes when content does."""
    path: str
    """Where the room was loaded from."""
    n_documents: int
    n_chars: int
    """Total characters of extracted document text."""
    n_tokens: int | None = None
    """Total tokens under the root model's tokenizer, when known."""
    folders: dict[str, int] = Field(default_factory=dict)
    """Documents per top-level category folder."""


class ModelSettings(BaseModel):
    """How one model was used in an episode (recorded per episode)."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    """Model spec as given (``local:NAME`` or ``openai:MODEL@URL``); never holds a key."""
    model_id: str
    """Back end's id of the model."""
    sampling: Sampling
    few_shot: bool = False
    """Root only: worked-example turns placed before the task."""
    prefill: str | None = None
    """Root only: text each assistant reply is forced to start with."""


class Coverage(BaseModel):
    """Share of the room's text that reached any model input (unit: characters).

    ``method`` names how it was measured, so later probes can replace earlier ones.
    """

    model_config = ConfigDict(extra="forbid")

    method: str
    overall: float
    """Covered characters / room characters, in [0, 1]."""
    per_folder: dict[str, float] = Field(default_factory=dict)
    per_document: dict[str, float] = Field(default_factory=dict)
    covered_chars: int | None = None
    """Numerator of ``overall`` (normalised characters), when the method counts them."""
    unique_chars: int | None = None
    """Denominator of ``overall``: room characters that are not repeats of other documents."""
    duplicate_chars: int | None = None
    """Room characters left out of ``overall`` as text repeated across documents (reported,
    not double-counted)."""


class EpisodeStart(_Record):
    """First line of a trajectory: everything needed to rebuild the root's first prompt."""

    record_type: Literal["episode_start"] = "episode_start"
    episode_id: str
    run_id: str
    sample_index: int
    started_at: dt.datetime = Field(default_factory=utcnow)
    room: RoomInfo
    task_id: str
    root: ModelSettings
    sub: ModelSettings
    depth: Literal[1, 2] = 1
    seed: int
    action_format: ActionFormat = "fenced_code"
    prompt_version: str
    """Version id of the packaged root system prompt."""
    limits: dict[str, Any]
    """Resolved episode limits (turns, sub-calls, tokens, wall time, output sizes)."""
    initial_messages: list[Message]
    """System prompt, few-shot turns and the task message, exactly as sent."""
    n_few_shot_messages: int = 0
    """How many of ``initial_messages`` (after the system prompt) are worked-example turns."""
    extra: dict[str, Any] | None = _extra_field()
    """Fields of an imported trace that this schema has no place for, as the source wrote them
    (see ``docs/bring-your-traces.md``); ``None`` (not written) in our own runs."""


class CodeBlockResult(BaseModel):
    """Execution of one fenced code block inside a turn."""

    model_config = ConfigDict(extra="forbid")

    index: int
    code: str
    stdout_full: str
    """Everything the block printed (capped at the trace limit; see ``stdout_chars``)."""
    stdout_chars: int
    """Characters printed in total, before any cap."""
    error: str | None = None
    """Traceback text when the block raised."""
    duration_s: float
    timed_out: bool = False


ReasoningSource = Literal["field", "inline"]
"""``field``: the server returned the reasoning apart from the content
(``reasoning_content``/``reasoning``); ``inline``: it was a ``<think>...</think>`` block at the
start of the completion (the completion keeps it, unchanged)."""


class TokenTrace(BaseModel):
    """Token ids of one model request, as the back end saw and produced them.

    Prompt ids are stored as a delta, never whole per turn (which would grow quadratically):
    ``prompt = base[:prompt_reused] + prompt_new_ids``, where ``base`` is the previous
    request's prompt ids + completion ids of the same agent (empty for the first request).
    :func:`rlmdistill.traces.tokens.prompt_ids` rebuilds each prompt and checks it against
    ``prompt_sha256``.
    """

    model_config = ConfigDict(extra="forbid")

    source: Literal["generation", "server", "unavailable"]
    """``generation``: in-process ``generate``; ``server``: returned by an OpenAI-compatible
    server; ``unavailable``: the back end gave none (see ``unavailable``)."""
    unavailable: str | None = None
    """Why ids or logprobs are missing (e.g. the server does not return them)."""
    prompt_reused: int = 0
    """Leading prompt ids equal to the previous request's prompt + completion ids."""
    prompt_new_ids: list[int] | None = None
    """The prompt ids after those ``prompt_reused`` ones."""
    prompt_n: int | None = None
    """Length of the whole prompt in ids."""
    prompt_sha256: str | None = None
    """sha256 (hex) of the whole prompt ids (:func:`rlmdistill.traces.tokens.ids_sha256`)."""
    completion_ids: list[int] | None = None
    """Generated ids as produced (reasoning included; an end-of-sequence id when generated)."""
    logprobs: list[float] | None = None
    """Log-probability of each completion id under the model (natural log)."""


class TurnBase(_Record):
    """Fields shared by a root turn and a subagent turn: one completion plus its execution."""

    episode_id: str
    turn: int
    """0-based turn index (of the root, or of the subagent)."""
    started_at: dt.datetime
    n_messages_before: int
    """Length of the message list sent in this turn's request."""
    prompt_sha256: str
    """sha256 of the exact message list sent (see :func:`rlmdistill.traces.rebuild`)."""
    seed: int | None = None
    """Sampling seed of this request (root: episode seed + 1,000,003 x turn, mod 2^31)."""
    prefill: str | None = None
    completion: str
    """The reply as generated (prefill excluded). The assistant message appended to the
    history is ``(prefill or "") + completion``."""
    usage: Usage
    latency_s: float
    attempts: int = 1
    blocks: list[CodeBlockResult] = Field(default_factory=list)
    observation: str | None = None
    """The user message appended after this turn: the bounded REPL output exactly as the model
    sees it in its next request. ``None`` when the episode (or subagent) ended in this turn."""
    final_answer_source: Literal["text", "final_call", "final_var"] | None = None
    final_error: str | None = None
    """E.g. ``FINAL_VAR(memo)`` named a variable that does not exist."""
    no_op: bool = False
    """The reply held neither code nor a final answer."""
    duration_s: float = 0.0
    reasoning: str | None = None
    """What the model thought before its answer (reasoning models), when it did."""
    reasoning_source: ReasoningSource | None = None
    tokens: TokenTrace | None = None
    """Token ids and logprobs of this request (root: always tried; subagent: when
    ``CollectConfig.token_ids == "all"``). ``None`` in traces older than schema version 2."""
    finish_reason: str | None = None
    """Why the reply ended, as the back end said (``stop``, ``length``: cut by
    ``max_tokens``, so the turn is truncated; ``content_filter``, ``tool_calls``,
    ``unknown``: not said; see :data:`rlmdistill.models.base.FinishReason`). ``None``: not
    recorded (traces written before the field, or a request that failed)."""
    text_from_reasoning: bool = False
    """The completion was read from the server's reasoning field: a reasoning parser returned
    the continuation of the prefilled reply as reasoning (see ``docs/serving.md``)."""
    extra: dict[str, Any] | None = _extra_field()
    """Fields of an imported trace that this schema has no place for, as the source wrote them
    (see ``docs/bring-your-traces.md``); ``None`` (not written) in our own runs."""


class TurnRecord(TurnBase):
    """One root completion plus the execution of its code."""

    record_type: Literal["turn"] = "turn"


class SubagentTurnRecord(TurnBase):
    """Depth 2: one turn of the subagent that a root sub-call started (never a root turn).

    The subagent's messages are rebuilt like the root's: ``initial_messages`` (on turn 0) then
    ``(prefill or "") + completion`` and ``observation`` per turn.
    """

    record_type: Literal["subagent_turn"] = "subagent_turn"
    call_id: int
    """The depth-1 sub-call whose subagent took this turn."""
    initial_messages: list[Message] | None = None
    """Turn 0 only: system prompt and task message of the subagent, exactly as sent."""
    error: str | None = None
    """Model error that ended the subagent in this turn (classified kind first)."""


class SubCallRecord(_Record):
    """One sub-call (a bounded LM call the root dispatched from the REPL)."""

    record_type: Literal["sub_call"] = "sub_call"
    episode_id: str
    call_id: int
    """0-based index over the episode's sub-calls."""
    turn: int
    block: int
    batch_id: int
    """Sub-calls sent by one ``llm_query_batched`` share a ``batch_id``."""
    batch_size: int
    parent_call_id: int | None = None
    """Depth 2: the depth-1 sub-call whose subagent made this call."""
    sub_turn: int | None = None
    """Depth 2: the subagent turn that made this call."""
    sub_block: int | None = None
    """Depth 2: the subagent code block that made this call."""
    subagent: bool = False
    """True when this call ran a subagent (depth 2) rather than one plain completion; its
    ``usage`` is then the subagent's own requests (its calls have their own records)."""
    depth: int = 1
    """1: made by the root's code; 2: made by a subagent's code."""
    prompt: str
    seed: int | None = None
    """Sampling seed of this request: episode seed + 7,919 x (call_id + 1) (mod 2^31)."""
    sources: list[dict[str, Any]] = Field(default_factory=list)
    """Document ranges the prompt carried when known: ``{doc_id, start, end}`` (chars)."""
    response: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    error_kind: str | None = None
    tokens: TokenTrace | None = None
    """Token ids of a plain completion when ``CollectConfig.token_ids == "all"``."""
    finish_reason: str | None = None
    """Why a plain completion ended (as :attr:`TurnBase.finish_reason`; ``length``: the
    answer was cut by ``max_tokens``); ``None`` for a subagent, a failed call, or traces
    written before the field."""
    extra: dict[str, Any] | None = _extra_field()
    """Fields of an imported trace that this schema has no place for, as the source wrote them
    (see ``docs/bring-your-traces.md``); ``None`` (not written) in our own runs."""


class EpisodeEnd(_Record):
    """Last line of a complete trajectory."""

    record_type: Literal["episode_end"] = "episode_end"
    episode_id: str
    status: EpisodeStatus
    status_detail: str | None = None
    memo: str | None = None
    ended_at: dt.datetime = Field(default_factory=utcnow)


class EpisodeSummary(_Record):
    """One line of ``episodes.jsonl``: enough to list, filter and report without trajectories."""

    record_type: Literal["episode_summary"] = "episode_summary"
    episode_id: str
    run_id: str
    sample_index: int
    room: RoomInfo
    task_id: str
    root_model: str
    sub_model: str
    depth: Literal[1, 2] = 1
    seed: int
    status: EpisodeStatus
    status_detail: str | None = None
    n_turns: int
    n_sub_calls: int
    n_sub_call_errors: int = 0
    n_sub_batches: int = 0
    n_truncated_turns: int | None = None
    """Root turns whose reply ``max_tokens`` cut (``finish_reason == "length"``); ``None`` in
    runs collected before finish reasons were recorded."""
    memo_sub_call_errors: int | None = None
    """Sub-call error texts the harness handed the root (``[llm_query error (kind): ...]``,
    :func:`rlmdistill.traces.memo_errors.count_sub_call_error_texts`) that the memo carries: 0
    for a clean memo. ``None`` in runs collected before the field (readers then look for the
    marker in the memo themselves)."""
    tokens: TokenUsage
    wall_time_s: float
    memo: str | None = None
    memo_chars: int = 0
    memo_sha256: str | None = None
    cited_documents: list[str] = Field(default_factory=list)
    """Document ids of the room that the memo names (exact id or file name)."""
    coverage: Coverage | None = None
    started_at: dt.datetime
    ended_at: dt.datetime
    extra: dict[str, Any] | None = _extra_field()
    """Fields of an imported trace that this schema has no place for, as the source wrote them
    (see ``docs/bring-your-traces.md``); ``None`` (not written) in our own runs."""


class Verdict(_Record):
    """One grader's decision on one rubric criterion for one episode's memo."""

    record_type: Literal["verdict"] = "verdict"
    episode_id: str
    grader: str
    """Grader id, also the verdict file name (``verdicts/<grader>.jsonl``)."""
    grader_version: str
    criterion_id: str
    criterion_type: str | None = None
    weight: float = 1.0
    verdict: VerdictLabel
    reason: str
    memo_sha256: str | None = None
    graded_at: dt.datetime = Field(default_factory=utcnow)


class AttemptRecord(_Record):
    """One line of ``attempts.jsonl``: an episode attempt that the serving infrastructure cut
    short (see ``docs/serving.md``). Such an attempt is not a finished episode: the next run
    of the same command retries it, until ``max_attempts``; the last allowed attempt is also
    written to ``episodes.jsonl`` with its status (``final`` is then true)."""

    record_type: Literal["attempt"] = "attempt"
    episode_id: str
    run_id: str
    attempt: int = Field(ge=1)
    """1 for the first attempt of the episode, 2.. for retries on later runs."""
    max_attempts: int = Field(ge=1)
    """``CollectConfig.max_attempts`` when this attempt ran."""
    final: bool
    """True when this was the last allowed attempt: the episode is finished with ``status``."""
    status: EpisodeStatus
    """The status the episode had when it stopped (``model_error`` when the root failed)."""
    error_kind: str
    """``ModelError.kind`` of the failure: ``retryable`` or ``server_refused``."""
    cause: str
    """Finer cause: ``connection_refused``, ``connection_reset``, ``timeout``, ``http_503``,
    ``model_not_found``, ``auth``, ``non_json``, ... (rows of the ``docs/serving.md`` table)."""
    who: Literal["root", "sub"]
    """Which model's server failed (root turn, or a sub-call/subagent turn)."""
    model: str
    """The failing client's ``model_id`` (server URL included; no secret)."""
    error: str
    """The classified error message."""
    http_attempts: int = 0
    """HTTP attempts the failing request spent (1 + retries)."""
    wall_time_s: float = 0.0
    started_at: dt.datetime
    ended_at: dt.datetime = Field(default_factory=utcnow)


class RunConfig(BaseModel):
    """``run.json``'s ``config``: the resolved collect config as the run recorded it.

    The fields every reader uses are typed here; every other field of
    ``rlmdistill.collect.config.CollectConfig`` is kept as written (``extra="allow"``), and
    ``collect`` validates the whole against ``CollectConfig`` when it resumes the run. Fields
    added to ``CollectConfig`` later are absent from older runs' configs, so each typed field
    has the default an older run implies."""

    model_config = ConfigDict(extra="allow")

    rooms: list[str] = Field(default_factory=list)
    """Room folders (absolute paths once resolved)."""
    root: str | None = None
    """Root model spec (``local:NAME[+adapter=DIR]``, ``openai:MODEL@URL``); ``None`` only in
    hand-made runs (tests) that record no config."""
    sub: str | None = None
    """Sub-call model spec; ``None`` only in hand-made runs."""
    episodes: int = 0
    """Episodes (samples) per room; 0 when not recorded."""
    depth: int = 1
    """Recursion depth: 1 = plain sub-calls, 2 = subagents."""
    seed: int = 0
    """Base seed of the run's episodes."""
    root_sampling: dict[str, Any] = Field(default_factory=dict)
    """The root's sampling settings (``rlmdistill.models.base.Sampling`` as JSON: ``temperature``,
    ``top_p``, ``max_tokens``, ...); kept as written so a run of any version loads."""
    fingerprint_version: int = 1
    """Episode-id rule (``CollectConfig.fingerprint_version``); absent = 1, the rule of every
    run written before versions."""


class SourceFile(BaseModel):
    """One input file of an imported run."""

    model_config = ConfigDict(extra="forbid")

    path: str
    """The file as given on the command line (resolved to an absolute path)."""
    sha256: str
    """sha256 (hex) of the file's bytes as read."""
    n_episodes: int = 0
    """Episodes imported from this file."""


class ImportedSource(BaseModel):
    """``run.json``'s ``source`` for a run that ``rlmdistill import`` wrote from another
    harness's traces (see ``docs/bring-your-traces.md``)."""

    model_config = ConfigDict(extra="forbid")

    format: str
    """Source format: ``rlms-log`` (the JSONL logs of the ``rlms`` package's logger)."""
    version: str
    """Version of the source format (the producing package's version whose writer it
    matches)."""
    files: list[SourceFile]
    importer_version: int = 1
    """Version of the import rule (field mapping and episode ids)."""
    warnings: list[str] = Field(default_factory=list)
    """What the import warned about (torn lines repaired, sub-call prompts not from the room)."""


class RunManifest(_Record, Provenance):
    """``run.json``: the resolved config and provenance of a run (:class:`Provenance`'s fields:
    ``versions``, ``git_commit``, ``git_dirty``, ``machine``, the collector's machine with the
    sandbox profile that held under ``machine.sandbox``)."""

    record_type: Literal["run_manifest"] = "run_manifest"
    run_id: str
    created_at: dt.datetime = Field(default_factory=utcnow)
    config: RunConfig
    """Resolved collect config (:class:`RunConfig`: ``rlmdistill.collect.config.CollectConfig``
    as JSON)."""
    config_hash: str
    rooms: list[RoomInfo]
    command: list[str] = Field(default_factory=list)
    compute_dtypes: dict[str, str] = Field(default_factory=dict)
    """``{"root": "float32 (reason)", "sub": ...}`` for in-process models; empty for servers and
    in older runs."""
    source: ImportedSource | None = Field(default=None, exclude_if=_unset)
    """Where an imported run's episodes came from (``rlmdistill import``); ``None`` (not
    written) for a run that ``collect`` wrote."""


TrajectoryRecord = Annotated[
    EpisodeStart | TurnRecord | SubagentTurnRecord | SubCallRecord | EpisodeEnd,
    Field(discriminator="record_type"),
]


def upgrade_record(data: dict[str, Any]) -> dict[str, Any]:
    """Upgrade an old record shape to :data:`SCHEMA_VERSION`.

    Version 1 -> 2 only added optional fields (``reasoning``, ``reasoning_source``,
    ``tokens``), so a version-1 record validates as it is and keeps ``schema_version == 1``
    (readers can tell it carries no token ids). Raises ``ValueError`` for a version newer
    than this package knows.
    """
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(
            f"record schema_version {version!r} is newer than this rlmdistill knows "
            f"({SCHEMA_VERSION}); upgrade rlmdistill"
        )
    return data


# --------------------------------------------------------------------------- LLM judge side files
class JudgeCacheEntry(_Record):
    """One line of ``verdicts/<grader>.cache.jsonl``: an LLM judge's PASS/FAIL on one criterion
    for one memo, reused whenever the whole key (memo, criterion content, judge model, judge
    prompt version) is equal. Only PASS/FAIL are cached; UNGRADABLE never is."""

    record_type: Literal["judge_cache"] = "judge_cache"
    memo_sha256: str
    """sha256 (hex) of the memo's UTF-8 text."""
    criterion_id: str
    criterion_hash: str
    """sha256 (first 16 hex chars) of the criterion's canonical JSON (every field)."""
    judge_model: str
    """The judge model's cache identity (see ``rlmdistill.judge.llm.judge_model_key``)."""
    prompt_version: str
    """Version of the judge prompt and reply format."""
    verdict: Literal["PASS", "FAIL"]
    reason: str
    created_at: dt.datetime = Field(default_factory=utcnow)


class JudgeRequestRecord(_Record):
    """One line of ``verdicts/<grader>.usage.jsonl``: one chat request of an LLM judge.

    Judge tokens and cost live here, apart from the agent's (``episodes.jsonl``)."""

    record_type: Literal["judge_request"] = "judge_request"
    episode_id: str
    grader: str
    judge_model: str
    """``model_id`` of the client that answered (the canonical spec)."""
    prompt_version: str
    criterion_ids: list[str]
    """Criteria this request asked for (a retry asks only for those still missing)."""
    attempt: int
    """1 for the first request of a batch, 2.. for retries after a malformed/partial reply."""
    outcome: Literal["ok", "partial", "malformed", "error"]
    """ok: every asked criterion got a valid verdict; partial: some did; malformed: none could
    be used; error: the request failed (``error`` holds the classified message)."""
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    finish_reason: str | None = None
    cost_usd: float | None = None
    """From the price table; ``None`` when the model has no price there."""
    price_table: str | None = None
    """``PriceTable.version`` used for ``cost_usd``."""
    error: str | None = None
    problem: str | None = None
    """What was wrong with the reply (told to the model in the retry), when anything was."""
    created_at: dt.datetime = Field(default_factory=utcnow)
