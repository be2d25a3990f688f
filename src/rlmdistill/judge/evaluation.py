"""``rlmdistill judge-eval``: precision and recall of the reference grader on CUAD labels.

Command::

    rlmdistill judge-eval ../shared/data/cuad --part heldout --out evals/judge-heldout

Steps (:func:`run`):

1. List the contracts of ``source`` that have at least one rubric criterion
   (:func:`~rlmdistill.rooms.cuad.criteria_per_contract`), keep those of the requested part
   of the fixed split (:func:`~rlmdistill.judge.evalset.contract_split`: ``tune`` is what
   the rule's constants were chosen on, ``heldout`` what its figures are reported on), sort
   them by name and cut them into rooms of ``contracts_per_room`` (built under
   ``OUT/rooms/`` with :func:`~rlmdistill.rooms.cuad.build_cuad_room`, as the loop builds
   its rooms).
2. Build the labelled memos of every criterion (:func:`~rlmdistill.judge.evalset.build_cases`)
   and grade each against its own criterion with :class:`ReferenceGrader`.
3. Per kind of memo: the share graded PASS (recall for memos that must pass, false-pass rate
   for decoys), as the mean over documents of each document's share, with a Student t
   interval over documents clipped to [0, 1]
   (:func:`~rlmdistill.stats.cluster_mean_interval`; memos of one document share its
   wording, so documents are the independent units).

Writes ``OUT/cases.jsonl`` (one :class:`EvalOutcome` per memo) and ``OUT/report.json``
(:class:`JudgeEvalReport`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.judge.base import Grader
from rlmdistill.judge.evalset import EXPECTED, SPLIT_SALT, EvalCase, build_cases, contract_split
from rlmdistill.judge.reference import ReferenceGrader
from rlmdistill.rooms.cuad import build_cuad_room, criteria_per_contract, labelled_spans
from rlmdistill.rooms.meta import ROOM_META, CuadRoomMeta, read_room_meta
from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Task
from rlmdistill.stats import SHARE, Estimate, cluster_mean_interval
from rlmdistill.traces.store import append_records

__all__ = [
    "ACCEPTANCE",
    "EvalOutcome",
    "JudgeEvalConfig",
    "JudgeEvalReport",
    "KindFigure",
    "run",
]

REPORT_SCHEMA_VERSION = 1
ACCEPTANCE: dict[str, tuple[Literal["<=", ">="], float]] = {
    "gold_quote": (">=", 0.95),
    "unlabelled": ("<=", 0.05),
    "unlabelled_nearest": ("<=", 0.05),
}
"""Targets on held-out contracts: recall on gold quotes, false-pass rate on
decoys that overlap no labelled clause."""


class JudgeEvalConfig(BaseModel):
    """Settings of one ``judge-eval`` run (each field's docstring is its description, and
    its flag's help)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    source: Path
    """CUAD-format folder (`contracts/` or `full_contract_txt/` + `master_clauses.csv`)."""
    out: Path
    """Output folder: `rooms/`, `cases.jsonl`, `report.json` (replaced on each run)."""
    part: Literal["tune", "heldout", "all"] = "heldout"
    """Contracts of which part of the fixed split to use."""
    contracts_per_room: int = Field(default=4, ge=1)
    """Contracts per room (room-common words are computed per room)."""
    max_contracts: int | None = Field(default=None, ge=1)
    """Use only the first N contracts of the part (by name), for a quick run."""
    decoys: int = Field(default=2, ge=0)
    """Decoys per criterion of each kind `unlabelled` and `other_clause`."""
    seed: int = 0
    """Seed of the decoy choice."""
    n_resamples: int = Field(default=2000, ge=100)
    """Not used since the interval became Student's t (2026-12-03); kept so that reports
    written before, whose config records it, still load."""


class EvalOutcome(EvalCase):
    """One graded memo of the evaluation set (a line of ``cases.jsonl``)."""

    verdict: Literal["PASS", "FAIL", "UNGRADABLE"]
    reason: str


class KindFigure(BaseModel):
    """How often the grader said PASS to one kind of memo."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    expected: Literal["PASS", "FAIL"]
    n_cases: int
    n_pass: int
    n_documents: int
    n_criteria: int
    pass_share: Estimate
    """Mean over documents of each document's share of PASS (recall when ``expected`` is
    PASS, false-pass rate when FAIL), with its bootstrap interval over documents."""


class JudgeEvalReport(BaseModel):
    """``report.json`` of a ``judge-eval`` run."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = REPORT_SCHEMA_VERSION
    grader: str
    grader_version: str
    config: JudgeEvalConfig
    split_rule: str
    """How contracts are assigned to parts (fixed, recorded)."""
    contracts: list[str]
    """Source text file names of the contracts evaluated."""
    n_rooms: int
    n_documents: int
    n_criteria: int
    n_cases: int
    figures: dict[str, KindFigure]
    """By kind of memo, in :data:`~rlmdistill.judge.evalset.EXPECTED` order."""
    acceptance: dict[str, bool]
    """Each :data:`ACCEPTANCE` target met (kinds without cases left out)."""


