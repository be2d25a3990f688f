"""The harness stands alone: an episode runs from any settings object and records itself
through a :class:`~rlmdistill.harness.trace.TraceWriter`, writing nothing of a run folder."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlmdistill.collect.prepare import room_handle
from rlmdistill.collect.trajectory import TrajectoryFile
from rlmdistill.harness.episode import Episode, EpisodeSpec
from rlmdistill.harness.repl import ReplLimits
from rlmdistill.harness.settings import EpisodeLimits, EpisodeSettings
from rlmdistill.harness.trace import MemoryTrace
from rlmdistill.models.base import ChatResult, Message, Sampling, Usage
from rlmdistill.rooms import DataRoom
from rlmdistill.traces.schema import EpisodeEnd, EpisodeStart, SubCallRecord, TurnRecord
from rlmdistill.traces.store import read_jsonl

ROOT_REPLY = (
    "```repl\nanswers = llm_query_batched(['one?', 'two?'])\n"
    "FINAL('memo: ' + ' | '.join(answers))\n```"
)


class Scripted:
    """A model client: the root always sends ``ROOT_REPLY``; the sub echoes its prompt."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.calls = 0
        self._lock = threading.Lock()

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        with self._lock:
            self.calls += 1
        text = ROOT_REPLY if self.model_id == "root" else f"ans({messages[-1].content})"
        return ChatResult(
            text=text,
            usage=Usage(prompt_tokens=10, completion_tokens=5),
            latency_s=0.0,
            finish_reason="stop",
            model=self.model_id,
        )

    def close(self) -> None:
        pass


@dataclass
class Settings:
    """Not a CollectConfig: the harness reads any object with these attributes."""

    depth: Literal[1, 2] = 1
    few_shot: bool = False
    prefill: str | None = None
    root_sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=64))
    sub_sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=32))
    sub_concurrency: int = 2
    subagent_max_turns: int = 2
    subagent_prefill: str | None = None
    limits: EpisodeLimits = field(default_factory=lambda: EpisodeLimits(max_turns=2))
    repl: ReplLimits = field(default_factory=ReplLimits)
    sandbox: Literal["bwrap", "audit", "none"] = "audit"
    token_ids: Literal["root", "all", "off"] = "off"


def _episode(settings: EpisodeSettings, room: Path, trace, scratch: Path) -> Episode:
    root, sub = Scripted("root"), Scripted("sub")
    spec = EpisodeSpec(
        run_id="r", episode_id="e1", sample_index=0, seed=7, trace=trace, scratch_dir=scratch
    )
    return Episode(settings, spec, room_handle(DataRoom.load(room)), root, sub, "s:root", "s:sub")


def test_episode_writes_only_through_its_trace_writer(cuad_room3: Path, tmp_path: Path) -> None:
    trace = MemoryTrace()
    trace.records.append(EpisodeEnd(episode_id="stale", status="error"))  # begin() drops it
    work = tmp_path / "work"
    summary = _episode(Settings(), cuad_room3, trace, work / "scratch").run()

    assert (summary.status, summary.memo) == ("completed", "memo: ans(one?) | ans(two?)")
    assert (summary.n_turns, summary.n_sub_calls) == (1, 2)
    kinds = [type(r) for r in trace.records]
    # sub-calls are recorded as their batch ends, the turn once its blocks have run
    assert kinds == [EpisodeStart, SubCallRecord, SubCallRecord, TurnRecord, EpisodeEnd]
    start, end = trace.records[0], trace.records[-1]
    assert isinstance(start, EpisodeStart) and (start.episode_id, start.seed) == ("e1", 7)
    assert isinstance(end, EpisodeEnd) and end.memo == summary.memo
    assert sorted(r.prompt for r in trace.records if isinstance(r, SubCallRecord)) == [
        "one?",
        "two?",
    ]
    assert trace.committed
    # nothing but the episode's scratch folder was made: no run folder, no trajectory file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert [p.name for p in work.iterdir()] == ["scratch"]


def test_trajectory_file_is_the_collect_stages_writer(cuad_room3: Path, tmp_path: Path) -> None:
    path = tmp_path / "run" / "trajectories" / "e1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"left": "by an interrupted attempt"}\n', encoding="utf-8")
    summary = _episode(Settings(), cuad_room3, TrajectoryFile(path), tmp_path / "s").run()
    rows = read_jsonl(path).records
    assert [r["record_type"] for r in rows] == [
        "episode_start",
        "sub_call",
        "sub_call",
        "turn",
        "episode_end",
    ]
    assert rows[-1]["memo"] == summary.memo


class _FailingCommit(MemoryTrace):
    """A trace whose commit (the fsync of a trajectory file) fails."""

    def commit(self) -> None:
        raise OSError(28, "No space left on device")


def test_a_trace_that_cannot_be_committed_fails_the_episode(
    cuad_room3: Path, tmp_path: Path
) -> None:
    """The commit runs beside the coverage computation, but the episode still returns no
    summary (the runner's commit record) for a trace that is not durable: the error is
    the commit's own."""
    trace = _FailingCommit()
    try:
        _episode(Settings(), cuad_room3, trace, tmp_path / "s").run()
    except OSError as exc:
        assert exc.errno == 28 and "No space left" in str(exc)
    else:
        raise AssertionError("an episode whose trace failed to commit returned a summary")
    assert [type(r) for r in trace.records][-1] is EpisodeEnd  # written, then the commit failed


class _Root(Scripted):
    """A root whose every reply is ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__("root")
        self.text = text

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        return (
            super().chat(messages, sampling, prefill=prefill).model_copy(update={"text": self.text})
        )


def _run_spying(root: Scripted, room: Path, scratch: Path) -> tuple[Episode, object, list]:
    spec = EpisodeSpec(
        run_id="r",
        episode_id="e1",
        sample_index=0,
        seed=7,
        trace=MemoryTrace(),
        scratch_dir=scratch,
    )
    ep = Episode(
        Settings(),
        spec,
        room_handle(DataRoom.load(room)),
        root,
        Scripted("sub"),
        "s:root",
        "s:sub",
    )
    taken: list = []
    end = ep._end_coverage

    def spy():  # type: ignore[no-untyped-def]
        taken.append(ep._early)
        return end()

    ep._end_coverage = spy  # type: ignore[method-assign]
    return ep, ep.run(), taken


def test_early_coverage_is_not_used_when_the_final_block_sent_more_inputs(
    cuad_room3: Path, tmp_path: Path
) -> None:
    """A root reply naming FINAL starts the coverage while its block runs; that block's
    sub-calls add inputs after it started, so the episode computes its coverage again."""
    ep, summary, taken = _run_spying(_Root(ROOT_REPLY), cuad_room3, tmp_path / "s")
    assert summary.status == "completed" and summary.n_sub_calls == 2
    ((n_early, _),) = taken
    assert ep.probe.n_observed == n_early + 2  # the prompts 'one?' and 'two?'
    assert summary.coverage == ep._coverage()


def test_early_coverage_is_the_episodes_when_nothing_came_after_it(
    cuad_room3: Path, tmp_path: Path
) -> None:
    ep, summary, taken = _run_spying(
        _Root("```repl\nFINAL('memo: done')\n```"), cuad_room3, tmp_path / "s"
    )
    assert (summary.status, summary.memo) == ("completed", "memo: done")
    ((n_early, fut),) = taken
    assert n_early == ep.probe.n_observed > 0
    if not fut.cancelled():  # it ran (or was running): its value is the episode's
        assert summary.coverage == fut.result() == ep._coverage()
