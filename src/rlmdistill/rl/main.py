"""The ``rl`` stage as a function: :func:`run` takes an :class:`~rlmdistill.rl.config.RLConfig`
and returns the :class:`~rlmdistill.rl.train.RLResult` (``rlmdistill rl`` and the loop call
it). The training itself is :func:`rlmdistill.rl.train.run` (TRL GRPOTrainer + LoRA, harness
rollouts), in this process or in Ray Train workers (:mod:`rlmdistill.rl.ray_train`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlmdistill.rl.config import RLConfig
    from rlmdistill.rl.train import RLResult

__all__ = ["run"]


def run(config: RLConfig, *, resume: bool = False, progress: bool = True) -> RLResult:
    """Train the GRPO adapter ``config`` describes into ``config.out``; ``resume`` continues
    from the newest checkpoint there; ``progress`` shows TRL's progress bar. With
    ``workers > 1`` or a ``ray_address`` the training runs in Ray Train workers
    (:func:`rlmdistill.rl.ray_train.train_ray`, which also raises ``RayTrainFailed``; no
    progress bar there).

    Raises what :func:`rlmdistill.rl.train.run` raises (``RLError``, ``RolloutError``,
    ``FileNotFoundError`` for a base model not pulled)."""
    if config.uses_ray:
        from rlmdistill.rl.ray_train import train_ray

        return train_ray(config, resume=resume)
    from rlmdistill.rl.train import run as train  # torch/transformers: import on use

    return train(config, resume=resume, progress=progress)
