"""Synthetic runs with valid, hash-consistent trajectories (export tests and benchmark).

:func:`write_trajectory_run` writes ``run.json``, ``episodes.jsonl`` and one trajectory per
episode through the schema models, with the packaged root prompt (system prompt + worked
example + task message) and root turns whose ``prompt_sha256`` match the rebuilt requests,
so :func:`rlmdistill.traces.rebuild.root_requests` accepts them. Lengths are realistic for
the collector's root: replies of a few hundred characters of code, REPL outputs up to
``obs_chars`` characters. Deterministic for a given ``seed``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from pathlib import Path

from rlmdistill.harness import prompts
from rlmdistill.models.base import Message, Sampling, Usage
from rlmdistill.traces import layout
from rlmdistill.traces.rebuild import assistant_message, messages_sha256
from rlmdistill.traces.schema import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeSummary,
    ModelSettings,
    RoomInfo,
    RunManifest,
    SubCallRecord,
    TokenUsage,
    TurnRecord,
)
from rlmdistill.traces.store import append_records

__all__ = ["synthetic_episode", "write_trajectory_run"]

_WORDS = [
    "agreement",
    "party",
    "assign",
    "consent",
    "change",
    "control",
    "termination",
    "notice",
    "liability",
    "cap",
    "exclusive",
    "license",
    "supplier",
    "buyer",
    "minimum",
    "purchase",
    "warranty",
    "indemnify",
    "governing",
    "law",
    "confidential",
    "term",
    "renewal",
    "fee",
    "royalty",
    "territory",
]
_T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _text(rng: random.Random, n_chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


def synthetic_episode(
    run_id: str,
    episode_id: str,
    *,
    n_turns: int = 3,
    few_shot: bool = True,
    prefill: str | None = "```repl\n",
    obs_chars: int = 1200,
    seed: int = 0,
    replies: list[str] | None = None,
    observations: list[str | None] | None = None,
) -> list[EpisodeStart | TurnRecord | SubCallRecord | EpisodeEnd]:
    """Records of one complete episode (start, turns, one sub-call per turn, end).

    ``replies[t]`` / ``observations[t]`` override the generated completion (prefill
    excluded) and REPL output of turn ``t``; the last turn's observation is ``None`` (the
    root handed back its memo) unless overridden.
    """
    rng = random.Random(f"{seed}-{episode_id}")
    room = RoomInfo(
        room_id="synth",
        room_hash="0" * 16,
        path="/synth",
        n_documents=3,
        n_chars=30_000,
        folders={"Contracts": 3},
    )
    initial = [Message(role="system", content=prompts.SYSTEM_PROMPT)]
    n_few = 0
    if few_shot:
        example = prompts.worked_example()
        initial += example
        n_few = len(example)
    docs = [(f"Contracts/doc_{k}.txt", 10_000) for k in range(3)]
    initial.append(
        Message(
            role="user",
            content=prompts.task_message(
                "Write a due-diligence memo.",
                "Red-flag review",
                3,
                30_000,
                {"Contracts": 3},
                docs,
            ),
        )
    )
    model = ModelSettings(
        spec="openai:root@http://x",
        model_id="root",
        sampling=Sampling(),
        few_shot=few_shot,
        prefill=prefill,
    )
    start = EpisodeStart(
        episode_id=episode_id,
        run_id=run_id,
        sample_index=0,
        started_at=_T0,
        room=room,
        task_id="synth-task",
        root=model,
        sub=model.model_copy(update={"prefill": None}),
        seed=seed,
        prompt_version=prompts.PROMPT_VERSION,
        limits={},
        initial_messages=initial,
        n_few_shot_messages=n_few,
    )
    records: list[EpisodeStart | TurnRecord | SubCallRecord | EpisodeEnd] = [start]
    history = list(initial)
    for t in range(n_turns):
        last = t == n_turns - 1
        if replies is not None:
            completion = replies[t]
        elif last:
            completion = "memo = '# Memo\\n' + '\\n'.join(answers)\nFINAL_VAR(memo)\n```"
        else:
            completion = (
                f"hits = search({rng.choice(_WORDS)!r}, window=300)\n"
                f"prompts = ['Quote the clause on {rng.choice(_WORDS)}:\\n' + h['text'] "
                "for h in hits]\nanswers = llm_query_batched(prompts)\n"
                f"# {_text(rng, rng.randint(100, 400))}\nprint(answers)\n```"
            )
        if observations is not None:
            observation = observations[t]
        elif last:
            observation = None
        else:
            observation = (
                f"REPL output (block 0):\n```\n{_text(rng, rng.randint(obs_chars // 2, obs_chars))}"
                "\n```"
            )
        turn = TurnRecord(
            episode_id=episode_id,
            turn=t,
            started_at=_T0,
            n_messages_before=len(history),
            prompt_sha256=messages_sha256(history),
            prefill=prefill,
            completion=completion,
            usage=Usage(prompt_tokens=100, completion_tokens=50),
            latency_s=0.1,
            observation=observation,
            final_answer_source="final_var" if last else None,
        )
        records.append(turn)
        records.append(
            SubCallRecord(
                episode_id=episode_id,
                call_id=t,
                turn=t,
                block=0,
                batch_id=t,
                batch_size=1,
                prompt=f"SUBCALL-PROMPT-{episode_id}-{t}: {_text(rng, 200)}",
                response=f"SUBCALL-RESPONSE-{episode_id}-{t}: {_text(rng, 100)}",
            )
        )
        history.append(assistant_message(turn))
        if observation is not None:
            history.append(Message(role="user", content=observation))
    records.append(
        EpisodeEnd(episode_id=episode_id, status="completed", memo="# Memo", ended_at=_T0)
    )
    return records


def write_trajectory_run(
    run_dir: Path,
    n_episodes: int,
    *,
    n_turns: int = 3,
    few_shot: bool = True,
    obs_chars: int = 1200,
    seed: int = 0,
) -> list[str]:
    """Write a run of ``n_episodes`` synthetic complete episodes; returns their ids.

    Raises ``FileExistsError`` when ``run_dir/run.json`` exists (never overwrites a run).
    """
    run_dir = Path(run_dir)
    if (run_dir / layout.RUN_MANIFEST).exists():
        raise FileExistsError(f"{run_dir} already holds a run")
    (run_dir / layout.TRAJECTORIES).mkdir(parents=True, exist_ok=True)
    run_id = f"synth-{seed}"
    manifest = RunManifest(
        run_id=run_id, created_at=_T0, config={}, config_hash="0", versions={}, rooms=[]
    )
    (run_dir / layout.RUN_MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    ids: list[str] = []
    summaries: list[EpisodeSummary] = []
    for i in range(n_episodes):
        eid = hashlib.sha256(f"{seed}-{i}".encode()).hexdigest()[:20]
        recs = synthetic_episode(
            run_id, eid, n_turns=n_turns, few_shot=few_shot, obs_chars=obs_chars, seed=seed
        )
        append_records(layout.trajectory_path(run_dir, eid), recs)
        start = recs[0]
        assert isinstance(start, EpisodeStart)
        summaries.append(
            EpisodeSummary(
                episode_id=eid,
                run_id=run_id,
                sample_index=i,
                room=start.room,
                task_id=start.task_id,
                root_model="root",
                sub_model="root",
                seed=seed,
                status="completed",
                n_turns=n_turns,
                n_sub_calls=n_turns,
                tokens=TokenUsage(),
                wall_time_s=1.0,
                memo="# Memo",
                started_at=_T0,
                ended_at=_T0,
            )
        )
        ids.append(eid)
    append_records(run_dir / layout.EPISODES, summaries)
    return ids
