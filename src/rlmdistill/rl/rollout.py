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
   :func:`rlmdistill.export.grpo.episode_token_tail` (the ``export-grpo`` row builder):
   ``completion_ids`` = generated ids interleaved with the REPL observations and template ids
   the harness added, ``env_mask`` = ``loss_mask`` (1 only on generated ids). Turns before
   the last point where a prompt does not extend the previous prompt + completion (a served
   chat template re-tokenised an earlier reply) stay out of the loss, counted in the step's
   ``turns_out_of_loss``;
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
from typing import Any, NamedTuple

from rlmdistill.export.advantages import group_advantages
from rlmdistill.models.base import ModelClient
from rlmdistill.rl.config import RLConfig
from rlmdistill.rl.rewards import episode_rewards
from rlmdistill.rooms import DataRoom


class RolloutError(RuntimeError):
    """A rollout episode cannot become a training row (the message names it and the fix)."""


class Episode(NamedTuple):
    """One collected rollout: its summary, its GRPO row
    (:func:`~rlmdistill.export.grpo.episode_token_tail`), its reward and the number of its
    root turns left out of the row (0 when the episode is one token sequence)."""

    summary: Any
    row: dict[str, Any]
    reward: float
    turns_left_out: int = 0


class RolloutBatch(NamedTuple):
    """The episodes of one step's collect: by ``(room path, sample index)``."""

    step: int
    run_dir: Path
    episodes: dict[tuple[str, int], Episode]
    wall_s: float
    """Wall seconds of the collect, the rows and the rewards."""


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

    def collect_config(
        self, paths: list[str], episodes: int, step: int, *, root: str | None = None
    ) -> Any:
        """The :class:`~rlmdistill.collect.config.CollectConfig` of one step's rollouts.

        Root sampling defaults to temperature 1.0, top_p 1.0 (the distribution the GRPO loss
        scores), unless ``collect.root_sampling`` says otherwise. ``root``: the root spec
        (default :func:`root_spec` of the base; served rollouts give the version's
        ``openai:`` spec).
        """
        from rlmdistill.collect.main import build_config

        data = dict(self.config.collect)
        sampling = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 256}
        sampling.update(data.pop("root_sampling", None) or {})
        data.setdefault("concurrency", episodes * len(paths))
        overrides = {
            **data,
            "rooms": paths,
            "root": root or root_spec(self.config.base),
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
        from rlmdistill.rl.policy_client import PolicyChatClient

        step = int(trainer.state.global_step) + 1
        paths, per_room = self.check_prompts(prompts)
        run_dir = self.step_dir(step, trainer)
        cc = self.collect_config(paths, per_room, step)
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        client = PolicyChatClient.from_model(
            model,
            self.tokenizer,
            model_id=f"{cc.root}@rl-step{step}",
            max_batch=self.config.max_batch,
        )
        try:
            batch = self.generate(paths, cc, run_dir, client, step)
        finally:
            client.close()
            model.train(was_training)
        # in process: the trainer's current weights generate every rollout (on-policy)
        result = self.output(prompts, batch, {"staleness": 0.0, "stale_token_share": 0.0})
        if int(getattr(trainer.accelerator, "num_processes", 1)) > 1:  # rank 0 merges them
            path = rank_record_path(
                Path(self.config.out), step, int(trainer.accelerator.process_index)
            )
            tmp = path.with_suffix(".tmp")
            tmp.write_text(dump_record(self.history[-1]), encoding="utf-8")
            tmp.replace(path)
        return result

    def check_prompts(self, prompts: list[str]) -> tuple[list[str], int]:
        """The distinct rooms of ``prompts`` (first-seen order) and episodes per room (the
        most repeats of one room). Raises :class:`RolloutError` for a prompt naming no
        configured room."""
        counts = Counter(prompts)
        unknown = [p for p in counts if p not in self.rooms]
        if unknown:
            raise RolloutError(f"rollout prompts name no configured room: {unknown[:3]}")
        return list(counts), max(counts.values())

    def step_dir(self, step: int, trainer: Any) -> Path:
        """``OUT/rollouts/step-NNNNNN`` (``-rankR`` appended with several processes)."""
        name = f"step-{step:06d}"
        if int(getattr(trainer.accelerator, "num_processes", 1)) > 1:  # one run folder each
            name += f"-rank{int(trainer.accelerator.process_index)}"
        return Path(self.config.out) / "rollouts" / name

    def generate(
        self, paths: list[str], cc: Any, run_dir: Path, client: ModelClient, step: int
    ) -> RolloutBatch:
        """Collect the episodes of ``cc`` (the rooms named by ``paths``) into ``run_dir`` with ``client`` as the root, turn
        each into a row and score it (no trainer needed: served rollouts call it from a
        background thread). Raises :class:`RolloutError` for an episode with no token ids."""
        from rlmdistill.collect.runner import collect
        from rlmdistill.export.grpo import episode_token_tail
        from rlmdistill.traces.runs import load_summaries, load_trajectory

        started = time.monotonic()
        rooms = [self.rooms[p] for p in paths]
        collect(cc, run_dir, client, self.sub, progress=False, rooms=rooms)
        wanted = {str(r.path) for r in rooms}
        summaries = sorted(
            (s for s in load_summaries(run_dir) if s.room.path in wanted),
            key=lambda s: (s.room.path, s.sample_index),
        )
        trajectories, rows, left_out = [], [], []
        for s in summaries:
            traj = load_trajectory(run_dir, s.episode_id)
            try:
                row, k = episode_token_tail(traj.turns)
            except (LookupError, ValueError) as exc:
                raise RolloutError(
                    f"{run_dir}: episode {s.episode_id} (status {s.status}) gives no training "
                    f"row: {exc}. Check the room fits the root's context and the token budget"
                ) from exc
            trajectories.append(traj)
            rows.append(row)
            left_out.append(k)
        rewards = episode_rewards(self.config.reward, run_dir, summaries, trajectories)
        episodes = {
            (s.room.path, s.sample_index): Episode(s, row, r, k)
            for s, row, r, k in zip(summaries, rows, rewards, left_out, strict=True)
        }
        return RolloutBatch(step, run_dir, episodes, time.monotonic() - started)

    def output(
        self,
        prompts: list[str],
        batch: RolloutBatch,
        extra: dict[str, Any],
        *,
        masked: bool = False,
    ) -> dict[str, Any]:
        """TRL's rollout dict for ``prompts`` from ``batch`` (the k-th repeat of a room gets its
        episode with sample index k) and the step's log record (appended to :attr:`history`,
        with ``extra`` merged in). ``masked``: every ``env_mask`` is 0 (a rollout too stale to
        train on: no loss, no KL)."""
        seen: Counter[str] = Counter()
        chosen: list[Episode] = []
        for p in prompts:
            key = (str(self.rooms[p].path), seen[p])
            seen[p] += 1
            if key not in batch.episodes:
                raise RolloutError(f"{batch.run_dir}: no episode {key[1]} of room {key[0]}")
            chosen.append(batch.episodes[key])
        rows = [e.row for e in chosen]
        rewards = [e.reward for e in chosen]
        summaries = [e.summary for e in chosen]
        groups: dict[str, list[float]] = {}
        for p, r in zip(prompts, rewards, strict=True):
            groups.setdefault(p, []).append(r)
        zero = sum(group_advantages(g).zero_variance for g in groups.values())
        record = {
            "step": batch.step,
            "run_dir": str(batch.run_dir),
            "episodes": len(prompts),
            "groups": len(groups),
            "zero_variance_groups": zero,
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
            "group_rewards": {self.rooms[p].room_id: g for p, g in groups.items()},
            "statuses": dict(Counter(s.status for s in summaries)),
            "generated_tokens": sum(sum(r["loss_mask"]) for r in rows),
            "completion_tokens": sum(len(r["completion_ids"]) for r in rows),
            "turns_out_of_loss": sum(e.turns_left_out for e in chosen),
            "rollout_wall_s": round(batch.wall_s, 3),
            "sub_calls_per_rollout": statistics.fmean(s.n_sub_calls for s in summaries),
            **extra,
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
            "env_mask": [[0] * len(r["loss_mask"]) if masked else r["loss_mask"] for r in rows],
            "rlm_reward": rewards,
            "rlm_episode_id": [s.episode_id for s in summaries],
            "rlm_zero_variance_groups": [zero] * len(prompts),
        }


RANK_RECORD = "step-{step:06d}-rank{rank}.record.json"
"""Under several processes: each rank's rollout record of a step, beside its step folder in
``OUT/rollouts/`` (:func:`rank_record_path`), merged by rank 0 for ``rl_log.jsonl``."""

_SUMMED = (
    "episodes",
    "groups",
    "zero_variance_groups",
    "generated_tokens",
    "completion_tokens",
    "turns_out_of_loss",
)
_PER_EPISODE = ("sub_calls_per_rollout", "staleness", "stale_token_share")


def rank_record_path(out: Path, step: int, rank: int) -> Path:
    """Where rank ``rank`` keeps its rollout record of optimiser step ``step`` (:data:`RANK_RECORD`)."""
    return Path(out) / "rollouts" / RANK_RECORD.format(step=step, rank=rank)


def merge_rank_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One step's rollout record over every rank's (``records``, by rank; each as
    :meth:`HarnessRollout.output` makes it): counts summed (:data:`_SUMMED`), statuses
    summed, ``group_rewards`` joined and the reward mean and sample sd taken over all of
    them, per-rollout means weighted by each rank's episodes, ``rollout_wall_s`` the slowest
    rank's (the update waits for it); ``run_dir`` is rank 0's, ``run_dirs`` every rank's,
    ``ranks`` their number; other keys as rank 0 has them.

    Example: ranks with group rewards ``{"a": [0, 1]}`` and ``{"b": [1, 1]}`` -> reward mean
    0.75, 2 groups, 1 of zero variance (if each rank counted its own).

    Raises ``ValueError`` for an empty list or records of different steps.
    """
    if not records:
        raise ValueError("no rank record to merge")
    steps = {r.get("step") for r in records}
    if len(steps) > 1:
        raise ValueError(f"rank records of different steps: {sorted(map(str, steps))}")
    merged = dict(records[0])
    for key in _SUMMED:
        if all(key in r for r in records):
            merged[key] = sum(r[key] for r in records)
    groups: dict[str, list[float]] = {}
    for r in records:
        for room, rewards in (r.get("group_rewards") or {}).items():
            groups.setdefault(room, []).extend(float(x) for x in rewards)
    rewards = [x for g in groups.values() for x in g]
    if rewards:
        merged["group_rewards"] = groups
        merged["reward_mean"] = statistics.fmean(rewards)
        merged["reward_std"] = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    statuses: Counter[str] = Counter()
    for r in records:
        statuses.update(r.get("statuses") or {})
    merged["statuses"] = dict(statuses)
    episodes = [int(r.get("episodes") or 0) for r in records]
    total = sum(episodes)
    for key in _PER_EPISODE:
        if total and all(r.get(key) is not None for r in records):
            weighted = [float(r[key]) * n for r, n in zip(records, episodes, strict=True)]
            merged[key] = sum(weighted) / total
    walls = [r["rollout_wall_s"] for r in records if r.get("rollout_wall_s") is not None]
    if walls:
        merged["rollout_wall_s"] = max(walls)
    merged["run_dirs"] = [r.get("run_dir") for r in records]
    merged["ranks"] = len(records)
    return merged


def dump_record(record: dict[str, Any]) -> str:
    """One JSON line of ``rl_log.jsonl``."""
    return json.dumps(record, sort_keys=True)


__all__ = [
    "RANK_RECORD",
    "Episode",
    "HarnessRollout",
    "RolloutBatch",
    "RolloutError",
    "dump_record",
    "harness_reward",
    "merge_rank_records",
    "rank_record_path",
    "root_spec",
]
