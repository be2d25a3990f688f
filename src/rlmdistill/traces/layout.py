"""The file names of a run, an artefact folder and a workspace: the one place they are spelled.

Every stage that reads or writes one of these files takes its name (or path) from here, so a
rename is one edit and no reader can look in the wrong place (``docs/architecture.md``, Files).

Run folder (``runs/<run>/``)::

    run.json  episodes.jsonl  attempts.jsonl  trajectories/<episode_id>.jsonl
    verdicts/<grader>.jsonl  verdicts/<grader>.cache.jsonl  verdicts/<grader>.usage.jsonl
    labels.jsonl  labels_tags.txt

Dataset (``datasets/<name>/``): ``export.json``, ``decisions.jsonl``, ``filter_report.{md,json}``.
Adapter (``adapters/<name>/``): ``sft.json``, ``train_log.jsonl``. Report (``reports/<name>/``):
``report.json``, ``report.md``. GRPO dataset: ``grpo.json``; RL run: ``rl.json``; merged
checkpoint: ``rlmdistill_merge.json``. Room: ``task.json``, ``room.json``. Workspace: ``runs/ datasets/ adapters/
reports/ rooms/``, ``lineage.jsonl``, ``rooms/split.json``, ``experiment.json``.
"""

from __future__ import annotations

from pathlib import Path

from rlmdistill.rooms.meta import ROOM_META as _ROOM_META

# ------------------------------------------------------------------------------- run folder
RUN_MANIFEST = "run.json"
EPISODES = "episodes.jsonl"
ATTEMPTS = "attempts.jsonl"
TRAJECTORIES = "trajectories"
PLACEMENT = "placement.jsonl"
"""`executor: ray`: which node ran each episode."""
VERDICTS = "verdicts"
VERDICT_SIDE_FILES = (".cache", ".usage")
"""Suffixes of a grader's side files in ``verdicts/`` (``<grader>.cache.jsonl``, ...)."""
LABELS = "labels.jsonl"
"""People's labels of a run's episodes and criteria (:mod:`rlmdistill.traces.labels`)."""
LABELS_TAGS = "labels_tags.txt"
"""Optional: the reason tags a label of this run may carry, one a line (else the defaults)."""

# ---------------------------------------------------------------------------- artefacts
EXPORT_MANIFEST = "export.json"
FILTER_DECISIONS = "decisions.jsonl"
FILTER_REPORT_JSON = "filter_report.json"
FILTER_REPORT_MD = "filter_report.md"
SFT_MANIFEST = "sft.json"
TRAIN_LOG = "train_log.jsonl"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
TASK = "task.json"
ROOM_META = _ROOM_META
"""A built room's provenance (``rlmdistill rooms build-cuad`` / ``rooms synth``); spelled in
:mod:`rlmdistill.rooms.meta`, whose builders stand below this package."""
GRPO_MANIFEST = "grpo.json"
"""``rlmdistill export-grpo``'s manifest in its dataset folder."""
RL_MANIFEST = "rl.json"
RL_LOG = "rl_log.jsonl"
"""``rlmdistill rl``'s manifest in its output folder."""
MERGE_MANIFEST = "rlmdistill_merge.json"
"""Provenance written beside a merged checkpoint (``rlmdistill sft merge``)."""

# ---------------------------------------------------------------------------- workspace
RUNS = "runs"
DATASETS = "datasets"
ADAPTERS = "adapters"
REPORTS = "reports"
ROOMS = "rooms"
LINEAGE = "lineage.jsonl"
SPLIT = "split.json"
"""Under ``rooms/`` of a loop workspace."""
EXPERIMENT = "experiment.json"


def verdicts_dir(run_dir: Path) -> Path:
    """``<run>/verdicts``."""
    return Path(run_dir) / VERDICTS


def verdicts_path(run_dir: Path, grader_id: str) -> Path:
    """``<run>/verdicts/<grader_id>.jsonl``: one grader's verdicts of a run."""
    return verdicts_dir(run_dir) / f"{grader_id}.jsonl"


def verdict_side_path(run_dir: Path, grader_id: str, kind: str) -> Path:
    """``<run>/verdicts/<grader_id>.<kind>.jsonl`` (``kind``: ``cache`` or ``usage``)."""
    return verdicts_dir(run_dir) / f"{grader_id}.{kind}.jsonl"


def labels_path(run_dir: Path) -> Path:
    """``<run>/labels.jsonl``: the append-only file of people's labels."""
    return Path(run_dir) / LABELS


def trajectory_path(run_dir: Path, episode_id: str) -> Path:
    """``<run>/trajectories/<episode_id>.jsonl``."""
    return Path(run_dir) / TRAJECTORIES / f"{episode_id}.jsonl"


__all__ = [
    "ADAPTERS",
    "ATTEMPTS",
    "DATASETS",
    "EPISODES",
    "EXPERIMENT",
    "EXPORT_MANIFEST",
    "FILTER_DECISIONS",
    "FILTER_REPORT_JSON",
    "FILTER_REPORT_MD",
    "GRPO_MANIFEST",
    "LABELS",
    "LABELS_TAGS",
    "LINEAGE",
    "MERGE_MANIFEST",
    "PLACEMENT",
    "REPORTS",
    "REPORT_JSON",
    "REPORT_MD",
    "RL_LOG",
    "RL_MANIFEST",
    "ROOMS",
    "ROOM_META",
    "RUNS",
    "RUN_MANIFEST",
    "SFT_MANIFEST",
    "SPLIT",
    "TASK",
    "TRAIN_LOG",
    "TRAJECTORIES",
    "VERDICTS",
    "VERDICT_SIDE_FILES",
    "labels_path",
    "trajectory_path",
    "verdict_side_path",
    "verdicts_dir",
    "verdicts_path",
]
