"""TRL ``rollout_func`` backed by the RLM harness: real collect episodes -> GRPO rows.

TRL's ``GRPOTrainer`` calls :class:`HarnessRollout` with the prompts of one generation batch
on this process (``prompts``: one room path per rollout; TRL's sampler repeats each room
``num_generations`` times) and expects one completion per prompt. Each call:

1. wraps the model being trained in a :class:`~rlmdistill.models.local.LocalChatClient`
   (:meth:`~rlmdistill.models.local.LocalChatClient.from_model`, no second copy) in eval mode,
   so every root turn samples from the current policy; the sub model is the frozen client
   given at construction;
2. runs the episodes with :func:`rlmdistill.collect.runner.collect` into
   ``OUT/rollouts/step-NNNNNN/`` (a normal run folder: ``rlmdistill judge``, ``report`` and the
   dashboard read it); a step interrupted by a crash resumes there, reusing its finished
   episodes (they came from the same checkpoint's policy);
3. turns each episode into one row with
   :func:`rlmdistill.export.grpo.episode_token_row` (the ``export-grpo`` row builder):
   ``completion_ids`` = generated ids interleaved with the REPL observations and template ids
   the harness added, ``env_mask`` = ``loss_mask`` (1 only on generated ids);
4. scores each episode (:func:`rlmdistill.rl.rewards.episode_rewards`) and returns the rewards
   as the ``rlm_reward`` column, which :func:`harness_reward` hands back to TRL.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmdistill.export.advantages import group_advantages
from rlmdistill.models.base import ModelClient
from rlmdistill.rl.config import RLConfig
from rlmdistill.rl.rewards import episode_rewards
from rlmdistill.rooms import DataRoom


class RolloutError(RuntimeError):
    """A rollout episode cannot become a training row (the message names it and the fix)."""


def root_spec(base: str) -> str:
    """The root spec recorded in each step's ``run.json`` (``local:NAME`` or ``local:DIR``)."""
    return base if base.startswith("local:") else f"local:{base}"


def harness_reward(
    prompts: list[Any], completions: list[Any], rlm_reward: list[float], **kwargs: Any
) -> list[float]:
    """TRL reward function: the rewards :class:`HarnessRollout` computed for the episodes.

    Also reports the step's zero-variance group count to TRL's trackers (``log_metric``).
    """
    log_metric = kwargs.get("log_metric")
    zero = kwargs.get("rlm_zero_variance_groups")
    if log_metric is not None and zero:
        log_metric("rollout/zero_variance_groups", float(zero[0]))
    return [float(r) for r in rlm_reward]


