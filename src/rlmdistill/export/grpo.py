"""Judged episodes -> GRPO rollout groups: token ids, loss masks, logprobs, rewards, advantages.

``rlmdistill export-grpo RUN [RUN ...] --out datasets/NAME`` writes a Hugging Face dataset
(``save_to_disk``) with a card (``README.md``) and a manifest (``grpo.json``, the export
report). See ``docs/export.md`` ("GRPO rollout groups") for the format and how to load it in
TRL and verl.

Groups. A rollout group is the episodes of one room and task collected with one root model
spec (``group_id`` = room id, room hash, task id, root spec). Its rewards are normalised within
the group (:mod:`rlmdistill.export.advantages`).

Rows. ``unit="episode"`` (default): one row per episode, the whole multi-turn root trajectory
as one token sequence. ``prompt_ids`` are the first root request's prompt; ``completion_ids``
are everything after it, in order: the ids the root generated in turn 0, then the ids the
harness added before turn 1 (end of turn, the REPL observation as the next user message, the
next assistant header and the reply prefill), then turn 1's generated ids, and so on.
``loss_mask`` is 1 exactly on generated ids and 0 on everything the root did not generate
(prefill, REPL output, template tokens). ``logprobs`` are the recorded per-token logprobs of the
generated ids and 0.0 under mask 0. This is the shape verl's multi-turn rollouts and TRL's
GRPO loss with a ``tool_mask`` take. An episode whose next prompt does not extend the previous
prompt + completion (a chat template that drops earlier reasoning re-renders the history) has
no single sequence: in episode mode it is dropped as ``non_contiguous`` (and counted), and
``unit="turn"`` exports it: one row per root turn, the exact prompt of that turn and its
completion (mask all 1), every turn of an episode carrying the episode's reward and advantage.

Rewards. ``pass_rate`` (default; PASS / all criteria of the room's rubric) or
``weighted_pass_rate``, from the chosen grader's verdicts of the episode's current memo
(:func:`rlmdistill.traces.scores.run_scores`); the per-criterion labels are kept in
``criterion_labels``. An episode that ended without a memo gets reward 0 (its rollout is a
failure of the policy, not missing data); an episode with a memo but no verdicts is dropped as
``unjudged``; episodes that ended for infrastructure reasons (``model_error``, ``error``) are
dropped, since their reward says nothing about the policy.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.export.advantages import (
    DEFAULT_STD_FLOOR,
    AdvantageScale,
    GroupAdvantages,
    group_advantages,
)
from rlmdistill.provenance import Provenance, current_provenance
from rlmdistill.traces.layout import GRPO_MANIFEST
from rlmdistill.traces.runs import grader_ids, load_manifest, load_trajectory
from rlmdistill.traces.schema import EpisodeSummary, TurnRecord
from rlmdistill.traces.scores import (
    EpisodeScore,
    GraderChoiceError,
    resolve_grader,
    run_scores,
)
from rlmdistill.traces.store import TraceFileError
from rlmdistill.traces.tokens import prompt_ids

GRPO_SCHEMA_VERSION = 1

GrpoUnit = Literal["episode", "turn"]
RewardKind = Literal["pass_rate", "weighted_pass_rate"]

INFRASTRUCTURE_STATUSES = frozenset({"model_error", "error"})
"""Episode statuses that say nothing about the policy: dropped, never rewarded 0."""


class GrpoOptions(BaseModel):
    """How judged episodes become GRPO rows (every field is recorded in ``grpo.json``)."""

    model_config = ConfigDict(extra="forbid")

    grader: str | None = Field(
        None, description="Grader whose verdicts give the reward (default: the only one)."
    )
    reward: RewardKind = Field("pass_rate", description="pass_rate | weighted_pass_rate.")
    unit: GrpoUnit = Field("episode", description="One row per episode, or per root turn.")
    scale: AdvantageScale = Field(
        "std", description="std: (r - mean) / max(std, floor) (GRPO); none: r - mean (Dr. GRPO)."
    )
    std_floor: float = Field(DEFAULT_STD_FLOOR, gt=0, description="Smallest group std divided by.")
    drop_zero_variance: bool = Field(
        False, description="Leave out groups whose rollouts all got the same reward."
    )
    min_group_size: int = Field(2, ge=1, description="Groups with fewer rollouts are dropped.")


class GroupStats(BaseModel):
    """One rollout group in the export report."""

    group_id: str
    size: int
    rewards: list[float]
    mean: float
    std: float
    zero_variance: bool
    floored: bool
    exported: bool
    drop_reason: str | None = None


class GrpoManifest(Provenance):
    """``datasets/NAME/grpo.json``: what was exported, how, and what was left out (with the
    :class:`~rlmdistill.provenance.Provenance` fields)."""

    schema_version: int = GRPO_SCHEMA_VERSION
    created_at: dt.datetime
    options: GrpoOptions
    runs: list[str]
    grader: str
    n_rows: int
    n_episodes: int
    n_groups: int
    n_groups_exported: int
    n_zero_variance_groups: int
    n_floored_groups: int
    dropped_episodes: dict[str, int]
    """Episodes left out, by reason (``unjudged``, ``infrastructure``, ``no_token_ids``,
    ``non_contiguous``, ``bad_tokens``, ``unreadable_trajectory``, ``group_dropped``)."""
    dropped_examples: list[dict[str, str]] = Field(default_factory=list)
    """Up to 50 dropped episodes with their reason and detail."""
    groups: list[GroupStats]


class GrpoExportError(ValueError):
    """Nothing could be exported, or the inputs are inconsistent (the message says which)."""


def group_id_of(summary: EpisodeSummary, root: str) -> str:
    """``room_id@room_hash[:12]|task_id|root-spec-hash`` (readable, unique per group)."""
    root_hash = hashlib.sha256(root.encode()).hexdigest()[:8]
    return f"{summary.room.room_id}@{summary.room.room_hash[:12]}|{summary.task_id}|{root_hash}"


class _Candidate:
    def __init__(
        self,
        run_dir: Path,
        summary: EpisodeSummary,
        root: str,
        reward: float,
        score: EpisodeScore | None,
        temperature: float | None,
    ) -> None:
        self.run_dir = run_dir
        self.summary = summary
        self.root = root
        self.reward = reward
        self.score = score
        self.temperature = temperature


def _turn_rows(turns: Sequence[TurnRecord]) -> list[dict[str, Any]]:
    """One row fragment per root turn: exact prompt ids, completion ids, mask, logprobs.

    Raises ``ValueError`` naming the turn when ids are missing or lengths disagree.
    """
    prompts = prompt_ids(turns)
    rows = []
    for turn, prompt in zip(sorted(turns, key=lambda t: t.turn), prompts, strict=True):
        tr = turn.tokens
        if prompt is None or tr is None or tr.completion_ids is None:
            raise LookupError(f"turn {turn.turn}: no token ids recorded")
        ids = list(tr.completion_ids)
        lps = list(tr.logprobs) if tr.logprobs is not None else None
        if lps is not None and len(lps) != len(ids):
            raise ValueError(f"turn {turn.turn}: {len(ids)} completion ids but {len(lps)} logprobs")
        rows.append(
            {
                "turn": turn.turn,
                "prompt_ids": prompt,
                "completion_ids": ids,
                "loss_mask": [1] * len(ids),
                "logprobs": lps,
                "logprobs_source": tr.source if lps is not None else "unavailable",
            }
        )
    return rows


def _episode_row(turn_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Join per-turn fragments into one sequence (``ValueError`` when not contiguous)."""
    first = turn_rows[0]
    prompt = list(first["prompt_ids"])
    seq = list(prompt)
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] | None = [] if all(r["logprobs"] is not None for r in turn_rows) else None
    for r in turn_rows:
        p = r["prompt_ids"]
        if p[: len(seq)] != seq:
            raise ValueError(
                f"turn {r['turn']}: its prompt does not extend the previous prompt + completion "
                "(the chat template re-rendered the history); export with unit=turn"
            )
        added = p[len(seq) :]
        completion += added
        mask += [0] * len(added)
        if logprobs is not None:
            logprobs += [0.0] * len(added)
        completion += r["completion_ids"]
        mask += [1] * len(r["completion_ids"])
        if logprobs is not None:
            logprobs += r["logprobs"]
        seq = p + r["completion_ids"]
    return {
        "turn": -1,
        "prompt_ids": prompt,
        "completion_ids": completion,
        "loss_mask": mask,
        "logprobs": logprobs,
        "logprobs_source": first["logprobs_source"] if logprobs is not None else "unavailable",
    }


