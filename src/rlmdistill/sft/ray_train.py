"""``rlmdistill sft --workers N``: the SFT train function (:func:`rlmdistill.sft.train.train`) run
in the workers of Ray Train's ``TorchTrainer`` (Ray Train V2, Ray 2.60).

One job: start ``config.workers`` Ray Train workers (DDP over ``gloo`` on CPUs, ``nccl`` when
``gpus_per_worker > 0``), run the same :func:`~rlmdistill.sft.train.train` in each, and hand
back rank 0's :class:`~rlmdistill.sft.train.SFTResult`. As under ``accelerate launch``, rank 0
writes ``sft.json``, ``train_log.jsonl`` and the adapter, in the same formats as a
single-process run (``world_size`` = workers, ``backend`` = gloo or nccl).

Checkpoints go through Ray Train's checkpoint API into the adapter folder: the Ray Train run
is named ``checkpoints`` with ``storage_path`` = the adapter folder, so its run folder is
``OUT/checkpoints``, where the Trainer writes ``checkpoint-<step>/`` as in a single-process
run; each one is reported to Ray Train when saved (``ray.train.report(...,
checkpoint_upload_mode=NO_UPLOAD)``: already in place, not copied), and Ray Train keeps the
newest ``save_total_limit`` (``CheckpointConfig.num_to_keep``). A worker or node that dies
makes Ray Train restart all workers (``FailureConfig(max_failures)``); they resume from the
latest reported checkpoint (``ray.train.get_checkpoint()``; when none reached Ray Train's
controller before the failure, the newest whole one in ``OUT/checkpoints``, which the driver's
check before the first attempt guarantees is this run's): the step count continues, the
lines of ``train_log.jsonl`` past that checkpoint are dropped (the lost attempt's), and the
first line written after it carries ``resumed_from_step``; ``sft.json``'s ``resumed_from``
lists the checkpoint. ``--resume`` after a run that stopped continues the same way.

``OUT``, the dataset and the base model must be at the same paths on every node (a shared
filesystem; Ray Train checks that its storage path is shared and refuses otherwise).

Needs the ``ray`` extra (``pip install 'rlmdistill[ray]'``). Nothing here imports Ray at module
level. The test hook :data:`KILL_HOOK_ENV` kills one worker once at a given step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlmdistill.cluster.train_workers import (
    FORWARDED_ENV,
    RAY_EXTRA,
    KillOnce,
    ReportCheckpoints,
    WeightDigests,
    fit,
    newest_checkpoint,
    weights_sha256,
    worker_error,
    worker_start,
    write_result,
)
from rlmdistill.models.spec import BaseModelError, resolve_base
from rlmdistill.sft.config import SFTConfig
from rlmdistill.sft.data import DatasetError, load_export
from rlmdistill.sft.train import (
    EvalLossRecord,
    SFTError,
    SFTResult,
    TrainHooks,
    _existing_output,
    train,
)

__all__ = [
    "FORWARDED_ENV",
    "KILL_HOOK_ENV",
    "RAY_EXTRA",
    "RAY_RUN_NAME",
    "RESULT_FILE",
    "RayTrainFailed",
    "newest_checkpoint",
    "train_ray",
    "weights_sha256",
]

RAY_RUN_NAME = "checkpoints"
"""Ray Train's run name: with ``storage_path`` = the adapter folder, its run folder is
``OUT/checkpoints``, the Trainer's checkpoint folder."""

RESULT_FILE = "ray_result.json"
"""``OUT/checkpoints/ray_result.json``: rank 0's :class:`~rlmdistill.sft.train.SFTResult` of the
last attempt as JSON, plus every rank's weights digest (Ray Train hands the driver the metrics
of checkpoints only); the driver reads it back."""

KILL_HOOK_ENV = "RLMDISTILL_SFT_TEST_KILL"
"""Test hook, read in the driver: ``RANK:STEP:MARKER`` kills (SIGKILL) the worker of that rank
at the end of that optimiser step, once: only while the file ``MARKER`` does not exist (the
worker creates it just before)."""

USER_ERRORS = (SFTError, DatasetError, BaseModelError, FileNotFoundError)
"""A worker's errors that are the user's to fix: raised as they are, not as Ray's."""


class RayTrainFailed(RuntimeError):
    """Ray Train gave up: a worker failed more often than ``max_failures`` allows (the message
    has each failed rank's error)."""


