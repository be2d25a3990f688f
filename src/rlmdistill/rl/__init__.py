"""``rlmdistill rl``: online GRPO on the root with rollouts from the RLM harness.

:mod:`~rlmdistill.rl.config` (:class:`RLConfig`), :mod:`~rlmdistill.rl.rewards` (episode ->
reward), :mod:`~rlmdistill.rl.rollout` (TRL ``rollout_func``: real collect episodes -> GRPO
rows), :mod:`~rlmdistill.rl.train` (:func:`run`), :mod:`~rlmdistill.rl.cli`. See docs/rl.md.
"""

from rlmdistill.rl.config import RLConfig, build_config
from rlmdistill.rl.train import RLError, RLResult, run

__all__ = ["RLConfig", "RLError", "RLResult", "build_config", "run"]
