"""The validated configuration of ``rlmdistill rl`` (saved resolved in ``rl.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlmdistill import cliconfig

BUILTIN_REWARDS = ("pass_rate", "weighted_pass_rate", "cited_documents", "coverage")
"""Rewards by name; anything else must be ``package.module:function`` (see
:mod:`rlmdistill.rl.rewards`)."""


class RLConfig(BaseModel):
    """Online GRPO on the root (TRL ``GRPOTrainer`` + LoRA, rollouts from the RLM harness).

    One optimiser step = one generation batch = ``rooms_per_step`` rooms x ``num_generations``
    episodes (one rollout group per room). Defaults are toy scale (CPU, embedded root).
    """

    model_config = ConfigDict(extra="forbid")

    rooms: list[str] = Field(description="Room folders (each with task.json); one prompt each.")
    out: str = Field(description="Adapter folder (rl.json, rl_log.jsonl, checkpoints/, rollouts/).")
    base: str = Field("smollm2-135m", description="Root: embedded name, local:NAME or directory.")
    sub: str | None = Field(
        None,
        description="Frozen sub model spec (local:NAME or openai:MODEL@URL); default "
        "local:<base>, a separately loaded copy that never trains.",
    )
    num_generations: int = Field(4, ge=2, description="K: episodes per room (group size).")
    rooms_per_step: int = Field(1, ge=1, description="Rollout groups per optimiser step.")
    max_steps: int = Field(3, ge=1, description="Optimiser steps.")
    learning_rate: float = Field(1e-5, gt=0, description="Learning rate of the LoRA weights.")
    beta: float = Field(
        0.04, ge=0, description="KL coefficient against the base (adapter off); 0 = no KL term."
    )
    loss_type: str = Field("grpo", description="TRL GRPOConfig.loss_type (grpo, dapo, dr_grpo...).")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="TRL scale_rewards: group | batch | none."
    )
    lora_r: int = Field(8, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha (scale = alpha / r).")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"],
        description="Module names that get LoRA adapters (peft target_modules).",
    )
    reward: str = Field(
        "pass_rate",
        description="pass_rate | weighted_pass_rate (reference grader) | cited_documents | "
        "coverage | package.module:function (see rlmdistill.rl.rewards).",
    )
    collect: dict[str, Any] = Field(
        default_factory=dict,
        description="CollectConfig fields for the rollouts (limits, root_sampling, prefill, "
        "few_shot, repl, depth...); rooms/root/sub/episodes/seed are set per step.",
    )
    seed: int = Field(0, description="Trainer seed; step s collects with collect seed seed + s.")
    save_steps: int = Field(1, ge=1, description="Checkpoint every N steps (resume point).")
    save_total_limit: int | None = Field(
        2, ge=1, description="Checkpoints kept (oldest removed first); None keeps all."
    )
    report_to: list[str] = Field(
        default_factory=list, description="TRL trackers (none by default)."
    )
    max_batch: int = Field(8, ge=1, description="In-process root: requests per generate call.")

    @field_validator("reward")
    @classmethod
    def _reward_known(cls, v: str) -> str:
        if v not in BUILTIN_REWARDS and ":" not in v:
            raise ValueError(
                f"reward {v!r}: expected one of {', '.join(BUILTIN_REWARDS)} or "
                "package.module:function"
            )
        return v

    @model_validator(mode="after")
    def _fits(self) -> RLConfig:
        if self.rooms_per_step > len(self.rooms):
            raise ValueError(
                f"rooms_per_step {self.rooms_per_step} > {len(self.rooms)} room(s): TRL's sampler "
                "would make no batch; lower rooms_per_step or add rooms"
            )
        taken = {"rooms", "root", "sub", "episodes", "seed"} & set(self.collect)
        if taken:
            raise ValueError(
                f"collect: {', '.join(sorted(taken))} are set by rl (rooms, base, sub, "
                "num_generations, seed); remove them from the collect section"
            )
        return self

    @property
    def sub_spec(self) -> str:
        """The sub model spec actually opened."""
        if self.sub is not None:
            return self.sub
        return self.base if self.base.startswith("local:") else f"local:{self.base}"


def finish_config(data: dict[str, Any]) -> RLConfig:
    """RLConfig from a field mapping (a file's, with flags over it): room and output paths
    made absolute (against the working directory), then validated. Raises
    ``pydantic.ValidationError`` naming the field."""
    data = dict(data)
    data["rooms"] = [str(Path(p).resolve()) for p in data.get("rooms", [])]
    if "out" in data:
        data["out"] = str(Path(data["out"]).resolve())
    return RLConfig.model_validate(data)


def build_config(file: Path | None, overrides: dict[str, Any]) -> RLConfig:
    """RLConfig from an optional YAML/JSON file, then overrides (``None`` = not given), read
    by :func:`rlmdistill.cliconfig.config_data`, finished by :func:`finish_config`.

    Raises :class:`~rlmdistill.cliconfig.ConfigFileError` (a ``ValueError``) when the file is
    not a mapping or has an unknown key, and ``pydantic.ValidationError`` naming the field.
    """
    given = {k: v for k, v in overrides.items() if v is not None and v != []}
    return finish_config(cliconfig.config_data(RLConfig, file, given))


__all__ = ["BUILTIN_REWARDS", "RLConfig", "build_config", "finish_config"]
