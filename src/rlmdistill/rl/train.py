""":func:`run`: online GRPO on the root (TRL ``GRPOTrainer`` + LoRA, harness rollouts).

Output folder (``config.out``), laid out like an SFT adapter so collect specs
(``local:NAME+adapter=OUT``), ``rlmdistill sft merge`` and the loop's eval arm load it:

- ``adapter_config.json``, ``adapter_model.safetensors``: the LoRA adapter (peft);
- ``rl.json``: :class:`RLManifest` (resolved config, base path, status, per-step summary),
  the counterpart of SFT's ``sft.json``;
- ``rl_log.jsonl``: one line per optimiser step: TRL's logged metrics (``loss``, ``kl``,
  ``reward``, ``reward_std``, ``frac_reward_zero_std``, ...) merged with the rollout record of
  that step (``reward_mean``, ``reward_std``, ``zero_variance_groups``, ``group_rewards``,
  ``advantages`` as TRL computed them, the step's run folder);
- ``rollouts/step-NNNNNN/``: each step's episodes as a normal run folder;
- ``checkpoints/checkpoint-N/``: TRL checkpoints; ``run(config, resume=True)`` continues
  from the newest.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import ConfigDict, Field

from rlmdistill.provenance import Provenance, current_provenance
from rlmdistill.rl.config import RLConfig
from rlmdistill.rl.rollout import (
    HarnessRollout,
    dump_record,
    harness_reward,
    merge_rank_records,
    rank_record_path,
)
from rlmdistill.traces.layout import RL_MANIFEST

RL_SCHEMA_VERSION = 1
RLStatus = Literal["running", "completed", "failed"]


class RLError(RuntimeError):
    """A user-fixable problem (occupied output folder, nothing to resume, room without task)."""


class RLManifest(Provenance):
    """``OUT/rl.json``: what was trained, from what, how, and how it went (with the
    :class:`~rlmdistill.provenance.Provenance` fields)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = RL_SCHEMA_VERSION
    method: Literal["grpo"] = "grpo"
    created_at: dt.datetime
    updated_at: dt.datetime
    status: RLStatus
    config: RLConfig
    base_path: str
    """Absolute checkpoint directory of the root's base model (as ``sft.json``'s)."""
    sub: str
    """Spec of the frozen sub model."""
    global_step: int = 0
    resumed_from: list[str] = Field(default_factory=list)
    steps: list[dict[str, Any]] = Field(default_factory=list)
    """Per step: reward_mean, reward_std, zero_variance_groups, groups, loss, kl."""


class RLResult(NamedTuple):
    """What :func:`run` did."""

    out: Path
    global_step: int
    steps: list[dict[str, Any]]
    """One merged log record per step (the lines of ``rl_log.jsonl`` written by this call)."""
    resumed_from: str | None


@dataclass(frozen=True)
class RLHooks:
    """How a caller that drives :func:`run` in worker processes (Ray Train:
    :mod:`rlmdistill.rl.ray_train`) changes it; the defaults are the in-process run."""

    resume_from: str | None = None
    """Checkpoint folder to resume from (Ray Train's latest after a restart); implies
    ``resume``."""
    callbacks: Sequence[Any] = ()
    """More ``transformers`` callbacks, after the RL-log callback."""
    output_checked: bool = False
    """The caller checked the output folder before the first attempt, so files found there now
    are an earlier attempt's of the same run: they are replaced instead of refused."""


