"""The configs of the room builders, ``rlmdistill rooms build-cuad`` and ``rooms synth``, and
their ``run(config) -> report`` entry points.

Each config is the one place its command's options, defaults and help live: the commands'
flags are made from these fields (:func:`rlmdistill.cliconfig.config_command`), and a
``--config FILE`` (YAML, JSON or TOML) may set any of them. The reports returned are what the
builders already return (:class:`~rlmdistill.rooms.cuad.BuildReport`,
:class:`~rlmdistill.rooms.synth.SynthReport`); the room's own manifest is the ``room.json``
and ``task.json`` written in the room folder.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.rooms.cuad import SAMPLE_SOURCE, BuildReport, build_cuad_room
from rlmdistill.rooms.synth import MAX_DOCS, MIN_DOCS, SynthReport, build_synth_room

__all__ = ["CuadRoomConfig", "RoomShowConfig", "SynthRoomConfig", "run_build_cuad", "run_synth"]


class CuadRoomConfig(BaseModel):
    """``rlmdistill rooms build-cuad``: sample contracts of a CUAD-format folder into a data
    room with its LAB-format task (:func:`rlmdistill.rooms.cuad.build_cuad_room`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    source: Path
    """CUAD folder (contracts/ or full_contract_txt/ + master_clauses.csv)."""
    out: Path
    """Room folder to write."""
    contracts: int = 10
    """Contracts to sample."""
    seed: int = 0
    """Sampling seed (random.Random(seed) over the matched contracts sorted by name)."""
    overwrite: bool = False
    """Replace an existing room folder (only one this command built)."""


class SynthRoomConfig(BaseModel):
    """``rlmdistill rooms synth``: a seeded synthetic data room with planted issues and its
    rubric (:func:`rlmdistill.rooms.synth.build_synth_room`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    out: Path
    """Room folder to write."""
    docs: int = Field(default=100, description=f"Documents ({MIN_DOCS}-{MAX_DOCS}).")
    seed: int = 0
    """Seed (same seed: byte-identical room)."""
    length_scale: float = 1.0
    """Multiplier on generated document lengths (1.0: mean ~13k characters per document)."""
    cuad: Path | None = None
    """CUAD folder for copied contracts (default: packaged sample)."""
    copy_cuad: bool = True
    """Copy CUAD contracts into the room (off: none, and cuad is ignored)."""
    overwrite: bool = False
    """Replace an existing room (only one this command built)."""

    def cuad_source(self) -> Path | None:
        """The CUAD folder the builder copies from: ``None`` unless ``copy_cuad``, else
        ``cuad`` or the packaged sample."""
        return (self.cuad or SAMPLE_SOURCE) if self.copy_cuad else None


class RoomShowConfig(BaseModel):
    """``rlmdistill rooms show``: a room's documents per folder, size, task and extraction
    notes."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    room: Path
    """Room folder."""
    strict: bool = False
    """Fail on a document whose text cannot be extracted (default: skip it)."""


def run_build_cuad(config: CuadRoomConfig) -> BuildReport:
    """Build the room ``config`` asks for. Raises :class:`~rlmdistill.rooms.cuad.CuadError`
    (unusable source, too many contracts, non-empty ``out``) or ``OSError``."""
    return build_cuad_room(
        config.source, config.out, config.contracts, config.seed, overwrite=config.overwrite
    )


def run_synth(config: SynthRoomConfig) -> SynthReport:
    """Build the synthetic room ``config`` asks for. Raises
    :class:`~rlmdistill.rooms.synth.SynthError` (size, seed or scale out of range, unusable
    CUAD source, non-empty ``out``) or ``OSError``."""
    return build_synth_room(
        config.out,
        config.docs,
        config.seed,
        length_scale=config.length_scale,
        cuad_source=config.cuad_source(),
        overwrite=config.overwrite,
    )
