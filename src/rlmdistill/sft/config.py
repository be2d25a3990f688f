"""The validated configuration of ``rlmdistill sft`` (one object, saved resolved in ``sft.json``).

Load it from a YAML or TOML file with :meth:`SFTConfig.from_file`; CLI flags override file
fields through :func:`build_config` (the one config parser, :mod:`rlmdistill.cliconfig`). Every field carries its help text (``description``), so
``SFTConfig.model_json_schema()`` documents the file format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from rlmdistill import cliconfig
from rlmdistill.cluster.options import RAY_FIELDS, workers_fields

SchedulerType = Literal[
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup"
]
"""Learning-rate schedules offered (names of ``transformers.SchedulerType``)."""

LengthPolicy = Literal["refuse", "drop"]
"""What to do with a row longer than ``max_length`` or whose last assistant turn was cut:
``refuse`` (error naming the row and episode) or ``drop`` (skip it and count it)."""

Bf16Option = Literal["auto", "on", "off"]
"""``auto``: bfloat16 mixed precision on a CUDA device that supports it or a CPU that runs
bfloat16 natively (:func:`rlmdistill.hardware.choose_compute_dtype`), float32 elsewhere;
``on``: require it (error where not native); ``off``: float32."""

DEFAULT_TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
"""Attention and MLP projections of Llama/Qwen2-style models (all linear layers but the head)."""


_RAY = workers_fields(
    "each with per_device_train_batch_size examples per forward pass, so the global batch is "
    "workers x per_device_train_batch_size x gradient_accumulation_steps."
)
"""The Ray Train fields (:data:`~rlmdistill.cluster.train_workers.RAY_FIELDS`, here for
:mod:`rlmdistill.sft.ray_train`); left out of a config's dump while at their defaults."""