def process_rank() -> tuple[int, int]:
    """``(rank, world size)`` of this training process: the initialised ``torch.distributed``
    group's (Ray Train sets it up before the worker function runs), else ``$RANK`` /
    ``$WORLD_SIZE`` (``accelerate launch`` sets them before the Trainer does), else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _write_manifest(path: Path, manifest: RLManifest) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _log_callback(path: Path, rollout: HarnessRollout, trainer_ref: list[Any]) -> Any:
    from transformers import TrainerCallback

    class _RLLog(TrainerCallback):  # type: ignore[misc]
        """Writes one ``rl_log.jsonl`` line per logged training step (rank 0)."""

        def __init__(self) -> None:
            self.records: list[dict[str, Any]] = []

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if logs is None or "loss" not in logs or not state.is_world_process_zero:
                return
            step = state.global_step
            roll: dict[str, Any] = next(
                (r for r in reversed(rollout.history) if r["step"] == step), {}
            )
            if int(getattr(args, "world_size", 1)) > 1 and roll:
                # every rank rolled out its own groups and wrote its record before the
                # backward pass; this step's update (DDP) waited for all of them
                ranks = [
                    json.loads(
                        rank_record_path(Path(rollout.config.out), step, r).read_text("utf-8")
                    )
                    for r in range(int(args.world_size))
                ]
                roll = merge_rank_records(ranks)
            trainer = trainer_ref[0] if trainer_ref else None
            record = {
                **roll,
                "step": step,
                "loss": float(logs["loss"]),
                "kl": logs.get("kl"),
                "trl": {k: v for k, v in logs.items() if isinstance(v, int | float)},
                "advantages": getattr(trainer, "last_advantages", None),
                "time": dt.datetime.now(dt.UTC).isoformat(),
            }
            self.records.append(record)
            with path.open("a", encoding="utf-8") as f:
                f.write(dump_record(record) + "\n")

    return _RLLog()


def generation_budget(rollout_config: Any) -> int:
    """Most ids the root may generate in one episode (tokens): ``limits.max_turns`` x
    ``root_sampling.max_tokens`` of the rollouts' :class:`~rlmdistill.collect.config.CollectConfig`.
    """
    return int(rollout_config.limits.max_turns) * int(rollout_config.root_sampling.max_tokens)


def grpo_arguments(
    config: RLConfig, rollout_config: Any, ckpt_dir: Path, *, progress: bool, cpu: bool
) -> dict[str, Any]:
    """The keyword arguments of TRL's ``GRPOConfig`` for ``config``.

    ``rollout_config`` is the rollouts' ``CollectConfig`` (:meth:`HarnessRollout.collect_config`):
    its root sampling gives TRL's ``temperature``/``top_p`` (the distribution the loss scores),
    and its generation budget (:func:`generation_budget`) gives ``max_completion_length``.
    TRL generates nothing here (the harness does), so that length only sets the constant
    ``loss_type: dr_grpo`` divides by (Liu et al. 2025, "Understanding R1-Zero-Like
    Training": the sum of the masked per-token losses over ``batch x max_completion_length``);
    TRL's default of 512 has nothing to do with an episode, whose generated ids can reach
    ``max_turns x max_tokens``. With ``rollouts: served`` it adds TRL's importance-sampling
    settings (``is_mode``, ``is_cap``; see :mod:`rlmdistill.rl.served`).
    """
    sampling = rollout_config.root_sampling
    k = config.num_generations
    return {
        "output_dir": str(ckpt_dir),
        "num_generations": k,
        "per_device_train_batch_size": k * config.rooms_per_step,
        "gradient_accumulation_steps": 1,
        "max_steps": config.max_steps,
        "learning_rate": config.learning_rate,
        "beta": config.beta,
        "loss_type": config.loss_type,
        "scale_rewards": config.scale_rewards,
        "max_completion_length": generation_budget(rollout_config),
        "temperature": sampling.temperature if sampling.temperature > 0 else 1.0,
        "top_p": sampling.top_p,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": config.save_steps,
        "save_total_limit": config.save_total_limit,
        "seed": config.seed,
        "report_to": config.report_to or "none",
        "disable_tqdm": not progress,
        "use_cpu": cpu,
        "bf16": False,
        **(
            {  # applied by rl.served.enable_server_is_correction (TRL gates it on use_vllm)
                "vllm_importance_sampling_correction": True,
                "vllm_importance_sampling_mode": config.is_mode,
                "vllm_importance_sampling_clip_max": config.is_cap,
            }
            if config.rollouts == "served"
            else {}
        ),
    }


def run(
    config: RLConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    hooks: RLHooks | None = None,
) -> RLResult:
    """Train a LoRA adapter on the root with GRPO on harness rollouts (module doc).

    Under several processes (Ray Train workers, :mod:`rlmdistill.rl.ray_train`, or
    ``accelerate launch``) each process rolls out its own rollout groups into
    ``rollouts/step-NNNNNN-rankR/``; rank 0 alone writes ``rl.json`` and ``rl_log.jsonl``, whose
    per-step figures it merges from every rank's record (:func:`~rlmdistill.rl.rollout.merge_rank_records`).

    Args:
        config: :class:`~rlmdistill.rl.config.RLConfig`.
        resume: continue from the newest checkpoint in ``OUT/checkpoints`` (same config
            required for the rooms and base).
        progress: show TRL's progress bar.
        hooks: what a caller driving this in worker processes changes (:class:`RLHooks`).

    Returns:
        :class:`RLResult` (the adapter is in ``config.out``).

    Raises:
        RLError: ``out`` already holds a run (without ``resume``), ``resume`` without a
            checkpoint, a room without ``task.json``.
        FileNotFoundError: the base model is not pulled.
    """
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOConfig, GRPOTrainer

    from rlmdistill.compat import library_warning_filter
    from rlmdistill.models.spec import open_client, resolve_base
    from rlmdistill.rooms import DataRoom

    hooks = hooks or RLHooks()
    rank, _world = process_rank()
    out = Path(config.out)
    ckpt_dir = out / "checkpoints"
    manifest_path = out / RL_MANIFEST
    resume_ckpt: str | None = hooks.resume_from
    previous: RLManifest | None = None
    if resume or resume_ckpt is not None:
        if resume_ckpt is None:
            resume_ckpt = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
        if resume_ckpt is None:
            raise RLError(f"{out}: resume asked but there is no checkpoint in {ckpt_dir}")
        if manifest_path.is_file():
            previous = RLManifest.model_validate_json(manifest_path.read_text("utf-8"))
    elif not hooks.output_checked and (
        manifest_path.exists() or (ckpt_dir.is_dir() and any(ckpt_dir.iterdir()))
    ):
        raise RLError(
            f"{out} already holds an RL run; pass --resume to continue or use a new --out"
        )

    rooms: dict[str, DataRoom] = {}
    for p in config.rooms:
        room = DataRoom.load(p)
        if room.task is None:
            raise RLError(f"room {room.path} has no task.json; rollouts need a task")
        rooms[str(room.path)] = room
    base_dir = resolve_base(config.base)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    sub = open_client(config.sub_spec)

    from datasets import Dataset

    dataset = Dataset.from_list([{"prompt": p} for p in rooms])
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    manifest = RLManifest(
        created_at=previous.created_at if previous else now,
        updated_at=now,
        status="running",
        config=config,
        base_path=str(base_dir),
        sub=config.sub_spec,
        global_step=previous.global_step if previous else 0,
        resumed_from=[
            *(previous.resumed_from if previous else []),
            *([resume_ckpt] if resume_ckpt else []),
        ],
        steps=previous.steps if previous else [],
        **current_provenance().model_dump(),
    )
    if rank == 0:
        _write_manifest(manifest_path, manifest)

    rollout: HarnessRollout
    if config.rollouts == "served":
        from rlmdistill.rl.served import ServedRollout

        rollout = ServedRollout(config, rooms, sub, tokenizer)
    else:
        rollout = HarnessRollout(config, rooms, sub, tokenizer)
    rollout_config = rollout.collect_config([next(iter(rooms))], 1, 0)
    args = GRPOConfig(
        **grpo_arguments(
            config, rollout_config, ckpt_dir, progress=progress, cpu=not torch.cuda.is_available()
        )
    )
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,  # rollouts sample from the model in eval mode; keep train = eval
        target_modules=config.target_modules,
        task_type="CAUSAL_LM",
    )
    trainer_ref: list[Any] = []
    log_cb = _log_callback(out / "rl_log.jsonl", rollout, trainer_ref)

    class _Trainer(GRPOTrainer):  # type: ignore[misc]
        """Keeps the advantages TRL computed for the last generation batch (for the log)."""

        last_advantages: list[float] | None = None

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            output = super()._generate_and_score_completions(inputs)
            self.last_advantages = [float(a) for a in output["advantages"].tolist()]
            return output

    harness_reward.__name__ = f"rlm_{config.reward.replace(':', '_').replace('.', '_')}"
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    status: RLStatus = "failed"
    try:
        with library_warning_filter():
            trainer = _Trainer(
                model=model,
                reward_funcs=[harness_reward],  # type: ignore[list-item]
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                peft_config=lora,
                rollout_func=rollout,
                callbacks=[log_cb, *hooks.callbacks],
            )
            trainer_ref.append(trainer)
            if config.rollouts == "served":
                from rlmdistill.rl.served import enable_server_is_correction

                enable_server_is_correction(trainer)
            output = trainer.train(resume_from_checkpoint=resume_ckpt)
            trainer.save_model(str(out))
        status = "completed"
        global_step = int(output.global_step)
    finally:
        try:
            if hasattr(rollout, "close"):
                rollout.close()  # served: the last prefetch ends, every version is unloaded
        finally:
            sub.close()
        steps = [*manifest.steps]
        for r in log_cb.records:
            steps = [s for s in steps if s.get("step") != r["step"]]
            steps.append(
                {
                    k: r.get(k)
                    for k in (
                        "step",
                        "reward_mean",
                        "reward_std",
                        "zero_variance_groups",
                        "groups",
                        "loss",
                        "kl",
                        "run_dir",
                    )
                }
            )
        manifest.steps = sorted(steps, key=lambda s: int(s["step"]))
        manifest.status = status
        manifest.global_step = max([manifest.global_step, *(int(s["step"]) for s in steps)])
        manifest.updated_at = dt.datetime.now(dt.UTC)
        if rank == 0:
            _write_manifest(manifest_path, manifest)
    return RLResult(out, global_step, log_cb.records, resume_ckpt)


def read_rl_manifest(path: Path) -> RLManifest:
    """Load ``rl.json`` (``ValueError`` naming the file when it does not validate)."""
    try:
        return RLManifest.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not an rl.json manifest: {exc}") from exc


__all__ = [
    "RLError",
    "RLHooks",
    "RLManifest",
    "RLResult",
    "generation_budget",
    "grpo_arguments",
    "process_rank",
    "read_rl_manifest",
    "run",
]
