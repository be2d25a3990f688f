"""SFT stage: dataset checks (cases S2, S3, S7, S8), LoRA training on a tiny random Llama with
the real SmolLM2 tokenizer, adapter save/reload, resume, merge, CLI and 2-process accelerate."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlmdistill.sft.config import SFTConfig
from rlmdistill.sft.data import (
    DatasetError,
    chat_template_sha256,
    check_rows,
    check_tokenizer,
    load_export,
    vocab_sha256,
)
from rlmdistill.sft.train import SFTError, SFTManifest, TrainLogRecord, resolve_precision, train
from rlmdistill.traces.store import read_jsonl

SYSTEM = "You are the root of a due-diligence agent. Write ```repl``` code."
CONVERSATIONS = [
    [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find the assignment clause in the room."},
        {"role": "assistant", "content": "```repl\nhits = search('assign')\nprint(hits)\n```"},
        {"role": "user", "content": "['contracts/a.txt:120']"},
        {"role": "assistant", "content": "```repl\nFINAL('Assignment needs consent.')\n```"},
    ],
    [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "List the documents."},
        {"role": "assistant", "content": "```repl\nprint(list_documents())\n```"},
    ],
]


def render_row(tokenizer: Any, messages: list[dict[str, str]], **meta: Any) -> dict[str, Any]:
    """One contract-format row: one full render (S7), mask = assistant content + <|im_end|>."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans, cursor = [], 0
    for m in messages:
        if m["role"] != "assistant":
            continue
        head = "<|im_start|>assistant\n"
        start = text.index(head + m["content"] + "<|im_end|>", cursor) + len(head)
        end = start + len(m["content"]) + len("<|im_end|>")
        spans.append((start, end))
        cursor = end
    mask = [int(any(s <= a and b <= e for s, e in spans)) for a, b in enc["offset_mapping"]]
    ids = list(enc["input_ids"])
    row = {
        "messages": messages,
        "input_ids": ids,
        "assistant_masks": mask,
        "n_tokens": len(ids),
        "n_supervised": sum(mask),
        "episode_id": "ep0",
        "run_id": "run0",
        "room_id": "room0",
        "task_id": "task0",
        "turn": -1,
        "pass_rate": 1.0,
        "coverage": 0.5,
    }
    row.update(meta)
    return row


def write_dataset(
    path: Path, tokenizer: Any, rows: list[dict[str, Any]], **tokenizer_info: Any
) -> Path:
    """Save ``rows`` like the export stage does: ``save_to_disk`` + ``export.json``."""
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    info = {
        "spec": "smollm2-135m",
        "path": "smollm2-135m",
        "name_or_path": "smollm2-135m",
        "chat_template_source": "tokenizer",
        "chat_template_sha256": chat_template_sha256(tokenizer),
        "assistant_header": "<|im_start|>assistant\n",
        "closer": "<|im_end|>",
        "tool_closer": None,
        "end_of_turn": ["<|im_end|>"],
        "default_system": None,
        "generation_markers": False,
        "vocab_size": len(tokenizer),
        "vocab_sha256": vocab_sha256(tokenizer),
        **tokenizer_info,
    }
    stats = {"n": 0, "total": 0, "min": None, "mean": None, "p50": None, "p95": None, "max": None}
    manifest = {  # every field export.json has (rlmdistill.traces.artefacts.ExportManifest)
        "created_at": "2025-01-01T00:00:00+00:00",
        "tokenizer": info,
        "mode": "whole",
        "style": "repl",
        "system_prompt_source": "collected",
        "system_prompt_sha256": None,
        "few_shot_kept": True,
        "max_length": 4096,
        "truncation": "drop",
        "prefill_supervised": False,
        "min_supervised_tokens": 1,
        "default_system": "",
        "n_examples": len(rows),
        "n_episodes": 2,
        "dropped": {},
        "dropped_items": [],
        "n_truncated": 0,
        "n_appended_closers": 0,
        "tokens": stats,
        "supervised": stats,
        "sources": [{"run_dir": "runs/x", "run_id": "run0", "episode_ids": ["ep0", "ep1"]}],
        "options": {},
        "versions": {},
        "git_commit": None,
        "git_dirty": None,
    }
    (path / "export.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_base(tiny_llama_dir: Path) -> Path:
    """A tiny random Llama (2 layers, hidden 64) with the real SmolLM2 tokenizer and vocab."""
    return tiny_llama_dir


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory, smollm2_tokenizer: Any) -> Path:
    rows = [
        render_row(smollm2_tokenizer, conv, episode_id=f"ep{i}")
        for i, conv in enumerate(CONVERSATIONS)
    ]
    return write_dataset(tmp_path_factory.mktemp("ds") / "tiny", smollm2_tokenizer, rows)