def episode_token_row(turns: Sequence[TurnRecord]) -> dict[str, Any]:
    """One episode's root turns as one GRPO sequence (the ``unit="episode"`` row fragment).

    Returns ``{"turn": -1, "prompt_ids", "completion_ids", "loss_mask", "logprobs",
    "logprobs_source"}``: ``completion_ids`` interleave generated ids (mask 1) with the ids the
    harness added between turns (mask 0, logprob 0.0); ``len(completion_ids) ==
    len(loss_mask) == len(logprobs)``. Shared by ``export-grpo`` and online RL
    (:mod:`rlmdistill.rl.rollout`).

    Raises:
        LookupError: a turn has no recorded token ids.
        ValueError: lengths disagree, or a turn's prompt does not extend the previous prompt +
            completion (a chat template that re-renders the history).
    """
    return _episode_row(_turn_rows(turns))


def _extends(prev: dict[str, Any], cur: dict[str, Any]) -> bool:
    """``cur``'s prompt ids start with ``prev``'s prompt + completion ids."""
    seq = list(prev["prompt_ids"]) + list(prev["completion_ids"])
    return list(cur["prompt_ids"][: len(seq)]) == seq


def episode_token_tail(turns: Sequence[TurnRecord]) -> tuple[dict[str, Any], int]:
    """The longest run of root turns ending at the last one that forms one token sequence.

    Online RL trains on this instead of :func:`episode_token_row`: when a served chat template
    re-renders an earlier reply with other ids than were generated (the root sampled a
    tokenisation the tokenizer would not produce: SmolLM2's ``"pr"`` + ``"int"``, re-encoded
    as one ``"print"`` id), the turns before the break cannot share a sequence with the later
    ones. The row starts at the first turn ``k`` after the last break: its
    ``prompt_ids`` are turn ``k``'s exact prompt ids (the earlier turns as the model saw them
    then, as context), so every id with mask 1 is scored in the context it was sampled in and
    keeps its sampling logprob. Turns before ``k`` are left out of the loss (they still count
    for the episode's reward).

    Returns ``(row, k)``: ``row`` as :func:`episode_token_row` builds it from turns ``k..T``;
    ``k`` = the number of turns left out (0 when the whole episode is one sequence, and then
    ``row == episode_token_row(turns)``).

    Raises:
        LookupError: no root turn, or a turn has no recorded token ids.
        ValueError: completion ids and logprobs of a turn differ in length.
    """
    rows = _turn_rows(turns)
    if not rows:
        raise LookupError("no root turns")
    k = len(rows) - 1
    while k > 0 and _extends(rows[k - 1], rows[k]):
        k -= 1
    return _episode_row(rows[k:]), k


