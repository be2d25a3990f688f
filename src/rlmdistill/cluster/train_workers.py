"""Training in Ray Train workers (Ray Train V2's ``TorchTrainer``, Ray 2.60), shared by
``rlmdistill sft --workers N`` (:mod:`rlmdistill.sft.ray_train`) and ``rlmdistill rl --workers
N`` (:mod:`rlmdistill.rl.ray_train`).

What is the same for both (beside the config fields that ask for workers,
:func:`rlmdistill.cluster.options.workers_fields`): joining or starting Ray, one ``TorchTrainer`` whose run folder is the output's
``checkpoints/`` (:func:`fit`: DDP over ``gloo`` on CPUs, ``nccl`` on GPUs; checkpoints the
Trainer writes are reported to Ray Train in place, :class:`ReportCheckpoints`; a dead worker
restarts every worker from the newest checkpoint, ``FailureConfig(max_failures)``), the
newest whole checkpoint on disk (:func:`newest_checkpoint`), the ranks' weight digests that
show DDP kept the weights equal (:class:`WeightDigests`), a test hook that kills one worker
once (:class:`KillOnce`), and the unwrapping of a worker's own error from Ray's
(:func:`worker_error`). Each stage keeps its worker function and its result file.

Nothing here imports Ray at module level.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from transformers import TrainerCallback

__all__ = [
    "FORWARDED_ENV",
    "RAY_EXTRA",
    "KillOnce",
    "ReportCheckpoints",
    "WeightDigests",
    "WorkerSettings",
    "check_reachable",
    "fit",
    "import_ray_train",
    "newest_checkpoint",
    "weights_sha256",
    "worker_error",
    "worker_start",
    "write_result",
]

RAY_EXTRA = "pip install 'rlmdistill[ray]'"
"""How to install what ``--workers N`` needs."""

FORWARDED_ENV = (
    "RLMDISTILL_HOME",
    "HF_HOME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "OMP_NUM_THREADS",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
)
"""Environment variables of the driver that the workers get too (the model cache, the
network interface for gloo/nccl, the loopback-only switch), when set."""


def weights_sha256(model: Any) -> str:
    """sha256 (hex) of ``model``'s trainable parameters: names and float32 bytes, in name order.

    Equal on every DDP rank after a step (DDP averages the gradients, so the ranks' updates are
    the same); for LoRA these are the adapter matrices.
    """
    import torch

    h = hashlib.sha256()
    named = sorted((n, p) for n, p in model.named_parameters() if p.requires_grad)
    for name, param in named:
        h.update(name.encode())
        h.update(param.detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class ReportCheckpoints(TrainerCallback):
    """Reports each checkpoint the Trainer saved to Ray Train, from every rank (a report is a
    barrier; rank 0 hands the folder, already in Ray Train's run folder: NO_UPLOAD)."""

    def __init__(self, rank: int):
        self.rank = rank

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import ray.train
        from ray.train import Checkpoint, CheckpointUploadMode

        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        ckpt = Checkpoint.from_directory(str(path)) if self.rank == 0 else None
        ray.train.report(
            {"step": state.global_step},
            checkpoint=ckpt,
            checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
        )


class WeightDigests(TrainerCallback):
    """At the end of training, every rank's :func:`weights_sha256`, gathered by rank
    (:attr:`digests`; one entry outside a process group)."""

    def __init__(self) -> None:
        self.digests: list[str] = []

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch.distributed as dist

        mine = weights_sha256(kwargs["model"])
        if dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine)
            self.digests = [str(d) for d in gathered]
        else:
            self.digests = [mine]


class KillOnce(TrainerCallback):
    """Test hook: SIGKILL this worker at the end of optimiser step ``step`` if it has rank
    ``rank`` and the file ``marker`` does not exist yet (it is written just before). ``spec``
    is ``RANK:STEP:MARKER``."""

    def __init__(self, spec: str, rank: int):
        want_rank, step, marker = spec.split(":", 2)
        self.active = int(want_rank) == rank
        self.step, self.marker = int(step), Path(marker)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.active and state.global_step == self.step and not self.marker.exists():
            self.marker.write_text(f"killed rank at step {self.step}\n", encoding="utf-8")
            os.kill(os.getpid(), signal.SIGKILL)


