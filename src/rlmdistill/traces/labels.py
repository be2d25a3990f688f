"""People's labels of a run: ``runs/<run>/labels.jsonl``, one typed, versioned record a line.

A label is a person's decision on one episode (``keep`` / ``reject``) or on one rubric
criterion of it (``PASS`` / ``FAIL`` / ``UNGRADABLE``), given for the memo the person saw
(its hash, :func:`memo_hash`), with reason tags from a configurable list, a free note, the
reviewer and a timezone-aware time.

- The file is append-only. Reading takes the latest label per (reviewer, episode, target,
  criterion) (:func:`latest_labels`: latest ``time`` wins, ties go to the later line), so a
  person changes their mind by appending.
- A label given for an older memo of the episode (the episode was re-collected since) is kept
  and read as *stale* (:func:`is_stale`), never dropped: readers show it and leave it out of
  statistics of the current memo.
- Writes are crash-safe and concurrent-safe: :func:`append_labels` validates the whole batch
  against the run first and writes nothing on any error; it then appends under an exclusive
  ``flock`` on the file, in one ``write`` (:func:`rlmdistill.traces.store.append_records`,
  which also closes a torn last line left by a crash, as for ``episodes.jsonl``).
- Reason tags: :data:`DEFAULT_TAGS`, or the run's own list in ``runs/<run>/labels_tags.txt``
  (one tag a line; blank lines and lines starting with ``#`` are skipped), read by
  :func:`allowed_tags`.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import AwareDatetime, BaseModel, Field, ValidationError, model_validator

from rlmdistill.traces import layout
from rlmdistill.traces.runs import load_room_tasks, load_summaries
from rlmdistill.traces.scores import memo_sha256
from rlmdistill.traces.store import append_records, read_jsonl

__all__ = [
    "CRITERION_VERDICTS",
    "CSV_COLUMNS",
    "CSV_REQUIRED",
    "DEFAULT_TAGS",
    "EPISODE_VERDICTS",
    "LABELS_SCHEMA_VERSION",
    "NO_LABELS",
    "NO_MEMO_HASH",
    "EpisodeLabels",
    "EpisodeRubric",
    "Label",
    "LabelKey",
    "LabelTarget",
    "LabelVerdict",
    "LabelsError",
    "LabelsProvenance",
    "allowed_tags",
    "append_labels",
    "check_labels",
    "episode_labels",
    "is_stale",
    "labels_from_csv",
    "labels_provenance",
    "labels_to_csv",
    "latest_labels",
    "memo_hash",
    "read_labels",
    "run_rubrics",
]

LABELS_SCHEMA_VERSION = 1
"""Version of a :class:`Label` line; a reader refuses a newer one."""

NO_MEMO_HASH = "no-memo"
""":func:`memo_hash` of an episode without a memo (no sha256 hex digest equals it)."""

DEFAULT_TAGS: tuple[str, ...] = (
    "invented clause",
    "missed document",
    "wrong document cited",
    "wrong amount",
    "no next step",
    "other",
)
"""Reason tags a label may carry when the run has no ``labels_tags.txt``."""

LabelTarget = Literal["episode", "criterion"]
LabelVerdict = Literal["keep", "reject", "PASS", "FAIL", "UNGRADABLE"]
EPISODE_VERDICTS: tuple[str, ...] = ("keep", "reject")
"""Verdicts of an ``episode`` label."""
CRITERION_VERDICTS: tuple[str, ...] = ("PASS", "FAIL", "UNGRADABLE")
"""Verdicts of a ``criterion`` label."""

LabelKey = tuple[str, str, str, str | None]
"""``(reviewer, episode_id, target, criterion_id)``: one person's one decision."""


class LabelsError(ValueError):
    """A label does not fit the run (unknown episode or criterion, tag not allowed) or a
    labels file does not read; the message names the file, the episode, the criterion or the
    tag, and the allowed values."""


