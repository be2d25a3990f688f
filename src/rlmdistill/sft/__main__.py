"""``python -m rlmdistill.sft ARGS`` = ``rlmdistill sft ARGS`` (for ``accelerate launch -m``)."""

from __future__ import annotations

import sys

import typer

from rlmdistill.sft.cli import register


def main() -> None:
    """Run the ``sft`` command group with this process's arguments."""
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    register(app)
    app(args=["sft", *sys.argv[1:]], prog_name="python -m rlmdistill.sft")


if __name__ == "__main__":
    main()
