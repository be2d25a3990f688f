"""The validated configuration of ``rlmdistill rl`` (saved resolved in ``rl.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from rlmdistill import cliconfig
from rlmdistill.cluster.options import RAY_FIELDS, workers_fields
from rlmdistill.models.lora_server import ServingConfig

BUILTIN_REWARDS = ("pass_rate", "weighted_pass_rate", "cited_documents", "coverage")
"""Rewards by name; anything else must be ``package.module:function`` (see
:mod:`rlmdistill.rl.rewards`)."""

SERVED_FIELDS = (
    "rollouts",
    "serving",
    "sync_every",
    "max_staleness",
    "prefetch",
    "is_mode",
    "is_cap",
)
"""Fields of served rollouts, left out of a dump while at their defaults (so an in-process
config dumps as before they existed: ``rl.json`` and the loop's RL fingerprints unchanged)."""


_RAY = workers_fields(
    "each rolling out and training rooms_per_step rollout groups of its own per step (different "
    "rooms), so a step covers workers x rooms_per_step rooms."
)


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
    rollouts: Literal["in_process", "served"] = Field(
        "in_process",
        description="Where the root of the rollouts runs: in_process (the trainer's own "
        "weights, on-policy) or served (an OpenAI-compatible vLLM server with runtime LoRA "
        "loading; the adapter is loaded as a new version every sync_every steps).",
    )
    serving: ServingConfig | None = Field(
        None,
        description="rollouts: served: the vLLM server (base_url, model, key_env, "
        "adapter_root = OUT/served as the server sees it).",
    )
    sync_every: int = Field(
        1, ge=1, description="rollouts: served: load the adapter into the server every N steps."
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="rollouts: served: rollouts more than N versions behind the weights being "
        "updated are masked out of the loss (and counted in stale_token_share).",
    )
    prefetch: bool = Field(
        True,
        description="rollouts: served: generate step k+1's rollouts in the background while "
        "step k trains (one step ahead; staleness 1).",
    )
    is_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = Field(
        "token_truncate",
        description="rollouts: served: truncated importance sampling on the server's sampling "
        "logprobs (TRL vllm_importance_sampling_mode): weight = min(p_train / p_served, is_cap) "
        "per token (truncate) or 0 above the cap (mask); sequence_* use the product over tokens.",
    )
    is_cap: float = Field(
        2.0,
        gt=0,
        description="rollouts: served: cap of the importance weights (TRL "
        "vllm_importance_sampling_clip_max).",
    )
    workers: int = _RAY["workers"]
    ray_address: str | None = _RAY["ray_address"]
    gpus_per_worker: float = _RAY["gpus_per_worker"]
    max_failures: int = _RAY["max_failures"]

    @property
    def uses_ray(self) -> bool:
        """Whether the run trains under Ray Train (``workers > 1`` or a ``ray_address``)."""
        return self.workers > 1 or self.ray_address is not None

    @model_serializer(mode="wrap")
    def _drop_default_served_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the served-rollout and Ray Train fields out of a dump while they are at their
        defaults, so an in-process, one-process config dumps exactly as before they existed
        (``rl.json``'s ``config`` and the loop's RL fingerprint stay the same)."""
        data: dict[str, Any] = handler(self)
        for name in (*SERVED_FIELDS, *RAY_FIELDS):
            if name in data and getattr(self, name) == type(self).model_fields[name].default:
                del data[name]
        return data

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
        if self.rooms_per_step * self.workers > len(self.rooms):
            per_step = f"rooms_per_step {self.rooms_per_step}" + (
                f" x workers {self.workers}" if self.workers > 1 else ""
            )
            raise ValueError(
                f"{per_step} > {len(self.rooms)} room(s): TRL's sampler draws that many "
                "different rooms per step and would make no batch; lower rooms_per_step"
                + (" or workers" if self.workers > 1 else "")
                + " or add rooms"
            )
        taken = {"rooms", "root", "sub", "episodes", "seed"} & set(self.collect)
        if taken:
            raise ValueError(
                f"collect: {', '.join(sorted(taken))} are set by rl (rooms, base, sub, "
                "num_generations, seed); remove them from the collect section"
            )
        if self.rollouts == "served":
            if self.uses_ray:
                raise ValueError(
                    "rollouts: served trains in one process (the server holds one adapter "
                    "version at a time); remove workers / ray_address, or use in_process"
                )
            if self.serving is None:
                raise ValueError(
                    "rollouts: served needs serving: {base_url, model} (the vLLM server that "
                    "loads each adapter version)"
                )
            if not self.serving.load_adapters:
                raise ValueError(
                    "rollouts: served loads a new adapter version every sync_every steps; "
                    "serving.load_adapters: false cannot serve them"
                )
            if self.prefetch and self.max_staleness == 0:
                raise ValueError(
                    "max_staleness 0 with prefetch masks every prefetched rollout (they are one "
                    "version behind); set prefetch: false or max_staleness >= 1"
                )
        elif self.serving is not None:
            raise ValueError(
                "serving is used only with rollouts: served; remove it or set rollouts"
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


__all__ = ["BUILTIN_REWARDS", "SERVED_FIELDS", "RLConfig", "build_config", "finish_config"]