def fast_config(dataset: Path, base: Path, out: Path, **kw: Any) -> SFTConfig:
    fields: dict[str, Any] = {
        "dataset": dataset,
        "base": str(base),
        "out": out,
        "learning_rate": 5e-3,
        "lr_scheduler_type": "constant",
        "warmup_ratio": 0.0,
        "max_steps": 12,
        "per_device_train_batch_size": 2,
        "lora_r": 8,
        "lora_dropout": 0.0,
        "save_steps": 6,
        **kw,
    }
    return SFTConfig(**fields)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path, tiny_dataset: Path) -> Any:
    out = tmp_path_factory.mktemp("adapters") / "a"
    result = train(fast_config(tiny_dataset, tiny_base, out), progress=False)
    return result


# ------------------------------------------------------------------ dataset checks
def test_masks_cover_assistant_content_and_end_of_turn_case_s3(smollm2_tokenizer: Any) -> None:
    row = render_row(smollm2_tokenizer, CONVERSATIONS[1])
    supervised = [t for t, m in zip(row["input_ids"], row["assistant_masks"], strict=True) if m]
    assert smollm2_tokenizer.decode(supervised) == (
        "```repl\nprint(list_documents())\n```<|im_end|>"
    )


def test_zero_supervised_row_refused_case_s2(
    tmp_path: Path, smollm2_tokenizer: Any, tiny_base: Path
) -> None:
    good = render_row(smollm2_tokenizer, CONVERSATIONS[1], episode_id="ep-good")
    bad = render_row(smollm2_tokenizer, CONVERSATIONS[1], episode_id="ep-empty")
    bad["assistant_masks"] = [0] * len(bad["input_ids"])
    ds_dir = write_dataset(tmp_path / "ds", smollm2_tokenizer, [good, bad])
    cfg = fast_config(ds_dir, tiny_base, tmp_path / "out", length_policy="drop")
    with pytest.raises(DatasetError, match=r"row 1 \(episode_id=ep-empty.*no supervised token"):
        train(cfg, progress=False)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_too_long_row_refused_or_dropped_never_truncated(
    tmp_path: Path, smollm2_tokenizer: Any
) -> None:
    rows = [
        render_row(smollm2_tokenizer, conv, episode_id=f"ep{i}")
        for i, conv in enumerate(CONVERSATIONS)
    ]
    ds, _, _ = load_export(write_dataset(tmp_path / "ds", smollm2_tokenizer, rows))
    limit = len(rows[1]["input_ids"])  # row 0 is longer
    assert len(rows[0]["input_ids"]) > limit
    with pytest.raises(DatasetError, match=rf"row 0 \(episode_id=ep0.*> max_length {limit}"):
        check_rows(ds, smollm2_tokenizer, tmp_path, max_length=limit, policy="refuse")
    check = check_rows(ds, smollm2_tokenizer, tmp_path, max_length=limit, policy="drop")
    assert check.kept == [1]
    assert check.dropped == {"too_long": 1}
    assert check.n_tokens == limit
    assert check.n_supervised == rows[1]["n_supervised"]


