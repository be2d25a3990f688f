"""Typed, versioned schemas of the artefact files written after collect, and their one reader.

``decisions.jsonl`` (:class:`FilterDecision`, written by ``rlmdistill filter``, read by
export), ``export.json`` (:class:`ExportManifest`, written by ``rlmdistill export``), ``sft.json``
(:class:`SFTManifest`) and ``train_log.jsonl`` (:class:`TrainLogRecord`, one per logging step),
written by ``rlmdistill sft``. Writers build these models; every reader (export, SFT, the
loop, the analysis report, the dashboard) reads them with :func:`read_decisions`,
:func:`load_export_manifest`, :func:`load_sft_manifest` and :func:`read_train_log`, so no
stage parses them its own way.

Versions: ``export.json`` and ``sft.json`` carry ``schema_version`` 1, decisions the trace
schema version; a field added later has a default, so files written by earlier versions keep
loading (``tests/test_artefacts.py`` loads files in the format before these models moved
here). ``train_log.jsonl`` lines carry no version (every line so far is version 1,
:data:`SFT_SCHEMA_VERSION`); extra keys of other writers are kept.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlmdistill.provenance import Provenance
from rlmdistill.traces.labels import LabelsProvenance
from rlmdistill.traces.layout import (
    EXPERIMENT,
    EXPORT_MANIFEST,
    MERGE_MANIFEST,
    RL_LOG,
    ROOMS,
    SFT_MANIFEST,
    SPLIT,
    TRAIN_LOG,
)
from rlmdistill.traces.runs import EpisodeRef
from rlmdistill.traces.schema import SCHEMA_VERSION
from rlmdistill.traces.store import JsonlRead, read_jsonl

__all__ = [
    "DECISION_SCHEMA_VERSION",
    "EXPORT_SCHEMA_VERSION",
    "MERGE_SCHEMA_VERSION",
    "SFT_SCHEMA_VERSION",
    "SPLIT_SCHEMA_VERSION",
    "ArtefactError",
    "DropReason",
    "DroppedItem",
    "EpisodeSelection",
    "EvalLossRecord",
    "ExperimentRecord",
    "ExportManifest",
    "FilterDecision",
    "LengthStats",
    "MergeManifest",
    "RLLog",
    "RLLogRecord",
    "RoomsSplit",
    "SFTManifest",
    "SFTStatus",
    "SourceRun",
    "TokenizerInfo",
    "TrainLog",
    "TrainLogRecord",
    "load_export_manifest",
    "load_merge_manifest",
    "load_sft_manifest",
    "read_decisions",
    "read_experiment_record",
    "read_rl_log",
    "read_rooms_split",
    "read_selection",
    "read_train_log",
]


_M = TypeVar("_M", bound=BaseModel)


class ArtefactError(ValueError):
    """An artefact file is missing, not JSON, or does not match its schema (names the file)."""


EXPORT_SCHEMA_VERSION = 1
"""Version of ``export.json``."""


class LengthStats(BaseModel):
    """Distribution of a per-example token count (tokens)."""

    n: int
    total: int
    min: int | None
    mean: float | None
    p50: float | None
    p95: float | None
    max: int | None

    @classmethod
    def of(cls, values: list[int]) -> LengthStats:
        """Stats of ``values`` (percentiles by numpy's linear interpolation)."""
        if not values:
            return cls(n=0, total=0, min=None, mean=None, p50=None, p95=None, max=None)
        a = np.asarray(values)
        return cls(
            n=len(values),
            total=int(a.sum()),
            min=int(a.min()),
            mean=float(a.mean()),
            p50=float(np.percentile(a, 50)),
            p95=float(np.percentile(a, 95)),
            max=int(a.max()),
        )


class DroppedItem(BaseModel):
    """An episode (``turn is None``) or one example of it that did not become a row."""

    run_id: str | None
    episode_id: str
    turn: int | None
    """Root turn of a turn-mode example; -1 a whole trajectory; ``None`` the whole episode."""
    reason: str
    detail: str = ""


class SourceRun(BaseModel):
    """One run the dataset came from and the episodes asked for."""

    run_dir: str
    run_id: str
    episode_ids: list[str]
    labels: LabelsProvenance | None = None
    """The run's ``labels.jsonl`` when exported (count, reviewers, sha256): what people
    decided travels with the dataset; ``None``: no labels (and in manifests before labels)."""


class TokenizerInfo(BaseModel):
    """The tokenizer and chat template the ids and masks were made with."""

    spec: str
    """As given in the options (directory or embedded model name)."""
    path: str
    name_or_path: str
    chat_template_source: str
    """``tokenizer`` or the ``.jinja`` file given."""
    chat_template_sha256: str
    assistant_header: str
    closer: str
    tool_closer: str | None
    end_of_turn: list[str]
    default_system: str | None
    """Default system prompt the template injects when none is given (None: none)."""
    generation_markers: bool
    vocab_size: int | None = None
    """Tokens of the vocabulary, when the writer recorded it (SFT then checks it)."""
    vocab_sha256: str | None = None
    """sha256 of the vocabulary, when the writer recorded it (SFT then checks it)."""


class ExportManifest(Provenance):
    """``export.json``: how the dataset was made and from what (read by SFT)."""

    schema_version: int = EXPORT_SCHEMA_VERSION
    created_at: dt.datetime
    tokenizer: TokenizerInfo
    mode: str
    style: str
    system_prompt_source: str
    system_prompt_sha256: str | None
    """sha256 of the replacement system prompt (None: each episode's collected one)."""
    few_shot_kept: bool
    max_length: int
    truncation: str
    prefill_supervised: bool
    min_supervised_tokens: int
    default_system: str
    n_examples: int
    n_episodes: int
    dropped: dict[str, int]
    dropped_items: list[DroppedItem]
    n_truncated: int
    n_appended_closers: int
    reasoning_policy: str = "last"
    n_reasoning_turns: int = 0
    n_reasoning_kept: int = 0
    from_ids: bool = False
    n_ids_matched: int = 0
    ids_mismatches: dict[str, int] = Field(default_factory=dict)
    tokens: LengthStats
    supervised: LengthStats
    sources: list[SourceRun]
    options: dict[str, Any]


SFT_SCHEMA_VERSION = 1
MERGE_SCHEMA_VERSION = 1
"""Version of ``rlmdistill_merge.json`` (files without the key are version 1)."""
"""Version of ``sft.json`` and ``train_log.jsonl`` records."""

SFTStatus = Literal["running", "completed", "failed"]
"""State of an SFT run as recorded in ``sft.json``."""


class TrainLogRecord(BaseModel):
    """One line of ``train_log.jsonl``: the metrics of one logging step (rank 0 only).

    ``rlmdistill sft`` fills every field. Only ``step`` and ``loss`` are required of a line
    read back, and extra keys are kept, so logs of other writers (and hand-made ones) load."""

    model_config = ConfigDict(extra="allow")

    step: int
    """Optimiser step (global, continues after ``--resume``)."""
    epoch: float | None = None
    """Epochs done (fractional)."""
    loss: float
    """Mean assistant-only token loss since the previous logging step (nats/token); may be
    non-finite (a diverged step), which readers count apart."""
    learning_rate: float | None = None
    """Learning rate at this step."""
    grad_norm: float | None = None
    """Gradient norm before clipping (``None`` when not computed)."""
    tokens_seen: int | None = None
    """Input tokens processed so far, all processes (supervised or not, no padding)."""
    tokens_per_s: float | None = None
    """Input tokens per wall-clock second since the previous logging step, all processes."""
    time: dt.datetime | None = None
    """When the line was written (UTC)."""


class RLLogRecord(BaseModel):
    """One line of an RL adapter's ``rl_log.jsonl`` (``rlmdistill rl``): one optimiser step's
    rollouts and update. Only ``step`` is required of a line read back; extra keys (TRL's own
    metrics under ``trl``, the advantages, the group rewards) are kept. Fields added later
    (rollout wall time, sub-calls, staleness) are ``None`` in logs written before them."""

    model_config = ConfigDict(extra="allow")

    step: int
    """Optimiser step (global, continues after ``--resume``)."""
    loss: float | None = None
    """GRPO loss TRL logged for the step."""
    kl: float | None = None
    """Mean per-token KL to the reference (base) policy TRL logged (``None`` when beta = 0)."""
    reward_mean: float | None = None
    """Mean reward over the step's rollouts."""
    reward_std: float | None = None
    """Sample standard deviation of the step's rewards (0 with one rollout)."""
    groups: int | None = None
    """Rollout groups (rooms) of the step."""
    zero_variance_groups: int | None = None
    """Groups whose rewards are all equal: their advantages are 0, they teach nothing."""
    episodes: int | None = None
    """Rollouts (episodes) of the step."""
    rollout_wall_s: float | None = None
    """Wall seconds of the step's rollouts and their rewards (before the update)."""
    sub_calls_per_rollout: float | None = None
    """Mean sub-calls per rollout of the step."""
    staleness: float | None = None
    """Mean policy versions between the weights that generated a rollout and the weights
    updated (0: on-policy, the in-process rollouts)."""
    stale_token_share: float | None = None
    """Share of the step's completion tokens masked for being too stale (0 in process)."""
    turns_out_of_loss: int | None = None
    """Root turns of the step's rollouts left out of the loss: those before the last point where
    a turn's prompt ids do not extend the previous prompt + completion (a served chat template
    re-tokenised an earlier reply; :func:`rlmdistill.export.grpo.episode_token_tail`)."""


class RLLog(BaseModel):
    """What :func:`read_rl_log` read."""

    path: Path
    records: list[RLLogRecord]
    torn_tail: bool
    """The last line was cut off (a job still writing, or a crash) and is left out."""


class EvalLossRecord(BaseModel):
    """One eval-loss measurement on the held-out episodes (``sft.json``'s ``eval_losses``)."""

    model_config = ConfigDict(extra="forbid")

    step: int
    """Optimiser step when measured (0 = before training)."""
    epoch: float
    """Epochs done (0.0 before training; whole numbers at epoch ends)."""
    loss: float
    """Mean assistant-only token loss on the held-out rows (nats/token), TRL's ``eval_loss``."""


class SFTManifest(Provenance):
    """``adapters/NAME/sft.json``: what was trained, from what, how, and how it went."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SFT_SCHEMA_VERSION
    created_at: dt.datetime
    """When the run (first attempt) started (UTC)."""
    updated_at: dt.datetime
    """Last update of this file (UTC)."""
    status: SFTStatus
    config: dict[str, Any]
    """Resolved config (file + CLI flags) of the latest attempt: an
    :class:`rlmdistill.sft.config.SFTConfig` as JSON (the writer validates it; read it back
    with ``SFTConfig.model_validate``)."""
    base_path: str
    """Absolute checkpoint directory of the base model."""
    dataset_path: str
    """Absolute path of the dataset folder."""
    export_sha256: str
    """sha256 of the dataset's ``export.json`` (identifies the dataset version)."""
    sources: list[dict[str, Any]] = Field(default_factory=list)
    """Runs the dataset came from (copied from ``export.json``)."""
    tokenizer_check: dict[str, Any]
    """How the dataset's tokens were matched to the base tokenizer."""
    n_rows: int
    """Rows in the dataset."""
    n_examples: int
    """Rows trained on."""
    dropped: dict[str, int]
    """Rows dropped by reason (``too_long``, ``last_turn_cut``)."""
    n_tokens: int
    """Input tokens of the rows trained on (one epoch)."""
    n_supervised: int
    """Supervised (assistant) tokens of the rows trained on (one epoch)."""
    eval_fraction: float = 0.0
    """Share of episodes held out for the eval loss (0.0 = off; resolved from the config)."""
    eval_note: str | None = None
    """What was held out, or why the eval loss is off (also logged)."""
    eval_episodes: list[str] = Field(default_factory=list)
    """Episode ids held out (never trained on)."""
    n_eval_examples: int = 0
    """Rows of the held-out episodes."""
    eval_losses: list[EvalLossRecord] = Field(default_factory=list)
    """Eval losses in order: before training (step 0, not on resume), then each epoch end."""
    device: str
    """``cpu`` or ``cuda`` (per process)."""
    precision: Literal["float32", "bf16"]
    """Training precision (float32 weights; bf16 = mixed-precision autocast)."""
    precision_reason: str | None = None
    """Why that precision (e.g. "no native bfloat16 on this CPU ..."); absent in sft.json written before the dtype choice was recorded."""
    world_size: int
    """Processes that trained (``accelerate launch --num_processes``)."""
    backend: str | None = None
    """``torch.distributed`` backend (``gloo`` on CPU, ``nccl`` on GPUs); ``None`` alone."""
    seed: int
    global_step: int = 0
    """Optimiser steps done."""
    train_loss: float | None = None
    """Mean training loss over the latest attempt (TRL's ``train_loss``)."""
    train_runtime_s: float | None = None
    """Wall time of the latest attempt's training loop in seconds."""
    resumed_from: list[str] = Field(default_factory=list)
    """Checkpoints the run was resumed from, in order."""
    error: str | None = None
    """Why the run failed (status ``failed``)."""


def _load_json_model(path: Path, model: type[_M], what: str) -> _M:
    if not path.is_file():
        raise ArtefactError(f"{path}: not found (no {what})")
    try:
        return model.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ArtefactError(f"{path}: not a valid {what}: {exc}") from exc


def load_export_manifest(dataset_dir: Path) -> ExportManifest:
    """``<dataset_dir>/export.json`` as an :class:`ExportManifest`.

    Raises :class:`ArtefactError` naming the file when it is missing, not JSON or invalid.
    """
    return _load_json_model(Path(dataset_dir) / EXPORT_MANIFEST, ExportManifest, "export.json")


def load_sft_manifest(adapter_dir: Path) -> SFTManifest:
    """``<adapter_dir>/sft.json`` as an :class:`SFTManifest`.

    Raises :class:`ArtefactError` naming the file when it is missing, not JSON or invalid.
    """
    return _load_json_model(Path(adapter_dir) / SFT_MANIFEST, SFTManifest, "sft.json")


class MergeManifest(Provenance):
    """``rlmdistill_merge.json`` beside a merged checkpoint (``rlmdistill sft merge``): which
    adapter was folded into which base, in which dtype. Files written before this model (a
    plain dict of the same keys) load unchanged."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = MERGE_SCHEMA_VERSION
    created_at: dt.datetime
    """When the merge finished (UTC)."""
    adapter: str
    """Absolute path of the adapter folder."""
    base_path: str
    """Absolute checkpoint directory of the base model."""
    dtype: str
    """torch dtype the merged weights were saved in (``float32``, ``bfloat16``, ...)."""


def load_merge_manifest(checkpoint_dir: Path) -> MergeManifest:
    """``<checkpoint_dir>/rlmdistill_merge.json`` as a :class:`MergeManifest`.

    Raises :class:`ArtefactError` naming the file when it is missing, not JSON or invalid.
    """
    return _load_json_model(Path(checkpoint_dir) / MERGE_MANIFEST, MergeManifest, "merge record")


SPLIT_SCHEMA_VERSION = 1
"""Version of ``rooms/split.json`` (files without the key are version 1)."""


class RoomsSplit(BaseModel):
    """``<workspace>/rooms/split.json`` (``rlmdistill loop``): the training and held-out rooms,
    their sizes and criteria, how CUAD rooms were drawn, and the leak check.

    Room paths inside the workspace are relative to it (absolute ones, of older files or rooms
    outside the workspace, are kept as written). Fields recorded later have defaults, so a
    split written by an earlier version loads; unknown keys are kept."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = SPLIT_SCHEMA_VERSION
    method: str = "sha256 of each document's bytes"
    """How documents were compared across the splits."""
    train: list[str]
    """Training room folders."""
    holdout: list[str]
    """Held-out room folders."""
    n_criteria: dict[str, int] = Field(default_factory=dict)
    """Room folder -> rubric criteria."""
    n_documents: dict[str, int] = Field(default_factory=dict)
    """Room folder -> documents (room sizes, which a size schedule varies); empty in older
    files."""
    cuad: dict[str, Any] | None = None
    """CUAD rooms: ``source``, ``spec``, the draw ``rule`` and one ``RoomDraw`` per room;
    ``None`` for given folders."""
    n_train_documents: int = 0
    n_holdout_documents: int = 0
    shared: list[tuple[str, str]] = Field(default_factory=list)
    """Pairs of documents with the same bytes in both splits (the loop stops on any)."""
    shared_paragraphs: int = 0
    """Paragraphs found in both splits (reported, not refused); 0 when absent (older files)."""
    passed: bool = True
    """No document is shared."""

    def room_names(self, split: Literal["train", "holdout"]) -> list[str]:
        """Folder names (last path part) of the ``split`` rooms."""
        return [Path(p).name for p in (self.train if split == "train" else self.holdout)]


def read_rooms_split(workspace: Path) -> RoomsSplit:
    """``<workspace>/rooms/split.json`` as a :class:`RoomsSplit`.

    Raises :class:`ArtefactError` (a ``ValueError``) naming the file when it is missing, not
    JSON, not a split record, or written by a newer version."""
    path = Path(workspace) / ROOMS / SPLIT
    split = _load_json_model(path, RoomsSplit, "rooms split record")
    if split.schema_version > SPLIT_SCHEMA_VERSION:
        raise ArtefactError(
            f"{path}: schema_version {split.schema_version} is newer than this rlmdistill "
            f"knows ({SPLIT_SCHEMA_VERSION}); upgrade rlmdistill"
        )
    return split


class ExperimentRecord(BaseModel):
    """``<workspace>/experiment.json`` (``rlmdistill loop``): the resolved experiment, as
    ``rlmdistill.loop.config.ExperimentConfig`` dumps it, paths relative to the workspace.

    Readers outside the loop (the dashboard) need a few fields, typed here; every other field is
    kept as written (``extra="allow"``), and ``load_experiment`` validates the whole file
    against ``ExperimentConfig`` when the loop resumes from it. Version 1 is written without a
    ``schema_version`` key (the file is also an experiment file the loop can read back)."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = 1
    name: str | None = None
    """The experiment's name."""
    base: str | None = None
    """The base root model spec the loop trains (``local:NAME``, a checkpoint folder)."""
    rounds: int | None = None
    """Self-distillation rounds."""


def read_experiment_record(workspace: Path) -> ExperimentRecord:
    """``<workspace>/experiment.json`` as an :class:`ExperimentRecord`.

    Raises :class:`ArtefactError` (a ``ValueError``) naming the file when it is missing, not
    JSON, not an experiment record, or written by a newer version."""
    path = Path(workspace) / EXPERIMENT
    record = _load_json_model(path, ExperimentRecord, "experiment record")
    if record.schema_version > 1:
        raise ArtefactError(
            f"{path}: schema_version {record.schema_version} is newer than this rlmdistill "
            "knows (1); upgrade rlmdistill"
        )
    return record


class TrainLog(BaseModel):
    """What :func:`read_train_log` read: the validated lines, as written and as records."""

    path: Path
    records: list[TrainLogRecord]
    rows: list[dict[str, Any]]
    """The same lines as the JSON objects written (what a table shows)."""
    torn_tail: bool
    """The last line was cut off (a job still writing, or a crash) and is left out."""

    @property
    def n_nonfinite(self) -> int:
        """Lines whose loss is not finite (NaN or infinite)."""
        return sum(1 for r in self.records if not math.isfinite(r.loss))


_Log = TypeVar("_Log", bound=BaseModel)


def _read_log(
    adapter_dir: Path, name: str, model: type[_Log], what: str, kind: str
) -> tuple[Path, list[_Log], JsonlRead]:
    """The lines of ``<adapter_dir>/<name>`` checked against ``model`` (``what``: the log's
    name in messages, ``kind``: the adapter kind it belongs to)."""
    path = Path(adapter_dir) / name
    if not path.exists():
        raise FileNotFoundError(f"{path}: no {what} (is {adapter_dir} an {kind} adapter?)")
    read = read_jsonl(path)
    records = []
    for i, raw in enumerate(read.records):
        try:
            records.append(model.model_validate(raw))
        except ValidationError as exc:
            raise ArtefactError(f"{path}: record {i + 1} is not a {what} entry: {exc}") from exc
    return path, records, read


def read_rl_log(adapter_dir: Path) -> RLLog:
    """Every line of ``<adapter_dir>/rl_log.jsonl`` checked against :class:`RLLogRecord` (a
    torn last line is skipped and flagged).

    Raises:
        FileNotFoundError: no log (names the file).
        ArtefactError: a line that is not an RL log record (names the file and line).
    """
    path, records, read = _read_log(adapter_dir, RL_LOG, RLLogRecord, "RL log", "RL")
    return RLLog(path=path, records=records, torn_tail=read.torn_tail is not None)


def read_train_log(adapter_dir: Path) -> TrainLog:
    """Every line of ``<adapter_dir>/train_log.jsonl`` checked against :class:`TrainLogRecord`
    (a torn last line is skipped and flagged).

    Raises:
        FileNotFoundError: no log (names the file).
        ArtefactError: a line that is not a training log record (names the file and line).
    """
    path, records, read = _read_log(adapter_dir, TRAIN_LOG, TrainLogRecord, "training log", "SFT")
    return TrainLog(
        path=path,
        records=records,
        rows=list(read.records),
        torn_tail=read.torn_tail is not None,
    )


# ------------------------------------------------------------------------- decisions.jsonl
DECISION_SCHEMA_VERSION = SCHEMA_VERSION
"""Version of ``decisions.jsonl`` records: the trace schema version (:data:`SCHEMA_VERSION`)."""

DropReason = Literal[
    "status",
    "no_memo",
    "sub_call_error_text",
    "turns",
    "sub_calls",
    "ungraded",
    "pass_rate",
    "no_coverage",
    "coverage",
    "where",
    "human_reject",
    "duplicate",
    "top_k",
]
"""Why the filter dropped an episode, in rule order (``rlmdistill.filter.rules``)."""


class FilterDecision(BaseModel):
    """One line of ``decisions.jsonl``: what the filter decided about one episode, and why."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = DECISION_SCHEMA_VERSION
    record_type: Literal["filter_decision"] = "filter_decision"
    run_id: str
    run_dir: str
    episode_id: str
    room_id: str
    room_hash: str
    task_id: str
    room_docs: int
    """Documents in the room (for size buckets)."""
    status: str
    kept: bool
    primary_reason: DropReason | None = None
    """First rule failed (``None`` when kept)."""
    reasons: list[DropReason] = Field(default_factory=list)
    """Every rule failed, in rule order."""
    details: dict[str, str] = Field(default_factory=dict)
    """Per reason: the value and the threshold, e.g. ``pass_rate 0.40 < 0.50``."""
    pass_rate: float | None = None
    graded_pass_rate: float | None = None
    weighted_pass_rate: float | None = None
    coverage: float | None = None
    n_ungradable: int | None = None
    rank_in_room: int | None = None
    """1-based rank among the room's episodes that reached the top-k rule (``None`` otherwise)."""
    duplicate_of: str | None = None
    """``episode_id`` of the better-ranked episode this one duplicates."""
    human_verdict: Literal["keep", "reject"] | None = None
    """What people decided about this memo (``labels.jsonl``: reject when any reviewer's latest
    label is reject); ``None``: nobody labelled it (and in decisions written before labels)."""

    @property
    def ref(self) -> EpisodeRef:
        """The :class:`EpisodeRef` the export stage takes."""
        return EpisodeRef(Path(self.run_dir), self.episode_id)


def read_decisions(path: Path) -> list[FilterDecision]:
    """Every :class:`FilterDecision` of a filter's ``decisions.jsonl`` in file order (a torn
    last line is ignored).

    Raises:
        ArtefactError: a line that is not a decision (names the file and line).
    """
    out = []
    for i, raw in enumerate(read_jsonl(Path(path)).records, start=1):
        try:
            out.append(FilterDecision.model_validate(raw))
        except ValidationError as exc:
            raise ArtefactError(f"{path}: line {i}: not a filter decision: {exc}") from exc
    return out


class EpisodeSelection(BaseModel):
    """One line of an episode list that ``export --episodes`` takes: a filter's
    ``decisions.jsonl`` (every :class:`FilterDecision` is one) or a hand-written list with
    only ``run_dir``, ``episode_id``, ``kept`` and optionally ``pass_rate`` / ``coverage``
    (docs/export.md, "Command"). Other fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    run_dir: str
    episode_id: str
    kept: bool
    pass_rate: float | None = None
    coverage: float | None = None

    @property
    def ref(self) -> EpisodeRef:
        """The :class:`EpisodeRef` the export stage takes."""
        return EpisodeRef(Path(self.run_dir), self.episode_id)


def read_selection(path: Path) -> list[EpisodeSelection]:
    """Every line of an episode list (:class:`EpisodeSelection`) in file order (a torn last
    line is ignored).

    Raises:
        ArtefactError: a line without ``run_dir``, ``episode_id`` or ``kept`` (names the file
            and line).
    """
    out = []
    for i, raw in enumerate(read_jsonl(Path(path)).records, start=1):
        try:
            out.append(EpisodeSelection.model_validate(raw))
        except ValidationError as exc:
            raise ArtefactError(
                f"{path}: line {i}: not an episode selection (needs run_dir, episode_id, "
                f"kept): {exc}"
            ) from exc
    return out
