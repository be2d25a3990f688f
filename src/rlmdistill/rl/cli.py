"""``rlmdistill rl CONFIG``: online GRPO on the root with harness rollouts (docs/rl.md).

::

    rlmdistill rl rl.yaml [--out adapters/NAME] [--max-steps N] [--resume] [--workers N]

:func:`rl_main` (a config file plus overrides) and :func:`train_main` (a validated
:class:`~rlmdistill.rl.config.RLConfig`) are the plain functions behind the command;
:func:`register` adds it to a typer app, its flags made from ``RLConfig``'s fields by
:mod:`rlmdistill.cliconfig` (the positional file gives any field; typed flags override it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from rlmdistill.cliconfig import config_command
from rlmdistill.rl.config import RLConfig, finish_config

err = Console(stderr=True, soft_wrap=True)


def rl_main(
    config: Path,
    *,
    out: Path | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    progress: bool = True,
) -> int:
    """Train per ``config`` (YAML/JSON) with flags overriding it; returns the exit code.

    0 on success; 2 with one clear line on stderr for a user error (bad config field, occupied
    output folder, nothing to resume, missing base model, room without task).
    """
    from pydantic import ValidationError

    from rlmdistill.rl.config import build_config

    try:
        cfg = build_config(config, {"out": out, "max_steps": max_steps})
    except (ValidationError, ValueError, OSError) as exc:
        err.print(f"rl: {config}: {exc}", markup=False)
        return 2
    return train_main(cfg, resume=resume, progress=progress)


def train_main(cfg: RLConfig, *, resume: bool = False, progress: bool = True) -> int:
    """Train per the validated ``cfg`` and print each step; returns the exit code (0, or 2
    with one clear line on stderr for an occupied output folder, nothing to resume, a
    missing base model or a room without task, or 1 when Ray Train workers failed past
    ``max_failures``)."""
    from rlmdistill.rl.main import run
    from rlmdistill.rl.ray_train import RayTrainFailed
    from rlmdistill.rl.rollout import RolloutError
    from rlmdistill.rl.train import RLError

    try:
        res = run(cfg, resume=resume, progress=progress)
    except (RLError, RolloutError, FileNotFoundError) as exc:
        err.print(f"rl: {exc}", markup=False)
        return 2
    except RayTrainFailed as exc:  # --workers N: Ray Train gave up after its restarts
        err.print(f"rl: training failed: {exc}", markup=False)
        return 1
    for r in res.steps:
        err.print(
            f"step {r['step']}: reward {r.get('reward_mean', float('nan')):.4f} "
            f"(std {r.get('reward_std', float('nan')):.4f}), zero-variance groups "
            f"{r.get('zero_variance_groups')}/{r.get('groups')}, loss {r['loss']:.4f}, kl {r.get('kl')}",
            markup=False,
        )
    err.print(f"adapter: {res.out} (step {res.global_step})", markup=False)
    return 0


def register(app: typer.Typer) -> None:
    """Add ``rl`` to ``app``."""

    @config_command(
        app,
        "rl",
        config_argument="RL config (YAML/JSON), see docs/rl.md.",
        prepare=finish_config,
    )
    def rl_cmd(
        cfg: RLConfig,
        resume: Annotated[bool, typer.Option(help="Continue from the newest checkpoint.")] = False,
    ) -> None:
        """Online GRPO on the root: LoRA, rollouts from the RLM harness, frozen sub model."""
        raise typer.Exit(train_main(cfg, resume=resume))


__all__ = ["register", "rl_main", "train_main"]