def test_cut_last_turn_refused_or_dropped(tmp_path: Path, smollm2_tokenizer: Any) -> None:
    whole = render_row(smollm2_tokenizer, CONVERSATIONS[0], episode_id="ep-whole")
    cut = render_row(smollm2_tokenizer, CONVERSATIONS[0], episode_id="ep-cut")
    n = len(cut["input_ids"]) - 4  # inside the last assistant turn, before <|im_end|>
    cut.update(input_ids=cut["input_ids"][:n], assistant_masks=cut["assistant_masks"][:n])
    cut["n_tokens"] = n
    ds, _, _ = load_export(write_dataset(tmp_path / "ds", smollm2_tokenizer, [whole, cut]))
    with pytest.raises(DatasetError, match=r"row 1 \(episode_id=ep-cut.*not an end-of-turn"):
        check_rows(ds, smollm2_tokenizer, tmp_path, max_length=None, policy="refuse")
    check = check_rows(ds, smollm2_tokenizer, tmp_path, max_length=None, policy="drop")
    assert (check.kept, check.dropped) == ([0], {"last_turn_cut": 1})


def test_end_of_turn_outside_mask_is_an_error_case_s3(
    tmp_path: Path, smollm2_tokenizer: Any
) -> None:
    row = render_row(smollm2_tokenizer, CONVERSATIONS[0])
    end = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
    first_end = next(
        k
        for k, (t, m) in enumerate(zip(row["input_ids"], row["assistant_masks"], strict=True))
        if m and t == end
    )
    row["assistant_masks"][first_end] = 0  # first assistant turn no longer supervises its stop
    ds, _, _ = load_export(write_dataset(tmp_path / "ds", smollm2_tokenizer, [row]))
    with pytest.raises(
        DatasetError, match=r"supervised turn 0 .*the model would not learn to stop"
    ):
        check_rows(ds, smollm2_tokenizer, tmp_path, max_length=None, policy="drop")


def test_trailing_newline_in_mask_is_accepted(tmp_path: Path, smollm2_tokenizer: Any) -> None:
    """TRL's *_training templates put '<|im_end|>\\n' inside the generation block."""
    row = render_row(smollm2_tokenizer, CONVERSATIONS[1])
    last = max(k for k, m in enumerate(row["assistant_masks"]) if m)
    assert smollm2_tokenizer.decode(row["input_ids"][last + 1 :]) == "\n"
    row["assistant_masks"][last + 1] = 1
    ds, _, _ = load_export(write_dataset(tmp_path / "ds", smollm2_tokenizer, [row]))
    assert check_rows(ds, smollm2_tokenizer, tmp_path, max_length=None, policy="refuse").kept == [0]


def test_tokenizer_match_by_hash_or_rerender_else_error(
    tmp_path: Path, smollm2_tokenizer: Any
) -> None:
    rows = [render_row(smollm2_tokenizer, c) for c in CONVERSATIONS]
    ds_dir = write_dataset(tmp_path / "a", smollm2_tokenizer, rows)
    ds, manifest, _ = load_export(ds_dir)
    assert check_tokenizer(ds, manifest, smollm2_tokenizer, ds_dir).method == "template_sha256"
    # Another template hash, but the ids are exactly one render with the base template.
    ds_dir = write_dataset(tmp_path / "b", smollm2_tokenizer, rows, chat_template_sha256="0" * 64)
    ds, manifest, _ = load_export(ds_dir)
    assert check_tokenizer(ds, manifest, smollm2_tokenizer, ds_dir).method == "rerender"
    # Ids that are not a render of the messages with the base tokenizer (S7).
    shifted = dict(rows[0], input_ids=[t + 1 for t in rows[0]["input_ids"]])
    ds_dir = write_dataset(tmp_path / "c", smollm2_tokenizer, [shifted], chat_template_sha256="x")
    ds, manifest, _ = load_export(ds_dir)
    with pytest.raises(DatasetError, match=r"row 0 .*differ from one full render"):
        check_tokenizer(ds, manifest, smollm2_tokenizer, ds_dir)
    ds_dir = write_dataset(tmp_path / "d", smollm2_tokenizer, rows, vocab_size=151_665)
    ds, manifest, _ = load_export(ds_dir)
    with pytest.raises(DatasetError, match="151665 tokens"):
        check_tokenizer(ds, manifest, smollm2_tokenizer, ds_dir)


