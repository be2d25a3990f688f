"""Lineage of a workspace: which runs made which dataset made which adapter made which run.

Every stage of ``rlmdistill loop`` appends one :class:`LineageRecord` per artefact it writes to
``<workspace>/lineage.jsonl`` (append-only, torn-tail tolerant like every trace file). A
record names the artefact (path relative to the workspace), its kind, the artefacts it was
made from, and the fingerprint of its inputs and settings; a stage is up to date when its
artefact exists and its newest record carries the fingerprint the stage would write now.
``rlmdistill lineage WORKSPACE`` prints the graph as a tree, each artefact in full once and
``(see above)`` where it appears again.

It sits in ``traces`` beside the other workspace files: the loop writes it, and the dashboard
and ``rlmdistill lineage`` read it, without either importing the other.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from rlmdistill.traces import layout
from rlmdistill.traces.store import append_records, parse_records

__all__ = ["LineageRecord", "latest_records", "lineage_path", "record", "render_tree"]

ArtefactKind = Literal["rooms", "run", "verdicts", "dataset", "adapter", "report", "check"]


class LineageRecord(BaseModel):
    """One artefact written by the loop."""

    record_type: Literal["lineage"] = "lineage"
    schema_version: int = 1
    artefact: str
    """Path relative to the workspace (e.g. ``runs/r1-train``)."""
    kind: ArtefactKind
    stage: str
    """Stage that wrote it: rooms, collect-train, judge, filter, sft, collect-eval, report."""
    round: int = 0
    """Loop round (0: shared by every round, e.g. rooms and the base arm)."""
    inputs: list[str] = Field(default_factory=list)
    """Artefacts it was made from (paths relative to the workspace)."""
    fingerprint: str
    """Fingerprint of the inputs and settings (see ``ExperimentConfig.fingerprint``)."""
    created_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))
    detail: dict[str, Any] = Field(default_factory=dict)
    """Stage facts worth keeping (counts, wall time, model specs, checks)."""


def lineage_path(workspace: Path) -> Path:
    """``<workspace>/lineage.jsonl``."""
    return Path(workspace) / layout.LINEAGE


def record(workspace: Path, rec: LineageRecord) -> None:
    """Append ``rec`` to the workspace's lineage file."""
    append_records(lineage_path(workspace), [rec])


def latest_records(workspace: Path) -> dict[str, LineageRecord]:
    """The newest record of every artefact (file order decides), keyed by artefact path."""
    out: dict[str, LineageRecord] = {}
    for rec in parse_records(lineage_path(workspace), LineageRecord):
        out[rec.artefact] = rec
    return out


def render_tree(workspace: Path) -> str:
    """The lineage graph as indented text: each artefact, then what it was made from.

    Roots of the printout are artefacts nothing else was made from (reports, last runs). Each
    artefact is printed in full once, with what it was made from below it; where it appears
    again (a base run or the rooms shared by several rounds) it is one line,
    ``<- ARTEFACT  (see above)``, as ``cargo tree`` does for repeated dependencies. Artefacts
    reachable from no root (a cycle) follow at the end, so every record is printed.
    Raises ``FileNotFoundError`` when the workspace has no lineage file.
    """
    path = lineage_path(workspace)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `rlmdistill loop` first")
    latest = latest_records(workspace)
    used = {i for rec in latest.values() for i in rec.inputs}
    tops = [a for a in latest if a not in used]
    lines: list[str] = []
    printed: set[str] = set()

    def walk(artefact: str, depth: int) -> None:
        prefix = "  " * depth + ("<- " if depth else "")
        if artefact in printed:
            lines.append(f"{prefix}{artefact}  (see above)")
            return
        printed.add(artefact)
        rec = latest.get(artefact)
        label = f"{artefact}" if rec is None else f"{artefact}  [{rec.kind}, {rec.stage}"
        if rec is not None:
            label += f", round {rec.round}]" if rec.round else "]"
            facts = ", ".join(f"{k}={v}" for k, v in rec.detail.items() if _short(v))
            if facts:
                label += f"  {facts}"
        lines.append(prefix + label)
        for parent in rec.inputs if rec is not None else ():
            walk(parent, depth + 1)

    for top in [*tops, *latest]:
        if top not in printed:
            walk(top, 0)
    return "\n".join(lines)


def _short(value: Any) -> bool:
    return isinstance(value, int | float | str | bool) and len(str(value)) <= 60
