"""OpenAI fine-tuning JSONL from an exported dataset: each assistant message's ``weight`` is
what the dataset's loss mask says about it (checked by decoding the masked tokens)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
import typer
from transformers import AutoTokenizer
from typer.testing import CliRunner

from rlmdistill.export import ExportOptions, export_dataset
from rlmdistill.export.interop_cli import register
from rlmdistill.export.openai_jsonl import openai_record, write_openai_jsonl
from rlmdistill.export.tools import load_messages
from rlmdistill.testing.trajectory_runs import write_trajectory_run
from rlmdistill.traces.rebuild import assistant_message
from rlmdistill.traces.runs import EpisodeRef, load_summaries, load_trajectory


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def _cut_first_turn(run: Path) -> str:
    """Record turn 0 of the run's first episode as cut by max_tokens; its id."""
    cut = load_summaries(run)[0].episode_id
    path = run / "trajectories" / f"{cut}.jsonl"
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    for rec in recs:
        if rec.get("record_type") == "turn" and rec["turn"] == 0:
            rec["finish_reason"] = "length"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return cut


def _export(run: Path, out: Path, tok_dir: Path, **options: object) -> Path:
    refs = [EpisodeRef(run, s.episode_id) for s in load_summaries(run)]
    export_dataset(refs, out, ExportOptions(tokenizer=str(tok_dir), **options), progress=False)  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize(
    ("source", "mode", "n_rows"),
    [
        ("collected", "trajectory", 2),
        ("collected", "turn", 4),
        ("few_shot", "trajectory", 2),
        ("truncated", "trajectory", 2),
    ],
)
def test_weights_equal_the_loss_mask(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path, source: str, mode: str, n_rows: int
) -> None:
    """The masked token runs of each row, decoded, are exactly the weight-1 assistant
    messages in order (content + ``<|im_end|>``, ChatML); the weight-0 ones have no masked
    token: in turn mode the replies before the last, with a worked example (kept as context)
    its replies; with ``truncated_turns="mask"`` the reply max_tokens cut. Sources: a real
    collected run (no worked example; one copy with its first reply marked as cut), a
    synthetic run with a worked example.
    Every line keeps the row's messages otherwise unchanged."""
    run, options, cut = collected_run, {"mode": mode}, None
    if source == "few_shot":
        run = tmp_path / "synth"
        write_trajectory_run(run, 2, n_turns=3, few_shot=True)
    elif source == "truncated":
        run = tmp_path / "run"
        shutil.copytree(collected_run, run)
        cut = _cut_first_turn(run)
        options["truncated_turns"] = "mask"
    ds_dir = _export(run, tmp_path / "ds", smollm2_dir, **options)
    r = write_openai_jsonl(ds_dir)
    assert r.path == ds_dir / "openai.jsonl"
    lines = [json.loads(x) for x in r.path.read_text(encoding="utf-8").splitlines()]
    ds = datasets.load_from_disk(str(ds_dir))
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert len(lines) == len(ds) == r.n_rows == n_rows
    n_on = n_off = 0
    for line, row in zip(lines, ds, strict=True):
        decoded = [tok.decode(row["input_ids"][a:b]) for a, b in _runs(row["assistant_masks"])]
        msgs = line["messages"]
        on = [m["content"] + "<|im_end|>" for m in msgs if m.get("weight") == 1]
        assert decoded == on
        off = [m for m in msgs if m.get("weight") == 0]
        if source == "few_shot" or row["turn"] > 0:
            assert off  # the worked example, earlier replies in turn mode: never trained
        elif row["episode_id"] == cut:  # truncated_turns=mask: the cut reply is context
            first = assistant_message(load_trajectory(run, cut).turns[0]).content
            assert [m["content"] for m in off] == [first]
        else:
            assert not off
        assert all(m["role"] == "assistant" for m in msgs if "weight" in m)
        assert all("weight" in m for m in msgs if m["role"] == "assistant")
        assert [{k: v for k, v in m.items() if k != "weight"} for m in msgs] == load_messages(row)
        n_on, n_off = n_on + len(on), n_off + len(off)
    assert (r.n_weighted, r.n_unweighted) == (n_on, n_off)
    if mode == "turn":
        assert all(sum(m.get("weight", 0) for m in x["messages"]) == 1 for x in lines)
    else:  # every root reply of the trajectory is trained, but a cut one
        n_turns = sum(len(load_trajectory(run, x["episode_id"]).turns) for x in ds)
        assert n_on == n_turns - (cut is not None)


def test_tool_style_arguments_are_json_strings(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    """Tool style: tool-call arguments become the JSON string of the OpenAI wire format, the
    ``tools`` schema rides along, tool messages carry no weight."""
    ds_dir = _export(collected_run, tmp_path / "ds", smollm2_dir, style="tools")
    out = tmp_path / "ft.jsonl"
    write_openai_jsonl(ds_dir, out)
    rows = list(datasets.load_from_disk(str(ds_dir)))
    for text, row in zip(out.read_text().splitlines(), rows, strict=True):
        line = json.loads(text)
        assert line["tools"][0]["function"]["name"] == "repl"
        calls = [c for m in line["messages"] for c in m.get("tool_calls") or []]
        theirs = [c for m in load_messages(row) for c in m.get("tool_calls") or []]
        assert calls and len(calls) == len(theirs)
        for c, t in zip(calls, theirs, strict=True):
            assert isinstance(c["function"]["arguments"], str)
            assert json.loads(c["function"]["arguments"]) == t["function"]["arguments"]
        assert all("weight" not in m for m in line["messages"] if m["role"] == "tool")


def test_dataset_without_weights_is_refused_naming_the_fix() -> None:
    """A row of a dataset exported before per-message weights: refused, never guessed."""
    row = {"messages_json": json.dumps([{"role": "assistant", "content": "x"}])}
    with pytest.raises(ValueError, match=r"no message_weights column.*export it again"):
        openai_record(row, "datasets/old row 0")
    with pytest.raises(ValueError, match="2 message_weights for 1 messages"):
        openai_record({**row, "message_weights": [1, 0]})


def test_cli_writes_and_refuses_to_overwrite(
    collected_run: Path, smollm2_dir: Path, tmp_path: Path
) -> None:
    ds_dir = _export(collected_run, tmp_path / "ds", smollm2_dir)
    app = typer.Typer()
    register(app)
    first = CliRunner().invoke(app, ["export-openai", str(ds_dir)])
    assert first.exit_code == 0, first.output
    assert "2 rows ->" in first.output
    again = CliRunner().invoke(app, ["export-openai", str(ds_dir)])
    assert again.exit_code == 2 and "exists" in again.output
    none = CliRunner().invoke(app, ["export-openai", str(tmp_path / "nope")])
    assert none.exit_code == 2 and "no exported dataset" in none.output