class HarnessRollout:
    """``rollout_func(prompts, trainer) -> dict`` for TRL's ``GRPOTrainer`` (module doc).

    Args:
        config: the RL config (reward, collect settings, out folder).
        rooms: loaded rooms by the prompt string that names them (their absolute path).
        sub: the frozen sub-call client.
        tokenizer: the root's tokenizer (with its chat template).

    Attributes:
        history: one record per call (step, run folder, rewards per group, zero-variance
            groups, statuses), appended by :meth:`__call__`; the trainer writes them to
            ``rl_log.jsonl``.
    """

    def __init__(
        self,
        config: RLConfig,
        rooms: dict[str, DataRoom],
        sub: ModelClient,
        tokenizer: Any,
        *,
        on_step: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.rooms = rooms
        self.sub = sub
        self.tokenizer = tokenizer
        self.on_step = on_step
        self.history: list[dict[str, Any]] = []

    def collect_config(self, paths: list[str], episodes: int, step: int) -> Any:
        """The :class:`~rlmdistill.collect.config.CollectConfig` of one step's rollouts.

        Root sampling defaults to temperature 1.0, top_p 1.0 (the distribution the GRPO loss
        scores), unless ``collect.root_sampling`` says otherwise.
        """
        from rlmdistill.collect.main import build_config

        data = dict(self.config.collect)
        sampling = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 256}
        sampling.update(data.pop("root_sampling", None) or {})
        data.setdefault("concurrency", episodes * len(paths))
        overrides = {
            **data,
            "rooms": paths,
            "root": root_spec(self.config.base),
            "sub": self.config.sub_spec,
            "episodes": episodes,
            "seed": self.config.seed + step,
            "root_sampling": sampling,
        }
        return build_config(None, overrides)

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """Run one episode per prompt with the current policy; return TRL's rollout dict.

        Returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (lists, one
        entry per prompt, in prompt order) plus ``rlm_reward``, ``rlm_episode_id`` and
        ``rlm_zero_variance_groups`` (forwarded by TRL to :func:`harness_reward`).

        Raises:
            RolloutError: a prompt that is no configured room, or an episode without root
                token ids / with a non-contiguous token sequence.
        """
        from rlmdistill.collect.runner import collect
        from rlmdistill.export.grpo import episode_token_row
        from rlmdistill.rl.policy_client import PolicyChatClient
        from rlmdistill.traces.runs import load_summaries, load_trajectory

        step = int(trainer.state.global_step) + 1
        counts = Counter(prompts)
        unknown = [p for p in counts if p not in self.rooms]
        if unknown:
            raise RolloutError(f"rollout prompts name no configured room: {unknown[:3]}")
        paths = list(counts)
        name = f"step-{step:06d}"
        if int(getattr(trainer.accelerator, "num_processes", 1)) > 1:  # one run folder each
            name += f"-rank{int(trainer.accelerator.process_index)}"
        run_dir = Path(self.config.out) / "rollouts" / name
        cc = self.collect_config(paths, max(counts.values()), step)
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        client = PolicyChatClient.from_model(
            model,
            self.tokenizer,
            model_id=f"{cc.root}@rl-step{step}",
            max_batch=self.config.max_batch,
        )
        started = time.monotonic()
        try:
            collect(
                cc, run_dir, client, self.sub, progress=False, rooms=[self.rooms[p] for p in paths]
            )
        finally:
            client.close()
            model.train(was_training)

        by_key = {(s.room.path, s.sample_index): s for s in load_summaries(run_dir)}
        seen: Counter[str] = Counter()
        summaries, trajectories, rows = [], [], []
        for p in prompts:
            k = seen[p]
            seen[p] += 1
            s = by_key[(str(self.rooms[p].path), k)]
            traj = load_trajectory(run_dir, s.episode_id)
            try:
                row = episode_token_row(traj.turns)
            except (LookupError, ValueError) as exc:
                raise RolloutError(
                    f"{run_dir}: episode {s.episode_id} (status {s.status}) gives no training "
                    f"row: {exc}. Check the room fits the root's context and the token budget"
                ) from exc
            summaries.append(s)
            trajectories.append(traj)
            rows.append(row)
        rewards = episode_rewards(self.config.reward, run_dir, summaries, trajectories)

        groups: dict[str, list[float]] = {}
        for p, r in zip(prompts, rewards, strict=True):
            groups.setdefault(p, []).append(r)
        zero = sum(group_advantages(g).zero_variance for g in groups.values())
        record = {
            "step": step,
            "run_dir": str(run_dir),
            "episodes": len(prompts),
            "groups": len(groups),
            "zero_variance_groups": zero,
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
            "group_rewards": {self.rooms[p].room_id: g for p, g in groups.items()},
            "statuses": dict(Counter(s.status for s in summaries)),
            "generated_tokens": sum(sum(r["loss_mask"]) for r in rows),
            "completion_tokens": sum(len(r["completion_ids"]) for r in rows),
            "rollout_wall_s": round(time.monotonic() - started, 3),
            "sub_calls_per_rollout": statistics.fmean(s.n_sub_calls for s in summaries),
            # in process: the trainer's current weights generate every rollout (on-policy)
            "staleness": 0.0,
            "stale_token_share": 0.0,
        }
        self.history.append(record)
        if self.on_step is not None:
            self.on_step(record)
        return {
            "prompt_ids": [r["prompt_ids"] for r in rows],
            "completion_ids": [r["completion_ids"] for r in rows],
            "logprobs": [
                r["logprobs"] if r["logprobs"] is not None else [0.0] * len(r["completion_ids"])
                for r in rows
            ],
            "env_mask": [r["loss_mask"] for r in rows],
            "rlm_reward": rewards,
            "rlm_episode_id": [s.episode_id for s in summaries],
            "rlm_zero_variance_groups": [zero] * len(prompts),
        }


def dump_record(record: dict[str, Any]) -> str:
    """One JSON line of ``rl_log.jsonl``."""
    return json.dumps(record, sort_keys=True)


__all__ = ["HarnessRollout", "RolloutError", "dump_record", "harness_reward", "root_spec"]
