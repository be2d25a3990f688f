"""End-to-end export of a real collected run (issue #5 items 2-3; cases R4, T3, S5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest

from rlmdistill.export import (
    EmptyExportError,
    ExportManifest,
    ExportOptions,
    FilterTimeScores,
    export_dataset,
    load_messages,
)
from rlmdistill.traces.runs import EpisodeRef, load_summaries, load_trajectory


def _refs(run: Path) -> list[EpisodeRef]:
    return [EpisodeRef(run, s.episode_id) for s in load_summaries(run)]


def test_export_collected_run_reopens_with_card(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    refs = _refs(collected_run)
    out = tmp_path / "ds"
    report = export_dataset(
        refs,
        out,
        ExportOptions(tokenizer=str(smollm2_dir)),
        card_extra="Rule: pass_rate >= 0.5",
        scores={refs[0].episode_id: FilterTimeScores(0.75, 0.5)},
    )
    ds = datasets.load_from_disk(str(out))
    assert report.n_examples == len(ds) == 2
    assert report.dropped == {}
    row = ds[0]
    traj = load_trajectory(collected_run, row["episode_id"])
    # messages are exactly what the root was sent + its last reply (collected prompt kept)
    from rlmdistill.traces.rebuild import assistant_message, root_requests

    expected = [m.model_dump() for m in root_requests(traj.start, traj.turns)[-1]]
    expected.append(assistant_message(traj.turns[-1]).model_dump())
    assert row["messages"] == expected
    assert load_messages(row) == expected
    assert row["turn"] == -1 and row["run_id"] == traj.start.run_id
    assert row["room_id"] == traj.start.room.room_id and row["task_id"] == traj.start.task_id
    assert len(row["input_ids"]) == len(row["assistant_masks"]) == row["n_tokens"]
    assert sum(row["assistant_masks"]) == row["n_supervised"] > 0
    by_ep = {r["episode_id"]: r for r in ds}
    assert by_ep[refs[0].episode_id]["pass_rate"] == 0.75
    assert by_ep[refs[0].episode_id]["coverage"] == 0.5
    assert by_ep[refs[1].episode_id]["pass_rate"] is None
    summary = {s.episode_id: s for s in load_summaries(collected_run)}[refs[1].episode_id]
    assert summary.coverage is not None
    assert by_ep[refs[1].episode_id]["coverage"] == pytest.approx(summary.coverage.overall)

    manifest = ExportManifest.model_validate_json((out / "export.json").read_text())
    assert manifest.n_examples == 2 and manifest.mode == "trajectory"
    assert manifest.sources[0].episode_ids == [r.episode_id for r in refs]
    assert manifest.tokenizer.closer == "<|im_end|>"
    card = (out / "README.md").read_text()
    assert "Rule: pass_rate >= 0.5" in card and "collected" in card
    assert str(collected_run) in card


def test_sub_calls_never_enter_examples_case_r4(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    """Case R4: a sub-call's prompt and response that the root never printed are in no
    example (messages or decoded ids), in either mode or style."""
    refs = _refs(collected_run)
    needles: list[str] = []
    for ref in refs:
        traj = load_trajectory(collected_run, ref.episode_id)
        assert traj.sub_calls, "the fixture run makes sub-calls"
        for call in traj.sub_calls:
            needles += [call.prompt, call.response or ""]
    needles = [n for n in needles if n]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    for mode in ("trajectory", "turn"):
        for style in ("plain", "tools"):
            out = tmp_path / f"{mode}-{style}"
            export_dataset(
                refs, out, ExportOptions(tokenizer=str(smollm2_dir), mode=mode, style=style)
            )
            for row in datasets.load_from_disk(str(out)):
                text = row["messages_json"] + tok.decode(row["input_ids"])
                for needle in needles:
                    assert needle not in text


def test_torn_and_incomplete_trajectories_dropped_case_t3(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    """Case T3: a torn last line / missing episode_end drops the episode with a reason."""
    run = tmp_path / "run"
    shutil.copytree(collected_run, run)
    refs = _refs(run)
    torn = run / "trajectories" / f"{refs[0].episode_id}.jsonl"
    lines = torn.read_text().splitlines()
    torn.write_text("\n".join(lines[:-1]) + '\n{"record_type":"episode_end","epi')
    refs.append(EpisodeRef(run, "no-such-episode"))
    report = export_dataset(refs, tmp_path / "ds", ExportOptions(tokenizer=str(smollm2_dir)))
    assert report.n_examples == 1
    assert report.dropped == {"torn_trajectory": 1, "missing_trajectory": 1}
    assert {d.episode_id for d in report.dropped_items} == {refs[0].episode_id, "no-such-episode"}
    torn.write_text("\n".join(lines[:-1]) + "\n")  # complete records, no episode_end
    report = export_dataset(refs[:2], tmp_path / "ds2", ExportOptions(tokenizer=str(smollm2_dir)))
    assert report.dropped == {"incomplete_trajectory": 1}


def test_export_refuses_existing_dataset_and_empty_result(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    refs = _refs(collected_run)
    out = tmp_path / "ds"
    out.mkdir()
    (out / "filter_report.md").write_text("kept")
    opts = ExportOptions(tokenizer=str(smollm2_dir))
    export_dataset(refs, out, opts)
    assert (out / "filter_report.md").read_text() == "kept"  # other files are kept
    with pytest.raises(FileExistsError, match="already holds a dataset"):
        export_dataset(refs, out, opts)
    report = export_dataset(refs[:1], out, opts, overwrite=True)
    assert len(datasets.load_from_disk(str(out))) == report.n_examples == 1
    assert json.loads((out / "export.json").read_text())["n_examples"] == 1
    with pytest.raises(EmptyExportError, match="too_long"):  # a failed overwrite keeps the old
        export_dataset(refs, out, opts.model_copy(update={"max_length": 16}), overwrite=True)
    assert len(datasets.load_from_disk(str(out))) == 1


def test_export_cli_command(collected_run: Path, smollm2_dir: Path, tmp_path: Path) -> None:
    """``rlmdistill export`` on a fresh typer app: from runs, and from a decisions.jsonl."""
    import typer
    from typer.testing import CliRunner

    from rlmdistill.export.cli import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps "export" as a sub-command
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "export",
            str(collected_run),
            "--out",
            str(tmp_path / "a"),
            "--tokenizer",
            str(smollm2_dir),
            "--mode",
            "turn",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "4 examples from 2/2 episodes" in res.output
    refs = _refs(collected_run)
    decisions = tmp_path / "decisions.jsonl"
    decisions.write_text(
        json.dumps(
            {
                "run_dir": str(collected_run),
                "episode_id": refs[0].episode_id,
                "kept": True,
                "pass_rate": 0.9,
                "coverage": 0.4,
            }
        )
        + "\n"
        + json.dumps(
            {"run_dir": str(collected_run), "episode_id": refs[1].episode_id, "kept": False}
        )
        + "\n"
    )
    res = runner.invoke(
        app,
        [
            "export",
            "--episodes",
            str(decisions),
            "--out",
            str(tmp_path / "b"),
            "--tokenizer",
            str(smollm2_dir),
        ],
    )
    assert res.exit_code == 0, res.output
    ds = datasets.load_from_disk(str(tmp_path / "b"))
    assert ds["episode_id"] == [refs[0].episode_id] and ds["pass_rate"] == [0.9]
    res = runner.invoke(
        app,
        [
            "export",
            str(collected_run),
            "--out",
            str(tmp_path / "c"),
            "--tokenizer",
            str(smollm2_dir),
            "--mode",
            "bogus",
        ],
    )
    assert res.exit_code == 2 and "mode" in res.output


def _varied_run(run: Path) -> list[EpisodeRef]:
    """A run whose episodes differ: 3 plain ones, 1 and 5 turns, unicode replies and output,
    no worked example, no prefill, a malformed tool turn (case T1), a torn trajectory (T3)
    and a missing one."""
    from rlmdistill.testing.trajectory_runs import synthetic_episode, write_trajectory_run
    from rlmdistill.traces.store import append_records

    ids = write_trajectory_run(run, 3, n_turns=3, obs_chars=900)
    extra = {
        "one-turn": synthetic_episode("synth-0", "one-turn", n_turns=1, seed=1),
        "five-turns": synthetic_episode("synth-0", "five-turns", n_turns=5, obs_chars=2000),
        "unicode": synthetic_episode(
            "synth-0",
            "unicode",
            n_turns=2,
            few_shot=False,
            prefill=None,
            replies=["```repl\nprint('東京 🚀 e\u0301')\n```", "FINAL('Mémo 👍🏽')"],
            observations=["REPL output (block 0):\n```\n東京 🚀 e\u0301\n```", None],
        ),
        "malformed-tool": synthetic_episode(
            "synth-0",
            "malformed-tool",
            n_turns=2,
            observations=["REPL output (block 3):\n```\nx\n```", None],
        ),
    }
    for eid, recs in extra.items():
        append_records(run / "trajectories" / f"{eid}.jsonl", recs)
    torn = run / "trajectories" / "torn.jsonl"
    append_records(torn, synthetic_episode("synth-0", "torn", n_turns=2))
    torn.write_text(torn.read_text() + '{"record_type":"turn","epi')
    names = [*ids[:2], *extra, "torn", "no-such-episode", ids[2]]
    return [EpisodeRef(run, n) for n in names]


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"mode": "turn"},
        {"mode": "turn", "max_length": 2000, "truncation": "keep_start"},
        {"style": "tools", "chat_template": "qwen2_5"},
        {"mode": "turn", "style": "tools", "chat_template": "qwen2_5", "max_length": 2600},
    ],
    ids=["trajectory", "turn", "turn-keep-start", "tools", "turn-tools"],
)
def test_batched_export_equals_unbatched_export(
    opts: dict, smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export with its examples tokenised in batches (of 4 episodes here, so batches
    split runs of drops and rows) writes byte for byte the ids and masks, rows, drops (in
    order) and counts of the one-call-per-example export."""
    import numpy as np
    import trl

    from rlmdistill.export import dataset as export_ds

    if opts.get("chat_template"):
        template = Path(trl.__file__).parent / "chat_templates" / f"{opts['chat_template']}.jinja"
        opts = {**opts, "chat_template": str(template)}
    refs = _varied_run(tmp_path / "run")
    options = ExportOptions(tokenizer=str(smollm2_dir), **opts)
    monkeypatch.setattr(export_ds, "_BATCH_EPISODES", 4)
    batched = export_dataset(refs, tmp_path / "batched", options)
    with monkeypatch.context() as m:
        m.setattr(export_ds._Encoder, "finish", lambda self, batch: None)
        unbatched = export_dataset(refs, tmp_path / "unbatched", options)
    timing = {"duration_s", "examples_per_s", "tokens_per_s", "out_dir"}
    assert batched.model_dump(exclude=timing) == unbatched.model_dump(exclude=timing)
    assert batched.n_examples >= 5 and len(batched.dropped_items) >= 2
    if opts.get("truncation") == "keep_start":  # the one-by-one fallback of a batch ran
        assert batched.n_truncated >= 1
    if opts.get("style") == "tools":
        assert batched.dropped["malformed_tool_call"] >= 1
    a = datasets.load_from_disk(str(tmp_path / "batched"))
    b = datasets.load_from_disk(str(tmp_path / "unbatched"))
    assert a.column_names == b.column_names and len(a) == len(b) == batched.n_examples
    for col in ("input_ids", "assistant_masks"):
        dtype = np.int32 if col == "input_ids" else np.int8
        for x, y in zip(a[col], b[col], strict=True):
            assert np.asarray(x, dtype=dtype).tobytes() == np.asarray(y, dtype=dtype).tobytes()
    for col in a.column_names:
        assert a[col] == b[col], col
