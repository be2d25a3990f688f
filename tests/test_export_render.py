"""Rendering root turns as the root saw them: few-shot, prefill, context distillation, modes."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from transformers import AutoTokenizer

from rlmdistill.export import ExportManifest, ExportOptions, export_dataset, render_episode
from rlmdistill.harness import prompts
from rlmdistill.testing.trajectory_runs import write_trajectory_run
from rlmdistill.traces.rebuild import assistant_message, root_requests
from rlmdistill.traces.runs import EpisodeRef, load_trajectory


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[EpisodeRef]]:
    run = tmp_path_factory.mktemp("synth") / "run"
    ids = write_trajectory_run(run, 2, n_turns=3, few_shot=True)
    return run, [EpisodeRef(run, i) for i in ids]


def test_masked_tokens_round_trip_and_few_shot_never_supervised(
    synth_run: tuple[Path, list[EpisodeRef]], smollm2_dir: Path, tmp_path: Path
) -> None:
    """Decoding the masked tokens of each assistant turn gives exactly its content +
    <|im_end|>; the worked-example assistant turns (kept as context) are never supervised."""
    run, refs = synth_run
    export_dataset(refs, tmp_path / "ds", ExportOptions(tokenizer=str(smollm2_dir)))
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    example_turns = [m.content for m in prompts.worked_example() if m.role == "assistant"]
    for row in datasets.load_from_disk(str(tmp_path / "ds")):
        traj = load_trajectory(run, row["episode_id"])
        replies = [assistant_message(t).content for t in traj.turns]
        decoded = [tok.decode(row["input_ids"][a:b]) for a, b in _runs(row["assistant_masks"])]
        assert decoded == [r + "<|im_end|>" for r in replies]
        assert [m["content"] for m in row["messages"] if m["role"] == "assistant"] == [
            *example_turns,
            *replies,
        ]


def test_context_distillation_plain_prompt_drops_worked_example(
    synth_run: tuple[Path, list[EpisodeRef]], smollm2_dir: Path, tmp_path: Path
) -> None:
    """system_prompt="plain": the collected system prompt without the worked example; the
    card and export.json record it."""
    run, refs = synth_run
    export_dataset(
        refs, tmp_path / "ds", ExportOptions(tokenizer=str(smollm2_dir), system_prompt="plain")
    )
    row = datasets.load_from_disk(str(tmp_path / "ds"))[0]
    traj = load_trajectory(run, row["episode_id"])
    assert row["messages"][0] == {"role": "system", "content": prompts.SYSTEM_PROMPT}
    assert row["messages"][1] == traj.start.initial_messages[-1].model_dump()  # the task
    assert "Supply/acme_supply.txt" not in row["messages_json"]  # worked example gone
    manifest = ExportManifest.model_validate_json((tmp_path / "ds" / "export.json").read_text())
    assert manifest.system_prompt_source == "plain" and not manifest.few_shot_kept
    card = (tmp_path / "ds" / "README.md").read_text()
    assert (
        "without the worked example" in card and "worked example (few-shot turns): dropped" in card
    )


def test_context_distillation_from_file_recorded_in_card(
    synth_run: tuple[Path, list[EpisodeRef]], smollm2_dir: Path, tmp_path: Path
) -> None:
    _, refs = synth_run
    prompt = tmp_path / "short_prompt.txt"
    prompt.write_text("You are an M&A reviewer. Use ```repl blocks.")
    export_dataset(
        refs, tmp_path / "ds", ExportOptions(tokenizer=str(smollm2_dir), system_prompt=str(prompt))
    )
    row = datasets.load_from_disk(str(tmp_path / "ds"))[0]
    assert row["messages"][0]["content"] == prompt.read_text()
    assert [m["role"] for m in row["messages"]][:2] == ["system", "user"]
    manifest = json.loads((tmp_path / "ds" / "export.json").read_text())
    assert manifest["system_prompt_source"] == str(prompt)
    import hashlib

    sha = hashlib.sha256(prompt.read_bytes()).hexdigest()
    assert manifest["system_prompt_sha256"] == sha
    assert sha[:16] in (tmp_path / "ds" / "README.md").read_text()
    with pytest.raises(ValueError, match="is not a file"):
        ExportOptions(tokenizer="x", system_prompt=str(tmp_path / "missing.txt"))


def test_prefill_unsupervised_when_configured(
    synth_run: tuple[Path, list[EpisodeRef]], smollm2_dir: Path, tmp_path: Path
) -> None:
    """supervise_prefill=False: the reply prefill ("```repl\\n") is context, the completion
    and <|im_end|> are supervised (default True supervises prefill + completion)."""
    run, refs = synth_run
    export_dataset(
        refs[:1],
        tmp_path / "ds",
        ExportOptions(tokenizer=str(smollm2_dir), supervise_prefill=False),
    )
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    row = datasets.load_from_disk(str(tmp_path / "ds"))[0]
    traj = load_trajectory(run, row["episode_id"])
    decoded = [tok.decode(row["input_ids"][a:b]) for a, b in _runs(row["assistant_masks"])]
    assert decoded == [t.completion + "<|im_end|>" for t in traj.turns]
    assert all(t.prefill == "```repl\n" for t in traj.turns)
    with pytest.raises(ValueError, match="needs style='plain'"):
        ExportOptions(tokenizer="x", style="tools", supervise_prefill=False)


def test_turn_mode_one_example_per_root_turn(
    synth_run: tuple[Path, list[EpisodeRef]], smollm2_dir: Path, tmp_path: Path
) -> None:
    """Turn mode: example t = exactly the request of turn t + that reply; only it is
    supervised."""
    run, refs = synth_run
    report = export_dataset(
        refs, tmp_path / "ds", ExportOptions(tokenizer=str(smollm2_dir), mode="turn")
    )
    assert report.n_examples == 6
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    for row in datasets.load_from_disk(str(tmp_path / "ds")):
        traj = load_trajectory(run, row["episode_id"])
        t = row["turn"]
        expected = [m.model_dump() for m in root_requests(traj.start, traj.turns)[t]]
        reply = assistant_message(traj.turns[t]).content
        assert row["messages"] == [*expected, {"role": "assistant", "content": reply}]
        ((a, b),) = _runs(row["assistant_masks"])
        assert tok.decode(row["input_ids"][a:b]) == reply + "<|im_end|>"


def test_edited_trajectory_is_refused_by_hash(
    synth_run: tuple[Path, list[EpisodeRef]], tmp_path: Path, smollm2_dir: Path
) -> None:
    """A trajectory whose turn text was edited no longer matches its recorded prompt hashes:
    render raises, export drops it as prompt_hash_mismatch."""
    import shutil

    run, refs = synth_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    path = copy / "trajectories" / f"{refs[0].episode_id}.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["completion"] = "edited"
    lines[1] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    traj = load_trajectory(copy, refs[0].episode_id)
    from rlmdistill.export.options import SystemPromptChoice

    with pytest.raises(ValueError, match="does not match"):
        render_episode(
            traj,
            mode="trajectory",
            style="plain",
            system=SystemPromptChoice("collected", None, True),
        )
    report = export_dataset(
        [EpisodeRef(copy, r.episode_id) for r in refs],
        tmp_path / "ds",
        ExportOptions(tokenizer=str(smollm2_dir)),
    )
    assert report.dropped == {"prompt_hash_mismatch": 1} and report.n_examples == 1
