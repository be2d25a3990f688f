"""Episode selection (rejection sampling): which episodes of some runs become training data.

:func:`select_episodes` is pure (reads, never writes) and reads only ``run.json``,
``episodes.jsonl``, ``verdicts/<grader>.jsonl`` and the rooms' ``task.json`` (for the rubric
size in pass rates) -- never a trajectory, unless ``dedup`` asks for ``completions``. It gives
every episode one :class:`FilterDecision`: kept or not, the primary drop reason (first rule
failed, in :data:`rlmdistill.filter.rules.REASON_ORDER`), every rule it failed with details,
and its scores. Rules 1-10 are judged on each episode alone, so all their failures are
recorded; ``duplicate`` is judged only among episodes passing 1-10 and ``top_k`` only among
episodes passing 1-11.

Per-room quantile thresholds are computed over the room's *eligible* episodes (status, memo,
turn and sub-call rules passed) that have the score, with :func:`numpy.quantile` and the
rules' ``quantile_method``. A room is identified by (room content hash, task id), so the
same room collected in two runs is one room.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.filter.expr import false_expressions
from rlmdistill.filter.fields import episode_fields
from rlmdistill.filter.rules import (
    REASON_ORDER,
    DropReason,
    FilterRuleError,
    FilterRules,
    FilterTarget,
)
from rlmdistill.rooms.task import Task
from rlmdistill.traces.artefacts import FilterDecision
from rlmdistill.traces.labels import (
    NO_LABELS,
    EpisodeLabels,
    LabelsProvenance,
    episode_labels,
    labels_provenance,
    memo_hash,
    read_labels,
)
from rlmdistill.traces.layout import EPISODES
from rlmdistill.traces.memo_errors import memo_sub_call_errors
from rlmdistill.traces.runs import (
    EpisodeRef,
    RoomTaskError,
    grader_ids,
    load_manifest,
    load_room_tasks,
    load_summaries,
    load_trajectory,
    load_verdicts,
)
from rlmdistill.traces.schema import EpisodeSummary, Verdict
from rlmdistill.traces.scores import (
    GraderChoiceError,
    PassRates,
    current_memo_verdicts,
    resolve_grader,
    score_episodes,
)

__all__ = [
    "EpisodeInputs",
    "FilterDecision",
    "RoomThresholds",
    "RunInfo",
    "Selection",
    "completions_sha256",
    "rank_key",
    "room_key",
    "select_episodes",
]


class RunInfo(BaseModel):
    """One input run of a selection."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    """The run directory as given."""
    run_id: str
    n_episodes: int
    """Episode summaries in ``episodes.jsonl``."""
    graders: list[str]
    """Graders with a verdict file in the run."""
    warnings: list[str] = Field(default_factory=list)
    """Things that limited scoring (e.g. a room's task.json not found, so no pass rates)."""
    labels: LabelsProvenance | None = None
    """The run's ``labels.jsonl`` as read (count, reviewers, sha256); ``None``: no labels."""


class RoomThresholds(BaseModel):
    """Per-room quantile thresholds actually applied (``None`` when not set or no scores)."""

    model_config = ConfigDict(extra="forbid")

    room_key: str
    """``<room_hash>/<task_id>``."""
    room_id: str
    task_id: str
    room_docs: int
    n_episodes: int
    n_eligible: int
    """Episodes passing the status, memo, turn and sub-call rules (the quantiles' population)."""
    pass_rate_threshold: float | None = None
    """``quantile(eligible pass rates, min_pass_rate_quantile)``."""
    coverage_threshold: float | None = None
    """``quantile(eligible coverages, min_coverage_quantile)``."""


class EpisodeInputs(NamedTuple):
    """What the rules read of one episode: its summary, scores, people's labels, and the
    grader's verdicts of its current memo with the room's task (``None``: none)."""

    summary: EpisodeSummary
    scores: PassRates | None
    human: EpisodeLabels
    verdicts: list[Verdict]
    task: Task | None


@dataclass
class Selection:
    """The result of :func:`select_episodes`: one decision per episode, in input order
    (runs in the order given, episodes in ``episodes.jsonl`` order)."""

    rules: FilterRules
    runs: list[RunInfo]
    grader: str | None
    """The grader whose verdicts gave the pass rates (``None``: no grader in any run)."""
    decisions: list[FilterDecision]
    rooms: list[RoomThresholds] = field(default_factory=list)
    inputs: dict[tuple[str, str], EpisodeInputs] = field(default_factory=dict)
    """``(run_dir, episode_id)`` -> what the rules read of each episode, kept only by a
    selection for ``target="sub"`` (the sub-call selection reads it again per sub-call)."""

    @property
    def kept(self) -> list[EpisodeRef]:
        """Kept episodes, in input order."""
        return [d.ref for d in self.decisions if d.kept]

    @property
    def n_kept(self) -> int:
        """Number of kept episodes."""
        return sum(1 for d in self.decisions if d.kept)


def room_key(summary: EpisodeSummary) -> str:
    """Group key of an episode's room: ``<room_hash>/<task_id>``."""
    return f"{summary.room.room_hash}/{summary.task_id}"


def rank_key(
    scores: Mapping[str, float | None], rank_by: Sequence[str], episode_id: str, run_id: str
) -> tuple[Any, ...]:
    """Ascending sort key: better episodes first.

    Scores in ``rank_by`` order, higher first, a missing score after every present one;
    ties broken by ``episode_id`` then ``run_id`` (both ascending), so the order never
    depends on file order.
    """
    parts: list[Any] = []
    for name in rank_by:
        value = scores.get(name)
        parts.append((value is None, -(value or 0.0)))
    return (*parts, episode_id, run_id)


def completions_sha256(run_dir: Path, episode_id: str) -> str | None:
    """sha256 of the root's assistant messages (prefill + completion, in turn order), read
    from the trajectory; ``None`` when the trajectory file is missing."""
    try:
        traj = load_trajectory(run_dir, episode_id)
    except FileNotFoundError:
        return None
    texts = [(t.prefill or "") + t.completion for t in traj.turns]
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass
class _Ep:
    run_dir: Path
    run_index: int
    summary: EpisodeSummary
    scores: PassRates | None
    """``None``: not graded (no verdict of the current memo, or no usable task)."""
    reasons: list[DropReason] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    rank: int | None = None
    duplicate_of: str | None = None
    human: EpisodeLabels = NO_LABELS
    """People's labels of the current memo (``labels.jsonl``)."""

    def fail(self, reason: DropReason, detail: str) -> None:
        self.reasons.append(reason)
        self.details[reason] = detail

    def score(self, name: str) -> float | None:
        if name == "coverage":
            cov = self.summary.coverage
            return cov.overall if cov is not None else None
        value = getattr(self.scores, name, None)
        return None if value is None else float(value)


def _resolve_grader(rules: FilterRules, available: dict[Path, list[str]]) -> str | None:
    try:
        return resolve_grader(
            {str(run): ids for run, ids in available.items()},
            rules.grader,
            required=rules.needs_pass_rate(),
            hint="grader: NAME (--grader NAME)",
        )
    except GraderChoiceError as exc:
        raise FilterRuleError(str(exc)) from exc


def _quantile(values: list[float], q: float | None, method: str) -> float | None:
    if q is None or not values:
        return None
    return float(np.quantile(np.asarray(values, dtype=float), q, method=method))  # type: ignore[call-overload]


def select_episodes(
    runs: Sequence[Path], rules: FilterRules, *, target: FilterTarget = "root"
) -> Selection:
    """Apply ``rules`` to every episode of ``runs`` (see the module docstring for the order).

    ``target="sub"``: the ``where`` expressions are left to the sub-call selection
    (:func:`rlmdistill.filter.sub_select.select_sub_calls`, which judges each sub-call of
    a kept episode by them); every other rule picks the episodes as for the root, and
    :attr:`Selection.inputs` keeps what the sub-call selection needs.

    Raises :class:`~rlmdistill.traces.runs.NotARunError` for a folder without ``run.json``,
    :class:`FilterRuleError` when a run is given twice (same path or run id), when the
    grader is ambiguous or missing (the message lists the graders per run), when the rules
    use pass rates and a graded room has no usable task (``task.json`` not found, invalid, or
    another task than its episodes ran: see
    :func:`~rlmdistill.traces.runs.load_room_tasks`), or when the same
    episode id appears twice in one run; :class:`~rlmdistill.filter.expr.ExpressionError`
    when a ``where`` expression fails on an episode for another reason than a ``None`` field.
    """
    if not runs:
        raise FilterRuleError("no runs given")
    run_dirs = [Path(r) for r in runs]
    seen_paths: dict[Path, Path] = {}
    for r in run_dirs:
        resolved = r.resolve()
        if resolved in seen_paths:
            raise FilterRuleError(f"run {r} is given twice")
        seen_paths[resolved] = r
    manifests = [load_manifest(r) for r in run_dirs]
    seen_ids: dict[str, Path] = {}
    for r, m in zip(run_dirs, manifests, strict=True):
        if m.run_id in seen_ids:
            raise FilterRuleError(
                f"runs {seen_ids[m.run_id]} and {r} have the same run id {m.run_id} "
                "(a copy of one run?)"
            )
        seen_ids[m.run_id] = r
    available = {r: grader_ids(r) for r in run_dirs}
    grader = _resolve_grader(rules, available)
    needs_pass = rules.needs_pass_rate()

    eps: list[_Ep] = []
    infos: list[RunInfo] = []
    inputs: dict[tuple[str, str], EpisodeInputs] = {}
    for index, (run_dir, manifest) in enumerate(zip(run_dirs, manifests, strict=True)):
        summaries = load_summaries(run_dir)
        seen: set[str] = set()
        for s in summaries:
            if s.episode_id in seen:
                raise FilterRuleError(
                    f"{run_dir / EPISODES}: episode {s.episode_id} has two summary lines"
                )
            seen.add(s.episode_id)
        warnings: list[str] = []
        verdicts = (
            load_verdicts(run_dir, grader)
            if grader is not None and grader in available[run_dir]
            else []
        )
        tasks: dict[str, Task] = {}
        if verdicts:
            try:
                room_tasks = load_room_tasks(
                    manifest,
                    summaries,
                    on_error="raise" if needs_pass else "report",
                    run_dir=run_dir,
                )
            except RoomTaskError as exc:
                raise FilterRuleError(
                    f"run {run_dir}, room {exc.problem.room_id}: cannot compute pass rates "
                    f"without the room's task: {exc}"
                ) from exc
            tasks = room_tasks.tasks
            warnings += [
                f"room {p.room_id}: {p.message}; its episodes have no pass rate"
                for p in room_tasks.problems
            ]
        scores = score_episodes(summaries, verdicts, tasks)
        provenance = labels_provenance(run_dir)
        human = (
            episode_labels(
                read_labels(run_dir), {s.episode_id: memo_hash(s.memo) for s in summaries}
            )
            if provenance is not None
            else {}
        )
        if target == "sub":
            by_episode: dict[str, list[Verdict]] = {}
            for verdict in verdicts:
                by_episode.setdefault(verdict.episode_id, []).append(verdict)
            for s in summaries:
                inputs[(str(run_dir), s.episode_id)] = EpisodeInputs(
                    s,
                    scores[s.episode_id].rates if s.episode_id in scores else None,
                    human.get(s.episode_id, NO_LABELS),
                    current_memo_verdicts(by_episode.get(s.episode_id, ()), s.memo_sha256),
                    tasks.get(s.room.room_hash),
                )
        eps.extend(
            _Ep(
                run_dir,
                index,
                s,
                scores[s.episode_id].rates if s.episode_id in scores else None,
                human=human.get(s.episode_id, NO_LABELS),
            )
            for s in summaries
        )
        infos.append(
            RunInfo(
                run_dir=str(run_dir),
                run_id=manifest.run_id,
                n_episodes=len(summaries),
                graders=available[run_dir],
                warnings=warnings,
                labels=provenance,
            )
        )

    # Rules 1-5: status, memo, sub-call error text, turns, sub-calls (each episode alone).
    required = set(rules.required_status)
    for ep in eps:
        s = ep.summary
        if required and s.status not in required:
            ep.fail("status", f"status {s.status} not in {sorted(required)}")
        if rules.require_memo and not (s.memo or s.memo_chars > 0):
            ep.fail("no_memo", "no memo")
        if n_error_texts := memo_sub_call_errors(s):
            ep.fail(
                "sub_call_error_text",
                f"memo carries {n_error_texts} sub-call error text(s) ([llm_query error ...])",
            )
        if rules.min_turns is not None and s.n_turns < rules.min_turns:
            ep.fail("turns", f"n_turns {s.n_turns} < {rules.min_turns}")
        elif rules.max_turns is not None and s.n_turns > rules.max_turns:
            ep.fail("turns", f"n_turns {s.n_turns} > {rules.max_turns}")
        if rules.min_sub_calls is not None and s.n_sub_calls < rules.min_sub_calls:
            ep.fail("sub_calls", f"n_sub_calls {s.n_sub_calls} < {rules.min_sub_calls}")

    # Per-room quantile thresholds over eligible episodes (rules 1-5 passed).
    by_room: dict[str, list[_Ep]] = {}
    for ep in eps:
        by_room.setdefault(room_key(ep.summary), []).append(ep)
    thresholds: dict[str, RoomThresholds] = {}
    for key, members in by_room.items():
        eligible = [ep for ep in members if not ep.reasons]
        first = members[0].summary
        pass_values = [v for ep in eligible if (v := ep.score(rules.pass_rate_field)) is not None]
        cov_values = [v for ep in eligible if (v := ep.score("coverage")) is not None]
        thresholds[key] = RoomThresholds(
            room_key=key,
            room_id=first.room.room_id,
            task_id=first.task_id,
            room_docs=first.room.n_documents,
            n_episodes=len(members),
            n_eligible=len(eligible),
            pass_rate_threshold=_quantile(
                pass_values, rules.min_pass_rate_quantile, rules.quantile_method
            ),
            coverage_threshold=_quantile(
                cov_values, rules.min_coverage_quantile, rules.quantile_method
            ),
        )

    # Rules 6-10: scores and expressions.
    expressions = rules.expressions() if target == "root" else []
    evaluators = [expr.evaluator() for expr in expressions]
    pass_rule = rules.min_pass_rate is not None or rules.min_pass_rate_quantile is not None
    for ep in eps:
        limit = thresholds[room_key(ep.summary)]
        name = rules.pass_rate_field
        value = ep.score(name)
        if pass_rule:
            if ep.scores is None:
                ep.fail("ungraded", f"no {grader} verdicts for this memo")
            elif value is None:
                ep.fail("pass_rate", f"{name} undefined")
            else:
                limits = [
                    (t, label)
                    for t, label in (
                        (rules.min_pass_rate, "min_pass_rate"),
                        (limit.pass_rate_threshold, f"room q{rules.min_pass_rate_quantile}"),
                    )
                    if t is not None
                ]
                failed = [f"{value:.4g} < {t:.4g} ({label})" for t, label in limits if value < t]
                if failed:
                    ep.fail("pass_rate", f"{name} " + ", ".join(failed))
        if rules.needs_coverage():
            cov = ep.score("coverage")
            if cov is None:
                ep.fail("no_coverage", "coverage not measured")
            else:
                limits = [
                    (t, label)
                    for t, label in (
                        (rules.min_coverage, "min_coverage"),
                        (limit.coverage_threshold, f"room q{rules.min_coverage_quantile}"),
                    )
                    if t is not None
                ]
                failed = [f"{cov:.4g} < {t:.4g} ({label})" for t, label in limits if cov < t]
                if failed:
                    ep.fail("coverage", "coverage " + ", ".join(failed))
        if expressions:
            values = episode_fields(ep.summary, ep.scores, ep.human)
            where = f"{ep.run_dir}:{ep.summary.episode_id}"
            false = false_expressions(expressions, evaluators, values, where)
            if false:
                ep.fail("where", "false: " + "; ".join(false))

    # Rule 11: a person's reject wins.
    if rules.human_reject_wins:
        for ep in eps:
            if ep.human.reject:
                who = ", ".join(ep.human.reviewers)
                tags = f" ({', '.join(ep.human.tags)})" if ep.human.tags else ""
                ep.fail("human_reject", f"a person rejected this memo (reviewers: {who}){tags}")

    def key_of(ep: _Ep) -> tuple[Any, ...]:
        scores: dict[str, float | None] = {n: ep.score(n) for n in rules.rank_by}
        return rank_key(scores, rules.rank_by, ep.summary.episode_id, ep.summary.run_id)

    # Rule 12: duplicates among survivors, best-ranked kept.
    if rules.dedup:
        survivors = sorted((ep for ep in eps if not ep.reasons), key=key_of)
        owner: dict[tuple[str, str], _Ep] = {}
        for ep in survivors:
            keys: list[tuple[str, str]] = []
            if "memo" in rules.dedup and ep.summary.memo_sha256:
                keys.append(("memo", ep.summary.memo_sha256))
            if "completions" in rules.dedup:
                digest = completions_sha256(ep.run_dir, ep.summary.episode_id)
                if digest is not None:
                    keys.append(("completions", digest))
            hit = next((k for k in keys if k in owner), None)
            if hit is not None:
                other = owner[hit]
                ep.duplicate_of = other.summary.episode_id
                ep.fail(
                    "duplicate",
                    f"same {hit[0]} as {other.summary.run_id}:{other.summary.episode_id}",
                )
                continue
            for dedup_key in keys:
                owner[dedup_key] = ep

    # Rule 13: top-k per room among survivors.
    if rules.top_k_per_room is not None:
        k = rules.top_k_per_room
        for key, members in by_room.items():
            ranked = sorted((ep for ep in members if not ep.reasons), key=key_of)
            for position, ep in enumerate(ranked, start=1):
                ep.rank = position
                if position > k:
                    ep.fail(
                        "top_k",
                        f"rank {position} of {len(ranked)} in room {thresholds[key].room_id} "
                        f"(top {k} by {', '.join(rules.rank_by)})",
                    )

    order = {reason: i for i, reason in enumerate(REASON_ORDER)}
    decisions = []
    for ep in eps:
        s = ep.summary
        reasons = sorted(ep.reasons, key=order.__getitem__)
        decisions.append(
            FilterDecision(
                run_id=s.run_id,
                run_dir=str(ep.run_dir),
                episode_id=s.episode_id,
                room_id=s.room.room_id,
                room_hash=s.room.room_hash,
                task_id=s.task_id,
                room_docs=s.room.n_documents,
                status=s.status,
                kept=not reasons,
                primary_reason=reasons[0] if reasons else None,
                reasons=reasons,
                details=ep.details,
                pass_rate=None if ep.scores is None else ep.scores.pass_rate,
                graded_pass_rate=None if ep.scores is None else ep.scores.graded_pass_rate,
                weighted_pass_rate=None if ep.scores is None else ep.scores.weighted_pass_rate,
                coverage=ep.score("coverage"),
                n_ungradable=None if ep.scores is None else ep.scores.n_ungradable,
                rank_in_room=ep.rank,
                duplicate_of=ep.duplicate_of,
                human_verdict="reject" if ep.human.reject else "keep" if ep.human.keep else None,
            )
        )
    return Selection(
        rules=rules,
        runs=infos,
        grader=grader,
        decisions=decisions,
        rooms=list(thresholds.values()),
        inputs=inputs,
    )
