"""Build the committed golden fixture workspace ``tests/data/golden_ws`` (run once, by hand).

Two rooms (``alpha``: 3 criteria of two types, ``beta``: 2 criteria), two runs over them
(``base`` at depth 1, ``deep`` at depth 2, same root and sub, so the report has a depth
ablation), verdicts of one grader (``reference``), a dataset folder with ``export.json`` and
an adapter folder with ``sft.json`` and ``train_log.jsonl``. Room paths are written as
``@WS@/rooms/<room>``; :func:`golden.load_fixture` copies the workspace and fills them in.

The episodes cover the readings that differ between stages: a verdict set for an older memo
(stale), an UNGRADABLE verdict, an episode without verdicts, a timeout, episodes with no memo
that read the room with and without sub-calls, and one with no memo that read nothing.

Usage: ``PYTHONPATH=src python tests/golden/build_fixture.py`` (rewrites the folder).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path

from rlmdistill.rooms.task import Criterion, Task, save_task
from rlmdistill.traces.schema import (
    Coverage,
    EpisodeSummary,
    RoomInfo,
    RunManifest,
    TokenUsage,
    Verdict,
)
from rlmdistill.traces.store import append_records

WS = Path(__file__).resolve().parent.parent / "data" / "golden_ws"
T0 = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
ROOMS = {
    "alpha": [("a1", "finding", 1.0), ("a2", "finding", 2.0), ("a3", "citation", 1.0)],
    "beta": [("b1", "citation", 1.0), ("b2", "quantification", 1.0)],
}
DOCS = {
    "alpha": ["Contracts/a.txt", "Contracts/b.txt"],
    "beta": ["Contracts/c.txt", "Leases/d.txt"],
}

# (episode id, room, status, memo, sub-calls, coverage per doc or None, labels or None, stale)
EPISODES = {
    "base": [
        ("b-al-0", "alpha", "completed", "memo b-al-0", 3, [0.5, 0.25], "PPF", False),
        ("b-al-1", "alpha", "completed", "memo b-al-1", 2, [0.2, 0.0], "PFU", False),
        ("b-al-2", "alpha", "no_memo", None, 0, [0.3, 0.1], None, False),
        ("b-be-0", "beta", "completed", "memo b-be-0", 1, [0.4, 0.4], "PF", False),
        ("b-be-1", "beta", "completed", "memo b-be-1 v2", 2, [0.1, 0.0], "PP", True),
        ("b-be-2", "beta", "timeout", None, 2, [0.0, 0.0], None, False),
    ],
    "deep": [
        ("d-al-0", "alpha", "completed", "memo d-al-0", 4, [0.6, 0.5], "PPP", False),
        ("d-al-1", "alpha", "completed", "memo d-al-1", 3, [0.3, 0.3], "FPF", False),
        ("d-al-2", "alpha", "no_memo", None, 2, [0.2, 0.0], None, False),
        ("d-be-0", "beta", "completed", "memo d-be-0", 2, [0.5, 0.2], "PP", False),
        ("d-be-1", "beta", "completed", "memo d-be-1", 0, None, "FF", False),
        ("d-be-2", "beta", "no_memo", None, 0, [0.2, 0.1], None, False),
    ],
}
LABEL = {"P": "PASS", "F": "FAIL", "U": "UNGRADABLE"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def room_info(name: str) -> RoomInfo:
    return RoomInfo(
        room_id=name,
        room_hash=sha(name)[:16],
        path=f"@WS@/rooms/{name}",
        n_documents=len(DOCS[name]),
        n_chars=2000 * len(DOCS[name]),
        n_tokens=500 * len(DOCS[name]),
        folders={d.split("/")[0]: 1 for d in DOCS[name]},
    )


def write_run(name: str, depth: int) -> None:
    run = WS / "runs" / name
    run.mkdir(parents=True)
    manifest = RunManifest(
        run_id=name,
        created_at=T0,
        config={
            "root": "openai:root-7b@http://127.0.0.1:1/v1",
            "sub": "openai:sub-1b@http://127.0.0.1:1/v1",
            "depth": depth,
            "episodes": 3,
        },
        config_hash=f"golden-{name}",
        versions={"rlmdistill": "golden"},
        rooms=[room_info(r) for r in ROOMS],
    )
    (run / "run.json").write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    summaries, verdicts = [], []
    for i, (eid, room, status, memo, n_sub, per_doc, labels, stale) in enumerate(EPISODES[name]):
        cov = None
        if per_doc is not None:
            cov = Coverage(
                method="shingle-v1",
                overall=sum(per_doc) / len(per_doc),
                per_document=dict(zip(DOCS[room], per_doc, strict=True)),
                per_folder={d.split("/")[0]: v for d, v in zip(DOCS[room], per_doc, strict=True)},
            )
        summaries.append(
            EpisodeSummary(
                episode_id=eid,
                run_id=name,
                sample_index=i % 3,
                room=room_info(room),
                task_id=f"task-{room}",
                root_model="root-7b",
                sub_model="sub-1b",
                depth=depth,  # type: ignore[arg-type]
                seed=i,
                status=status,  # type: ignore[arg-type]
                n_turns=2 + i % 3,
                n_sub_calls=n_sub,
                tokens=TokenUsage.model_validate(
                    {
                        "root": {
                            "prompt_tokens": 1000 + 100 * i,
                            "completion_tokens": 200 + 10 * i,
                            "cached_tokens": 50 * i,
                        },
                        "sub": {
                            "prompt_tokens": 300 * n_sub,
                            "completion_tokens": 40 * n_sub,
                            "cached_tokens": 0,
                        },
                    }
                ),
                wall_time_s=10.0 + i,
                memo=memo,
                memo_chars=len(memo or ""),
                memo_sha256=sha(memo) if memo else None,
                cited_documents=[DOCS[room][0]] if memo else [],
                coverage=cov,
                started_at=T0,
                ended_at=T0 + dt.timedelta(seconds=10 + i),
            )
        )
        if labels is None:
            continue
        graded_memo = (memo.replace(" v2", "") if stale else memo) or ""
        for (cid, _t, _w), lab in zip(ROOMS[room], labels, strict=True):
            verdicts.append(
                Verdict(
                    episode_id=eid,
                    grader="reference",
                    grader_version="1",
                    criterion_id=cid,
                    verdict=LABEL[lab],  # type: ignore[arg-type]
                    reason="golden",
                    memo_sha256=sha(graded_memo),
                    graded_at=T0,
                )
            )
    append_records(run / "episodes.jsonl", summaries)
    append_records(run / "verdicts" / "reference.jsonl", verdicts)


def main() -> None:
    if WS.exists():
        shutil.rmtree(WS)
    for name, crits in ROOMS.items():
        folder = WS / "rooms" / name
        folder.mkdir(parents=True)
        save_task(
            Task(
                id=f"task-{name}",
                title=f"Review {name}",
                instructions="Write a memo.",
                criteria=[
                    Criterion(
                        id=c,
                        title=f"criterion {c}",
                        match_criteria="PASS if found",
                        type=t,
                        weight=w,
                    )
                    for c, t, w in crits
                ],
            ),
            folder / "task.json",
        )
    write_run("base", 1)
    write_run("deep", 2)
    write_dataset_and_adapter()


def write_dataset_and_adapter() -> None:
    ds = WS / "datasets" / "r1"
    ds.mkdir(parents=True)
    stats = {
        "n": 3,
        "total": 360,
        "mean": 120.0,
        "min": 100,
        "max": 140,
        "p50": 120.0,
        "p95": 138.0,
    }
    export = {
        "schema_version": 1,
        "created_at": T0.isoformat(),
        "tokenizer": {
            "spec": "smollm2-135m",
            "path": "/models/smollm2-135m",
            "name_or_path": "smollm2-135m",
            "chat_template_source": "tokenizer",
            "chat_template_sha256": sha("template"),
            "assistant_header": "<|im_start|>assistant\n",
            "closer": "<|im_end|>",
            "tool_closer": None,
            "end_of_turn": ["<|im_end|>"],
            "default_system": None,
            "generation_markers": False,
        },
        "mode": "per_turn",
        "style": "repl",
        "system_prompt_source": "collected",
        "system_prompt_sha256": None,
        "few_shot_kept": True,
        "max_length": 4096,
        "truncation": "drop",
        "prefill_supervised": False,
        "min_supervised_tokens": 1,
        "default_system": "",
        "n_examples": 3,
        "n_episodes": 2,
        "dropped": {"too_long": 1},
        "dropped_items": [],
        "n_truncated": 0,
        "n_appended_closers": 0,
        "tokens": stats,
        "supervised": stats,
        "sources": [
            {"run_dir": "@WS@/runs/base", "run_id": "base", "episode_ids": ["b-al-0", "b-be-0"]}
        ],
        "options": {"mode": "per_turn"},
        "versions": {"rlmdistill": "golden"},
        "git_commit": None,
        "git_dirty": None,
    }
    (ds / "export.json").write_text(json.dumps(export, indent=2), encoding="utf-8")
    ad = WS / "adapters" / "r1"
    ad.mkdir(parents=True)
    sft = {
        "schema_version": 1,
        "created_at": T0.isoformat(),
        "updated_at": T0.isoformat(),
        "status": "completed",
        "config": {
            "dataset": "@WS@/datasets/r1",
            "base": "smollm2-135m",
            "out": "@WS@/adapters/r1",
        },
        "base_path": "/models/smollm2-135m",
        "dataset_path": "@WS@/datasets/r1",
        "export_sha256": sha("export"),
        "sources": export["sources"],
        "tokenizer_check": {"matched": True},
        "n_rows": 3,
        "n_examples": 3,
        "dropped": {},
        "n_tokens": 360,
        "n_supervised": 120,
        "device": "cpu",
        "precision": "float32",
        "world_size": 1,
        "seed": 0,
        "versions": {"rlmdistill": "golden"},
        "git_commit": None,
        "git_dirty": None,
        "global_step": 4,
        "train_loss": 2.0,
    }
    (ad / "sft.json").write_text(json.dumps(sft, indent=2), encoding="utf-8")
    with (ad / "train_log.jsonl").open("w", encoding="utf-8") as f:
        for step, loss in [(1, 2.5), (2, 2.1), (3, 1.9), (4, 1.6)]:
            f.write(
                json.dumps(
                    {
                        "step": step,
                        "epoch": step / 4,
                        "loss": loss,
                        "learning_rate": 2e-4,
                        "grad_norm": 1.0,
                        "tokens_seen": 90 * step,
                        "tokens_per_s": 45.0,
                        "time": (T0 + dt.timedelta(seconds=step)).isoformat(),
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main()
