"""Choosing the SFT checkpoint by behaviour on the training rooms (``checkpoint_check``).

The pure part: candidates are ranked by memo rate, then pass rate, then coverage, ties to the
later checkpoint, and the choice file is versioned. The loop part (slow): the quickstart's
training recipe (its filter, export, SFT and checkpoint-check sections) on a tiny base whose
checkpoints are served by the fake server; the script makes only the *earliest* checkpoint
write memos, so the loop must choose it over the later one it would pick by default, and the
tuned arm must load that checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT_SCRIPT

from rlmdistill.loop.checkpoints import (
    CheckpointChoice,
    CheckpointScore,
    checkpoint_step,
    choose_checkpoint,
    list_checkpoints,
    load_choice,
)
from rlmdistill.loop.config import ExperimentConfig, load_experiment

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _score(step: int, memo: float, passed: float, cov: float = 0.0) -> CheckpointScore:
    return CheckpointScore(
        checkpoint=f"checkpoints/checkpoint-{step}",
        step=step,
        run=f"runs/r1-check-{step}",
        episodes=4,
        memo_rate=memo,
        pass_rate=passed,
        coverage=cov,
    )


def test_the_most_memos_win_before_pass_rate_and_ties_go_to_the_later_checkpoint():
    early, late = _score(3, 0.75, 0.05), _score(6, 0.5, 0.20)
    assert choose_checkpoint([early, late]).chosen == "checkpoints/checkpoint-3"
    same_memos = [_score(3, 0.75, 0.10, 0.2), _score(6, 0.75, 0.05, 0.9)]
    assert choose_checkpoint(same_memos).chosen == "checkpoints/checkpoint-3"
    by_coverage = [_score(3, 0.75, 0.10, 0.2), _score(6, 0.75, 0.10, 0.4)]
    assert choose_checkpoint(by_coverage).chosen == "checkpoints/checkpoint-6"
    tie = [_score(6, 0.5, 0.1, 0.3), _score(3, 0.5, 0.1, 0.3)]
    assert choose_checkpoint(tie).chosen == "checkpoints/checkpoint-6"
    with pytest.raises(ValueError, match="no checkpoint"):
        choose_checkpoint([])


def test_a_pass_rate_tie_in_all_but_the_last_bit_goes_to_coverage():
    # the figures of a quickstart run (seed 1): the same 4-episode pass rate summed in two
    # orders; coverage, the rule's next criterion, must decide, not the rounding
    assert 0.2106331168831169 > 0.21063311688311687
    early = _score(8, 0.75, 0.21063311688311687, 0.2300)
    late = _score(12, 0.75, 0.2106331168831169, 0.1392)
    assert choose_checkpoint([early, late]).chosen == "checkpoints/checkpoint-8"
    same_coverage = [
        _score(8, 0.75, 0.21063311688311687, 0.2),
        _score(12, 0.75, 0.2106331168831169 - 1e-16, 0.2),
    ]
    assert choose_checkpoint(same_coverage).chosen == "checkpoints/checkpoint-12"


def test_checkpoints_are_listed_by_step_and_only_those_holding_an_adapter(tmp_path):
    for step in (10, 2, 7):
        (tmp_path / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"checkpoint-{step}" / "adapter_config.json").write_text("{}")
    (tmp_path / "checkpoints" / "checkpoint-5").mkdir()  # no adapter in it
    (tmp_path / "checkpoints" / "checkpoint-x").mkdir()
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path)] == [2, 7, 10]
    assert list_checkpoints(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="not a checkpoint"):
        checkpoint_step(tmp_path / "checkpoints" / "checkpoint-x")


def test_choice_file_round_trips_and_a_newer_or_broken_one_is_refused_by_name(tmp_path):
    assert load_choice(tmp_path) is None
    choice = choose_checkpoint([_score(3, 1.0, 0.1), _score(6, 0.5, 0.1)])
    (tmp_path / "selected.json").write_text(choice.model_dump_json())
    assert load_choice(tmp_path) == choice
    (tmp_path / "selected.json").write_text(
        json.dumps({**choice.model_dump(), "schema_version": 9})
    )
    with pytest.raises(ValueError, match=r"selected\.json.*newer"):
        load_choice(tmp_path)
    (tmp_path / "selected.json").write_text("{")
    with pytest.raises(ValueError, match=r"selected\.json"):
        load_choice(tmp_path)


def test_seed_offsets_training_and_evaluation_seeds_not_the_rooms():
    cfg = load_experiment(EXAMPLES / "quickstart.yaml")
    assert cfg.with_seed(0) is cfg
    two = cfg.with_seed(2)
    assert two.rooms == cfg.rooms  # the same rooms
    assert two.workspace == cfg.workspace.with_name("quickstart-seed2")
    assert two.collect_train["seed"] == cfg.collect_train.get("seed", 0) + 2
    assert two.collect_eval["seed"] == cfg.collect_eval.get("seed", 0) + 2
    assert two.sft["seed"] == cfg.sft.get("seed", 0) + 2
    # both arms and the check collect with collect_eval's (shifted) seed
    assert two.check_settings()["seed"] == two.collect_eval["seed"]
    assert two.check_settings()["few_shot"] is False  # the plain prompt, as the held-out arms


def test_checkpoint_check_keys_the_loop_sets_are_refused(tmp_path):
    base = {"name": "x", "workspace": "ws", "base": "local:smollm2-135m",
            "sub": "local:smollm2-135m", "rooms": {"train_rooms": 1}}  # fmt: skip
    with pytest.raises(ValueError, match=r"checkpoint_check\.collect\.rooms is set by the loop"):
        ExperimentConfig.model_validate({**base, "checkpoint_check": {"collect": {"rooms": []}}})


_BAD = "```repl\nprint(undefined_name)\n```"


@pytest.mark.slow
def test_quickstart_recipe_chooses_the_checkpoint_the_behaviour_check_prefers(
    tmp_path, tiny_llama_dir
):
    from rlmdistill.loop.run import run_loop
    from rlmdistill.testing.fake_openai import FakeOpenAIServer, conversation_turn
    from rlmdistill.traces.runs import load_summaries

    servers: list[FakeOpenAIServer] = []  # the script reads what the loop has loaded so far

    def script(req: dict) -> str:  # type: ignore[type-arg]
        """Base ``root`` and the tuned arm write the memo; of the checked checkpoints
        (``t-r1-<step>``) only the earliest loaded one does, the later ones raise a NameError."""
        model = req["model"]
        if model == "sub":
            return "The agreement may not be assigned without prior written consent."
        if model.startswith("t-r1-"):
            loaded = servers[0].loaded_adapters
            steps = [int(n.rsplit("-", 1)[1]) for n in loaded if n.startswith("t-r1-")]
            if int(model.rsplit("-", 1)[1]) != min(steps):
                return _BAD
        return ROOT_SCRIPT[min(conversation_turn(req)[1], len(ROOT_SCRIPT) - 1)]

    data = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    with FakeOpenAIServer(script, models=["root", "sub"]) as server:
        servers.append(server)
        data.update(
            name="t",
            workspace=str(tmp_path / "ws"),
            rooms={"contracts_per_room": 1, "train_rooms": 2, "holdout_rooms": 2, "seed": 3},
            base=f"local:{tiny_llama_dir}",
            sub=f"openai:sub@{server.base_url}",
            serving={"base_url": server.base_url, "model": "root"},
            check_greedy_change=False,
        )
        for section in ("collect_train", "collect_eval"):
            data[section].update(concurrency=2, prefill=None)
            data[section]["root_sampling"]["max_tokens"] = 400
        data["collect_train"].update(episodes=2, few_shot=False)
        data["collect_eval"]["episodes"] = 1
        data["sft"].update(gradient_checkpointing=False, lora_r=4)
        assert data["sft"]["save_strategy"] == "epoch" and data["checkpoint_check"]
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        cfg = load_experiment(path)

        res = run_loop(cfg, progress=False)
        served = dict(server.loaded_adapters)
    adapter = res.rounds[0].adapter
    checkpoints = list_checkpoints(adapter)
    assert len(checkpoints) == 2  # save_total_limit 2: the last two epochs
    choice = load_choice(adapter)
    assert isinstance(choice, CheckpointChoice)
    first = checkpoints[0].relative_to(adapter).as_posix()
    assert choice.chosen == first  # not the later one, which a tie would pick
    rates = {c.checkpoint: c.memo_rate for c in choice.candidates}
    assert rates == {first: 1.0, checkpoints[1].relative_to(adapter).as_posix(): 0.0}
    # every candidate ran on the TRAINING rooms, never the held-out ones
    train_rooms = {s.room.room_id for s in load_summaries(res.rounds[0].train_run)}
    for c in choice.candidates:
        rooms = {s.room.room_id for s in load_summaries(cfg.workspace / c.run)}
        assert rooms == train_rooms
    assert served["t-r1"] == str(checkpoints[0].resolve())  # the tuned arm loads the choice
