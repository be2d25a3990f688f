"""What each run of a workspace is for, read from the loop's records: training or evaluation,
which rooms are held out, and which runs the loop's own report compares.

The pages take their defaults from here, so that a default never mixes what the loop kept
apart: Compare opens on the loop's report arms (its base against the last tuned arm at the
base's depth), Ablations on the evaluation runs, the filter preview on the training runs; and
the filter page refuses to export episodes of held-out rooms unless asked to.

Sources, in order (a workspace made by ``rlmdistill collect`` alone has neither, and then no
run has a role and the pages fall back to every run):

- ``lineage.jsonl`` (``rlmdistill loop``): a run artefact written by stage ``collect-train``
  is a training run, one written by ``collect-eval`` an evaluation run; the newest report
  artefact's run inputs are the report's arms, in the report's order;
- ``rooms/split.json`` (``rlmdistill loop``): the held-out rooms, matched to a run's rooms by
  folder name (``room_id``); a run the lineage does not name is an evaluation run when it ran
  a held-out room and a training run when it ran training rooms only.

Read through a ``st.cache_data`` entry keyed on the two files' stamps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import streamlit as st

from rlmdistill.dashboard.runview import file_stamp, manifest_of
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import read_rooms_split

__all__ = [
    "RunRole",
    "WorkspaceRoles",
    "compare_default",
    "heldout_rooms_of",
    "role_label",
    "workspace_roles",
]

RunRole = Literal["train", "eval"]
"""``train``: collected on training rooms for the filter and SFT; ``eval``: on held-out rooms,
for the report."""

_STAGE_ROLE: dict[str, RunRole] = {"collect-train": "train", "collect-eval": "eval"}
"""Loop stage that wrote a run -> its role."""


class WorkspaceRoles(NamedTuple):
    """The roles of a workspace's runs and its held-out rooms (empty when not recorded)."""

    roles: dict[str, RunRole]
    """Run folder name -> role; runs without a known role are absent."""
    heldout: frozenset[str]
    """Room folder names of the held-out rooms (``rooms/split.json``)."""
    train_rooms: frozenset[str]
    """Room folder names of the training rooms."""
    report: str | None
    """The newest report the loop wrote (workspace-relative, e.g. ``reports/r2``)."""
    report_runs: list[str]
    """Run folder names of that report's arms, in its order (first = baseline)."""
    eval_order: list[str]
    """Evaluation runs in the order the loop wrote them."""


def _names(paths: Sequence[str]) -> list[str]:
    return [Path(p).name for p in paths]


@st.cache_data(max_entries=8, show_spinner=False)
def _roles(
    root: str, lineage_stamp: str, split_stamp: str, runs: tuple[str, ...]
) -> WorkspaceRoles:
    ws = Path(root)
    roles: dict[str, RunRole] = {}
    report: str | None = None
    report_runs: list[str] = []
    eval_order: list[str] = []
    if lineage_stamp != "-":
        from rlmdistill.traces.lineage import latest_records

        latest = latest_records(ws)
        for artefact, rec in latest.items():
            if rec.kind == "run" and rec.stage in _STAGE_ROLE:
                name = Path(artefact).name
                roles[name] = _STAGE_ROLE[rec.stage]
                if roles[name] == "eval":
                    eval_order.append(name)
        reports = [r for r in latest.values() if r.kind == "report"]
        if reports:
            newest = max(reports, key=lambda r: r.created_at)
            report = newest.artefact
            report_runs = _names([p for p in newest.inputs if p.startswith(f"{layout.RUNS}/")])
    heldout: frozenset[str] = frozenset()
    train: frozenset[str] = frozenset()
    if split_stamp != "-":
        split = read_rooms_split(ws)
        heldout = frozenset(split.room_names("holdout"))
        train = frozenset(split.room_names("train"))
    if heldout or train:
        for name in runs:
            if name in roles:
                continue
            try:
                rooms = {r.room_id for r in manifest_of(ws / layout.RUNS / name).rooms}
            except (FileNotFoundError, ValueError):
                continue
            if rooms & heldout:
                roles[name] = "eval"
            elif rooms and rooms <= train:
                roles[name] = "train"
    return WorkspaceRoles(roles, heldout, train, report, report_runs, eval_order)


def workspace_roles(root: Path, runs: Sequence[str]) -> WorkspaceRoles:
    """The :class:`WorkspaceRoles` of the workspace at ``root`` whose runs are ``runs``
    (folder names), cached by the stamps of ``lineage.jsonl`` and ``rooms/split.json``.

    Raises :class:`~rlmdistill.traces.artefacts.ArtefactError` (a ``ValueError``) naming
    ``rooms/split.json`` when it is not JSON or not a split record
    (:func:`~rlmdistill.traces.artefacts.read_rooms_split`), and what
    :func:`rlmdistill.traces.lineage.latest_records` raises for an invalid lineage line."""
    split = root / layout.ROOMS / layout.SPLIT
    return _roles(str(root), file_stamp(root / layout.LINEAGE), file_stamp(split), tuple(runs))


def role_label(name: str, roles: WorkspaceRoles) -> str:
    """``"r2-train · train"`` / ``"eval-base · eval"``; the name alone without a role."""
    role = roles.roles.get(name)
    return f"{name} · {role}" if role else name


def _depth_root(run_dir: Path) -> tuple[int, str]:
    try:
        cfg = manifest_of(run_dir).config
    except (FileNotFoundError, ValueError):
        return 0, ""
    return cfg.depth, str(cfg.root)


def compare_default(runs_dir: Path, names: Sequence[str], roles: WorkspaceRoles) -> list[str]:
    """The runs Compare opens on: the loop's report arms' baseline and its last arm that
    changed the root at the baseline's depth (base against the last tuned arm, on the same
    held-out rooms); without a loop report, the first evaluation run against the last one
    at its depth with another root; without either, the first two runs."""
    present = set(names)
    for order in (roles.report_runs, roles.eval_order):
        arms = [n for n in order if n in present]
        if len(arms) < 2:
            continue
        base = arms[0]
        depth, root = _depth_root(runs_dir / base)
        tuned = [
            n
            for n in arms[1:]
            if _depth_root(runs_dir / n)[0] == depth and _depth_root(runs_dir / n)[1] != root
        ]
        return [base, (tuned or arms[1:])[-1]]
    return list(names[:2])


def heldout_rooms_of(run_dirs: Sequence[Path], roles: WorkspaceRoles) -> dict[str, list[str]]:
    """Run folder name -> the held-out rooms it ran (sorted room ids), for the runs of
    ``run_dirs`` that ran any; an evaluation run with none of the split's rooms (or in a
    workspace without a split) is listed with all its rooms."""
    out: dict[str, list[str]] = {}
    for rd in run_dirs:
        try:
            rooms = sorted({r.room_id for r in manifest_of(rd).rooms})
        except (FileNotFoundError, ValueError):
            rooms = []
        held = [r for r in rooms if r in roles.heldout]
        if not held and roles.roles.get(rd.name) == "eval":
            held = rooms
        if held:
            out[rd.name] = held
    return out
