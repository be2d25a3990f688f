"""The collect stage's shape: ``run(config)`` takes its run folder from the config (an
operational field, out of episode ids and of ``run.json``), and where episodes run is an
:class:`~rlmdistill.collect.executor.Executor` resolved once from the config's name (the
judge's requests likewise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmdistill.cluster.options import RayOptions
from rlmdistill.collect.config import CollectConfig, episode_id
from rlmdistill.collect.executor import CollectResult, EpisodePlan
from rlmdistill.collect.main import pending_episodes, run
from rlmdistill.collect.ray_executor import RayExecutor
from rlmdistill.collect.runner import collect, executor_for
from rlmdistill.collect.thread_executor import ThreadExecutor
from rlmdistill.judge import executor as judge_executor
from rlmdistill.rooms import DataRoom

BEFORE = Path(__file__).with_name("data") / "collect_config_before_sandbox.json"


def test_the_run_folder_is_operational() -> None:
    """A config written before the field existed keeps its fingerprint (and so its episode
    ids) with any run folder."""
    stored = json.loads(BEFORE.read_text())
    for out in (None, "/runs/a", "runs/b"):
        cfg = CollectConfig.model_validate({**stored["config"], "out": out})
        assert cfg.fingerprint() == stored["fingerprint"] == "6a31d24b9bd63130"
        assert episode_id(cfg, "h1", "t", 0) == episode_id(
            CollectConfig.model_validate(stored["config"]), "h1", "t", 0
        )


def test_run_names_the_missing_run_folder() -> None:
    cfg = CollectConfig(rooms=[], root="openai:m@http://127.0.0.1:9/v1", sub="local:x")
    with pytest.raises(ValueError, match=r"CollectConfig\.out is not set"):
        run(cfg)


def test_the_older_out_argument_warns_and_still_sets_the_run_folder(tmp_path: Path) -> None:
    """``run(config, out)`` (the form before ``CollectConfig.out``) is deprecated but works:
    it warns, and ``out`` is the run folder (the run then stops at the server check, a closed
    loopback port, before writing anything, instead of at "out is not set")."""
    cfg = CollectConfig(rooms=[], root="openai:m@http://127.0.0.1:9/v1", sub="local:x")
    out = tmp_path / "run"
    with (
        pytest.warns(DeprecationWarning, match=r"set config\.out instead"),
        pytest.raises(ValueError) as caught,
    ):
        run(cfg, out, progress=False)
    assert "out is not set" not in str(caught.value)
    assert "127.0.0.1:9" in str(caught.value)
    assert not out.exists()


class _Client:
    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    def close(self) -> None:
        pass


class _Recording:
    """An executor that runs nothing and records the plan it was handed."""

    name = "recording"

    def __init__(self) -> None:
        self.plans: list[EpisodePlan] = []

    def check(self, config: CollectConfig) -> None:
        pass

    def run(self, job: EpisodePlan, *, progress: bool = True) -> CollectResult:
        self.plans.append(job)
        job.manifest.result()
        return CollectResult(job.run_dir, [], job.skipped, (), len(job.episodes))


def test_the_runner_hands_its_plan_to_the_executor(cuad_room3: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "a"
    cfg = CollectConfig(
        rooms=[str(cuad_room3)], root="s:root", sub="s:sub", episodes=2, out=str(out)
    )
    room = DataRoom.load(cuad_room3)
    assert room.task is not None
    rec = _Recording()
    root = _Client("root")
    res = collect(cfg, out, root, root, progress=False, executor=rec)  # type: ignore[arg-type]

    (job,) = rec.plans
    expected = [episode_id(cfg, room.room_hash, room.task.id, k) for k in range(2)]
    assert [eid for _, _, eid in job.episodes] == expected
    assert [k for _, k, _ in job.episodes] == [0, 1]
    assert (job.run_dir, job.run_id, job.skipped, dict(job.attempts_before)) == (out, "a", 0, {})
    assert (res.not_started, res.summaries) == (2, [])
    recorded = json.loads((out / "run.json").read_text())["config"]
    assert "out" not in recorded  # the run is the folder run.json sits in
    assert recorded["executor"] == "thread"
    assert pending_episodes(cfg) == 2  # the folder comes from the config


def test_each_executor_name_resolves_to_its_executor() -> None:
    base = {"rooms": [], "root": "local:x", "sub": "local:x"}
    assert isinstance(executor_for(CollectConfig(**base)), ThreadExecutor)
    assert isinstance(executor_for(CollectConfig(**base, executor="ray")), RayExecutor)
    bogus = CollectConfig(**base).model_copy(update={"executor": "slurm"})
    with pytest.raises(ValueError, match="executor must be one of ray, thread, got 'slurm'"):
        executor_for(bogus)

    assert isinstance(judge_executor.executor_for("thread"), judge_executor.ThreadExecutor)
    ray = judge_executor.executor_for("ray", RayOptions(address="10.0.0.1:6379"))
    assert isinstance(ray, judge_executor.RayExecutor)
    assert ray.ray.address == "10.0.0.1:6379"
    assert judge_executor.executor_for("ray").ray == RayOptions()
    with pytest.raises(ValueError, match="executor must be one of ray, thread, got 'slurm'"):
        judge_executor.executor_for("slurm")


def test_collect_config_file_is_read_by_the_one_reader_and_unknown_keys_are_named(tmp_path):
    """``build_config(FILE, ...)`` reads through cliconfig: a typo'd key names the file and the
    dotted key instead of surfacing later as a pydantic error; flags still override the file."""
    from rlmdistill.cliconfig import ConfigFileError
    from rlmdistill.collect.main import build_config

    good = tmp_path / "c.yaml"
    good.write_text("root: local:smollm2-135m\nsub: local:smollm2-135m\nepisodes: 3\n")
    cfg = build_config(good, {"episodes": 5, "rooms": []})
    assert (cfg.episodes, cfg.root) == (5, "local:smollm2-135m")
    bad = tmp_path / "bad.yaml"
    bad.write_text("root: local:x\nsub: local:x\nroot_sampling: {temprature: 0.2}\n")
    with pytest.raises(
        ConfigFileError, match=r"bad\.yaml: unknown key 'root_sampling\.temprature'"
    ):
        build_config(bad, {})
