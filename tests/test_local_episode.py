"""A real in-process model as root and sub (SmolLM2-135M): slow, so marked."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.models.base import Sampling
from rlmdistill.models.spec import close_all, get_client
from rlmdistill.traces.rebuild import root_requests
from rlmdistill.traces.schema import EpisodeStart, TrajectoryRecord, TurnRecord
from rlmdistill.traces.store import parse_records


@pytest.mark.slow
def test_local_smollm2_episode_is_traced_and_prompts_rebuild(cuad_room3, smollm2_dir, tmp_path):
    cfg = CollectConfig(
        rooms=[str(cuad_room3)],
        root="local:smollm2-135m",
        sub="local:smollm2-135m",
        episodes=1,
        concurrency=1,
        few_shot=True,
        prefill="```repl\n",
        root_sampling=Sampling(temperature=0.0, max_tokens=96),
        sub_sampling=Sampling(temperature=0.0, max_tokens=24),
        limits=EpisodeLimits(max_turns=2),
    )
    root = get_client(cfg.root)
    try:
        assert get_client(cfg.sub) is root  # one loaded model serves root and sub
        (s,) = collect(cfg, tmp_path / "run", root, root, progress=False).summaries
        records = list(
            parse_records(
                tmp_path / "run" / "trajectories" / f"{s.episode_id}.jsonl",
                TypeAdapter(TrajectoryRecord),
            )
        )
        start = records[0]
        assert isinstance(start, EpisodeStart)
        turns = [r for r in records if isinstance(r, TurnRecord)]
        assert s.status in {"completed", "no_memo", "repl_crashed", "repl_timeout"}
        assert s.n_turns == len(turns) >= 1
        requests = root_requests(start, turns)
        # prompt tokens the model saw == tokens of the chat-template render of the rebuilt prompt
        first = root.encode(root.render(requests[0], cfg.prefill))  # type: ignore[attr-defined]
        assert turns[0].usage.prompt_tokens == len(first)
        assert 0 < turns[0].usage.completion_tokens <= 96
        assert s.tokens.root.completion_tokens == sum(t.usage.completion_tokens for t in turns)
        assert s.room.n_tokens is not None and s.room.n_tokens > s.room.n_chars / 8
    finally:
        close_all()
