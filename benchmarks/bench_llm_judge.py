"""Throughput and cache cost of the LLM judge (``judge/llm.py``), and how a local model copes.

1. Fake server (always): a run of ``--episodes`` episodes (distinct memos of ~``--memo-chars``
   characters) over a room whose task has ``--criteria`` criteria, judged through the loopback
   fake OpenAI server that answers valid JSON after ``--latency`` seconds per request. Prints
   wall time, requests, verdicts per second, judge tokens; then the same run judged again from
   the cache alone (verdict file removed): wall time and requests (must be 0).
2. ``--local NAME`` (optional): a 1-episode run with ``--local-criteria`` criteria judged by the
   in-process model ``local:NAME``; prints seconds per request and how the replies fared
   (ok / partial / malformed per request, verdict labels).

    python benchmarks/bench_llm_judge.py [--episodes 40] [--criteria 300] [--latency 0.05]
        [--local qwen2.5-coder-0.5b --local-criteria 4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rlmdistill.judge.cache import memo_sha256
from rlmdistill.judge.main import JudgeConfig
from rlmdistill.judge.main import run as judge_stage
from rlmdistill.judge.run import load_verdicts
from rlmdistill.rooms.room import DataRoom
from rlmdistill.testing.fake_openai import FakeOpenAIServer, last_user_message
from rlmdistill.traces.schema import (
    EpisodeSummary,
    JudgeRequestRecord,
    RoomInfo,
    RunManifest,
    TokenUsage,
)
from rlmdistill.traces.store import append_records, parse_records

_IDS = re.compile(r'for these \d+ ids: ((?:"[^"]*"(?:, )?)+)')


def make_run(root: Path, memos: list[str], n_criteria: int) -> Path:
    """A run directory with one episode per memo over a 2-document room of ``n_criteria``."""
    room_dir = root / "room"
    (room_dir / "documents").mkdir(parents=True)
    (room_dir / "documents" / "a.txt").write_text("Change of control requires consent.\n")
    (room_dir / "documents" / "b.txt").write_text("Indemnity is capped at $2m.\n")
    criteria = [
        {
            "id": f"C-{k:04d}",
            "title": f"Identifies planted issue {k}",
            "match_criteria": f"PASS if the memo identifies issue {k} and cites its document.",
            "type": ["finding", "citation", "quantification"][k % 3],
        }
        for k in range(n_criteria)
    ]
    (room_dir / "task.json").write_text(
        json.dumps({"title": "Bench", "instructions": "Memo.", "criteria": criteria})
    )
    room = DataRoom.load(room_dir)
    assert room.task is not None
    info = RoomInfo(
        room_id="room",
        room_hash=room.room_hash,
        path=str(room_dir),
        n_documents=len(room),
        n_chars=room.n_chars,
    )
    run = root / "run"
    run.mkdir()
    manifest = RunManifest(run_id="bench", config={}, config_hash="0", versions={}, rooms=[info])
    (run / "run.json").write_text(manifest.model_dump_json())
    now = dt.datetime.now(dt.UTC)
    append_records(
        run / "episodes.jsonl",
        [
            EpisodeSummary(
                episode_id=f"ep{k}",
                run_id="bench",
                sample_index=k,
                room=info,
                task_id=room.task.id,
                root_model="root",
                sub_model="sub",
                seed=k,
                status="completed",
                n_turns=1,
                n_sub_calls=0,
                tokens=TokenUsage(),
                wall_time_s=1.0,
                memo=memo,
                memo_chars=len(memo),
                memo_sha256=memo_sha256(memo),
                started_at=now,
                ended_at=now,
            )
            for k, memo in enumerate(memos)
        ],
    )
    return run


def fake_judge(request: dict[str, Any]) -> str:
    """Valid JSON for every asked id (PASS for even ids)."""
    match = _IDS.search(last_user_message(request))
    ids = json.loads("[" + (match.group(1) if match else "") + "]")
    return json.dumps(
        {
            "verdicts": [
                {"id": i, "verdict": "PASS" if int(i[2:]) % 2 == 0 else "FAIL", "reason": "ok"}
                for i in ids
            ]
        }
    )


def bench_fake(args: argparse.Namespace) -> None:
    filler = "The target's supply contract with Acme has a change-of-control clause. "
    memos = [
        f"# Memo {k}\n" + filler * max(1, args.memo_chars // len(filler))
        for k in range(args.episodes)
    ]
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(fake_judge, args.latency) as srv:
        run = make_run(Path(tmp), memos, args.criteria)
        spec = f"openai:judge@{srv.base_url}"
        t0 = time.perf_counter()
        report = judge_stage(
            JudgeConfig(
                run_dir=run,
                judge=spec,
                criteria_per_request=args.per_request,
                concurrency=args.concurrency,
                request_concurrency=args.request_concurrency,
            )
        )
        wall = time.perf_counter() - t0
        n_verdicts = args.episodes * args.criteria
        s = report.stats
        assert s is not None
        print(
            f"fake server ({args.latency:.3f} s/request): {args.episodes} episodes x "
            f"{args.criteria} criteria, {args.per_request}/request, concurrency "
            f"{args.concurrency}x{args.request_concurrency}"
        )
        print(
            f"  judge: {wall:.2f} s, {s.requests} requests ({len(srv.requests)} at the server), "
            f"{n_verdicts / wall:.0f} verdicts/s, judge tokens prompt {s.usage.prompt_tokens} "
            f"completion {s.usage.completion_tokens}, verdicts {report.result.counts}"
        )
        assert report.cache_path is not None
        cache_mb = report.cache_path.stat().st_size / 1e6
        report.result.verdicts_path.unlink()
        n_before = len(srv.requests)
        t0 = time.perf_counter()
        again = judge_stage(
            JudgeConfig(run_dir=run, judge=spec, criteria_per_request=args.per_request)
        )
        wall2 = time.perf_counter() - t0
        assert again.stats is not None
        print(
            f"  re-judge from cache ({cache_mb:.1f} MB): {wall2:.2f} s, "
            f"{len(srv.requests) - n_before} requests, cache hits {again.stats.cache_hits}"
        )


def bench_local(args: argparse.Namespace) -> None:
    memo = (
        "# Memo\n## Findings\n- contracts/a.txt: change of control requires the counterparty's "
        "consent (issue 0).\n- contracts/b.txt: indemnity capped at $2m (issue 2).\n"
        "## Next steps\nObtain consent before closing."
    )
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp), [memo], args.local_criteria)
        t0 = time.perf_counter()
        report = judge_stage(
            JudgeConfig(
                run_dir=run,
                judge=f"local:{args.local}",
                criteria_per_request=args.local_criteria,
                max_attempts=args.local_attempts,
            )
        )
        wall = time.perf_counter() - t0
        assert report.usage_path is not None
        usage = list(parse_records(report.usage_path, JudgeRequestRecord))
        verdicts = load_verdicts(run, report.grader_id)
        print(
            f"local:{args.local}: {args.local_criteria} criteria in one batch, "
            f"max {args.local_attempts} attempts"
        )
        print(
            f"  {wall:.1f} s wall (model load included), {len(usage)} requests, "
            f"{sum(u.latency_s for u in usage) / max(1, len(usage)):.1f} s/request, "
            f"outcomes {[u.outcome for u in usage]}, "
            f"completion tokens {[u.usage.completion_tokens for u in usage]}"
        )
        print(f"  verdicts {dict(Counter(v.verdict for v in verdicts))}")
        for v in verdicts:
            print(f"    {v.criterion_id} {v.verdict}: {v.reason[:150]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--criteria", type=int, default=300)
    p.add_argument("--memo-chars", type=int, default=6000)
    p.add_argument("--per-request", type=int, default=20)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--request-concurrency", type=int, default=4)
    p.add_argument("--local", default=None, help="embedded model name, e.g. qwen2.5-coder-0.5b")
    p.add_argument("--local-criteria", type=int, default=4)
    p.add_argument("--local-attempts", type=int, default=2)
    args = p.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    bench_fake(args)
    if args.local:
        bench_local(args)


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
