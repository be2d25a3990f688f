"""Crash safety: SIGKILL `collect` at random points, re-run, every episode exactly once (T3)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from pydantic import TypeAdapter

from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler
from rlmdistill.traces.schema import EpisodeEnd, EpisodeSummary, TrajectoryRecord
from rlmdistill.traces.store import parse_records, read_jsonl

EXPLORE = "```repl\ndocs = list_documents()\nprint(len(docs))\n```"
DELEGATE = (
    "```repl\nanswers = llm_query_batched(['Contract ' + d['id'] for d in docs])\n"
    "memo = '\\n'.join(d['id'] + ': ' + a for d, a in zip(docs, answers))\nFINAL_VAR(memo)\n```"
)


def _collect_cmd(room, url, out):
    return [
        sys.executable,
        "-m",
        "rlmdistill.cli",
        "collect",
        "--room",
        str(room),
        "--root",
        f"openai:root@{url}",
        "--sub",
        f"openai:sub@{url}",
        "--episodes",
        "6",
        "--concurrency",
        "3",
        "--out",
        str(out),
        "--no-progress",
        "--prefill",
        "",
    ]


def test_sigkill_at_random_points_then_rerun_gives_each_episode_once(cuad_room3, tmp_path):
    rng = random.Random(1234)
    out = tmp_path / "run"
    env = {**os.environ, "RLMDISTILL_API_KEY": "x"}
    with FakeOpenAIServer(
        ScriptedHandler([EXPLORE, DELEGATE], lambda p: "ok " + p), latency_s=1.0
    ) as server:
        cmd = _collect_cmd(cuad_room3, server.base_url, out)
        kills = 0
        done_after_kill: list[int] = []
        for _ in range(4):
            proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(rng.uniform(1.0, 4.0))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.wait()
            done_after_kill.append(len(read_jsonl(out / "episodes.jsonl").records))
        final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert final.returncode == 0, final.stderr
    assert kills >= 1 and done_after_kill[0] < 6  # the first kill really interrupted the run
    raw = read_jsonl(out / "episodes.jsonl")
    assert raw.torn_tail is None
    summaries = list(parse_records(out / "episodes.jsonl", EpisodeSummary))
    ids = [s.episode_id for s in summaries]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert all(s.status == "completed" for s in summaries)
    adapter = TypeAdapter(TrajectoryRecord)
    for eid in ids:
        records = list(parse_records(out / "trajectories" / f"{eid}.jsonl", adapter))
        assert isinstance(records[-1], EpisodeEnd) and records[-1].status == "completed"
        assert sum(isinstance(r, EpisodeEnd) for r in records) == 1