class Label(BaseModel):
    """One line of ``labels.jsonl``: a person's decision on an episode or one criterion."""

    schema_version: int = LABELS_SCHEMA_VERSION
    """:data:`LABELS_SCHEMA_VERSION` of the writer."""
    episode_id: str = Field(min_length=1)
    memo_hash: str = Field(min_length=1)
    """:func:`memo_hash` of the memo the person saw; differs from the episode's current memo
    once the episode is re-collected (the label is then stale)."""
    target: LabelTarget
    criterion_id: str | None = None
    """The rubric criterion's id; ``None`` exactly when ``target`` is ``"episode"``."""
    verdict: LabelVerdict
    """``keep``/``reject`` for an episode; ``PASS``/``FAIL``/``UNGRADABLE`` for a criterion."""
    tags: list[str] = Field(default_factory=list)
    """Reason tags (:func:`allowed_tags` of the run)."""
    note: str = ""
    reviewer: str = Field(min_length=1)
    time: AwareDatetime
    """When the person decided (timezone-aware; a naive time is refused)."""

    @model_validator(mode="after")
    def _consistent(self) -> Label:
        if self.schema_version > LABELS_SCHEMA_VERSION:
            raise ValueError(
                f"label schema_version {self.schema_version} is newer than this package "
                f"reads ({LABELS_SCHEMA_VERSION}): upgrade rlmdistill"
            )
        if (self.target == "episode") != (self.criterion_id is None):
            raise ValueError(
                "criterion_id must be empty for an episode label and set for a criterion label"
            )
        allowed = EPISODE_VERDICTS if self.target == "episode" else CRITERION_VERDICTS
        if self.verdict not in allowed:
            raise ValueError(
                f"verdict {self.verdict!r} is not one of a {self.target} label's "
                f"({', '.join(allowed)})"
            )
        return self

    @property
    def key(self) -> LabelKey:
        """``(reviewer, episode_id, target, criterion_id)``."""
        return (self.reviewer, self.episode_id, self.target, self.criterion_id)


def memo_hash(memo: str | None) -> str:
    """The hash a label records of the memo the person saw: the memo's sha256 hex digest
    (:func:`rlmdistill.traces.scores.memo_sha256`, the same key verdicts carry), or
    :data:`NO_MEMO_HASH` when the episode wrote no memo."""
    return NO_MEMO_HASH if memo is None else memo_sha256(memo)


def is_stale(label: Label, current_memo_hash: str) -> bool:
    """``True`` when ``label`` was given for another memo than the episode's current one
    (``current_memo_hash``, :func:`memo_hash` of the current memo)."""
    return label.memo_hash != current_memo_hash