SPLIT_RULE = (
    "tune if the contract is one the grader was shaped on (judge.evalset.SHAPED_ON: the 16"
    " packaged sample contracts and Oaktree's services agreement) or"
    f" int(sha256('{SPLIT_SALT}:' + contract text file name)[:8], 16) is even, else heldout"
)


def _contracts(config: JudgeEvalConfig) -> list[str]:
    counts = criteria_per_contract(config.source)
    names = sorted(
        n
        for n, k in counts.items()
        if k > 0 and (config.part == "all" or contract_split(n) == config.part)
    )
    return names[: config.max_contracts] if config.max_contracts else names


def _room_contracts(room_dir: Path) -> dict[str, str]:
    """Document id -> source text file name, from the ``room.json`` the CUAD builder wrote."""
    path = room_dir / ROOM_META
    try:
        meta = read_room_meta(room_dir)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: not a CUAD room.json with contracts[].doc_id/source_file ({exc})"
        ) from exc
    if not isinstance(meta, CuadRoomMeta):
        raise ValueError(f"{path}: not a CUAD room.json (kind {meta.kind!r})")
    return {c.doc_id: c.source_file for c in meta.contracts}


def run(config: JudgeEvalConfig, grader: Grader | None = None) -> JudgeEvalReport:
    """Build the evaluation set for ``config`` and grade it (see the module docstring).

    ``grader`` defaults to a fresh :class:`ReferenceGrader`; another grader (e.g. an earlier
    version, for comparison) must grade criteria with CUAD evidence.

    Raises :class:`~rlmdistill.rooms.cuad.CuadError` (a ``ValueError``) when the source is
    unusable and ``ValueError`` when the part holds no contract with a criterion.
    """
    names = _contracts(config)
    if not names:
        raise ValueError(
            f"{config.source}: no contract with a rubric criterion in part {config.part!r}"
        )
    labels = labelled_spans(config.source)
    all_names = set(criteria_per_contract(config.source))
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    cases_path = out / "cases.jsonl"
    cases_path.unlink(missing_ok=True)
    grader = grader if grader is not None else ReferenceGrader()
    outcomes: list[EvalOutcome] = []
    size = config.contracts_per_room
    groups = [names[i : i + size] for i in range(0, len(names), size)]
    for r, group in enumerate(groups):
        room_dir = out / "rooms" / f"{config.part}-{r:03d}"
        build_cuad_room(
            config.source,
            room_dir,
            len(group),
            seed=r,
            overwrite=True,
            exclude=all_names - set(group),
        )
        room = DataRoom.load(room_dir)
        assert room.task is not None
        cases = build_cases(
            room, _room_contracts(room_dir), labels, decoys=config.decoys, seed=config.seed
        )
        graded: list[EvalOutcome] = []
        for case in cases:
            task = Task(
                id=room.task.id,
                title=room.task.title,
                instructions=room.task.instructions,
                criteria=[room.task.criterion(case.criterion_id)],
            )
            (verdict,) = grader.grade(
                case.memo, task, room, episode_id=case.case_id, memo_sha256=None
            )
            graded.append(
                EvalOutcome(**case.model_dump(), verdict=verdict.verdict, reason=verdict.reason)
            )
        append_records(cases_path, graded)
        outcomes.extend(graded)
    report = JudgeEvalReport(
        grader=grader.grader_id,
        grader_version=grader.version,
        config=config,
        split_rule=SPLIT_RULE,
        contracts=names,
        n_rooms=len(groups),
        n_documents=len({o.contract for o in outcomes}),
        n_criteria=len({(o.room, o.criterion_id) for o in outcomes}),
        n_cases=len(outcomes),
        figures=figures(outcomes),
        acceptance={},
    )
    report.acceptance = {
        kind: (fig.pass_share.value or 0.0) >= bound
        if op == ">="
        else (fig.pass_share.value or 0.0) <= bound
        for kind, (op, bound) in ACCEPTANCE.items()
        if (fig := report.figures.get(kind)) is not None
    }
    (out / "report.json").write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return report


def figures(outcomes: list[EvalOutcome]) -> dict[str, KindFigure]:
    """:class:`KindFigure` per kind of memo present in ``outcomes`` (documents, identified by
    contract name, are the units of the interval)."""
    out: dict[str, KindFigure] = {}
    for kind, expected in EXPECTED.items():
        rows = [o for o in outcomes if o.kind == kind]
        if not rows:
            continue
        values = [1.0 if o.verdict == "PASS" else 0.0 for o in rows]
        out[kind] = KindFigure(
            kind=kind,
            expected=expected,
            n_cases=len(rows),
            n_pass=sum(o.verdict == "PASS" for o in rows),
            n_documents=len({o.contract for o in rows}),
            n_criteria=len({(o.room, o.criterion_id) for o in rows}),
            pass_share=cluster_mean_interval(
                values, [o.contract for o in rows], unit="documents", bounds=SHARE
            ),
        )
    return out
