"""GRPO rollout groups (issue 22): groups, rewards, advantages and loss masks against
hand-computed values, on runs the collector made against the loopback fake server with the
real Qwen2.5 tokenizer returning vLLM-style token ids; then a few rows through TRL's GRPO loss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from datasets import load_from_disk

from rlmdistill.export.grpo import GrpoExportError, GrpoOptions, export_grpo
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.rooms.task import load_task
from rlmdistill.testing.fake_openai import FakeOpenAIServer, conversation_turn
from rlmdistill.testing.tokenizers import qwen25_tokenizer_dir
from rlmdistill.traces.runs import load_summaries, load_trajectory
from rlmdistill.traces.schema import Verdict
from rlmdistill.traces.store import append_records

ROOT = [
    "```repl\ndocs = list_documents()\nprint(len(docs))\n```",
    "```repl\nFINAL('# Memo\\nEvery document was listed.')\n```",
]


def _handler(req: dict[str, Any]) -> str:
    if req["model"].startswith("root"):
        return ROOT[min(conversation_turn(req)[1], len(ROOT) - 1)]
    return "No clause."


@pytest.fixture(scope="module")
def qwen_tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen25_tokenizer_dir())


def _collect(
    room: Path, out: Path, tok: Any, root_name: str, episodes: int, handler: Any = _handler
) -> Path:
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect

    with FakeOpenAIServer(handler, tokenizer=tok, models=[root_name, "sub"]) as server:
        root = OpenAIChatClient(
            root_name, server.base_url, api_key="x", max_retries=0, token_ids=True
        )
        sub = OpenAIChatClient("sub", server.base_url, api_key="x", max_retries=0)
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:{root_name}@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=episodes,
            limits=EpisodeLimits(max_turns=3),
        )
        collect(cfg, out, root, sub, progress=False)
    return out


def _grade(run: Path, room: Path, passes: dict[int, int]) -> dict[str, float]:
    """Hand-set verdicts: episode with sample index k passes the first ``passes[k]`` criteria.

    Returns the expected pass rate per episode id."""
    criteria = load_task(room / "task.json").criteria
    expected: dict[str, float] = {}
    records = []
    for s in load_summaries(run):
        n_pass = passes[s.sample_index]
        expected[s.episode_id] = n_pass / len(criteria)
        for i, c in enumerate(criteria):
            records.append(
                Verdict(
                    episode_id=s.episode_id,
                    grader="hand",
                    grader_version="1",
                    criterion_id=c.id,
                    verdict="PASS" if i < n_pass else "FAIL",
                    reason="hand-set for the test",
                    memo_sha256=s.memo_sha256,
                )
            )
    append_records(run / "verdicts" / "hand.jsonl", records)
    return expected


@pytest.fixture(scope="module")
def graded_runs(
    tmp_path_factory: pytest.TempPathFactory, cuad_room3: Path, qwen_tok: Any
) -> tuple[Path, Path, dict[str, float], int]:
    base = tmp_path_factory.mktemp("grpo")
    n = len(load_task(cuad_room3 / "task.json").criteria)
    a = _collect(cuad_room3, base / "a", qwen_tok, "root-a", 4)
    b = _collect(cuad_room3, base / "b", qwen_tok, "root-b", 2)
    # root a: sample 3 passes every criterion, the others none -> rewards 0, 0, 0, 1
    expected = _grade(a, cuad_room3, {0: 0, 1: 0, 2: 0, 3: n})
    # root b: both pass one criterion -> a zero-variance group
    expected |= _grade(b, cuad_room3, {0: 1, 1: 1})
    return a, b, expected, n


def test_groups_rewards_and_advantages_by_hand(graded_runs: Any, tmp_path: Path) -> None:
    a, b, expected, n = graded_runs
    m = export_grpo([a, b], tmp_path / "ds", GrpoOptions())
    assert (m.n_groups, m.n_zero_variance_groups, m.n_rows, m.dropped_episodes) == (2, 1, 6, {})
    rows = list(load_from_disk(str(tmp_path / "ds")))
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_group.setdefault(r["group_id"], []).append(r)
        assert r["reward"] == pytest.approx(expected[r["episode_id"]])
    big = next(g for g in by_group.values() if len(g) == 4)
    small = next(g for g in by_group.values() if len(g) == 2)
    assert {r["root"].split("@")[0] for r in big} == {"openai:root-a"}
    # rewards 0, 0, 0, 1: mean 0.25, sample std 0.5 -> advantages -0.5 (x3) and 1.5
    adv = {r["reward"]: r["advantage"] for r in big}
    assert adv == {0.0: pytest.approx(-0.5), 1.0: pytest.approx(1.5)}
    assert sorted(r["advantage"] for r in big) == pytest.approx([-0.5, -0.5, -0.5, 1.5])
    assert all(r["group_mean"] == 0.25 and r["group_std"] == 0.5 for r in big)
    # root b: both 1/n -> zero variance, advantages exactly 0
    assert [r["advantage"] for r in small] == [0.0, 0.0]
    assert all(r["reward"] == pytest.approx(1 / n) for r in small)
    one = next(r for r in small)
    assert one["criterion_labels"] == ["PASS"] + ["FAIL"] * (n - 1)
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "zero-variance groups: 1" in card and "(r - mean) / max(std, 0.01)" in card
    assert json.loads((tmp_path / "ds" / "grpo.json").read_text())["n_groups_exported"] == 2


def test_episode_row_mask_covers_exactly_what_the_root_generated(
    graded_runs: Any, tmp_path: Path, qwen_tok: Any
) -> None:
    a, _, _, _ = graded_runs
    export_grpo([a], tmp_path / "ds", GrpoOptions())
    row = next(iter(load_from_disk(str(tmp_path / "ds"))))
    traj = load_trajectory(a, row["episode_id"])
    t0, t1 = traj.turns
    ids, mask, lps = row["completion_ids"], row["loss_mask"], row["logprobs"]
    assert len(ids) == len(mask) == len(lps)
    c0, c1 = t0.tokens.completion_ids, t1.tokens.completion_ids  # type: ignore[union-attr]
    # hand layout: turn 0's generated ids, the harness's ids before turn 1, turn 1's ids
    n0, n1 = len(c0), len(c1)  # type: ignore[arg-type]
    gap = len(ids) - n0 - n1
    assert mask == [1] * n0 + [0] * gap + [1] * n1
    assert qwen_tok.decode(ids[:n0]) == ROOT[0] + "<|im_end|>"
    assert qwen_tok.decode(ids[n0 + gap :]) == ROOT[1] + "<|im_end|>"
    # what the root did not generate: newline, the REPL observation as the user turn, header
    assert qwen_tok.decode(ids[n0 : n0 + gap]) == (
        f"\n<|im_start|>user\n{t0.observation}<|im_end|>\n<|im_start|>assistant\n"
    )
    # logprobs: the server's -0.5 per generated id, 0.0 under mask 0
    assert lps == [-0.5] * n0 + [0.0] * gap + [-0.5] * n1
    rendered = qwen_tok.apply_chat_template(
        [m.model_dump() for m in traj.start.initial_messages],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert row["prompt_ids"] == qwen_tok(rendered, add_special_tokens=False)["input_ids"]


def test_tail_row_starts_after_a_reply_the_template_retokenised(
    tmp_path: Path, cuad_room3: Path, qwen_tok: Any
) -> None:
    """The root's first reply comes back with ``print`` sampled as ``pr`` + ``int`` (ids 649,
    396; the tokenizer's own id is 1350). Turn 1's prompt re-encodes that reply as 1350, so
    the episode is no single sequence: the episode row refuses it, the tail row is turn 1
    alone (its exact prompt, its generated ids, all mask 1) and says 1 turn was left out. On
    an episode with canonical ids the tail row is the whole episode row."""
    from rlmdistill.export.grpo import episode_token_row, episode_token_tail
    from rlmdistill.testing.fake_openai import FakeReply
    from rlmdistill.traces.tokens import prompt_ids

    canonical = [*qwen_tok.encode(ROOT[0]), qwen_tok.convert_tokens_to_ids("<|im_end|>")]
    at = canonical.index(1350)
    odd = [*canonical[:at], 649, 396, *canonical[at + 1 :]]
    assert qwen_tok.decode(odd) == qwen_tok.decode(canonical)  # same text, other ids

    def handler(req: dict[str, Any]) -> Any:
        if not req["model"].startswith("root"):
            return "No clause."
        turn = conversation_turn(req)[1]
        return FakeReply(text=ROOT[0], token_ids=odd) if turn == 0 else ROOT[1]

    out = _collect(cuad_room3, tmp_path / "odd", qwen_tok, "root-a", 1, handler)
    (summary,) = load_summaries(out)
    turns = load_trajectory(out, summary.episode_id).turns
    assert turns[0].tokens.completion_ids == odd  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="turn 1: its prompt does not extend"):
        episode_token_row(turns)
    row, left_out = episode_token_tail(turns)
    assert left_out == 1
    p1 = prompt_ids(turns)[1]
    c1 = list(turns[1].tokens.completion_ids)  # type: ignore[union-attr]
    assert row["prompt_ids"] == p1 and 1350 in p1  # turn 0's reply as the template re-encoded it
    assert row["completion_ids"] == c1 and row["loss_mask"] == [1] * len(c1)
    assert row["logprobs"] == [-0.5] * len(c1)

    a = _collect(cuad_room3, tmp_path / "plain", qwen_tok, "root-a", 1)
    (summary,) = load_summaries(a)
    turns = load_trajectory(a, summary.episode_id).turns
    assert episode_token_tail(turns) == (episode_token_row(turns), 0)


def test_turn_rows_share_the_episode_advantage(graded_runs: Any, tmp_path: Path) -> None:
    a, _, _, _ = graded_runs
    m = export_grpo([a], tmp_path / "ds", GrpoOptions(unit="turn"))
    rows = list(load_from_disk(str(tmp_path / "ds")))
    assert m.n_rows == 8 and {r["turn"] for r in rows} == {0, 1}
    for r in rows:
        assert r["loss_mask"] == [1] * len(r["completion_ids"])
    per_ep = {}
    for r in rows:
        per_ep.setdefault(r["episode_id"], set()).add(r["advantage"])
    assert all(len(v) == 1 for v in per_ep.values())


def test_drop_zero_variance_and_unscaled(graded_runs: Any, tmp_path: Path) -> None:
    a, b, _, _ = graded_runs
    m = export_grpo([a, b], tmp_path / "ds", GrpoOptions(drop_zero_variance=True, scale="none"))
    assert m.n_groups_exported == 1 and m.dropped_episodes == {"group_dropped": 2}
    rows = list(load_from_disk(str(tmp_path / "ds")))
    assert sorted(r["advantage"] for r in rows) == pytest.approx([-0.25, -0.25, -0.25, 0.75])


def test_no_grader_is_a_clear_error(graded_runs: Any, tmp_path: Path) -> None:
    a, _, _, _ = graded_runs
    with pytest.raises(GrpoExportError, match="grader 'reference' has no verdicts"):
        export_grpo([a], tmp_path / "ds", GrpoOptions(grader="reference"))


def test_rows_feed_trls_grpo_loss(graded_runs: Any, tmp_path: Path, qwen_tok: Any) -> None:
    """Four exported rows, padded into TRL's GRPO batch (completion_mask = real ids, tool_mask =
    loss_mask, advantages, old_per_token_logps = logprobs), through
    ``GRPOTrainer._compute_loss`` of a tiny random Qwen2 with the Qwen2.5 vocabulary."""
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    a, _, _, _ = graded_runs
    export_grpo([a], tmp_path / "ds", GrpoOptions())
    rows = list(load_from_disk(str(tmp_path / "ds")))
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(qwen_tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    )
    model = Qwen2ForCausalLM(cfg)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=max(len(r["completion_ids"]) for r in rows),
        loss_type="grpo",
        use_cpu=True,
        report_to=[],
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["x"] * 4}),
        processing_class=qwen_tok,
    )
    pad = qwen_tok.pad_token_id
    P = max(len(r["prompt_ids"]) for r in rows)
    C = max(len(r["completion_ids"]) for r in rows)

    def left(x: list[int], n: int, v: int) -> list[int]:
        return [v] * (n - len(x)) + x

    def right(x: list[Any], n: int, v: Any) -> list[Any]:
        return x + [v] * (n - len(x))

    inputs = {
        "prompt_ids": torch.tensor([left(r["prompt_ids"], P, pad) for r in rows]),
        "prompt_mask": torch.tensor([left([1] * len(r["prompt_ids"]), P, 0) for r in rows]),
        "completion_ids": torch.tensor([right(r["completion_ids"], C, pad) for r in rows]),
        "completion_mask": torch.tensor(
            [right([1] * len(r["completion_ids"]), C, 0) for r in rows]
        ),
        "tool_mask": torch.tensor([right(r["loss_mask"], C, 0) for r in rows]),
        "advantages": torch.tensor([r["advantage"] for r in rows]),
        "old_per_token_logps": torch.tensor([right(r["logprobs"], C, 0.0) for r in rows]),
        "num_items_in_batch": torch.tensor(float(sum(sum(r["loss_mask"]) for r in rows))),
    }
    trainer.model.eval()
    loss = trainer._compute_loss(trainer.model, inputs)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grad = trainer.model.get_input_embeddings().weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