def allowed_tags(run_dir: Path) -> tuple[str, ...]:
    """The reason tags a label of this run may carry: the lines of ``<run>/labels_tags.txt``
    (stripped; blank lines and ``#`` comments skipped; order kept, duplicates dropped) when the
    file exists, else :data:`DEFAULT_TAGS`. Raises :class:`LabelsError` naming the file when it
    lists no tag."""
    path = Path(run_dir) / layout.LABELS_TAGS
    if not path.is_file():
        return DEFAULT_TAGS
    tags = [
        line.strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    if not tags:
        raise LabelsError(f"{path}: lists no tag (one tag a line; delete the file for defaults)")
    return tuple(dict.fromkeys(tags))


_run_tags = allowed_tags  # the parameters named ``allowed_tags`` below shadow the function


class EpisodeRubric(NamedTuple):
    """What a label of one episode is checked against."""

    memo_hash: str
    """:func:`memo_hash` of the episode's current memo."""
    criterion_ids: tuple[str, ...] | None
    """Criterion ids of the episode's room rubric; ``None`` when the room's ``task.json`` is
    unusable (``problem`` says why)."""
    problem: str | None = None


def run_rubrics(run_dir: Path) -> dict[str, EpisodeRubric]:
    """Per episode id of the run (its latest ``episodes.jsonl`` line): current memo hash and
    rubric criterion ids. Raises ``NotARunError`` when ``run.json`` is absent."""
    summaries = {s.episode_id: s for s in load_summaries(run_dir)}
    tasks = load_room_tasks(run_dir, summaries.values(), on_error="report")
    problems = {p.room_hash: p.message for p in tasks.problems}
    out: dict[str, EpisodeRubric] = {}
    for eid, s in summaries.items():
        task = tasks.tasks.get(s.room.room_hash)
        ids = None if task is None else tuple(c.id for c in task.criteria)
        out[eid] = EpisodeRubric(memo_hash(s.memo), ids, problems.get(s.room.room_hash))
    return out


def check_labels(
    run_dir: Path,
    labels: Sequence[Label],
    *,
    allowed_tags: Iterable[str] | None = None,
    rubrics: dict[str, EpisodeRubric] | None = None,
) -> list[str]:
    """Every problem of ``labels`` against the run, one message each (empty: all fit).

    A label fits when its episode is one of the run's, its criterion (for a criterion label)
    is in that episode's room rubric, and every tag is allowed (``allowed_tags``; default
    :func:`allowed_tags` of the run). The memo hash is not checked: a label of an older memo is
    kept (stale). ``rubrics`` (from :func:`run_rubrics`) spares re-reading the run.
    """
    run_dir = Path(run_dir)
    tags = tuple(_run_tags(run_dir) if allowed_tags is None else allowed_tags)
    rubrics = run_rubrics(run_dir) if rubrics is None else rubrics
    problems: list[str] = []
    for i, label in enumerate(labels):
        where = f"label {i + 1} (episode {label.episode_id}"
        where += ")" if label.criterion_id is None else f", criterion {label.criterion_id})"
        rubric = rubrics.get(label.episode_id)
        if rubric is None:
            problems.append(f"{where}: unknown episode {label.episode_id!r} in run {run_dir}")
            continue
        if label.criterion_id is not None:
            if rubric.criterion_ids is None:
                problems.append(
                    f"{where}: the episode's rubric cannot be read ({rubric.problem}), so "
                    "criterion labels cannot be checked"
                )
            elif label.criterion_id not in rubric.criterion_ids:
                problems.append(
                    f"{where}: unknown criterion {label.criterion_id!r}; the episode's rubric "
                    f"has {', '.join(rubric.criterion_ids)}"
                )
        bad = [t for t in label.tags if t not in tags]
        if bad:
            problems.append(
                f"{where}: unknown tag(s) {', '.join(map(repr, bad))}; allowed tags: "
                f"{', '.join(tags)} (configure in {run_dir / layout.LABELS_TAGS})"
            )
    return problems


def append_labels(
    run_dir: Path, labels: Sequence[Label], *, allowed_tags: Iterable[str] | None = None
) -> None:
    """Append ``labels`` to ``<run>/labels.jsonl`` after checking all of them.

    Args:
        run_dir: the run folder (with ``run.json`` and ``episodes.jsonl``).
        labels: labels to write, in order.
        allowed_tags: tags a label may carry; default :func:`allowed_tags` of the run.

    Raises:
        LabelsError: any label does not fit the run (:func:`check_labels`: unknown episode or
            criterion, unknown tag, listing the allowed values); nothing is written.
        NotARunError: ``run_dir`` has no ``run.json``.

    Concurrency: the batch is one ``write`` under an exclusive ``flock`` of the file, so
    processes and threads appending at once never tear or lose lines.
    """
    if not labels:
        return
    problems = check_labels(run_dir, labels, allowed_tags=allowed_tags)
    if problems:
        raise LabelsError("; ".join(problems) + " (nothing written)")
    path = layout.labels_path(run_dir)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        append_records(path, labels)
    finally:
        os.close(fd)  # closing releases the lock


def read_labels(run_dir: Path) -> list[Label]:
    """Every label of ``<run>/labels.jsonl`` in file order; ``[]`` without the file.

    A torn last line (a crash mid-write) is skipped, and the next append closes it, as for
    ``episodes.jsonl`` (:func:`rlmdistill.traces.store.read_jsonl`). Raises
    :class:`LabelsError` naming the file and line number of a record that does not validate
    (or is of a newer schema), and ``TraceFileError`` for a corrupt line mid-file.
    """
    path = layout.labels_path(run_dir)
    read = read_jsonl(path)
    out: list[Label] = []
    for i, record in enumerate(read.records):
        try:
            out.append(Label.model_validate(record))
        except ValidationError as exc:
            raise LabelsError(f"{path}: record {i + 1} is not a valid label: {exc}") from exc
    return out


def latest_labels(labels: Iterable[Label]) -> dict[LabelKey, Label]:
    """The latest label per ``(reviewer, episode_id, target, criterion_id)``: the greatest
    ``time``; between equal times the later one in ``labels`` (file order) wins."""
    out: dict[LabelKey, Label] = {}
    for label in labels:
        old = out.get(label.key)
        if old is None or label.time >= old.time:
            out[label.key] = label
    return out


class LabelsProvenance(BaseModel):
    """What an artefact records of the labels it used (``export.json``, the dataset card)."""

    count: int
    """Labels read from the file (every line, stale and superseded ones included)."""
    reviewers: list[str]
    """Distinct reviewers, sorted."""
    sha256: str
    """sha256 hex digest of ``labels.jsonl``'s bytes when read."""
    path: str
    """The file read."""


def labels_provenance(run_dir: Path) -> LabelsProvenance | None:
    """:class:`LabelsProvenance` of a run's ``labels.jsonl``; ``None`` without the file."""
    path = layout.labels_path(run_dir)
    if not path.is_file():
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    labels = read_labels(run_dir)
    return LabelsProvenance(
        count=len(labels),
        reviewers=sorted({x.reviewer for x in labels}),
        sha256=digest,
        path=str(path),
    )


# ------------------------------------------------------------------------------- CSV in/out
CSV_COLUMNS: tuple[str, ...] = (
    "episode_id",
    "target",
    "criterion_id",
    "verdict",
    "tags",
    "note",
    "reviewer",
    "time",
    "memo_hash",
)
"""Columns of ``rlmdistill labels export`` (and what ``import`` reads). ``tags`` are joined
with ``;``; ``time`` is ISO 8601 with its offset."""

CSV_REQUIRED: tuple[str, ...] = ("episode_id", "verdict", "reviewer")
"""Columns an imported CSV must have. The others may be absent or empty: ``target`` follows
from ``criterion_id`` (empty: the episode); ``memo_hash`` defaults to the episode's current
memo; ``time`` to the time of the import (UTC)."""


def labels_to_csv(labels: Iterable[Label], path: Path) -> int:
    """Write ``labels`` as CSV (:data:`CSV_COLUMNS`, header first) to ``path``; returns the
    rows written. Written to a temporary file and renamed, so a reader never sees half."""
    import csv

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for x in labels:
            w.writerow(
                [
                    x.episode_id,
                    x.target,
                    x.criterion_id or "",
                    x.verdict,
                    ";".join(x.tags),
                    x.note,
                    x.reviewer,
                    x.time.isoformat(),
                    x.memo_hash,
                ]
            )
            n += 1
    os.replace(tmp, path)
    return n


def labels_from_csv(
    path: Path,
    run_dir: Path,
    *,
    allowed_tags: Iterable[str] | None = None,
    now: dt.datetime | None = None,
) -> list[Label]:
    """Read and check every row of a labels CSV against the run; nothing is written.

    Args:
        path: the CSV (UTF-8, header row; :data:`CSV_REQUIRED` columns, the rest of
            :data:`CSV_COLUMNS` optional; unknown columns are an error).
        run_dir: the run the labels are for.
        allowed_tags: as for :func:`append_labels` (default: the run's).
        now: the time of rows without one (default: now, UTC).

    Returns the labels in row order.

    Raises:
        LabelsError: one message listing every bad row as ``FILE:LINE: what`` (a field that
            does not validate, a naive time, an unknown episode, criterion or tag), or a
            missing or unknown column.
    """
    import csv

    path = Path(path)
    now = now or dt.datetime.now(dt.UTC)
    rubrics = run_rubrics(run_dir)
    labels: list[Label] = []
    lines: list[int] = []
    problems: list[str] = []
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        missing = [c for c in CSV_REQUIRED if c not in header]
        unknown = [c for c in header if c not in CSV_COLUMNS]
        if missing or unknown:
            raise LabelsError(
                f"{path}:1: "
                + "; ".join(
                    [f"missing column(s) {', '.join(missing)}"] * bool(missing)
                    + [f"unknown column(s) {', '.join(unknown)}"] * bool(unknown)
                )
                + f" (columns: {', '.join(CSV_COLUMNS)})"
            )
        for row in reader:
            line = reader.line_num
            get = {k: (v or "").strip() for k, v in row.items() if k is not None}
            cid = get.get("criterion_id") or None
            eid = get.get("episode_id", "")
            rubric = rubrics.get(eid)
            try:
                time = dt.datetime.fromisoformat(get["time"]) if get.get("time") else now
                label = Label(
                    episode_id=eid,
                    memo_hash=get.get("memo_hash")
                    or (rubric.memo_hash if rubric is not None else NO_MEMO_HASH),
                    target=get.get("target") or ("episode" if cid is None else "criterion"),  # type: ignore[arg-type]
                    criterion_id=cid,
                    verdict=get.get("verdict", ""),  # type: ignore[arg-type]
                    tags=[t.strip() for t in get.get("tags", "").split(";") if t.strip()],
                    note=get.get("note", ""),
                    reviewer=get.get("reviewer", ""),
                    time=time,
                )
            except ValueError as exc:  # pydantic's ValidationError, a bad ISO time
                msgs = (
                    [f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors()]
                    if isinstance(exc, ValidationError)
                    else [f"time: {exc}"]
                )
                problems.append(f"{path}:{line}: " + "; ".join(msgs))
                continue
            labels.append(label)
            lines.append(line)
    if labels:
        tags = tuple(_run_tags(run_dir) if allowed_tags is None else allowed_tags)
        for label, line in zip(labels, lines, strict=True):
            for p in check_labels(run_dir, [label], allowed_tags=tags, rubrics=rubrics):
                problems.append(f"{path}:{line}: {p.split(': ', 1)[1]}")
    if problems:
        raise LabelsError("\n".join(problems) + "\n(nothing imported)")
    return labels


# ------------------------------------------------------------------ per-episode human view
class EpisodeLabels(NamedTuple):
    """What people decided about one episode's current memo (the filter's ``human_*`` fields).

    Over every reviewer's latest label per target of the *current* memo: ``reject`` when any
    reviewer's latest episode label is ``reject`` (a person's reject wins over another's keep);
    ``keep`` when at least one is ``keep`` and none ``reject``. ``stale`` when a (reviewer,
    target) was labelled on an older memo only (someone reviewed an earlier memo, not this one).
    """

    reviewed: bool
    """A reviewer gave the current memo an episode label (keep or reject)."""
    keep: bool
    reject: bool
    tags: tuple[str, ...]
    """Tags of the latest current labels, episode and criterion ones, sorted, once each."""
    stale: bool
    reviewers: tuple[str, ...]
    """Reviewers with a current label of the episode (any target), sorted."""


NO_LABELS = EpisodeLabels(False, False, False, (), False, ())
"""The :class:`EpisodeLabels` of an episode nobody labelled."""


def episode_labels(
    labels: Iterable[Label], current_memo_hashes: dict[str, str]
) -> dict[str, EpisodeLabels]:
    """:class:`EpisodeLabels` per episode id of ``current_memo_hashes`` (episode id ->
    :func:`memo_hash` of its current memo) that has any label; others are :data:`NO_LABELS`.
    Labels of episodes not in the mapping are ignored."""
    fresh: list[Label] = []
    stale_keys: set[LabelKey] = set()
    for x in labels:
        current = current_memo_hashes.get(x.episode_id)
        if current is None:
            continue
        if is_stale(x, current):
            stale_keys.add(x.key)
        else:
            fresh.append(x)
    latest = latest_labels(fresh)
    by_ep: dict[str, list[Label]] = {}
    for x in latest.values():
        by_ep.setdefault(x.episode_id, []).append(x)
    stale_eps = {k[1] for k in stale_keys - latest.keys()}
    out: dict[str, EpisodeLabels] = {}
    for eid in set(by_ep) | stale_eps:
        xs = by_ep.get(eid, [])
        verdicts = {x.verdict for x in xs if x.target == "episode"}
        reject = "reject" in verdicts
        out[eid] = EpisodeLabels(
            reviewed=bool(verdicts),
            keep="keep" in verdicts and not reject,
            reject=reject,
            tags=tuple(sorted({t for x in xs for t in x.tags})),
            stale=eid in stale_eps,
            reviewers=tuple(sorted({x.reviewer for x in xs})),
        )
    return out
