"""The ``export`` stage as a function: :func:`run` takes an :class:`ExportConfig` and returns
the :class:`~rlmdistill.export.dataset.ExportReport` (``rlmdistill export`` calls it; so do
``rlmdistill filter``, the loop and the dashboard, on the decisions the filter stage wrote).

It exports every finished episode of the given runs, or the kept episodes of a filter's
``decisions.jsonl`` or a hand-written episode list (read with
:func:`rlmdistill.traces.artefacts.read_selection`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.export.dataset import ExportReport, FilterTimeScores, export_dataset
from rlmdistill.export.options import ExportOptions
from rlmdistill.traces.artefacts import read_selection
from rlmdistill.traces.runs import EpisodeRef, load_summaries

__all__ = ["ExportConfig", "kept_episodes", "run"]


class ExportConfig(BaseModel):
    """What :func:`run` exports and where (the fields of ``rlmdistill export``; each field's
    description is its flag's help)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: list[Path] = Field(
        default_factory=list,
        description="Run directories (all finished episodes; ignored with --episodes).",
    )
    out: Path = Field(description="Dataset folder to write.")
    options: ExportOptions = Field(description="How root turns become examples.")
    episodes: Path | None = Field(
        None, description="A filter's decisions.jsonl: export its kept episodes instead."
    )
    overwrite: bool = Field(False, description="Replace an existing dataset.")
    card_extra: str | None = Field(
        None,
        description="Markdown section of the dataset card saying where the episodes came "
        "from (the filter's summary, FilterOutcome.card_section()); None: a line naming the "
        "runs or the episodes file, without selection rules.",
    )


def kept_episodes(path: Path) -> tuple[list[EpisodeRef], dict[str, FilterTimeScores]]:
    """Kept episodes of a filter's ``decisions.jsonl`` (or a hand-written episode list:
    :class:`~rlmdistill.traces.artefacts.EpisodeSelection`) and their filter-time scores.

    Raises :class:`~rlmdistill.traces.artefacts.ArtefactError` (a ``ValueError``) naming the
    file and line of a line without ``run_dir``, ``episode_id`` or ``kept``."""
    refs: list[EpisodeRef] = []
    scores: dict[str, FilterTimeScores] = {}
    for d in read_selection(path):
        if d.kept:
            refs.append(d.ref)
            scores[d.episode_id] = FilterTimeScores(d.pass_rate, d.coverage)
    return refs, scores


def run(config: ExportConfig, *, progress: bool = True) -> ExportReport:
    """The export stage: write ``config.out`` from the episodes ``config`` names.

    Raises ``ValueError`` when neither runs nor ``episodes`` is given; see
    :func:`~rlmdistill.export.export_dataset` for the rest."""
    c = config
    scores: dict[str, FilterTimeScores] | None = None
    if c.episodes is not None:
        refs, scores = kept_episodes(c.episodes)
    elif c.runs:
        refs = [EpisodeRef(r, s.episode_id) for r in c.runs for s in load_summaries(r)]
    else:
        raise ValueError("give run directories or --episodes decisions.jsonl")
    source = f"--episodes {c.episodes}" if c.episodes else "runs " + ", ".join(map(str, c.runs))
    card = c.card_extra
    if card is None:
        card = f"Exported by `rlmdistill export` from {source} (no selection rules here)."
    return export_dataset(
        refs,
        c.out,
        c.options,
        scores=scores,
        overwrite=c.overwrite,
        progress=progress,
        card_extra=card,
    )