def _resolve_grader(runs: Sequence[Path], grader: str | None) -> str:
    try:
        chosen = resolve_grader(
            {str(r): grader_ids(r) for r in runs}, grader, required=True, all_runs=True
        )
    except GraderChoiceError as exc:
        raise GrpoExportError(str(exc)) from exc
    assert chosen is not None  # required=True
    return chosen


def export_grpo(
    runs: Sequence[Path], out: Path, options: GrpoOptions, *, overwrite: bool = False
) -> GrpoManifest:
    """Export the judged episodes of ``runs`` as GRPO rollout groups (see the module doc).

    Args:
        runs: run folders (judged by the grader of ``options``).
        out: dataset folder to write.
        options: :class:`GrpoOptions`.
        overwrite: replace an existing ``out``.

    Returns:
        The :class:`GrpoManifest` written to ``out/grpo.json``.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is False.
        GrpoExportError: no grader / an ambiguous grader, or no row survived (the message
            gives the drop counts).
        ValueError: a row whose ids, mask and logprobs lengths differ (a bug, never written).
    """
    from datasets import Dataset

    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass --overwrite to replace it")
    run_dirs = [Path(r) for r in runs]
    grader = _resolve_grader(run_dirs, options.grader)
    dropped: Counter[str] = Counter()
    examples: list[dict[str, str]] = []

    def drop(c: EpisodeSummary, reason: str, detail: str) -> None:
        dropped[reason] += 1
        if len(examples) < 50:
            examples.append({"episode_id": c.episode_id, "reason": reason, "detail": detail})

    groups: dict[str, list[_Candidate]] = {}
    for run_dir in run_dirs:
        manifest = load_manifest(run_dir)
        root = manifest.config.root or ""
        temperature = manifest.config.root_sampling.get("temperature")
        scored = run_scores(run_dir, grader, on_error="report")
        tasks_ok = {s.room.room_hash for s in scored.summaries} - {
            p.room_hash for p in scored.problems
        }
        for s in scored.summaries:
            if s.status in INFRASTRUCTURE_STATUSES:
                drop(s, "infrastructure", f"status {s.status}")
                continue
            score = scored.scores.get(s.episode_id)
            if score is None:
                if s.memo_sha256 is None and s.room.room_hash in tasks_ok:
                    reward = 0.0  # no memo: every criterion fails
                else:
                    drop(s, "unjudged", f"no {grader} verdicts of its memo (or no task)")
                    continue
            else:
                value = getattr(score.rates, options.reward)
                if value is None:
                    drop(s, "unjudged", f"{options.reward} undefined (no criteria)")
                    continue
                reward = float(value)
            groups.setdefault(group_id_of(s, root), []).append(
                _Candidate(run_dir, s, root, reward, score, temperature)
            )

    rows: list[dict[str, Any]] = []
    stats: list[GroupStats] = []
    for gid in sorted(groups):
        members = sorted(groups[gid], key=lambda c: c.summary.episode_id)
        adv = group_advantages(
            [c.reward for c in members], scale=options.scale, std_floor=options.std_floor
        )
        reason = None
        if len(members) < options.min_group_size:
            reason = f"size {len(members)} < min_group_size {options.min_group_size}"
        elif adv.zero_variance and options.drop_zero_variance:
            reason = "zero variance"
        group_rows = [] if reason else _group_rows(gid, members, adv, options, drop)
        stats.append(
            GroupStats(
                group_id=gid,
                size=len(members),
                rewards=[c.reward for c in members],
                mean=adv.mean,
                std=adv.std,
                zero_variance=adv.zero_variance,
                floored=adv.floored,
                exported=bool(group_rows),
                drop_reason=reason,
            )
        )
        if reason:
            for c in members:
                drop(c.summary, "group_dropped", reason)
        rows += group_rows

    if not rows:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(dropped.items())) or "no episodes"
        raise GrpoExportError(f"no GRPO row to export from {len(run_dirs)} run(s): {counts}")
    for r in rows:
        n = len(r["completion_ids"])
        if len(r["loss_mask"]) != n or (r["logprobs"] is not None and len(r["logprobs"]) != n):
            raise ValueError(
                f"episode {r['episode_id']} turn {r['turn']}: {n} completion ids, "
                f"{len(r['loss_mask'])} mask values, "
                f"{None if r['logprobs'] is None else len(r['logprobs'])} logprobs"
            )

    manifest_out = GrpoManifest(
        created_at=dt.datetime.now(dt.UTC),
        options=options,
        runs=[str(r) for r in run_dirs],
        grader=grader,
        n_rows=len(rows),
        n_episodes=len({r["episode_id"] for r in rows}),
        n_groups=len(stats),
        n_groups_exported=sum(g.exported for g in stats),
        n_zero_variance_groups=sum(g.zero_variance for g in stats),
        n_floored_groups=sum(g.floored for g in stats),
        dropped_episodes=dict(sorted(dropped.items())),
        dropped_examples=examples,
        groups=stats,
        **current_provenance().model_dump(),
    )
    if out.exists():
        shutil.rmtree(out)
    Dataset.from_list(rows).save_to_disk(str(out))
    (out / GRPO_MANIFEST).write_text(manifest_out.model_dump_json(indent=2), encoding="utf-8")
    (out / "README.md").write_text(grpo_card(manifest_out), encoding="utf-8")
    return manifest_out


