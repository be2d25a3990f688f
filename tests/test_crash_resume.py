"""Crash safety: SIGKILL `collect` at points chosen by events, re-run, every episode
exactly once (case T3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from rlmdistill.testing.fake_openai import FakeOpenAIServer, FakeReply, ScriptedHandler
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


class KillGate:
    """Holds every chat request once a kill point is reached, so the collector is frozen at
    a known point until the test has SIGKILLed it.

    A kill point ``(j, k)``: the first chat request of this run, from its ``k``-th on, that
    arrives while at least ``j`` episode summaries are on disk (``episodes.jsonl``, read when
    the request arrives).
    From then on every request waits for :meth:`release`, so nothing the collector has not
    been answered yet can be written. Wraps a stateless handler (``ScriptedHandler``: a
    request held and never answered gets the same reply when the re-run sends it again).
    """

    def __init__(self, inner: ScriptedHandler, summaries: Path) -> None:
        self.inner, self.summaries = inner, summaries
        self.models = inner.models  # the server lists them for the collector's preflight
        self.lock = threading.Lock()
        self.held = threading.Event()
        self._open = threading.Event()
        self._point: tuple[int, int] | None = None
        self._n = 0

    def arm(self, j: int, k: int) -> None:
        """A new run: count its requests from 0 and hold from kill point ``(j, k)`` on."""
        with self.lock:
            self._point, self._n = (j, k), 0
            self.held.clear()
            self._open.clear()

    def release(self) -> None:
        """Answer the held requests (the collector that sent them is dead by then)."""
        with self.lock:
            self._point = None
            self._open.set()

    def _summaries(self) -> int:
        if not self.summaries.is_file():
            return 0
        return len(read_jsonl(self.summaries).records)

    def __call__(self, request: dict[str, Any]) -> FakeReply | str:
        with self.lock:
            self._n += 1
            point = self._point
            if point is not None and not self.held.is_set():
                j, k = point
                if self._n >= k and self._summaries() >= j:
                    self.held.set()
            hold = self.held.is_set() and point is not None
        if hold:
            self._open.wait()
        return self.inner(request)


KILL_POINTS = [(0, 2), (1, 1), (2, 4), (3, 1)]
"""``(summaries on disk, request of the run)`` of each run: in the first turns, before any
episode is done (an episode takes 5 requests: 2 root turns, then 3 sub-calls); after the
first episode; after the second, mid-run; after half (or at once on a re-run that starts
with half done). Every point is reached in its run: a run whose count is below 6 sends at
least 5 requests, and one whose requests all came in while fewer than ``j`` episodes were
done would leave more than 3 unfinished, yet only 3 run at a time (``--concurrency 3``);
so ``j <= 3`` and ``k <= 5``."""


def test_sigkill_at_event_chosen_points_then_rerun_gives_each_episode_once(
    cuad_room3: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "RLMDISTILL_API_KEY": "x"}
    script = ScriptedHandler([EXPLORE, DELEGATE], lambda p: "ok " + p)
    gate = KillGate(script, out / "episodes.jsonl")
    with FakeOpenAIServer(gate) as server:
        cmd = _collect_cmd(cuad_room3, server.base_url, out)
        kills = 0
        done_after_kill: list[int] = []
        try:
            for j, k in KILL_POINTS:
                gate.arm(j, k)
                proc = subprocess.Popen(
                    cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                while not gate.held.wait(0.05):  # the event, or the run ended without it
                    if proc.poll() is not None:
                        break
                if gate.held.is_set():
                    proc.send_signal(signal.SIGKILL)
                    kills += 1
                proc.wait()
                gate.release()
                done_after_kill.append(len(read_jsonl(out / "episodes.jsonl").records))
        finally:
            gate.release()
        final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert final.returncode == 0, final.stderr
    # every run was cut at its point: the held request's episode cannot finish in its run
    assert kills == len(KILL_POINTS)
    assert done_after_kill[0] == 0  # at most one request answered: no episode done
    assert all(n >= j for n, (j, _) in zip(done_after_kill, KILL_POINTS, strict=True))
    assert all(n < 6 for n in done_after_kill)
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
