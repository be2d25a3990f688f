"""``rlmdistill export``: root turns of collected runs -> an SFT dataset (standalone).

The main entry is ``rlmdistill filter`` (which selects episodes and calls
:func:`rlmdistill.export.export_dataset`); this command exports every finished episode of the
given runs, or the kept episodes of a filter's ``decisions.jsonl``::

    rlmdistill export runs/demo --out datasets/demo --tokenizer qwen2.5-coder-0.5b
    rlmdistill export --episodes datasets/demo/decisions.jsonl --out datasets/demo-turns \\
        --tokenizer qwen2.5-coder-0.5b --mode turn
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlmdistill.export.dataset import ExportReport, FilterTimeScores, export_dataset
from rlmdistill.export.options import ExportOptions
from rlmdistill.traces.runs import EpisodeRef, load_summaries
from rlmdistill.traces.store import read_jsonl

__all__ = ["export_main", "read_decisions", "register"]


def read_decisions(path: Path) -> tuple[list[EpisodeRef], dict[str, FilterTimeScores]]:
    """Kept episodes and their scores from a filter's ``decisions.jsonl``.

    Each line is a JSON object with at least ``run_dir``, ``episode_id`` and ``kept``
    (``pass_rate`` / ``coverage`` optional); a torn last line is ignored. Raises
    ``ValueError`` naming the file and line when a field is missing.
    """
    refs: list[EpisodeRef] = []
    scores: dict[str, FilterTimeScores] = {}
    for i, rec in enumerate(read_jsonl(path).records, start=1):
        try:
            kept, run_dir, episode_id = rec["kept"], rec["run_dir"], rec["episode_id"]
        except KeyError as exc:
            raise ValueError(f"{path}: line {i}: missing field {exc.args[0]!r}") from exc
        if kept:
            refs.append(EpisodeRef(Path(run_dir), episode_id))
            scores[episode_id] = FilterTimeScores(rec.get("pass_rate"), rec.get("coverage"))
    return refs, scores


def export_main(
    runs: list[Path],
    out: Path,
    options: ExportOptions,
    *,
    episodes: Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> ExportReport:
    """Export ``runs`` (every episode listed in their ``episodes.jsonl``) or, with
    ``episodes``, the kept episodes of that ``decisions.jsonl``. Raises ``ValueError`` when
    neither is given; see :func:`~rlmdistill.export.export_dataset` for the rest."""
    scores: dict[str, FilterTimeScores] | None = None
    if episodes is not None:
        refs, scores = read_decisions(episodes)
    elif runs:
        refs = [EpisodeRef(r, s.episode_id) for r in runs for s in load_summaries(r)]
    else:
        raise ValueError("give run directories or --episodes decisions.jsonl")
    source = f"--episodes {episodes}" if episodes else "runs " + ", ".join(map(str, runs))
    return export_dataset(
        refs,
        out,
        options,
        scores=scores,
        overwrite=overwrite,
        progress=progress,
        card_extra=f"Exported by `rlmdistill export` from {source} (no selection rules here).",
    )


def register(app: typer.Typer) -> None:
    """Add the ``export`` command to ``app``."""

    @app.command("export")
    def export_cmd(
        runs: Annotated[
            list[Path] | None, typer.Argument(help="Run directories (all finished episodes).")
        ] = None,
        out: Annotated[Path, typer.Option(help="Dataset folder to write.")] = Path("dataset"),
        tokenizer: Annotated[
            str, typer.Option(help="Tokenizer directory or pulled embedded model name.")
        ] = "qwen2.5-coder-0.5b",
        episodes: Annotated[
            Path | None, typer.Option(help="A filter's decisions.jsonl: export its kept episodes.")
        ] = None,
        mode: Annotated[str, typer.Option(help="trajectory | turn")] = "trajectory",
        style: Annotated[str, typer.Option(help="plain | tools")] = "plain",
        system_prompt: Annotated[
            str, typer.Option(help="collected | plain | FILE (context distillation).")
        ] = "collected",
        chat_template: Annotated[
            Path | None, typer.Option(help=".jinja file replacing the tokenizer's template.")
        ] = None,
        max_length: Annotated[int, typer.Option(help="Most tokens per example.")] = 8192,
        truncation: Annotated[str, typer.Option(help="drop | keep_start")] = "drop",
        supervise_prefill: Annotated[
            bool, typer.Option(help="Train on the reply prefill too.")
        ] = True,
        min_supervised_tokens: Annotated[int, typer.Option(help="Drop examples below.")] = 1,
        reasoning: Annotated[
            str, typer.Option(help="Reasoning policy: last | all | drop (docs/export.md).")
        ] = "last",
        from_ids: Annotated[
            bool, typer.Option(help="Turn mode: build examples from recorded token ids.")
        ] = False,
        overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset.")] = False,
    ) -> None:
        """Export root turns of collected runs as an SFT dataset (HF datasets on disk)."""
        try:
            options = ExportOptions.model_validate(
                {
                    "tokenizer": tokenizer,
                    "chat_template": str(chat_template) if chat_template else None,
                    "mode": mode,
                    "style": style,
                    "system_prompt": system_prompt,
                    "max_length": max_length,
                    "truncation": truncation,
                    "supervise_prefill": supervise_prefill,
                    "min_supervised_tokens": min_supervised_tokens,
                    "reasoning": reasoning,
                    "from_ids": from_ids,
                }
            )
            report = export_main(
                list(runs or []), out, options, episodes=episodes, overwrite=overwrite
            )
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        drops = ", ".join(f"{k} {v}" for k, v in report.dropped.items()) or "none"
        typer.echo(
            f"{report.n_examples} examples from {report.n_episodes_exported}/"
            f"{report.n_episodes} episodes -> {out}  (dropped: {drops}; "
            f"tokens mean {report.tokens.mean:.0f} max {report.tokens.max}; "
            f"{report.examples_per_s:.1f} examples/s)"
        )
        if report.n_reasoning_turns:
            typer.echo(
                f"reasoning policy {report.reasoning_policy}: {report.n_reasoning_turns} "
                f"reasoning turns, {report.n_reasoning_kept} supervised replies keep it"
            )
        if report.from_ids:
            typer.echo(
                f"from recorded ids: {report.n_ids_matched} equal a re-render; "
                f"mismatches {report.ids_mismatches or 'none'}"
            )
