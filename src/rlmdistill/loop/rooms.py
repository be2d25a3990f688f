"""Rooms of an experiment: CUAD training and held-out rooms with no document in common.

Rooms are built once into ``<workspace>/rooms/{train,holdout}-<k>`` (contracts sampled
without replacement across all rooms, via ``build_cuad_room(exclude=...)``), and the split is
checked on content with the room-set check (:func:`rlmdistill.rooms.roomset.split_overlap`): no
document's bytes (sha256) may appear in both a training and a held-out room, whatever the
rooms' origin; paragraphs shared across the splits are counted in ``split.json``. Every room must have at least one rubric criterion (a room
without one gives episodes with no pass rate): a CUAD draw with none is drawn again with the
next seed of its own sequence, and given room folders are checked. What happened (seeds,
contracts, criteria, rejected draws) and the split check are written to
``<workspace>/rooms/split.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from rlmdistill.loop.config import CuadRooms, ExperimentConfig, ExperimentError
from rlmdistill.loop.paths import from_record, to_record
from rlmdistill.rooms.roomset import split_overlap
from rlmdistill.traces import layout

__all__ = [
    "MAX_DRAWS",
    "CuadBuild",
    "PreparedRooms",
    "RoomDraw",
    "SplitCheck",
    "build_cuad_rooms",
    "check_criteria",
    "check_split",
    "default_cuad_source",
    "prepare_rooms",
    "read_split",
]

MAX_DRAWS = 50
"""Draws tried per CUAD room before giving up on finding one with a rubric criterion."""


class SplitCheck(NamedTuple):
    """Result of :func:`check_split`."""

    n_train_documents: int
    n_holdout_documents: int
    shared: list[tuple[str, str]]
    """(training document, held-out document) pairs with identical bytes."""
    shared_paragraphs: int = 0
    """Distinct paragraphs (80+ characters) found in both (reported, not a failure)."""


class RoomDraw(NamedTuple):
    """How one CUAD room of the loop was drawn (one entry of ``split.json``'s ``cuad.rooms``)."""

    name: str
    """Room folder name (``train-0``, ``holdout-1``, ...)."""
    seed: int
    """Seed of the kept draw: ``spec.seed + k + attempt * n_rooms`` for room index ``k``."""
    attempt: int
    """0 when the first draw had a criterion; else the number of draws rejected before it."""
    contracts: list[str]
    """Source text file names of the room's contracts."""
    n_criteria: int
    """Rubric criteria of the room's task (>= 1)."""
    rejected: list[dict[str, Any]] | None
    """Draws with no criterion (``{"seed", "contracts"}``), in order; ``None`` when the rooms
    were reused from an earlier call and no record of their draws was found."""


class CuadBuild(NamedTuple):
    """What :func:`build_cuad_rooms` returns."""

    train: list[Path]
    holdout: list[Path]
    draws: list[RoomDraw]
    """One per room, training rooms first."""
    reused: bool
    """True when every room was already built (nothing drawn this call)."""


class PreparedRooms(NamedTuple):
    """What :func:`prepare_rooms` returns."""

    train: list[Path]
    holdout: list[Path]
    check: SplitCheck
    n_criteria: dict[str, int]
    """Rubric criteria per room folder (all >= 1)."""
    draws: list[RoomDraw]
    """How each CUAD room was drawn (empty for given room folders)."""
    cuad_source: str | None = None
    """The CUAD folder the rooms were drawn from, as recorded in their ``room.json`` (``None``
    for given room folders)."""


def default_cuad_source() -> Path:
    """``../shared/data/cuad`` beside the checkout when present, else the packaged sample."""
    from rlmdistill.rooms.cuad import SAMPLE_SOURCE

    shared = Path(__file__).resolve().parents[4] / "shared" / "data" / "cuad"
    return shared if (shared / "master_clauses.csv").exists() else SAMPLE_SOURCE


def _fix_hint(spec: CuadRooms) -> str:
    n = spec.train_rooms + spec.holdout_rooms
    return (
        f"ask for fewer rooms (rooms.train_rooms + rooms.holdout_rooms = {n}) or fewer "
        f"contracts per room (rooms.contracts_per_room = {spec.contracts_per_room}), or give "
        "a larger CUAD source (rooms.source, e.g. ../shared/data/cuad or the full CUAD v1 "
        "release)"
    )


def _reused_draws(spec: CuadRooms, paths: list[Path], previous: Path) -> list[RoomDraw]:
    """Draws of rooms built earlier: from their room.json and task.json, with the rejected
    draws carried over from the previous ``split.json`` when it describes the same rooms."""
    from rlmdistill.rooms.task import load_task

    n = len(paths)
    old: dict[str, Any] = {}
    if previous.is_file():
        try:
            rooms = json.loads(previous.read_text(encoding="utf-8"))["cuad"]["rooms"]
            old = {r["name"]: r for r in rooms}
        except (ValueError, KeyError, TypeError):
            old = {}
    draws = []
    for k, path in enumerate(paths):
        meta = json.loads((path / "room.json").read_text(encoding="utf-8"))
        contracts = sorted(c["source_file"] for c in meta.get("contracts", []))
        seed = int(meta["seed"])
        prior = old.get(path.name) or {}
        same = prior.get("contracts") == contracts and prior.get("seed") == seed
        draws.append(
            RoomDraw(
                name=path.name,
                seed=seed,
                attempt=(seed - spec.seed - k) // n,
                contracts=contracts,
                n_criteria=len(load_task(path / layout.TASK).criteria),
                rejected=prior.get("rejected") if same else None,
            )
        )
    return draws


def build_cuad_rooms(spec: CuadRooms, out: Path) -> CuadBuild:
    """Build ``spec.train_rooms`` + ``spec.holdout_rooms`` disjoint CUAD rooms under ``out``,
    each with at least one rubric criterion.

    Room ``k`` (training rooms first, then held-out) draws ``spec.contracts_per_room``
    contracts not used by rooms ``0..k-1`` with seed ``spec.seed + k``; when the draw has no
    criterion (no contract in it carries a positive M&A label) it is drawn again with seed
    ``spec.seed + k + a * n_rooms`` for attempt ``a = 1, 2, ...`` (so no two draws share a
    seed), up to :data:`MAX_DRAWS` draws. Deterministic for a given source and spec; rooms
    whose first draw has a criterion are the same as before this rule existed.

    Rooms already built (``task.json`` present, all of them) are reused; otherwise every room
    is rebuilt, so the exclusion chain stays whole.

    Raises:
        ExperimentError: naming the room and how to change the config, when the source has
            too few contracts left for a room, when no contract left carries an M&A label, or
            when :data:`MAX_DRAWS` draws all had no criterion; also when a reused room has no
            criterion (built before this rule: remove the workspace's ``rooms/`` and ``runs/``).
    """
    from rlmdistill.rooms.cuad import CuadError, build_cuad_room, criteria_per_contract

    names = [f"train-{k}" for k in range(spec.train_rooms)]
    names += [f"holdout-{k}" for k in range(spec.holdout_rooms)]
    paths = [out / n for n in names]
    n_rooms = len(paths)
    reused = all((p / layout.TASK).exists() for p in paths)
    if reused:
        draws = _reused_draws(spec, paths, out / layout.SPLIT)
        empty = [d.name for d in draws if d.n_criteria == 0]
        if empty:
            raise ExperimentError(
                f"rooms: {', '.join(empty)} under {out} have no rubric criterion (built before "
                "rooms were required to have one); their episodes would have no pass rate. "
                f"Remove {out} and the runs made on it ({out.parent / 'runs'}), or use a new "
                "workspace, to rebuild them"
            )
        return CuadBuild(paths[: spec.train_rooms], paths[spec.train_rooms :], draws, True)

    source = Path(spec.source) if spec.source else default_cuad_source()
    per_contract = criteria_per_contract(source)
    n_labelled = sum(1 for v in per_contract.values() if v)
    used: list[str] = []
    draws = []
    for k, path in enumerate(paths):
        left = [c for c in per_contract if c not in used]
        labelled_left = sum(1 for c in left if per_contract[c])
        where = f"rooms: room {path.name} (room {k + 1} of {n_rooms}, source {source})"
        if len(left) < spec.contracts_per_room:
            raise ExperimentError(
                f"{where}: needs {spec.contracts_per_room} contracts but only {len(left)} of "
                f"the source's {len(per_contract)} are left after the rooms before it; "
                + _fix_hint(spec)
            )
        if labelled_left == 0:
            raise ExperimentError(
                f"{where}: none of the {len(left)} contracts left carries an M&A label, so the "
                f"room would have no rubric criterion ({n_labelled} of the source's "
                f"{len(per_contract)} contracts carry one, all used by earlier rooms); "
                + _fix_hint(spec)
            )
        rejected: list[dict[str, Any]] = []
        for attempt in range(MAX_DRAWS):
            seed = spec.seed + k + attempt * n_rooms
            try:
                report = build_cuad_room(
                    source, path, spec.contracts_per_room, seed, overwrite=True, exclude=used
                )
            except CuadError as exc:
                raise ExperimentError(f"{where}: {exc}; " + _fix_hint(spec)) from exc
            if report.n_criteria:
                break
            rejected.append({"seed": seed, "contracts": report.contracts})
        else:
            raise ExperimentError(
                f"{where}: {MAX_DRAWS} draws of {spec.contracts_per_room} from the "
                f"{len(left)} contracts left all had no rubric criterion (only {labelled_left} "
                "of them carry an M&A label); " + _fix_hint(spec)
            )
        used += report.contracts
        draws.append(
            RoomDraw(path.name, seed, attempt, report.contracts, report.n_criteria, rejected)
        )
    return CuadBuild(paths[: spec.train_rooms], paths[spec.train_rooms :], draws, False)


def check_criteria(rooms: list[Path]) -> dict[str, int]:
    """Rubric criteria per room folder (``task.json``), keyed by the folder path.

    Raises:
        ExperimentError: naming every room without a ``task.json`` or with no criterion
            (episodes there would have no pass rate, useless for training and evaluation).
    """
    from rlmdistill.rooms.task import TaskError, load_task

    counts: dict[str, int] = {}
    problems: list[str] = []
    for room in rooms:
        try:
            counts[str(room)] = n = len(load_task(Path(room) / layout.TASK).criteria)
        except TaskError as exc:
            problems.append(str(exc))
            continue
        if n == 0:
            problems.append(f"{room}: task.json has no rubric criterion")
    if problems:
        raise ExperimentError(
            "rooms: every room needs a task with at least one rubric criterion (episodes "
            "without one have no pass rate): " + "; ".join(problems)
        )
    return counts


def check_split(train: list[Path], holdout: list[Path]) -> SplitCheck:
    """The room-set leak check (:func:`rlmdistill.rooms.roomset.split_overlap`: identical
    document bytes and shared paragraphs) over the training and held-out rooms; the loop
    fails on shared documents only (distinct contracts may share a boilerplate paragraph,
    which is counted in ``shared_paragraphs``)."""
    o = split_overlap(train, holdout)
    return SplitCheck(
        o.n_train_documents, o.n_holdout_documents, o.shared_documents, o.shared_paragraphs
    )


def prepare_rooms(cfg: ExperimentConfig) -> PreparedRooms:
    """The experiment's training and held-out room folders, built if needed, checked.

    Writes ``<workspace>/rooms/split.json``: the rooms, their criteria counts, for CUAD rooms
    how each was drawn (:class:`RoomDraw` under ``cuad``), and the split check; room folders
    inside the workspace are written relative to it (:func:`~rlmdistill.loop.paths.to_record`,
    read back by :func:`read_split`). Raises
    :class:`ExperimentError` naming the shared documents when a training and a held-out room
    share one, and the errors of :func:`build_cuad_rooms` / :func:`check_criteria` naming a
    room with no rubric criterion.
    """
    rooms_dir = cfg.workspace / layout.ROOMS
    cuad: dict[str, Any] | None = None
    cuad_source: str | None = None
    draws: list[RoomDraw] = []
    if cfg.rooms is not None:
        built = build_cuad_rooms(cfg.rooms, rooms_dir)
        train, holdout, draws = built.train, built.holdout, built.draws
        first = (built.train or built.holdout)[0]
        cuad_source = json.loads((first / "room.json").read_text(encoding="utf-8")).get("source")
        cuad = {
            "source": cuad_source,
            "spec": cfg.rooms.model_dump(mode="json"),
            "rule": "room k draws with seed + k, then seed + k + a * n_rooms (attempt a) "
            "until the room has a rubric criterion",
            "rooms": [d._asdict() for d in built.draws],
        }
    else:
        train, holdout = list(cfg.train_rooms), list(cfg.holdout_rooms)
    criteria = check_criteria([*train, *holdout])
    check = check_split(train, holdout)
    rooms_dir.mkdir(parents=True, exist_ok=True)
    (rooms_dir / layout.SPLIT).write_text(
        json.dumps(
            {
                "method": "sha256 of each document's bytes",
                "train": [to_record(p, cfg.workspace) for p in train],
                "holdout": [to_record(p, cfg.workspace) for p in holdout],
                "n_criteria": {to_record(k, cfg.workspace): n for k, n in criteria.items()},
                **({"cuad": cuad} if cuad is not None else {}),
                "n_train_documents": check.n_train_documents,
                "n_holdout_documents": check.n_holdout_documents,
                "shared": check.shared,
                "shared_paragraphs": check.shared_paragraphs,
                "passed": not check.shared,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    if check.shared:
        pairs = "; ".join(f"{a} == {b}" for a, b in check.shared[:5])
        raise ExperimentError(
            f"training and held-out rooms share {len(check.shared)} document(s): {pairs}"
        )
    return PreparedRooms(train, holdout, check, criteria, draws, cuad_source)


def read_split(workspace: Path) -> tuple[list[Path], list[Path], dict[Path, int]]:
    """The training rooms, held-out rooms and criteria per room of ``<workspace>/rooms/
    split.json`` as paths: relative entries are joined to ``workspace``; absolute ones (files
    written before paths were stored relative, or rooms outside the workspace) are kept.

    Raises ``FileNotFoundError`` when the workspace has no split file and ``ValueError``
    (naming the file) when it is not a split record.
    """
    path = Path(workspace) / layout.ROOMS / layout.SPLIT
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        train = [from_record(p, workspace) for p in data["train"]]
        holdout = [from_record(p, workspace) for p in data["holdout"]]
        n_criteria = {from_record(k, workspace): int(n) for k, n in data["n_criteria"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a rooms split record ({type(exc).__name__}: {exc})") from exc
    return train, holdout, n_criteria
