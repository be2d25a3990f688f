"""The self-distillation loop end to end on a tiny base model (issue #6, item 4).

Training data comes from a scripted root on the loopback fake server (``train_root``); the
base is a tiny random Llama with the real SmolLM2 tokenizer, so SFT and both held-out arms run
in process in seconds. Checks: stages run in order and write lineage, the rooms share no
document, base and tuned arms use the same seeds, a second call skips every stage (the report
too: its fingerprint is its inputs), a changed input or statistical method rebuilds the report
alone, and the greedy check is a section of report.json that report.md is rendered from.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from conftest import _scripted

from rlmdistill.analysis.markdown import render_markdown
from rlmdistill.analysis.schema import Report
from rlmdistill.analysis.sections import METHODS
from rlmdistill.loop.config import ExperimentError, load_experiment
from rlmdistill.loop.run import run_loop
from rlmdistill.testing.fake_openai import FakeOpenAIServer
from rlmdistill.traces.labels import Label, append_labels, memo_hash
from rlmdistill.traces.lineage import latest_records, render_tree
from rlmdistill.traces.runs import load_summaries


def _experiment(tmp_path: Path, url: str, base: Path) -> Path:
    data = {
        "name": "t",
        "workspace": "ws",
        "rooms": {"contracts_per_room": 1, "train_rooms": 2, "holdout_rooms": 2, "seed": 3},
        "base": f"local:{base}",
        "sub": f"openai:sub@{url}",
        "train_root": f"openai:root@{url}",
        "collect_train": {"episodes": 2, "concurrency": 2, "limits": {"max_turns": 3}},
        "collect_eval": {
            "episodes": 1,
            "concurrency": 2,
            "few_shot": False,
            "root_sampling": {"temperature": 0.0, "max_tokens": 12},
            "limits": {"max_turns": 2},
        },
        "export": {"system_prompt": "plain", "max_length": 4096},
        "sft": {"max_steps": 3, "learning_rate": 0.01, "lora_r": 4, "save_steps": 3},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_loop_runs_every_stage_then_skips_them(tmp_path, tiny_llama_dir, monkeypatch):
    logs: list[str] = []
    with FakeOpenAIServer(_scripted, models=["root", "sub"]) as server:  # as GET /v1/models
        cfg = load_experiment(_experiment(tmp_path, server.base_url, tiny_llama_dir))
        res = run_loop(cfg, log=logs.append, progress=False)
        ws = cfg.workspace
        assert ws == tmp_path / "ws"
        split = json.loads((ws / "rooms" / "split.json").read_text())
        assert split["passed"] and split["n_train_documents"] == split["n_holdout_documents"] == 2
        train = load_summaries(res.rounds[0].train_run)
        assert len(train) == 4 and {s.status for s in train} == {"completed"}
        base = {(s.room.room_id, s.sample_index): s for s in load_summaries(res.base_run)}
        tuned = {
            (s.room.room_id, s.sample_index): s for s in load_summaries(res.rounds[0].tuned_run)
        }
        assert base.keys() == tuned.keys() and len(base) == 2
        assert all(base[k].seed == tuned[k].seed for k in base)
        assert all(base[k].episode_id != tuned[k].episode_id for k in base)
        sft = json.loads((res.rounds[0].adapter / "sft.json").read_text())
        assert sft["status"] == "completed"
        report = json.loads((res.rounds[0].report / "report.json").read_text())
        assert report  # built by the analysis stage; its numbers are tested there
        check = json.loads((res.rounds[0].report / "adapter_check.json").read_text())
        assert check["max_abs_logit_diff"] > 0
        # the check is a section of report.json, and report.md is rendered from report.json alone
        report_md = (res.rounds[0].report / "report.md").read_text(encoding="utf-8")
        assert "Does the adapter change the root?" in report_md
        [section] = report["adapter_checks"]
        assert section["max_abs_logit_diff"] == check["max_abs_logit_diff"]
        assert section["adapter"] == "adapters/r1"
        stored = Report.model_validate_json((res.rounds[0].report / "report.json").read_text())
        assert render_markdown(stored) == report_md
        latest = latest_records(ws)
        assert {"runs/eval-base", "runs/r1-train", "datasets/r1/export.json",
                "adapters/r1/sft.json", "runs/r1-eval-tuned", "reports/r1"} <= latest.keys()  # fmt: skip
        assert latest["adapters/r1/sft.json"].inputs == ["datasets/r1/export.json"]
        tree = render_tree(ws)
        assert "reports/r1" in tree and "<- datasets/r1/export.json" in tree
        n_records = len((ws / "lineage.jsonl").read_text().splitlines())

        logs.clear()
        run_loop(cfg, log=logs.append, progress=False)
        second = list(logs)
        # a changed input (one more logged training step) rebuilds the report, and only it
        train_log = res.rounds[0].adapter / "train_log.jsonl"
        last = json.loads(train_log.read_text(encoding="utf-8").splitlines()[-1])
        with train_log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({**last, "step": last["step"] + 1}) + "\n")
        logs.clear()
        run_loop(cfg, log=logs.append, progress=False)
        third = list(logs)
        # a changed statistical method (as when the Spearman interval moved from a bootstrap to
        # Fisher z) rebuilds the report, and only it
        monkeypatch.setitem(METHODS, "spearman", METHODS["spearman"] + " (changed)")
        logs.clear()
        run_loop(cfg, log=logs.append, progress=False)
        fourth = list(logs)
        methods = json.loads((res.rounds[0].report / "report.json").read_text())["methods"]
        rebuilt = json.loads((res.rounds[0].report / "report.json").read_text())
        new = (ws / "lineage.jsonl").read_text().splitlines()[n_records:]
        # a person's label on a training episode changes what is kept: the dataset is rebuilt
        first_train = train[0]
        append_labels(
            res.rounds[0].train_run,
            [
                Label(
                    episode_id=first_train.episode_id,
                    memo_hash=memo_hash(first_train.memo),
                    target="episode",
                    verdict="reject",
                    reviewer="ana",
                    time=datetime.now(UTC),
                )
            ],
        )
        logs.clear()
        run_loop(cfg, log=logs.append, progress=False)
        fifth = list(logs)
    ran = [line for line in fifth if line.startswith("[run ]")]
    assert ran[0] == "[run ] filter + export runs/r1-train -> datasets/r1", fifth
    ran = [line for line in third if line.startswith("[run ]")]
    assert len(ran) == 1 and ran[0].startswith("[run ] report runs/eval-base vs"), third
    ran = [line for line in fourth if line.startswith("[run ]")]
    assert len(ran) == 1 and ran[0].startswith("[run ] report runs/eval-base vs"), fourth
    assert methods["spearman"].endswith(" (changed)")
    assert len(rebuilt["training"][0]["steps"]) == len(report["training"][0]["steps"]) + 1
    assert rebuilt["training"][0]["steps"][-1] == last["step"] + 1
    skipped = [line for line in second if line.startswith("[skip]")]
    assert len(skipped) == 6, second  # eval-base, train, dataset, adapter, eval-tuned, report
    assert "[skip] reports/r1: report up to date" in second
    assert not any(line.startswith("[run ]") for line in second), second
    assert {json.loads(x)["kind"] for x in new} <= {"check", "report"}


def test_experiment_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkspace: ws\nbase: openai:m@http://h/v1\nsub: local:x\n"
                   "rooms: {train_rooms: 1}\n")  # fmt: skip
    with pytest.raises(
        ExperimentError, match=r"(?s)bad\.yaml: invalid experiment: .*base must be a local"
    ):
        load_experiment(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ExperimentError, match="expected a mapping"):
        load_experiment(bad)


def test_loop_with_a_served_root_loads_each_adapter_into_the_server(tmp_path, tiny_llama_dir):
    """GLM-class set-up: SFT on local weights, collection and evaluation through a vLLM-style
    server whose runtime LoRA endpoint loads each tuned adapter as a model id."""
    with FakeOpenAIServer(_scripted, models=["root", "sub"]) as server:
        path = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        data = yaml.safe_load(path.read_text())
        data.pop("train_root")
        data["serving"] = {"base_url": server.base_url, "model": "root"}
        data["check_greedy_change"] = False
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        res = run_loop(load_experiment(path), progress=False)
        loaded = dict(server.loaded_adapters)
    assert loaded == {"t-r1": str(res.rounds[0].adapter.resolve())}
    base = load_summaries(res.base_run)
    tuned = load_summaries(res.rounds[0].tuned_run)
    assert {s.root_model for s in base} == {f"openai:root@{server.base_url}"}
    assert {s.root_model for s in tuned} == {f"openai:t-r1@{server.base_url}"}
    assert len(base) == len(tuned) == 2
    assert not (res.rounds[0].report / "adapter_check.json").exists()


def test_load_adapter_error_names_server_and_adapter(tmp_path):
    from rlmdistill.loop.serving import ServingConfig, ServingError, load_lora_adapter

    with FakeOpenAIServer(_scripted) as server:
        serving = ServingConfig(base_url=server.base_url, model="root")
        with pytest.raises(
            ServingError, match=r"loading adapter x-r1 from .* failed with HTTP 400"
        ):
            load_lora_adapter(serving, "x-r1", tmp_path / "not-an-adapter")


def test_stage_sections_are_validated_when_the_experiment_loads(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: x\nworkspace: ws\nbase: local:smollm2-135m\nsub: local:smollm2-135m\n"
        "rooms: {train_rooms: 1}\nsft: {lora_rank: 8}\n"
    )
    with pytest.raises(ExperimentError, match=r"exp\.yaml: invalid experiment: sft\.lora_rank"):
        load_experiment(path)


@pytest.mark.parametrize("name", ["quickstart.yaml", "glm_vllm.yaml", "room_scaling.yaml"])
def test_shipped_examples_validate(name):
    cfg = load_experiment(Path(__file__).resolve().parents[1] / "examples" / name)
    assert cfg.rounds >= 1 and cfg.base.startswith("local:")


def test_lineage_prints_a_shared_ancestor_once_then_refers_back(tmp_path):
    from typer.testing import CliRunner

    from rlmdistill.cli import app
    from rlmdistill.traces.lineage import LineageRecord, record

    def rec(artefact: str, kind: str, stage: str, inputs: list[str], rnd: int = 0) -> None:
        made = LineageRecord(
            artefact=artefact,
            kind=kind,
            stage=stage,
            round=rnd,
            inputs=inputs,
            fingerprint="f",
            detail={"n": 1},
        )
        record(tmp_path, made)

    rec("rooms/split.json", "check", "rooms", [])
    rec("runs/eval-base", "run", "collect-eval", ["rooms/split.json"])
    for r in (1, 2):  # two rounds share the base run and the rooms
        rec(f"runs/r{r}-train", "run", "collect-train", ["rooms/split.json"], r)
        rec(f"reports/r{r}", "report", "report", ["runs/eval-base", f"runs/r{r}-train"], r)
    result = CliRunner().invoke(app, ["lineage", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "reports/r1  [report, report, round 1]  n=1",
        "  <- runs/eval-base  [run, collect-eval]  n=1",
        "    <- rooms/split.json  [check, rooms]  n=1",
        "  <- runs/r1-train  [run, collect-train, round 1]  n=1",
        "    <- rooms/split.json  (see above)",
        "reports/r2  [report, report, round 2]  n=1",
        "  <- runs/eval-base  (see above)",
        "  <- runs/r2-train  [run, collect-train, round 2]  n=1",
        "    <- rooms/split.json  (see above)",
    ]
    # a cycle (no artefact outside it) is still printed, once, and ends
    cyc = tmp_path / "cycle"
    record(cyc, LineageRecord(artefact="a", kind="run", stage="s", inputs=["b"], fingerprint="f"))
    record(cyc, LineageRecord(artefact="b", kind="run", stage="s", inputs=["a"], fingerprint="f"))
    assert render_tree(cyc).splitlines() == [
        "a  [run, s]",
        "  <- b  [run, s]",
        "    <- a  (see above)",
    ]


def test_moved_workspace_resumes_and_reports(tmp_path, tiny_llama_dir):
    """Issue #25 item 5: a workspace moved to another folder resumes (every stage skipped,
    no episode collected again, no adapter trained again) and reports; its loop records hold
    paths relative to the workspace."""
    import shutil

    with FakeOpenAIServer(_scripted, models=["root", "sub"]) as server:
        exp = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        first = run_loop(load_experiment(exp), progress=False)
        before = json.loads((first.rounds[0].report / "report.json").read_text())
        moved = tmp_path / "elsewhere"
        moved.mkdir()
        shutil.move(tmp_path / "ws", moved / "ws")
        shutil.move(exp, moved / "exp.yaml")
        cfg = load_experiment(moved / "exp.yaml")
        assert cfg.workspace == moved / "ws"
        logs: list[str] = []
        res = run_loop(cfg, log=logs.append, progress=False)
    skipped = [line for line in logs if line.startswith("[skip]")]
    assert len(skipped) == 5, logs  # eval-base, train, dataset, adapter, eval-tuned
    assert not any(line.startswith("[run ] sft") or ("collect" in line and "[run ]" in line)
                   for line in logs)  # fmt: skip
    ws = moved / "ws"
    after = json.loads((res.rounds[0].report / "report.json").read_text())
    # same numbers from the moved rooms' tasks (found by content hash), nothing left unscored
    assert after["per_arm"] == before["per_arm"] and after["notes"] == before["notes"] == []
    assert [r["room_hash"] for r in after["rooms"]] == [r["room_hash"] for r in before["rooms"]]
    split = json.loads((ws / "rooms" / "split.json").read_text())
    assert split["train"] == ["rooms/train-0", "rooms/train-1"]
    assert set(split["n_criteria"]) == {f"rooms/{n}-{k}" for n in ("train", "holdout")
                                        for k in (0, 1)}  # fmt: skip
    assert json.loads((ws / "experiment.json").read_text())["workspace"] == "."
    tuned = latest_records(ws)["runs/r1-eval-tuned"].detail["root"]
    assert tuned == f"local:{tiny_llama_dir}+adapter=adapters/r1"
    assert {s.root_model for s in load_summaries(res.rounds[0].tuned_run)} == {tuned}


def test_strict_loop_stops_on_a_corrupt_document_before_any_model_loads(tmp_path, cuad_room3):
    """Issue #25 item 2 in the loop: ``strict`` turns the skipped corrupt PDF into an error
    naming the file, raised when the held-out rooms are loaded for the base arm (the base
    named here does not exist, so reaching a model would fail differently)."""
    import shutil

    from rlmdistill.rooms import RoomError

    holdout = tmp_path / "holdout"
    shutil.copytree(cuad_room3, holdout)
    (holdout / "documents" / "broken.pdf").write_bytes(b"%PDF-1.4\ncut short")
    train = tmp_path / "train"  # its own document; the task only has to have a criterion
    (train / "documents").mkdir(parents=True)
    (train / "documents" / "lease.txt").write_text("A lease of no other room.", "utf-8")
    shutil.copy(cuad_room3 / "task.json", train / "task.json")
    exp = tmp_path / "exp.yaml"
    # a live sub server (the loop's server preflight passes), a base that does not exist
    with FakeOpenAIServer(models=["sub"]) as server:
        exp.write_text(yaml.safe_dump({
            "name": "s", "workspace": "ws", "base": f"local:{tmp_path / 'no-such-model'}",
            "sub": f"openai:sub@{server.base_url}", "train_rooms": [str(train)],
            "holdout_rooms": [str(holdout)],
        }), encoding="utf-8")  # fmt: skip
        with pytest.raises(RoomError, match=r"broken\.pdf: cannot extract text"):
            run_loop(load_experiment(exp), progress=False, strict=True)
        assert not [r for r in server.requests if r.get("messages")]  # no model request sent
    assert not (tmp_path / "ws" / "runs" / "eval-base" / "episodes.jsonl").exists()


def _every_root_scripted(req: dict):  # type: ignore[no-untyped-def]
    """The scripted root for every served root model (base ``root`` and the tuned adapters'
    names ``t-r1``, ``t-r2``), the plain sub answer for ``sub`` (at depth 2: its subagent)."""
    from conftest import ROOT_SCRIPT

    from rlmdistill.testing.fake_openai import conversation_turn

    if req["model"] != "sub":
        return ROOT_SCRIPT[min(conversation_turn(req)[1], len(ROOT_SCRIPT) - 1)]
    return "The agreement may not be assigned without prior written consent."


def test_two_rounds_with_depth_arms_report_every_arm_on_the_same_rooms_and_seeds(
    tmp_path, tiny_llama_dir
):
    """Issue 21 items 2-3: depth_arms [2] adds runs/eval-base-d2 and runs/r2-eval-tuned-d2
    (the last round's root) with collect_eval's settings, the override and depth 2, on the
    held-out rooms and seeds of the depth-1 arms; reports/r1 compares base and tuned-r1,
    reports/r2 base, tuned-r1, tuned-r2, base-d2, tuned-r2-d2 with both adapters' logs; a
    second call collects and trains nothing."""
    with FakeOpenAIServer(_every_root_scripted, models=["root", "sub"]) as server:
        path = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        data = yaml.safe_load(path.read_text())
        data.pop("train_root")
        data["collect_eval"]["root_sampling"]["max_tokens"] = 400  # the whole scripted block
        data["sft"].update(max_steps=1, save_steps=1)  # two SFTs: keep the test short
        data.update(
            serving={"base_url": server.base_url, "model": "root"},
            check_greedy_change=False,
            rounds=2,
            depth_arms=[2],
            collect_eval_d2={"subagent_max_turns": 2, "limits": {"max_sub_calls": 50}},
        )
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        cfg = load_experiment(path)
        res = run_loop(cfg, progress=False)
        ws = cfg.workspace
        r1, r2 = res.rounds
        assert [a.label for a in r1.arms] == ["base", "tuned-r1"]
        labels = ["base", "tuned-r1", "tuned-r2", "base-d2", "tuned-r2-d2"]
        names = ["eval-base", "r1-eval-tuned", "r2-eval-tuned", "eval-base-d2", "r2-eval-tuned-d2"]
        assert [a.label for a in r2.arms] == labels
        assert [a.run for a in r2.arms] == [ws / "runs" / n for n in names]
        assert not (ws / "runs" / "r1-eval-tuned-d2").exists()  # depth arms: last round only
        by_arm = {a.label: {(s.room.room_id, s.sample_index): s for s in load_summaries(a.run)}
                  for a in r2.arms}  # fmt: skip
        base = by_arm["base"]
        assert len(base) == 2
        for label, episodes in by_arm.items():
            assert episodes.keys() == base.keys(), label
            assert [episodes[k].seed for k in base] == [base[k].seed for k in base], label
        config = {
            n: json.loads((ws / "runs" / n / "run.json").read_text())["config"] for n in names
        }
        d1, d2 = config["eval-base"], config["eval-base-d2"]
        assert (d1["depth"], d2["depth"]) == (1, 2)
        assert (d2["subagent_max_turns"], d2["limits"]["max_sub_calls"]) == (2, 50)
        assert d2["limits"]["max_turns"] == d1["limits"]["max_turns"] == 2  # merged, not replaced
        changed = {"depth", "subagent_max_turns", "limits"}
        assert {k: v for k, v in d2.items() if k not in changed} == {
            k: v for k, v in d1.items() if k not in changed}  # fmt: skip
        assert config["r2-eval-tuned-d2"]["root"] == config["r2-eval-tuned"]["root"] == (
            f"openai:t-r2@{server.base_url}")  # fmt: skip
        subagents = load_summaries(ws / "runs" / "eval-base-d2")  # the scripted root delegated
        assert all(s.n_sub_calls > 0 and s.status == "completed" for s in subagents)
        for rnd, arms in ((r1, r1.arms), (r2, r2.arms)):
            report = json.loads((rnd.report / "report.json").read_text())
            assert list(report["per_arm"]) == [a.label for a in arms]
        latest = latest_records(ws)
        assert latest["reports/r2"].inputs == [
            *(f"runs/{n}" for n in names), "adapters/r1/sft.json", "adapters/r2/sft.json"]  # fmt: skip
        assert latest["runs/eval-base-d2"].round == 0 and latest["runs/r2-eval-tuned-d2"].round == 2

        logs: list[str] = []
        run_loop(cfg, log=logs.append, progress=False)
    skipped = [line for line in logs if line.startswith("[skip]")]
    # eval-base, 2 x (train, data, adapter, tuned, report), the 2 depth-2 arms
    assert len(skipped) == 1 + 2 * 5 + 2, logs
    assert "[skip] reports/r2: report up to date" in skipped
    assert not [line for line in logs if line.startswith("[run ]") and "load adapter" not in line]


def test_depth_arm_settings_are_checked(tmp_path):
    def load(**extra):  # type: ignore[no-untyped-def]
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump({
            "name": "x", "workspace": "ws", "base": "local:smollm2-135m",
            "sub": "local:smollm2-135m", "rooms": {"train_rooms": 1}, **extra,
        }))  # fmt: skip
        return load_experiment(path)

    cfg = load(depth_arms=[2], collect_eval={"limits": {"max_turns": 3}},
               collect_eval_d2={"limits": {"max_tokens": 5000}})  # fmt: skip
    assert cfg.eval_settings(2) == {"limits": {"max_turns": 3, "max_tokens": 5000}, "depth": 2}
    assert cfg.eval_settings() == {"limits": {"max_turns": 3}}
    for extra, match in [
        ({"depth_arms": [2], "collect_eval_d2": {"depth": 1}}, "collect_eval_d2.depth is set"),
        ({"depth_arms": [2], "collect_eval": {"depth": 2}}, "repeats collect_eval.depth = 2"),
        ({"collect_eval_d2": {"subagent_max_turns": 2}}, "depth_arms is empty"),
        ({"depth_arms": [3]}, r"depth_arms\.0"),
        (
            {"depth_arms": [2], "collect_eval_d2": {"subagent_max_turns": 0}},
            r"collect_eval_d2\.subagent_max_turns",
        ),
    ]:
        with pytest.raises(ExperimentError, match=match):
            load(**extra)


def test_sft_grpo_and_sft_plus_grpo_arms_are_reported_against_base_on_the_same_rooms(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """``arms: [sft, grpo, sft+grpo]``: round 1 trains the SFT adapter, GRPO from the base
    (adapters/grpo) and GRPO from the base with the SFT adapter merged in (adapters/sft-grpo,
    on adapters/sft-merged), each in process on the training rooms; each arm collects the
    held-out rooms with the base arm's seeds; the report has the three tuned arms against
    base, paired on the same rooms; lineage records each; a second call skips every row."""
    with FakeOpenAIServer(_scripted, models=["root", "sub"]) as server:
        path = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["arms"] = ["sft", "grpo", "sft+grpo"]
        data["rl"] = {
            "num_generations": 2,
            "max_steps": 1,
            "learning_rate": 0.01,
            "lora_r": 4,
            "reward": "rlmdistill.testing.rl_rewards:distinct_root_tokens",
            "collect": {
                "limits": {"max_turns": 1},
                "root_sampling": {"max_tokens": 8},
                "few_shot": False,
                "prefill": "```repl\n",
            },
        }
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        cfg = load_experiment(path)
        logs: list[str] = []
        res = run_loop(cfg, log=logs.append, progress=False)
        ws = cfg.workspace
        [rnd] = res.rounds
        assert [a.label for a in rnd.arms] == ["base", "tuned-r1", "grpo", "sft+grpo"]
        assert [a.run for a in rnd.arms[2:]] == [ws / "runs/eval-grpo", ws / "runs/eval-sft-grpo"]
        base = {(s.room.room_id, s.sample_index): s.seed for s in load_summaries(res.base_run)}
        for arm in rnd.arms[1:]:
            got = {(s.room.room_id, s.sample_index): s.seed for s in load_summaries(arm.run)}
            assert got == base, arm.label  # the same held-out rooms and seeds as base
        for name in ("grpo", "sft-grpo"):
            rl = json.loads((ws / "adapters" / name / "rl.json").read_text())
            assert rl["status"] == "completed" and rl["global_step"] == 1
            assert (ws / "adapters" / name / "adapter_model.safetensors").is_file()
        merged = json.loads((ws / "adapters/sft-merged/rlmdistill_merge.json").read_text())
        assert merged["adapter"] == str(ws / "adapters/r1")
        roots = {
            arm.label: json.loads((arm.run / "run.json").read_text())["config"]["root"]
            for arm in rnd.arms
        }
        assert roots["grpo"] == f"local:{tiny_llama_dir}+adapter=adapters/grpo"
        assert roots["sft+grpo"] == "local:adapters/sft-merged+adapter=adapters/sft-grpo"
        report = json.loads((rnd.report / "report.json").read_text())
        assert [a["label"] for a in report["arms"]] == ["base", "tuned-r1", "grpo", "sft+grpo"]
        assert report["arms"][0]["n_rooms"] == 2
        paired = {(c["a"], c["b"]): c["rooms_paired"] for c in report["comparisons"]}
        rooms = ["holdout-0", "holdout-1"]
        assert paired == {("base", a): rooms for a in ("tuned-r1", "grpo", "sft+grpo")}
        rl = {c["adapter"]: c for c in report["rl_training"]}
        assert sorted(rl) == ["grpo", "sft-grpo"]
        for curve in rl.values():  # one logged step each, on-policy (in process)
            assert curve["steps"] == [1] and curve["staleness"] == [0.0]
            assert curve["groups"] == [1] and curve["rollout_wall_s"][0] > 0
        assert "## RL training" in (rnd.report / "report.md").read_text(encoding="utf-8")
        table = report["arm_table"]
        assert table["baseline"] == "base" and table["rooms"] == rooms
        assert table["arms"] == ["base", "tuned-r1", "grpo", "sft+grpo"]
        latest = latest_records(ws)
        assert latest["adapters/grpo/rl.json"].inputs == ["rooms/split.json"]
        assert latest["adapters/sft-grpo/rl.json"].inputs == [
            "rooms/split.json",
            "adapters/r1/sft.json",
        ]
        assert latest["adapters/grpo/rl.json"].detail["steps"] == 1
        logs.clear()
        run_loop(cfg, log=logs.append, progress=False)
    assert not [line for line in logs if line.startswith("[run ]")], logs


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"arms": ["grpo"]}, r"sft among them"),
        ({"arms": ["sft", "sft"]}, r"list each arm once"),
        ({"rl": {"max_steps": 2}}, r"rl is set but arms has no grpo"),
        ({"arms": ["sft", "grpo"], "rl": {"out": "x"}}, r"rl\.out is set by the loop"),
        ({"arms": ["sft", "grpo"], "rl": {"max_step": 2}}, r"rl\.max_step"),
        ({"arms": ["sft", "ppo"]}, r"arms"),
        ({"train": ["sub"]}, r"root among them"),
        ({"train": ["root", "sub"]}, r"sub must be a local spec"),
        ({"sft_sub": {"max_steps": 1}}, r"sft_sub is set but train has no sub"),
    ],
)
def test_training_arms_that_cannot_run_are_named(
    tmp_path: Path, extra: dict[str, object], message: str
) -> None:
    path = _experiment(tmp_path, "http://127.0.0.1:9/v1", tmp_path / "base")
    data = {**yaml.safe_load(path.read_text(encoding="utf-8")), **extra}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ExperimentError, match=message):
        load_experiment(path)


def test_train_root_and_sub_reports_the_tuned_sub_arms_on_the_same_rooms(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    """``train: [root, sub]``: round 1 also filters the kept episodes' sub-calls
    (``--target sub``, ``sub_where``) into datasets/r1-sub, fine-tunes the sub on them
    (adapters/r1-sub), and evaluates base root + tuned sub (sub-r1) and tuned root + tuned
    sub (both-r1) on the held-out rooms with the base arm's seeds, at depth 2 too
    (depth_arms); the report pairs every arm with base and has the sub's training curve."""
    with FakeOpenAIServer(_scripted, models=["root", "sub"]) as server:
        path = _experiment(tmp_path, server.base_url, tiny_llama_dir)
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["sub"] = f"local:{tiny_llama_dir}"  # a local sub, to fine-tune
        data["train"] = ["root", "sub"]
        data["sub_where"] = ["not error"]  # a random tiny sub's answers never reach a memo
        data["depth_arms"] = [2]
        data["collect_eval_d2"] = {"subagent_max_turns": 1, "limits": {"max_sub_calls": 2}}
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        cfg = load_experiment(path)
        res = run_loop(cfg, log=lambda s: None, progress=False)
    ws = cfg.workspace
    [rnd] = res.rounds
    labels = [a.label for a in rnd.arms]
    assert labels == [
        "base", "tuned-r1", "sub-r1", "both-r1",
        "base-d2", "tuned-r1-d2", "sub-r1-d2", "both-r1-d2",
    ]  # fmt: skip
    sub_export = json.loads((ws / "datasets/r1-sub/export.json").read_text())
    assert sub_export["mode"] == "sub" and sub_export["n_examples"] > 0
    sft = json.loads((ws / "adapters/r1-sub/sft.json").read_text())
    assert sft["status"] == "completed" and sft["config"]["base"] == f"local:{tiny_llama_dir}"
    base = {(s.room.room_id, s.sample_index): s.seed for s in load_summaries(res.base_run)}
    roots = {}
    for arm in rnd.arms:
        if arm.label.endswith("-d2"):
            continue
        got = {(s.room.room_id, s.sample_index): s.seed for s in load_summaries(arm.run)}
        assert got == base, arm.label
        roots[arm.label] = json.loads((arm.run / "run.json").read_text())["config"]
    tuned_sub = f"local:{tiny_llama_dir}+adapter=adapters/r1-sub"
    assert roots["sub-r1"]["sub"] == roots["both-r1"]["sub"] == tuned_sub
    assert roots["sub-r1"]["root"] == roots["base"]["root"]
    assert roots["both-r1"]["root"] == roots["tuned-r1"]["root"]
    assert roots["tuned-r1"]["sub"] == f"local:{tiny_llama_dir}"
    report = json.loads((rnd.report / "report.json").read_text())
    assert [a["label"] for a in report["arms"]] == labels
    assert {c["b"] for c in report["comparisons"]} >= {"sub-r1", "both-r1"}
    assert [c["adapter"] for c in report["training"]] == ["r1", "r1-sub"]
    latest = latest_records(ws)
    assert latest["adapters/r1-sub/sft.json"].inputs == ["datasets/r1-sub/export.json"]