def _group_rows(
    gid: str, members: list[_Candidate], adv: GroupAdvantages, options: GrpoOptions, drop: Any
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for c, a in zip(members, adv.advantages, strict=True):
        s = c.summary
        try:
            traj = load_trajectory(c.run_dir, s.episode_id)
        except (FileNotFoundError, TraceFileError) as exc:
            drop(s, "unreadable_trajectory", str(exc))
            continue
        if not traj.turns:
            drop(s, "no_token_ids", "no root turns")
            continue
        try:
            fragments = _turn_rows(traj.turns)
        except LookupError as exc:
            drop(
                s,
                "no_token_ids",
                f"{exc} (trace older than schema 2, or the server returned no ids)",
            )
            continue
        except ValueError as exc:
            drop(s, "bad_tokens", str(exc))
            continue
        if options.unit == "episode":
            try:
                fragments = [_episode_row(fragments)]
            except ValueError as exc:
                drop(s, "non_contiguous", str(exc))
                continue
        score = c.score
        for f in fragments:
            rows.append(
                {
                    "group_id": gid,
                    "episode_id": s.episode_id,
                    "run_id": s.run_id,
                    "room_id": s.room.room_id,
                    "task_id": s.task_id,
                    "root": c.root,
                    "status": s.status,
                    **f,
                    "logprobs_temperature": c.temperature,
                    "reward": c.reward,
                    "reward_kind": options.reward,
                    "advantage": a,
                    "group_size": len(members),
                    "group_mean": adv.mean,
                    "group_std": adv.std,
                    "criterion_ids": score.criterion_ids if score else [],
                    "criterion_labels": score.labels if score else [],
                    "criterion_weights": score.weights if score else [],
                }
            )
    return rows


def grpo_card(m: GrpoManifest) -> str:
    """The dataset card (``README.md``) of a GRPO export."""
    o = m.options
    sizes = Counter(g.size for g in m.groups)
    drops = ", ".join(f"{k}: {v}" for k, v in m.dropped_episodes.items()) or "none"
    adv = (
        f"(r - mean) / max(std, {o.std_floor}) (sample std, ddof 1)"
        if o.scale == "std"
        else "r - mean (unscaled, Dr. GRPO)"
    )
    unit = (
        "one row per episode: the whole multi-turn root trajectory as one sequence; loss_mask "
        "is 1 on ids the root generated and 0 on prefill, REPL output and template tokens"
        if o.unit == "episode"
        else "one row per (episode, root turn): the exact prompt of that turn and its completion; "
        "every turn of an episode carries the episode's reward and advantage"
    )
    return f"""---
tags: [rlmdistill, grpo, rollout-groups]
---
# GRPO rollout groups (rlmdistill)

Exported {m.created_at.isoformat()} from {len(m.runs)} run(s), grader `{m.grader}`.

- Rows: {m.n_rows} ({unit}).
- Episodes: {m.n_episodes}; groups: {m.n_groups} ({m.n_groups_exported} exported), sizes
  {dict(sorted(sizes.items()))}; zero-variance groups: {m.n_zero_variance_groups}
  ({"dropped" if o.drop_zero_variance else "kept, advantages exactly 0"}); groups whose std was
  below the floor: {m.n_floored_groups}.
- Reward: `{o.reward}` of the episode's current memo; no memo = 0. Per-criterion labels in
  `criterion_labels`.
- Advantage: {adv}.
- Logprobs: recorded at collection (`logprobs_source`: `generation` in process, `server` from
  an OpenAI-compatible server), at the sampling temperature in `logprobs_temperature`; 0.0
  under loss_mask 0.
- Episodes left out: {drops}.

Columns: group_id, episode_id, run_id, room_id, task_id, root, status, turn (-1 for a whole
episode), prompt_ids, completion_ids, loss_mask, logprobs, logprobs_source,
logprobs_temperature, reward, reward_kind, advantage, group_size, group_mean, group_std,
criterion_ids, criterion_labels, criterion_weights. Per row,
`len(completion_ids) == len(loss_mask) == len(logprobs)` (checked at export).

Loading: see docs/export.md, "GRPO rollout groups" (TRL: `completion_mask` = 1 on real ids,
`tool_mask` = `loss_mask`, `advantages` = `advantage`, `old_per_token_logps` = `logprobs`).
"""


def read_grpo_manifest(path: Path) -> GrpoManifest:
    """Load ``grpo.json`` (``ValueError`` naming the file when it does not validate)."""
    try:
        return GrpoManifest.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a GRPO export manifest: {exc}") from exc


__all__ = [
    "GRPO_SCHEMA_VERSION",
    "GroupStats",
    "GrpoExportError",
    "GrpoManifest",
    "GrpoOptions",
    "episode_token_row",
    "episode_token_tail",
    "export_grpo",
    "group_id_of",
    "grpo_card",
    "read_grpo_manifest",
]