def test_dataset_from_the_real_export_stage_trains(
    tmp_path: Path, smollm2_dir: Path, tiny_base: Path
) -> None:
    """Interop: `export_dataset` output (synthetic run, SmolLM2 template) passes every check
    as is and trains one step."""
    from transformers import AutoTokenizer

    from rlmdistill.export.dataset import export_dataset
    from rlmdistill.export.options import ExportOptions
    from rlmdistill.testing.trajectory_runs import write_trajectory_run
    from rlmdistill.traces.runs import EpisodeRef

    run = tmp_path / "run"
    ids = write_trajectory_run(run, 2, n_turns=2, few_shot=False)
    ds_dir = tmp_path / "ds"
    export_dataset(
        [EpisodeRef(run, i) for i in ids], ds_dir, ExportOptions(tokenizer=str(smollm2_dir))
    )
    tok = AutoTokenizer.from_pretrained(tiny_base)
    ds, manifest, _ = load_export(ds_dir)
    assert check_tokenizer(ds, manifest, tok, ds_dir).method == "template_sha256"
    check = check_rows(ds, tok, ds_dir, max_length=None, policy="refuse")
    assert check.kept == list(range(len(ds))) and check.dropped == {}
    result = train(fast_config(ds_dir, tiny_base, tmp_path / "a", max_steps=1), progress=False)
    assert result.global_step == 1 and result.n_examples == len(ds)


def test_missing_export_manifest_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    with pytest.raises(DatasetError, match=r"no export\.json"):
        load_export(tmp_path / "ds")


# --------------------------------------------------------------------- training
def test_loss_falls_and_lora_weights_change(trained: Any, tiny_base: Path) -> None:
    from safetensors.torch import load_file

    out = trained.out_dir
    assert trained.global_step == 12
    assert trained.first_loss is not None and trained.final_loss is not None
    assert trained.final_loss < trained.first_loss - 0.5, (trained.first_loss, trained.final_loss)
    log = [TrainLogRecord.model_validate(r) for r in read_jsonl(out / "train_log.jsonl").records]
    assert [r.step for r in log] == list(range(1, 13))
    assert log[0].loss == pytest.approx(trained.first_loss)
    assert all(r.tokens_per_s > 0 and r.learning_rate == pytest.approx(5e-3) for r in log)
    n_tokens = sum(len(r) for r in (render_row_ids(tiny_base, c) for c in CONVERSATIONS))
    assert [r.tokens_seen for r in log] == [n_tokens * s for s in range(1, 13)]
    assert all(r.time.tzinfo is not None for r in log)
    weights = load_file(out / "adapter_model.safetensors")
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and all(float(v.abs().max()) > 0 for v in lora_b)  # B starts at zero
    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert manifest.status == "completed"
    assert (manifest.n_examples, manifest.global_step, manifest.world_size) == (2, 12, 1)
    assert manifest.n_supervised == sum(sum(render_row_mask(tiny_base, c)) for c in CONVERSATIONS)
    # the precision bf16: auto picks on this machine (bf16 only where the CPU runs it natively)
    expected = "bf16" if resolve_precision("auto").bf16 else "float32"
    assert manifest.precision == expected and manifest.device == "cpu"
    assert manifest.sources[0]["run_id"] == "run0"
    assert (
        manifest.export_sha256
        == hashlib.sha256((Path(manifest.dataset_path) / "export.json").read_bytes()).hexdigest()
    )
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-12",
        "checkpoint-6",
    ]


