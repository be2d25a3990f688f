"""``rlmdistill rl --workers N``: GRPO (:func:`rlmdistill.rl.train.run`) in the workers of Ray
Train's ``TorchTrainer`` (:func:`rlmdistill.cluster.train_workers.fit`).

Each worker is one TRL process of a DDP group (``gloo`` on CPUs, ``nccl`` with
``gpus_per_worker > 0``): TRL's sampler hands each its own ``rooms_per_step`` rooms per step,
it rolls them out with its copy of the current policy into ``rollouts/step-NNNNNN-rankR/``
(in process: rollouts from the weights being updated), and the update averages the ranks'
gradients, so every rank keeps the same weights. Rank 0 writes ``rl.json``, ``rl_log.jsonl``
(each step's figures merged over the ranks) and the adapter, in the formats of a
one-process run.

Checkpoints: Ray Train's run folder is ``OUT/checkpoints``, where TRL writes
``checkpoint-<step>/``; each is reported in place (``NO_UPLOAD``). A dead worker makes Ray Train
restart all of them (``max_failures``) from the newest checkpoint; a step's rollouts already
written are reused (a step folder resumes its finished episodes).

``OUT``, the rooms and the base model must be at the same paths on every node (a shared
filesystem). Served rollouts run in one process only (the config refuses workers with them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlmdistill.cluster.train_workers import (
    ReportCheckpoints,
    WeightDigests,
    fit,
    newest_checkpoint,
    worker_start,
    write_result,
)
from rlmdistill.rl.config import RLConfig
from rlmdistill.rl.rollout import RolloutError
from rlmdistill.rl.train import RLError, RLHooks, RLResult, run

__all__ = ["RESULT_FILE", "RayTrainFailed", "train_ray"]

RESULT_FILE = "ray_result.json"
"""``OUT/checkpoints/ray_result.json``: rank 0's :class:`~rlmdistill.rl.train.RLResult` of the
last attempt as JSON, plus every rank's weights digest; the driver reads it back."""

USER_ERRORS = (RLError, RolloutError, FileNotFoundError)
"""A worker's errors that are the user's to fix: raised as they are, not as Ray's."""


class RayTrainFailed(RuntimeError):
    """Ray Train gave up (a worker failed more often than ``max_failures`` allows), or the
    workers ended with different weights."""


def _worker_loop(loop_config: dict[str, Any]) -> None:
    """What every Ray Train worker runs: :func:`~rlmdistill.rl.train.run` with the checkpoint
    reporting callbacks, from Ray Train's latest checkpoint after a restart (else the newest
    whole one in ``OUT/checkpoints``, or a fresh start); rank 0 then writes :data:`RESULT_FILE`."""
    config = RLConfig.model_validate(loop_config["config"])
    out = Path(config.out).resolve()
    rank, resume_from = worker_start(out)
    digests = WeightDigests()
    hooks = RLHooks(
        resume_from=resume_from,
        callbacks=[ReportCheckpoints(rank), digests],
        output_checked=True,  # by train_ray, before the first attempt
    )
    result = run(config, progress=False, hooks=hooks)
    if rank == 0:
        got = {
            "out": str(result.out),
            "global_step": result.global_step,
            "steps": result.steps,
            "resumed_from": result.resumed_from,
            "rank_weights_sha256": digests.digests,
        }
        write_result(out / "checkpoints" / RESULT_FILE, got)


def _precheck(config: RLConfig, resume: bool) -> None:
    """What the workers would refuse, said before Ray starts: an occupied output folder (or
    ``resume`` without a checkpoint), a room without ``task.json``, a base model not there."""
    from rlmdistill.models.spec import resolve_base
    from rlmdistill.rooms import DataRoom

    out = Path(config.out).resolve()
    ckpt_dir = out / "checkpoints"
    if resume:
        if newest_checkpoint(ckpt_dir) is None:
            raise RLError(f"{out}: resume asked but there is no checkpoint in {ckpt_dir}")
    elif (out / "rl.json").exists() or (ckpt_dir.is_dir() and any(ckpt_dir.iterdir())):
        raise RLError(
            f"{out} already holds an RL run; pass --resume to continue or use a new --out"
        )
    for p in config.rooms:
        if DataRoom.load(p).task is None:
            raise RLError(f"room {p} has no task.json; rollouts need a task")
    resolve_base(config.base)


def train_ray(config: RLConfig, *, resume: bool = False) -> RLResult:
    """Train ``config``'s GRPO adapter with ``config.workers`` Ray Train workers (module doc).

    Returns:
        Rank 0's :class:`~rlmdistill.rl.train.RLResult` of the last attempt.

    Raises:
        RLError: Ray Train not installed, the cluster does not answer, the output folder holds
            a run (without ``resume``), a room without task; or, as is, what a worker raised
            of ``RLError``, ``RolloutError``, ``FileNotFoundError``.
        RayTrainFailed: the workers failed more than ``max_failures`` times, or ended with
            different weights (their gradients were not averaged).
    """
    _precheck(config, resume)
    out = Path(config.out).resolve()
    got = fit(
        _worker_loop,
        {"config": config.model_dump(mode="json")},
        config,
        out=out,
        run_name="checkpoints",
        error=RLError,
        user_errors=USER_ERRORS,
        failed=RayTrainFailed,
        result_file=RESULT_FILE,
    )
    return RLResult(
        Path(got["out"]), int(got["global_step"]), list(got["steps"]), got["resumed_from"]
    )
