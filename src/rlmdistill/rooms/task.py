"""Task and rubric records: the public LAB ``task.json`` shape plus this project's extensions.

A LAB task (Harvey's Legal Agent Bench) holds ``title``, ``instructions``, ``work_type``,
``deliverables``, ``tags`` and ``criteria``; each criterion has ``id``, ``title``,
``match_criteria`` (PASS/FAIL wording) and optionally ``deliverables`` and ``sources``.
Such a file imports here as is, and unknown fields are kept (``extra="allow"``) so that a
load/dump round trip loses nothing.

Extensions (all optional, so a LAB file stays valid): ``Task.id``, and per criterion ``type``,
``weight`` and ``evidence`` (machine-checkable gold evidence that the reference grader uses).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "Amount",
    "Criterion",
    "CriterionType",
    "Evidence",
    "Task",
    "TaskError",
    "load_task",
    "save_task",
]

CriterionType = Literal[
    "finding", "citation", "quantification", "recommendation", "missing-evidence"
]


class TaskError(ValueError):
    """A ``task.json`` could not be read or is not a valid task; the message names the file
    and, where it applies, the criterion (index and id)."""


class Amount(BaseModel):
    """A gold amount a memo should state, with a tolerance (extension).

    ``value`` is in ``unit`` (an ISO 4217 currency code such as ``"USD"``, or ``"%"`` for a
    percentage); a stated figure ``x`` matches when ``|x - value| <= tolerance * |value|``
    (``tolerance`` is relative: ``0.05`` is within 5%, the LAB example's wording).
    """

    model_config = ConfigDict(extra="allow")

    value: float
    """The gold figure, in ``unit``."""
    unit: str = "USD"
    """Currency code (``"USD"``) or ``"%"``."""
    tolerance: float = Field(default=0.05, ge=0.0)
    """Relative tolerance: ``0.05`` accepts figures within 5% of ``value``."""
    note: str | None = None
    """How the figure is found or derived (e.g. ``"2 x base salary of USD 310,000"``)."""

    def matches(self, stated: float) -> bool:
        """``True`` when ``stated`` (same unit) is within the tolerance of :attr:`value`."""
        return abs(stated - self.value) <= self.tolerance * abs(self.value)


class Evidence(BaseModel):
    """Gold evidence for one criterion, as a room builder knows it (e.g. CUAD labels)."""

    model_config = ConfigDict(extra="allow")

    documents: list[str] = Field(default_factory=list)
    """Document ids (POSIX paths inside the room's documents root) the finding lives in."""
    category: str | None = None
    """Clause category, e.g. ``"Change Of Control"`` (CUAD spelling)."""
    spans: list[str] = Field(default_factory=list)
    """Gold clause texts (whitespace-normalised, possibly truncated)."""
    key_terms: list[str] = Field(default_factory=list)
    """A few distinctive content words of the spans, for humans and LLM judges."""
    amounts: list[Amount] | None = None
    """Gold amounts with a tolerance (extension, for quantification criteria); ``None`` (left
    out of ``task.json``) when the builder knows none."""


class Criterion(BaseModel):
    """One pass/fail rubric check (LAB shape plus optional extensions)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    """Unique id within the task, e.g. ``"C-001"`` or ``"cuad-03-change-of-control"``."""
    title: str
    """One-line statement of what the memo must do."""
    match_criteria: str
    """PASS/FAIL wording a judge applies."""
    deliverables: list[str] | None = None
    """Deliverables this criterion is judged on (LAB); ``None`` when the file has none."""
    sources: list[str] | None = None
    """Document ids that support the criterion (LAB); ``None`` when the file has none."""
    type: CriterionType = "finding"
    """Kind of check (extension)."""
    weight: float = Field(default=1.0, ge=0.0)
    """Weight in the weighted pass rate (extension); unweighted pass rate ignores it."""
    evidence: Evidence | None = None
    """Machine-checkable gold evidence (extension); graders without it mark UNGRADABLE."""


class Task(BaseModel):
    """Instructions plus rubric for one data room (``task.json``)."""

    model_config = ConfigDict(extra="allow")

    id: str = ""
    """Stable task id; when absent it is derived as ``task-<sha256(title)[:12]>``."""
    title: str
    instructions: str
    work_type: str | None = None
    deliverables: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    criteria: list[Criterion] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Task:
        if not self.id:
            self.id = "task-" + hashlib.sha256(self.title.encode("utf-8")).hexdigest()[:12]
            # Derived, not given: left out of to_json_dict so a LAB file round-trips unchanged.
            self.model_fields_set.discard("id")
        seen: dict[str, int] = {}
        for index, criterion in enumerate(self.criteria):
            if criterion.id in seen:
                raise ValueError(
                    f"duplicate criterion id {criterion.id!r} at criteria[{index}] "
                    f"(first at criteria[{seen[criterion.id]}])"
                )
            seen[criterion.id] = index
        return self

    def criterion(self, criterion_id: str) -> Criterion:
        """Return the criterion with id ``criterion_id``; raises ``KeyError`` if none."""
        for criterion in self.criteria:
            if criterion.id == criterion_id:
                return criterion
        raise KeyError(f"task {self.id!r} has no criterion {criterion_id!r}")

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-ready dict in LAB shape: fields that were neither in the source nor set by the
        builder (defaults such as ``type``/``weight``, the derived ``id``) and ``None`` values
        are left out, unknown fields from the source file are kept; so a file with only the
        public LAB fields round-trips unchanged."""
        return self.model_dump(mode="json", exclude_none=True, exclude_unset=True)


def _describe_loc(loc: tuple[int | str, ...], raw: Any) -> str:
    """Human description of a pydantic error location, naming the criterion if any."""
    if len(loc) >= 2 and loc[0] == "criteria" and isinstance(loc[1], int):
        index = loc[1]
        crit_id = None
        if isinstance(raw, dict):
            crits = raw.get("criteria")
            if isinstance(crits, list) and index < len(crits) and isinstance(crits[index], dict):
                crit_id = crits[index].get("id")
        where = f"criterion #{index}" + (f" (id {crit_id!r})" if crit_id else " (no id)")
        rest = ".".join(str(p) for p in loc[2:])
        return f"{where}: {rest}" if rest else where
    return ".".join(str(p) for p in loc) or "task"


def load_task(path: str | Path) -> Task:
    """Read and validate a ``task.json``.

    Raises :class:`TaskError` (a ``ValueError``) when the file is missing, is not JSON, or does
    not validate; the message names the file and each failing criterion by index and id
    (duplicate criterion ids are an error).
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TaskError(f"{path}: task file not found") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskError(f"{path}: cannot read task JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise TaskError(f"{path}: a task must be a JSON object, got {type(raw).__name__}")
    try:
        return Task.model_validate(raw)
    except ValidationError as exc:
        problems = [
            f"{_describe_loc(tuple(err['loc']), raw)}: {err['msg']}" for err in exc.errors()
        ]
        raise TaskError(f"{path}: invalid task: " + "; ".join(problems)) from exc


def save_task(task: Task, path: str | Path) -> None:
    """Write ``task`` as pretty JSON (LAB shape, see :meth:`Task.to_json_dict`) to ``path``."""
    Path(path).write_text(
        json.dumps(task.to_json_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
