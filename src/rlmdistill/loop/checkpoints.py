"""Choosing the SFT checkpoint by what the root does, not by its loss.

A LoRA run on a handful of trajectories reaches a near-zero training loss within a few epochs
and then reproduces its training programs with names changed, which raise errors it cannot
repair. Its held-out loss, on one or two episodes, cannot tell the epochs apart. So the loop can
check every epoch's checkpoint by *behaviour*: a short collection on the **training** rooms
(never the held-out ones) with the held-out arms' settings (the plain prompt), graded like any
run; the checkpoint that writes the most memos, then passes the most rubric criteria, then
reads the most of the room, is the one the held-out arm evaluates. Ties go to the later
checkpoint (more training on the same data). The choice and every candidate's figures are
written to ``adapters/r<r>/selected.json`` (:class:`CheckpointChoice`).

This is model selection on training rooms, so it adds no information from the held-out rooms;
with 4 training rooms and 1 episode each, its figures are coarse (a memo rate in quarters) and
they are recorded as such, never reported as an evaluation.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SELECTED_FILE",
    "SELECTION_SCHEMA_VERSION",
    "CheckpointChoice",
    "CheckpointScore",
    "checkpoint_step",
    "choose_checkpoint",
    "list_checkpoints",
    "load_choice",
    "score_run",
]

SELECTED_FILE = "selected.json"
"""The choice, in the adapter folder (``adapters/r<r>/selected.json``)."""
SELECTION_SCHEMA_VERSION = 1
KEY_DECIMALS = 9
"""Decimal places a rate is compared at (:meth:`CheckpointScore.key`): far below any real
difference of rates over a few episodes (1 / (episodes x criteria)), far above rounding."""


class CheckpointScore(BaseModel):
    """One candidate checkpoint's behaviour on the training rooms."""

    model_config = ConfigDict(extra="forbid")

    checkpoint: str
    """The checkpoint folder relative to the adapter folder (``checkpoints/checkpoint-6``)."""
    step: int
    """Optimiser step of the checkpoint."""
    run: str
    """The check's run folder, relative to the workspace (``runs/r1-check-6``)."""
    episodes: int
    """Finished episodes the figures are over."""
    memo_rate: float
    """Share of those episodes that wrote a memo, in [0, 1]."""
    pass_rate: float
    """Mean rubric pass rate over those episodes (0 for an episode without a memo), in [0, 1]."""
    coverage: float
    """Mean coverage (share of the room's documents read) over those episodes, in [0, 1]."""

    def key(self) -> tuple[float, float, float, int]:
        """The ranking key: memo rate, then pass rate, then coverage, then the later step.

        Each rate is rounded to :data:`KEY_DECIMALS` places first: the same pass rate summed in
        another order differs in its last bit (0.2106331168831169 against
        0.21063311688311687 in a quickstart run), and such noise must not decide what the
        rule leaves to coverage and then to the step."""
        return (
            round(self.memo_rate, KEY_DECIMALS),
            round(self.pass_rate, KEY_DECIMALS),
            round(self.coverage, KEY_DECIMALS),
            self.step,
        )


class CheckpointChoice(BaseModel):
    """``adapters/r<r>/selected.json``: the candidates and the one chosen."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SELECTION_SCHEMA_VERSION
    rule: str = Field(
        "highest memo rate, then pass rate, then coverage on the training rooms; ties: the "
        "later checkpoint",
        description="How the choice was made.",
    )
    chosen: str
    """The chosen checkpoint folder, relative to the adapter folder."""
    candidates: list[CheckpointScore]


def checkpoint_step(folder: Path) -> int:
    """The optimiser step of a ``checkpoint-<step>`` folder. Raises ``ValueError`` for any
    other name."""
    head, _, tail = folder.name.rpartition("-")
    if head != "checkpoint" or not tail.isdigit():
        raise ValueError(f"{folder}: not a checkpoint-<step> folder")
    return int(tail)


def list_checkpoints(adapter: Path) -> list[Path]:
    """The adapter folder's ``checkpoints/checkpoint-<step>`` folders that hold a LoRA
    adapter (``adapter_config.json``), by step. Empty when SFT kept none."""
    root = Path(adapter) / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.glob("checkpoint-*")
        if p.is_dir() and (p / "adapter_config.json").is_file() and p.name[11:].isdigit()
    ]
    return sorted(found, key=checkpoint_step)


def score_run(
    run: Path, grader: str, *, checkpoint: str, step: int, run_name: str
) -> CheckpointScore:
    """The behaviour figures of one check run (its graded, finished episodes).

    Raises ``ValueError`` naming the run when it has no finished episode.
    """
    from rlmdistill.analysis.metrics import load_run_metrics

    rows = load_run_metrics(run, grader, row_cache=False).rows
    if not rows:
        raise ValueError(f"{run}: the checkpoint check has no finished episode to score")
    n = len(rows)
    return CheckpointScore(
        checkpoint=checkpoint,
        step=step,
        run=run_name,
        episodes=n,
        memo_rate=sum(r.has_memo for r in rows) / n,
        pass_rate=sum((r.pass_rate or 0.0) for r in rows) / n,
        coverage=sum((r.coverage or 0.0) for r in rows) / n,
    )


def choose_checkpoint(scores: list[CheckpointScore]) -> CheckpointChoice:
    """The candidate with the largest :meth:`CheckpointScore.key`. Raises ``ValueError`` when
    there is none."""
    if not scores:
        raise ValueError("no checkpoint to choose from")
    best = max(scores, key=CheckpointScore.key)
    return CheckpointChoice(chosen=best.checkpoint, candidates=list(scores))


def load_choice(adapter: Path) -> CheckpointChoice | None:
    """``adapter/selected.json``, or ``None`` when the loop did not choose a checkpoint.

    Raises ``ValueError`` naming the file when it is not a valid choice of a known version.
    """
    path = Path(adapter) / SELECTED_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        version = raw.get("schema_version", 1)
        if version > SELECTION_SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {version} is newer than this version reads "
                f"({SELECTION_SCHEMA_VERSION}); upgrade rlmdistill"
            )
        return CheckpointChoice.model_validate(raw)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a checkpoint choice: {exc}") from exc
