"""``rlmdistill sft`` (train a LoRA adapter) and ``rlmdistill sft merge`` (fold it in).

::

    rlmdistill sft --dataset datasets/NAME --base qwen2.5-coder-0.5b --out adapters/NAME \\
        [--config sft.yaml] [--max-steps N] [--lr X] [--epochs E] [--seed S] [--resume] \\
        [--workers N [--ray-address ADDR] [--gpus-per-worker G]]
    rlmdistill sft merge --adapter adapters/NAME --out models/NAME-merged
    accelerate launch --config_file examples/accelerate/ddp_cpu.yaml -m rlmdistill.sft \\
        --dataset datasets/NAME --base smollm2-135m --out adapters/NAME

:func:`train_main` (a validated :class:`~rlmdistill.sft.config.SFTConfig` in, an exit
code out), :func:`sft_main` (a config file plus overrides) and :func:`merge_main` are the
plain functions behind the commands (tests call them); :func:`register` adds the ``sft``
command group to a typer app, its training flags made from ``SFTConfig``'s fields by
:mod:`rlmdistill.cliconfig` (``--config FILE`` for any field, typed flags override it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from rlmdistill.cliconfig import config_command
from rlmdistill.sft.config import SFTConfig

err = Console(stderr=True, soft_wrap=True)


def sft_main(
    dataset: Path | None = None,
    base: str | None = None,
    out: Path | None = None,
    *,
    config: Path | None = None,
    max_steps: int | None = None,
    lr: float | None = None,
    epochs: float | None = None,
    seed: int | None = None,
    resume: bool = False,
    progress: bool = True,
) -> int:
    """Train per ``config`` (file) with CLI flags overriding it; returns the exit code.

    0 on success; 2 with one clear line on stderr for a user error (bad config field, dataset
    check failure, missing base model, occupied output folder).
    """
    from pydantic import ValidationError

    from rlmdistill.sft.config import build_config

    overrides = {
        "dataset": dataset,
        "base": base,
        "out": out,
        "max_steps": max_steps,
        "learning_rate": lr,
        "num_train_epochs": epochs,
        "seed": seed,
    }
    try:
        cfg = build_config(config, overrides)
    except ValidationError as exc:
        err.print(f"[red]invalid SFT configuration:[/red] {exc}")
        return 2
    except (ValueError, FileNotFoundError) as exc:  # the file: unreadable, unknown key
        err.print(f"[red]error:[/red] {exc}")
        return 2
    return train_main(cfg, resume=resume, progress=progress)


def train_main(cfg: SFTConfig, *, resume: bool = False, progress: bool = True) -> int:
    """Train per the validated ``cfg`` and print what was done; returns the exit code (0, or
    2 with one clear line on stderr for a dataset check failure, missing base model or
    occupied output folder, or 1 when Ray Train workers failed past ``max_failures``)."""
    from rlmdistill.models.spec import BaseModelError
    from rlmdistill.sft.data import DatasetError
    from rlmdistill.sft.main import run
    from rlmdistill.sft.ray_train import RayTrainFailed
    from rlmdistill.sft.train import SFTError

    try:
        result = run(cfg, resume=resume, progress=progress)
    except (SFTError, BaseModelError, DatasetError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    except RayTrainFailed as exc:  # --workers N: Ray Train gave up after its restarts
        err.print(f"[red]training failed:[/red] {exc}")
        return 1
    loss = (
        f"loss {result.first_loss:.4f} -> {result.final_loss:.4f}, "
        if result.first_loss is not None and result.final_loss is not None
        else ""
    )
    dropped = f", dropped {result.dropped}" if result.dropped else ""
    err.print(
        f"sft: {result.global_step} steps on {result.n_examples} examples{dropped}, {loss}"
        f"{result.tokens_seen:,} tokens in {result.train_runtime_s:.1f}s -> {result.out_dir}"
    )
    err.print(f"sft: {result.eval_note}")
    if result.eval_losses:
        err.print(
            "sft: eval loss "
            + ", ".join(f"{r.loss:.4f} (step {r.step})" for r in result.eval_losses)
        )
    return 0


def merge_main(
    adapter: Path,
    out: Path,
    *,
    base: str | None = None,
    dtype: Literal["float32", "bfloat16"] = "float32",
) -> int:
    """Write base + adapter merged into ``out``; returns the exit code (2 on a user error)."""
    from rlmdistill.models.spec import BaseModelError
    from rlmdistill.sft.merge import merge_adapter
    from rlmdistill.sft.train import SFTError

    try:
        path = merge_adapter(adapter, out, base=base, dtype=dtype)
    except (SFTError, BaseModelError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 2
    err.print(f"merged {adapter} -> {path} (load it with local:{path})")
    return 0


class MergeOptions(BaseModel):
    """``rlmdistill sft merge``: fold a LoRA adapter into its base weights."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    adapter: Path
    """Adapter folder (adapters/NAME)."""
    out: Path
    """Folder for the merged checkpoint."""
    base: str | None = None
    """Base model (default: the one the adapter records)."""
    dtype: str = "float32"
    """Weights' dtype of the merged checkpoint: float32 or bfloat16."""


def register(app: typer.Typer) -> None:
    """Add the ``sft`` command group (train when no sub-command is given; ``merge``)."""
    sft_app = typer.Typer(
        help="Fine-tune the root on an exported dataset (TRL SFTTrainer + LoRA).",
        no_args_is_help=True,
    )

    @config_command(
        sft_app,
        "sft",
        group_callback=True,
        section="sft",
        names={
            "learning_rate": ["--lr", "--learning-rate"],
            "num_train_epochs": ["--epochs", "--num-train-epochs"],
        },
    )
    def sft(
        config: SFTConfig,
        resume: Annotated[
            bool, typer.Option(help="Continue from the newest checkpoint in OUT/checkpoints.")
        ] = False,
    ) -> None:
        """Train a LoRA adapter (see `rlmdistill sft --help`)."""
        raise typer.Exit(train_main(config, resume=resume))

    @config_command(sft_app, "merge", config_flag=None)
    def merge(options: MergeOptions) -> None:
        """Fold the adapter into the base weights and save a plain checkpoint."""
        if options.dtype not in ("float32", "bfloat16"):
            raise typer.BadParameter("--dtype must be float32 or bfloat16")
        raise typer.Exit(
            merge_main(
                options.adapter,
                options.out,
                base=options.base,
                dtype=options.dtype,  # type: ignore[arg-type]
            )
        )

    app.add_typer(sft_app, name="sft")


__all__ = ["MergeOptions", "merge_main", "register", "sft_main", "train_main"]
