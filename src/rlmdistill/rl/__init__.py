"""``rlmdistill rl``: online GRPO on the root with rollouts from the RLM harness.

:mod:`~rlmdistill.rl.config` (:class:`RLConfig`), :mod:`~rlmdistill.rl.rewards` (episode ->
reward), :mod:`~rlmdistill.rl.rollout` (TRL ``rollout_func``: real collect episodes -> GRPO
rows), :mod:`~rlmdistill.rl.train` (one process), :mod:`~rlmdistill.rl.ray_train` (Ray Train
workers), :mod:`~rlmdistill.rl.main` (:func:`run`: either), :mod:`~rlmdistill.rl.cli`. See
docs/rl.md.
"""

from rlmdistill.rl.config import RLConfig, build_config
from rlmdistill.rl.main import run
from rlmdistill.rl.train import RLError, RLResult

__all__ = ["RLConfig", "RLError", "RLResult", "build_config", "run"]