def newest_checkpoint(ckpt_dir: Path) -> str | None:
    """The newest whole Trainer checkpoint in ``ckpt_dir``: the ``checkpoint-<step>`` folder
    with the highest step that holds ``trainer_state.json`` (the Trainer writes it after the
    weights and optimiser state, so a folder without it was cut off); None when there is none."""
    if not ckpt_dir.is_dir():
        return None
    steps = []
    for path in ckpt_dir.glob("checkpoint-*"):
        step = path.name.removeprefix("checkpoint-")
        if step.isdigit() and (path / "trainer_state.json").is_file():
            steps.append((int(step), path))
    return str(max(steps)[1]) if steps else None


def worker_start(out: Path) -> tuple[int, str | None]:
    """In a Ray Train worker: ``(rank, checkpoint to resume from)``. The checkpoint is Ray
    Train's latest (after a restart), else the newest whole one in ``out/checkpoints`` (one
    reported just before a worker died may not have reached Ray Train's controller yet), else
    None (a fresh start)."""
    import ray.train

    rank = int(ray.train.get_context().get_world_rank())
    latest = ray.train.get_checkpoint()
    if latest is not None:
        return rank, str(latest.path)
    return rank, newest_checkpoint(Path(out).resolve() / "checkpoints")


def check_reachable(address: str, error: type[Exception], timeout_s: float = 3.0) -> None:
    """One TCP connection to ``HOST:PORT`` or ``ray://HOST[:PORT]`` (other forms: Ray's own
    lookup); raises ``error`` naming the address when nothing answers (``ray.init`` would retry
    for about a minute)."""
    text = address.removeprefix("ray://")
    if text in ("auto", "local", "") or "://" in text:
        return
    host, sep, port = text.split("/", 1)[0].rpartition(":")
    if not sep or not port.isdigit():
        if not address.startswith("ray://"):
            raise error(f"ray_address {address!r} has no port: give HOST:PORT of the head")
        host, port = text, "10001"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise error(
            f"ray_address {address!r}: nothing answers at {host}:{port} ({exc}); start the "
            "cluster or fix --ray-address / $RAY_ADDRESS. Nothing was written."
        ) from None


def import_ray_train(error: type[Exception]) -> Any:
    """The ``ray`` module with Ray Train imported; raises ``error`` naming the extra to
    install when it cannot be imported."""
    try:
        import ray
        import ray.train.torch  # Ray Train (the `ray` extra)
    except ImportError as exc:
        raise error(
            f"--workers/--ray-address need Ray Train, which cannot be imported here ({exc}); "
            f"install the extra: {RAY_EXTRA} (or train with --workers 1)"
        ) from exc
    return ray


def worker_error(
    exc: BaseException, kinds: tuple[type[BaseException], ...]
) -> BaseException | None:
    """The first worker error of ``exc`` (a Ray Train ``WorkerGroupError``) that is one of
    ``kinds`` (a stage's user errors), unwrapped from Ray's task error; None when there is
    none."""
    for failure in getattr(exc, "worker_failures", {}).values():
        seen: set[int] = set()
        err: BaseException | None = failure
        while err is not None and id(err) not in seen:
            seen.add(id(err))
            if isinstance(err, kinds):
                return err
            err = getattr(err, "cause", None) or err.__cause__
    return None


class WorkerSettings(Protocol):
    """What :func:`fit` reads of a stage config (``SFTConfig``, ``RLConfig``): the fields of
    :func:`rlmdistill.cluster.options.workers_fields` and the checkpoints to keep."""

    workers: int
    ray_address: str | None
    gpus_per_worker: float
    max_failures: int
    save_total_limit: int | None