def render_row_ids(base: Path, conv: list[dict[str, str]]) -> list[int]:
    from transformers import AutoTokenizer

    return list(render_row(AutoTokenizer.from_pretrained(base), conv)["input_ids"])


def render_row_mask(base: Path, conv: list[dict[str, str]]) -> list[int]:
    from transformers import AutoTokenizer

    return list(render_row(AutoTokenizer.from_pretrained(base), conv)["assistant_masks"])


def test_adapter_reload_gives_identical_logits_and_merge_matches(
    trained: Any, tiny_base: Path, tmp_path: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlmdistill.compat import library_warning_filter
    from rlmdistill.sft.merge import merge_adapter

    ids = torch.tensor([render_row_ids(tiny_base, CONVERSATIONS[0])])

    def logits(adapter: Path | None) -> torch.Tensor:
        model: Any = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
        if adapter is not None:
            with library_warning_filter():  # peft reads a deprecated transformers property
                model = PeftModel.from_pretrained(model, adapter)
        with torch.no_grad():
            return model.eval()(input_ids=ids).logits

    final = logits(trained.out_dir)
    assert torch.equal(final, logits(trained.out_dir / "checkpoints" / "checkpoint-12"))
    assert not torch.allclose(final, logits(None), atol=1e-3)  # the adapter changed the model
    merged_dir = merge_adapter(trained.out_dir, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(merged.eval()(input_ids=ids).logits, final, atol=1e-4)
    assert json.loads((merged_dir / "rlmdistill_merge.json").read_text())["adapter"] == str(
        trained.out_dir
    )
    with pytest.raises(SFTError, match="already holds a checkpoint"):
        merge_adapter(trained.out_dir, merged_dir)


def test_local_client_loads_base_plus_adapter(trained: Any, tiny_base: Path) -> None:
    """`local:BASE+adapter=DIR` serves the tuned root (models/local.py, unchanged)."""
    from rlmdistill.models.base import Message, Sampling
    from rlmdistill.models.local import LocalChatClient

    msgs = [Message(role="user", content="Find the assignment clause in the room.")]
    greedy = Sampling(temperature=0.0, max_tokens=12)
    with (
        LocalChatClient(tiny_base, dtype="float32") as plain,
        LocalChatClient(tiny_base, dtype="float32", adapter=trained.out_dir) as tuned,
    ):
        a, b = plain.chat(msgs, greedy), tuned.chat(msgs, greedy)
    assert a.token_ids != b.token_ids


def test_resume_continues_step_count(tmp_path: Path, tiny_base: Path, tiny_dataset: Path) -> None:
    out = tmp_path / "a"
    first = train(
        fast_config(tiny_dataset, tiny_base, out, max_steps=3, save_steps=1), progress=False
    )
    assert first.global_step == 3
    with pytest.raises(SFTError, match="already holds an SFT run"):
        train(fast_config(tiny_dataset, tiny_base, out, max_steps=4), progress=False)
    shutil.rmtree(out / "checkpoints" / "checkpoint-3")  # as if killed during step 3
    second = train(
        fast_config(tiny_dataset, tiny_base, out, max_steps=4, save_steps=1),
        resume=True,
        progress=False,
    )
    assert second.global_step == 4
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-2")
    log = read_jsonl(out / "train_log.jsonl").records
    assert [r["step"] for r in log] == [1, 2, 3, 3, 4]  # step 3 logged again after resume
    per_step = log[0]["tokens_seen"]
    assert [r["tokens_seen"] for r in log] == [per_step * s for s in (1, 2, 3, 3, 4)]
    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert manifest.global_step == 4 and manifest.status == "completed"
    assert [Path(p).name for p in manifest.resumed_from] == ["checkpoint-2"]


def test_resume_without_checkpoint_is_refused(
    tmp_path: Path, tiny_base: Path, tiny_dataset: Path
) -> None:
    with pytest.raises(SFTError, match="no checkpoint"):
        train(fast_config(tiny_dataset, tiny_base, tmp_path / "x"), resume=True, progress=False)


def test_target_module_error_lists_valid_names(
    tmp_path: Path, tiny_base: Path, tiny_dataset: Path
) -> None:
    cfg = fast_config(tiny_dataset, tiny_base, tmp_path / "o", target_modules=["q_proj", "qkv"])
    with pytest.raises(SFTError, match=r"\['qkv'\].*valid names: down_proj, gate_proj, k_proj"):
        train(cfg, progress=False)


def test_packing_restarts_positions_and_isolates_examples_case_s8(tiny_base: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    a, b = list(range(100, 110)), list(range(200, 210))
    collator = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    batch = collator([{"input_ids": a, "seq_lengths": [10]}, {"input_ids": b, "seq_lengths": [10]}])
    assert batch["position_ids"].tolist() == [list(range(10)) + list(range(10))]
    assert "attention_mask" not in batch
    assert batch["labels"][0, 10].item() == -100  # no loss across the boundary
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
        ).logits
        alone = [model(input_ids=torch.tensor([x])).logits for x in (a, b)]
    assert torch.allclose(packed[:, :10], alone[0], atol=1e-5)
    assert torch.allclose(packed[:, 10:], alone[1], atol=1e-5)  # attention never crossed


def test_training_with_packing(tmp_path: Path, tiny_base: Path, tiny_dataset: Path) -> None:
    cfg = fast_config(tiny_dataset, tiny_base, tmp_path / "p", packing=True, max_length=256)
    result = train(cfg.model_copy(update={"max_steps": 2}), progress=False)
    assert result.global_step == 2
    log = read_jsonl(tmp_path / "p" / "train_log.jsonl").records
    n_tokens = sum(len(render_row_ids(tiny_base, c)) for c in CONVERSATIONS)
    assert log[0]["tokens_seen"] == n_tokens  # both examples in one padding-free row


# ------------------------------------------------------------- held-out eval loss
TOPICS = ["assignment", "change of control", "exclusivity", "audit", "termination"]


def episode_rows(tokenizer: Any, n_episodes: int) -> list[dict[str, Any]]:
    """Two rows (turns) per episode, each episode about its own clause."""
    rows = []
    for e in range(n_episodes):
        topic = TOPICS[e % len(TOPICS)]
        conv = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Find the {topic} clause ({e})."},
            {"role": "assistant", "content": f"```repl\nprint(search('{topic}'))\n```"},
            {"role": "user", "content": f"['contracts/{e}.txt:{40 * e}']"},
            {
                "role": "assistant",
                "content": f"```repl\nFINAL('The {topic} clause is in {e}.')\n```",
            },
        ]
        for turn, end in enumerate((3, 5)):
            rows.append(render_row(tokenizer, conv[:end], episode_id=f"ep{e}", turn=turn))
    return rows


def test_split_eval_holds_out_whole_episodes_deterministically(smollm2_tokenizer: Any) -> None:
    import datasets

    from rlmdistill.sft.data import split_eval

    ds = datasets.Dataset.from_list(episode_rows(smollm2_tokenizer, 5))
    a = split_eval(ds, list(range(10)), 0.4, seed=0)
    assert a == split_eval(ds, list(range(10)), 0.4, seed=0)  # same seed, same split
    assert len(a.eval_episodes) == 2 and len(a.eval) == 4 and len(a.train) == 6
    eps = ds["episode_id"]
    assert {eps[i] for i in a.eval} == set(a.eval_episodes)
    assert not {eps[i] for i in a.train} & set(a.eval_episodes)  # no episode on both sides
    assert a.note.startswith("eval loss on 2 of 5 episodes held out (4 rows")
    seeds = {tuple(split_eval(ds, list(range(10)), 0.4, seed=k).eval_episodes) for k in range(6)}
    assert len(seeds) > 1  # the seed chooses which episodes
    off = split_eval(ds, list(range(10)), None, seed=0)  # auto: 5 episodes < 10
    assert (off.train, off.eval, off.fraction) == (list(range(10)), [], 0.0)
    assert off.note.startswith("eval loss off: 5 episode(s) < 10 (eval_fraction auto)")
    assert split_eval(ds, list(range(10)), 0.0, seed=0).note == "eval loss off (eval_fraction: 0)"
    one = split_eval(ds, [0, 1], 0.5, seed=0)  # one episode: nothing to hold out
    assert one.eval == [] and "at least 2" in one.note
    big = datasets.Dataset.from_list(episode_rows(smollm2_tokenizer, 20))
    auto = split_eval(big, list(range(40)), None, seed=0)
    assert (len(auto.eval_episodes), len(auto.eval), auto.fraction) == (2, 4, 0.1)


def test_eval_loss_recorded_per_epoch_on_held_out_episodes(
    tmp_path: Path, tiny_base: Path, smollm2_tokenizer: Any
) -> None:
    """5 episodes x 2 turns, eval_fraction 0.4: 2 episodes held out, eval loss before training
    and after each of 2 epochs; the step-0 value equals the base model's assistant-only loss
    on the held-out rows computed here by hand (same masks as training). With activation
    checkpointing on, no FutureWarning about gradient/activation checkpointing is raised."""
    import math
    import warnings

    import torch
    from transformers import AutoModelForCausalLM

    rows = episode_rows(smollm2_tokenizer, 5)
    ds_dir = write_dataset(tmp_path / "ds", smollm2_tokenizer, rows)
    cfg = fast_config(ds_dir, tiny_base, tmp_path / "a", max_steps=-1, num_train_epochs=2,
                      per_device_train_batch_size=1, eval_fraction=0.4,
                      gradient_checkpointing=True)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(cfg, progress=False)
    checkpointing = [
        str(w.message) for w in caught
        if issubclass(w.category, FutureWarning) and "checkpointing" in str(w.message)
    ]  # fmt: skip
    assert checkpointing == []
    manifest = SFTManifest.model_validate_json((tmp_path / "a" / "sft.json").read_text())
    held = set(manifest.eval_episodes)
    assert len(held) == 2 and manifest.eval_fraction == 0.4
    assert (manifest.n_examples, manifest.n_eval_examples, result.n_examples) == (6, 4, 6)
    eval_rows = [r for r in rows if r["episode_id"] in held]
    train_rows = [r for r in rows if r["episode_id"] not in held]
    assert {r["episode_id"] for r in train_rows}.isdisjoint(held)
    assert manifest.n_tokens == sum(len(r["input_ids"]) for r in train_rows)
    assert manifest.n_supervised == sum(r["n_supervised"] for r in train_rows)
    evals = manifest.eval_losses
    assert [(e.step, e.epoch) for e in evals] == [(0, 0.0), (6, 1.0), (12, 2.0)]
    assert all(math.isfinite(e.loss) and e.loss > 0 for e in evals)
    assert list(result.eval_losses) == evals and result.global_step == 12
    assert evals[-1].loss < evals[0].loss  # the held-out turns share the template and tools
    assert manifest.eval_note == result.eval_note
    assert result.eval_note.startswith("eval loss on 2 of 5 episodes held out (4 rows")

    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32).eval()
    per_row = []
    with torch.no_grad():
        for r in eval_rows:
            ids = torch.tensor([r["input_ids"]])
            labels = torch.where(torch.tensor([r["assistant_masks"]]) == 1, ids, -100)
            per_row.append(float(model(input_ids=ids, labels=labels).loss))
    assert evals[0].loss == pytest.approx(sum(per_row) / len(per_row), rel=1e-4)