def _worker_loop(loop_config: dict[str, Any]) -> None:
    """The function every Ray Train worker runs: :func:`train` with the checkpoint reporting
    callbacks, resuming from Ray Train's latest checkpoint after a restart (or with
    ``--resume``), else from the newest whole checkpoint in ``OUT/checkpoints`` (one that had
    not reached Ray Train's controller when a worker died); then rank 0 writes its result to
    :data:`RESULT_FILE`. The driver checked the output folder (:func:`_precheck`), so files
    found there that no checkpoint covers are a dead attempt's and are replaced."""
    config = SFTConfig.model_validate(loop_config["config"])
    rank, resume_from = worker_start(Path(config.out))
    digests = WeightDigests()
    callbacks: list[TrainerCallback] = [ReportCheckpoints(rank), digests]
    if loop_config.get("kill"):
        callbacks.append(KillOnce(loop_config["kill"], rank))
    hooks = TrainHooks(
        resume_from=resume_from,
        callbacks=callbacks,
        rotate_checkpoints=False,  # Ray Train's num_to_keep does it
        clean_log_on_resume=True,
        output_checked=True,  # by train_ray, before the first attempt
    )
    result = train(config, progress=False, hooks=hooks)
    if rank == 0:  # Ray Train's Result carries checkpoint metrics only: the result as a file
        got = result._asdict()
        got.update(
            out_dir=str(result.out_dir),
            eval_losses=[r.model_dump(mode="json") for r in result.eval_losses],
            rank_weights_sha256=digests.digests,
        )
        write_result(result.out_dir / "checkpoints" / RESULT_FILE, got)


def _precheck(config: SFTConfig, resume: bool) -> None:
    """What the workers would refuse, said now, before Ray starts: an occupied output folder
    (or ``resume`` without a checkpoint), a base model not there, a dataset folder without
    ``export.json``."""
    out = Path(config.out).resolve()
    ckpt_dir = out / "checkpoints"
    if resume:
        if newest_checkpoint(ckpt_dir) is None:
            raise SFTError(f"{out}: --resume given but there is no checkpoint in {ckpt_dir}")
    elif found := _existing_output(out):
        raise SFTError(
            f"{out} already holds an SFT run ({', '.join(found)}); pass --resume to continue "
            "it or choose another --out"
        )
    resolve_base(config.base)
    load_export(Path(config.dataset).resolve())


def _user_error(exc: BaseException) -> BaseException | None:
    """The first worker error of ``exc`` (a Ray Train ``WorkerGroupError``) that is a user
    error (:data:`USER_ERRORS`), unwrapped from Ray's task error; None when there is none."""
    return worker_error(exc, USER_ERRORS)


def train_ray(config: SFTConfig, *, resume: bool = False, progress: bool = True) -> SFTResult:
    """Train the LoRA adapter ``config`` describes with ``config.workers`` Ray Train workers.

    Joins ``config.ray_address`` (else ``$RAY_ADDRESS``, else starts a Ray on this machine
    and stops it at the end) unless Ray is initialised in this process already. Each worker
    claims 1 CPU, and ``gpus_per_worker`` GPUs when > 0 (then ``nccl``, else ``gloo``).
    ``progress`` is unused: workers show no progress bars (their output goes to Ray's logs).

    Returns:
        Rank 0's :class:`~rlmdistill.sft.train.SFTResult` of the last attempt, with
        ``rank_weights_sha256``: every rank's :func:`weights_sha256` at the end.

    Raises:
        SFTError: Ray Train not installed, the cluster does not answer, the output folder
            holds a run (without ``resume``), or what :func:`~rlmdistill.sft.train.train`
            raises in a worker (``SFTError``, ``DatasetError``, ``BaseModelError``,
            ``FileNotFoundError``: raised as is, after Ray Train's restarts).
        RayTrainFailed: the workers failed more than ``max_failures`` times, or ended with
            different weights.
    """
    del progress
    _precheck(config, resume)
    out = Path(config.out).resolve()
    got = fit(
        _worker_loop,
        {"config": config.model_dump(mode="json"), "kill": os.environ.get(KILL_HOOK_ENV)},
        config,
        out=out,
        run_name=RAY_RUN_NAME,
        error=SFTError,
        user_errors=USER_ERRORS,
        failed=RayTrainFailed,
        result_file=RESULT_FILE,
    )
    return SFTResult(
        out_dir=Path(got["out_dir"]),
        global_step=int(got["global_step"]),
        first_loss=got["first_loss"],
        final_loss=got["final_loss"],
        tokens_seen=int(got["tokens_seen"]),
        train_runtime_s=float(got["train_runtime_s"]),
        n_examples=int(got["n_examples"]),
        dropped=dict(got["dropped"]),
        resumed_from=got["resumed_from"],
        eval_losses=tuple(EvalLossRecord.model_validate(r) for r in got["eval_losses"]),
        eval_note=str(got["eval_note"]),
        rank_weights_sha256=tuple(got["rank_weights_sha256"]),
    )