def fit(
    loop: Callable[[dict[str, Any]], None],
    loop_config: dict[str, Any],
    settings: WorkerSettings,
    *,
    out: Path,
    run_name: str,
    error: type[Exception],
    user_errors: tuple[type[BaseException], ...],
    failed: type[Exception],
    result_file: str,
) -> dict[str, Any]:
    """Run ``loop(loop_config)`` in ``workers`` Ray Train workers until it finishes; return
    what rank 0 wrote to ``out/run_name/result_file`` (:func:`write_result`), whose
    ``rank_weights_sha256`` (every rank's :func:`weights_sha256` at the end) must agree.

    ``settings`` gives ``workers``, ``ray_address``, ``gpus_per_worker``, ``max_failures`` and
    ``save_total_limit``. Joins ``ray_address`` (else ``$RAY_ADDRESS``, else starts a Ray on
    this machine and stops it at the end) unless Ray is initialised in this process already.
    Each worker claims 1 CPU, and ``gpus_per_worker`` GPUs when > 0 (then ``nccl``, else
    ``gloo``). Ray Train's run folder is ``out/run_name`` (``storage_path`` = ``out``); it
    keeps the newest ``save_total_limit`` reported checkpoints and restarts the workers up to
    ``max_failures`` times. Workers get :data:`FORWARDED_ENV`.

    Raises:
        error: Ray Train cannot be imported, or the cluster does not answer.
        user_errors: the first such error a worker raised, as is (after Ray's restarts).
        failed: Ray Train gave up otherwise (the message has each failed rank's error), rank 0
            wrote no result, or the ranks ended with different weights (their gradients were
            not averaged).
    """
    workers, gpus_per_worker = settings.workers, settings.gpus_per_worker
    ray_address, max_failures = settings.ray_address, settings.max_failures
    num_to_keep = settings.save_total_limit
    ray = import_ray_train(error)
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    started = False
    if not ray.is_initialized():
        address = ray_address or os.environ.get("RAY_ADDRESS")
        if address:
            check_reachable(address, error)
            ray.init(address=address)
        else:
            ray.init(include_dashboard=False)
        started = True
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    env["RAY_TRAIN_ENABLE_PRINT_PATCH"] = "0"  # else datasets/TRL flood the worker logs
    trainer = TorchTrainer(
        loop,
        train_loop_config=loop_config,
        torch_config=TorchConfig(backend="nccl" if gpus_per_worker > 0 else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=workers,
            use_gpu=gpus_per_worker > 0,
            resources_per_worker={
                "CPU": 1,
                **({"GPU": gpus_per_worker} if gpus_per_worker > 0 else {}),
            },
        ),
        run_config=RunConfig(
            name=run_name,
            storage_path=str(out),
            checkpoint_config=CheckpointConfig(num_to_keep=num_to_keep),
            failure_config=FailureConfig(max_failures=max_failures),
            worker_runtime_env={"env_vars": env},  # Train V2's RunConfig (mypy sees V1's)
        ),  # type: ignore[call-arg]
    )
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as exc:
        if (user := worker_error(exc, user_errors)) is not None:
            raise user from None
        raise failed(f"{out}: Ray Train gave up: {exc}") from exc
    finally:
        if started:
            ray.shutdown()
    if result.error is not None:
        raise failed(f"{out}: Ray Train gave up: {result.error}")
    path = out / run_name / result_file
    if not path.is_file():
        raise failed(f"{out}: Ray Train finished but rank 0 wrote no {path}")
    got: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    digests = got.get("rank_weights_sha256") or []
    if len(set(digests)) > 1:  # DDP keeps the ranks' weights equal
        raise failed(
            f"{out}: the workers ended with different weights (sha256 by rank: "
            f"{', '.join(d[:12] for d in digests)}): their gradients were not averaged, so the "
            "adapter rank 0 saved is one rank's alone"
        )
    return got


def write_result(path: Path, data: dict[str, Any]) -> None:
    """Rank 0's result for the driver (:func:`fit` reads it back): JSON, written whole
    (a temporary file, then renamed)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