def test_eval_loss_off_for_small_data_is_said(trained: Any) -> None:
    manifest = SFTManifest.model_validate_json((trained.out_dir / "sft.json").read_text())
    assert manifest.eval_losses == [] and manifest.eval_episodes == []
    assert (manifest.eval_fraction, manifest.n_eval_examples) == (0.0, 0)
    assert manifest.eval_note == trained.eval_note
    assert trained.eval_note.startswith("eval loss off: 2 episode(s) < 10 (eval_fraction auto)")


def test_cli_trains_and_merges(tmp_path: Path, tiny_base: Path, tiny_dataset: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from rlmdistill.sft.cli import register

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        "lora_r: 4\nmax_steps: 50\nlearning_rate: 0.001\nper_device_train_batch_size: 2\n"
    )
    out = tmp_path / "adapters" / "a"
    args = ["sft", "--dataset", str(tiny_dataset), "--base", str(tiny_base), "--out", str(out)]
    res = runner.invoke(app, [*args, "--config", str(cfg), "--max-steps", "1", "--lr", "0.01"])
    assert res.exit_code == 0, res.output
    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert (manifest.config["max_steps"], manifest.config["learning_rate"]) == (1, 0.01)
    assert manifest.config["lora_r"] == 4 and manifest.global_step == 1
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    res = runner.invoke(app, args)  # same --out again without --resume
    assert res.exit_code == 2 and "already holds an SFT run" in res.output
    merged = tmp_path / "merged"
    res = runner.invoke(app, ["sft", "merge", "--adapter", str(out), "--out", str(merged)])
    assert res.exit_code == 0, res.output
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()
    res = runner.invoke(
        app,
        [
            "sft",
            "--dataset",
            str(tmp_path / "nope"),
            "--base",
            str(tiny_base),
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert res.exit_code == 2 and "no such dataset folder" in res.output


def test_accelerate_two_processes_on_cpu(
    tmp_path: Path, tiny_base: Path, tiny_dataset: Path
) -> None:
    """`accelerate launch` with 2 processes (DDP, gloo on CPU) trains and writes one adapter
    (~18 s on 2 busy cores, so not marked slow)."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "ddp"
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [
        str(accelerate), "launch", "--config_file", str(repo / "examples/accelerate/ddp_cpu.yaml"),
        "-m", "rlmdistill.sft", "--dataset", str(tiny_dataset), "--base", str(tiny_base),
        "--out", str(out), "--max-steps", "3",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert (manifest.world_size, manifest.global_step, manifest.status) == (2, 3, "completed")
    assert manifest.backend == "gloo" and manifest.device == "cpu"
    log = read_jsonl(out / "train_log.jsonl").records
    assert [r["step"] for r in log] == [1, 2, 3]  # rank 0 only
    n_tokens = sum(len(render_row_ids(tiny_base, c)) for c in CONVERSATIONS)
    assert log[-1]["tokens_seen"] == 3 * n_tokens  # both ranks' tokens, one example each
    assert (out / "adapter_model.safetensors").is_file()


def test_tokenizer_larger_than_embeddings_is_refused_before_training(
    tmp_path: Path, smollm2_tokenizer: Any, tiny_dataset: Path
) -> None:
    """Issue #25 item 3: a base folder whose tokenizer has 10 more tokens than the model's
    embedding matrix (len(tokenizer) = 49152, rows = 49152 - 10 = 49142) is refused before
    training starts: both sizes named, nothing written to the output folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer
    assert len(tok) == 49152  # SmolLM2's vocabulary, no added tokens
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok) - 10,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    base = tmp_path / "short-vocab"
    LlamaForCausalLM(cfg).save_pretrained(base)
    tok.save_pretrained(base)
    out = tmp_path / "adapter"
    with pytest.raises(SFTError) as info:
        train(fast_config(tiny_dataset, base, out), progress=False)
    msg = str(info.value)
    assert "49152 tokens" in msg and "49142 rows" in msg, msg
    assert "resize the embeddings" in msg and "model's own tokenizer" in msg
    assert not (out / "train_log.jsonl").exists() and not (out / "checkpoints").exists()