class SFTConfig(BaseModel):
    """Everything that decides an SFT run (LoRA, optimiser, batching, lengths, checkpoints).

    ``dataset``, ``base`` and ``out`` are usually given on the command line (``--dataset``,
    ``--base``, ``--out``), which override the file.
    """

    model_config = ConfigDict(extra="forbid")

    # -- what to train, from what, to where --------------------------------------------
    dataset: Path = Field(description="Exported dataset folder (datasets/NAME, with export.json).")
    base: str = Field(
        description="Base model: an embedded name (smollm2-135m, qwen2.5-coder-0.5b, ...), "
        "local:NAME, or a checkpoint directory with config.json. Never fetched from a hub."
    )
    out: Path = Field(description="Adapter folder to write (adapters/NAME).")

    # -- LoRA (peft) -------------------------------------------------------------------
    lora_r: int = Field(16, ge=1, description="LoRA rank r (size of the low-rank update).")
    lora_alpha: int = Field(
        32, ge=1, description="LoRA alpha; the update is scaled by alpha / r (Hu et al., 2021)."
    )
    lora_dropout: float = Field(
        0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input during training."
    )
    target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TARGET_MODULES),
        min_length=1,
        description="Names (last dotted component) of the linear layers that get LoRA "
        "adapters, e.g. q_proj, v_proj; checked against the base model before training "
        "(the error lists the valid names). ['all-linear'] = every linear layer but the head.",
    )

    # -- optimiser and schedule --------------------------------------------------------
    learning_rate: float = Field(2e-4, gt=0, description="Peak learning rate (AdamW).")
    lr_scheduler_type: SchedulerType = Field(
        "cosine", description="Learning-rate schedule after warmup."
    )
    warmup_ratio: float = Field(
        0.03, ge=0.0, lt=1.0, description="Share of the total steps spent in linear warmup."
    )
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    num_train_epochs: float = Field(
        1.0, gt=0, description="Passes over the dataset (ignored when max_steps > 0)."
    )
    max_steps: int = Field(
        -1, ge=-1, description="Optimiser steps to run; -1 = derive from num_train_epochs."
    )

    # -- batching and memory -----------------------------------------------------------
    per_device_train_batch_size: int = Field(
        1, ge=1, description="Examples (or packed rows) per device per forward pass."
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="Forward passes accumulated into one optimiser step."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory, ~30% slower)."
    )
    bf16: Bf16Option = Field(
        "auto",
        description="bfloat16 mixed precision: auto (CUDA with bf16 support, or a CPU with "
        "native bfloat16: AVX512-BF16/AMX/Arm BF16; float32 elsewhere, where bfloat16 would be "
        "emulated and slower), on (error where not native), off.",
    )
    packing: bool = Field(
        False,
        description="Pack several examples into one row of max_length tokens without padding "
        "(best-fit decreasing, whole examples only). Position ids restart at 0 for each "
        "example and attention never crosses an example boundary. Needs max_length.",
    )

    # -- lengths -----------------------------------------------------------------------
    max_length: int | None = Field(
        None,
        ge=8,
        description="Longest example in tokens. Rows are never truncated here (the export "
        "already applied its length policy): a longer row is refused or dropped per "
        "length_policy. Required with packing (it is also the packed row length). None = no limit.",
    )
    length_policy: LengthPolicy = Field(
        "refuse",
        description="Rows longer than max_length or whose last assistant turn does not end "
        "with an end-of-turn token: refuse (error naming row and episode) or drop (counted "
        "in sft.json).",
    )

    # -- held-out loss -----------------------------------------------------------------
    eval_fraction: float | None = Field(
        None,
        ge=0.0,
        le=0.5,
        description="Share of the dataset's episodes held out to measure an eval loss (whole "
        "episodes: one episode's rows are never split between train and eval; chosen with "
        "seed). The eval loss (assistant-only, same masks as training) is computed before "
        "training and at the end of every epoch, and recorded in sft.json. None = auto: 0.1 "
        "when the dataset has at least 10 episodes, else off (said in the log and sft.json). "
        "0 = off. A fraction is also off when fewer than 2 episodes are left after the checks.",
    )

    # -- checkpoints, logging, reproducibility -----------------------------------------
    save_steps: int = Field(
        50, ge=1, description="Write a resumable checkpoint every this many optimiser steps."
    )
    save_strategy: Literal["steps", "epoch"] = Field(
        "steps",
        description="When to write a checkpoint: every save_steps optimiser steps, or at the "
        "end of every epoch (one candidate per epoch for the loop's checkpoint_check).",
    )
    save_total_limit: int | None = Field(
        3, ge=1, description="Keep at most this many checkpoints (oldest deleted); None = all."
    )
    logging_steps: int = Field(
        1, ge=1, description="Log loss, learning rate, tokens/s every this many steps."
    )
    seed: int = Field(
        0, description="Seed for LoRA init, data order, dropout and the held-out episodes."
    )
    report_to: list[str] = Field(
        default_factory=list,
        description="Trackers besides train_log.jsonl (e.g. ['tensorboard', 'wandb']); "
        "empty = none.",
    )
    dataloader_num_workers: int = Field(0, ge=0, description="Data loader worker processes.")

    # -- workers (Ray Train) -------------------------------------------------------------
    workers: int = _RAY["workers"]
    ray_address: str | None = _RAY["ray_address"]
    gpus_per_worker: float = _RAY["gpus_per_worker"]
    max_failures: int = _RAY["max_failures"]

    @property
    def uses_ray(self) -> bool:
        """Whether the run trains under Ray Train (``workers > 1`` or a ``ray_address``)."""
        return self.workers > 1 or self.ray_address is not None

    @model_serializer(mode="wrap")
    def _drop_default_ray_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the Ray fields out of a dump while they are at their defaults, so that a
        single-process config dumps exactly as before they existed (``sft.json``'s ``config``
        and the loop's adapter fingerprint stay the same)."""
        data: dict[str, Any] = handler(self)
        for name in RAY_FIELDS:
            if name in data and getattr(self, name) == type(self).model_fields[name].default:
                del data[name]
        return data

    @model_validator(mode="after")
    def _check(self) -> SFTConfig:
        if self.packing and self.max_length is None:
            raise ValueError("packing needs max_length (the packed row length)")
        if "all-linear" in self.target_modules and len(self.target_modules) > 1:
            raise ValueError("target_modules: 'all-linear' cannot be combined with other names")
        return self

    @classmethod
    def from_file(cls, path: Path | str) -> SFTConfig:
        """Read a config from ``.yaml``/``.yml``/``.toml``/``.json`` (a mapping of fields).

        Raises:
            FileNotFoundError: no such file.
            ValueError: unknown suffix, not a mapping, or an unknown key (message names the
                file and the key).
            pydantic.ValidationError: a bad field (names the field).
        """
        return cliconfig.load_config(cls, path, section="sft")


def read_config_file(path: Path | str) -> dict[str, Any]:
    """The mapping of fields in a YAML/TOML/JSON config file (a TOML file may hold them under
    ``[sft]``; :func:`rlmdistill.cliconfig.read_config_file`)."""
    return cliconfig.read_config_file(path, section="sft")


def build_config(file: Path | str | None, overrides: dict[str, Any] | None = None) -> SFTConfig:
    """The config from an optional file, then ``overrides`` (CLI flags; ``None`` = not given):
    :func:`rlmdistill.cliconfig.load_config`.

    Raises the errors of :meth:`SFTConfig.from_file`, and
    :class:`~rlmdistill.cliconfig.ConfigFileError` (a ``ValueError``) naming the file and an
    unknown key.
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    return cliconfig.load_config(SFTConfig, file, given, section="sft")


__all__ = [
    "DEFAULT_TARGET_MODULES",
    "RAY_FIELDS",
    "Bf16Option",
    "LengthPolicy",
    "SFTConfig",
    "SchedulerType",
    "build_config",
    "read_config_file",
]
