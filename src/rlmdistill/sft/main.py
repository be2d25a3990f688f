"""The ``sft`` stage as a function: :func:`run` takes an :class:`~rlmdistill.sft.config.SFTConfig`
and returns the :class:`~rlmdistill.sft.train.SFTResult` (``rlmdistill sft`` and the loop call
it; the typer command in :mod:`rlmdistill.sft.cli` maps the result to output and an exit code).
The training itself is :func:`rlmdistill.sft.train.train` (TRL SFTTrainer + LoRA), in this
process or in Ray Train workers (:mod:`rlmdistill.sft.ray_train`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlmdistill.sft.config import SFTConfig
    from rlmdistill.sft.train import SFTResult

__all__ = ["run"]


def run(config: SFTConfig, *, resume: bool = False, progress: bool = True) -> SFTResult:
    """Train the LoRA adapter ``config`` describes into ``config.out``; ``resume`` continues
    from the last checkpoint there; ``progress`` shows progress bars. With ``workers > 1`` or a
    ``ray_address`` the training runs in Ray Train workers
    (:func:`rlmdistill.sft.ray_train.train_ray`, which also raises ``RayTrainFailed``).

    Raises what :func:`rlmdistill.sft.train.train` raises (``SFTError``, ``DatasetError``,
    ``FileNotFoundError`` for a base model not pulled)."""
    if config.uses_ray:  # workers > 1 or a ray_address: Ray Train workers
        from rlmdistill.sft.ray_train import train_ray

        return train_ray(config, resume=resume, progress=progress)
    from rlmdistill.sft.train import train  # torch/transformers: import on use

    return train(config, resume=resume, progress=progress)
