"""The continuous engine of LocalChatClient (rlmdistill.models.continuous) on the real
SmolLM2-135M checkpoint in float32: requests that join a running batch and leave it get the
static engine's greedy ids, and logprobs equal to one unbatched forward pass over prompt +
reply; a seeded sample does not depend on its batch company; models it cannot run exactly
fall back to the static engine."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rlmdistill.models.base import ChatResult, Message, Sampling
from rlmdistill.models.local import ENGINE_ENV, LocalChatClient


def _staggered(client: LocalChatClient, n: int) -> list[ChatResult]:
    """``n`` greedy requests of different lengths, the k-th sent 0.3 k s after the first, so
    later ones join a batch that is running and earlier ones leave it first."""
    out: list[ChatResult | None] = [None] * n

    def go(k: int) -> None:
        time.sleep(0.3 * k)
        prompt = f"Write a Python function number {k} that " + "adds numbers " * (5 * k)
        out[k] = client.chat(
            [Message(role="user", content=prompt)],
            Sampling(temperature=0.0, top_p=1.0, max_tokens=12 + 8 * k),
        )

    threads = [threading.Thread(target=go, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


def test_joining_and_leaving_rows_decode_like_static_and_unbatched(smollm2_dir: Path) -> None:
    import torch

    with LocalChatClient(smollm2_dir, dtype="float32", engine="static", max_batch=3) as c:
        static = _staggered(c, 5)
    with LocalChatClient(smollm2_dir, dtype="float32", engine="continuous", max_batch=3) as c:
        cont = _staggered(c, 5)
        # rows joined a running batch: some decode step ran 3 rows; every prompt id was
        # prefilled once, padding excluded
        assert max(c.batch_sizes) == 3
        assert c.batcher.prefill_tokens == sum(r.usage.prompt_tokens for r in cont)
        assert c.batcher.row_steps > c.batcher.decode_steps
        model = c.model
        for s, k in zip(static, cont, strict=True):
            assert k.token_ids == s.token_ids and k.text == s.text
            assert k.finish_reason == s.finish_reason and k.usage == s.usage
        # each generated id's logprob = the log-softmax of one unbatched pass over prompt + reply
        for r in cont:
            assert r.token_ids is not None and r.logprobs is not None and r.prompt_token_ids
            ids = torch.tensor([r.prompt_token_ids + r.token_ids])
            with torch.inference_mode():
                logp = torch.log_softmax(model(ids).logits.float(), dim=-1)[0]
            n = len(r.prompt_token_ids)
            ref = [logp[n - 1 + i, t].item() for i, t in enumerate(r.token_ids)]
            assert r.logprobs == pytest.approx(ref, abs=1e-4)


def test_a_seeded_sample_does_not_depend_on_its_batch_company(smollm2_dir: Path) -> None:
    seeded = Sampling(temperature=1.0, top_p=0.9, max_tokens=16, seed=1234)
    ask = [Message(role="user", content="Tell me a word.")]
    with LocalChatClient(smollm2_dir, dtype="float32", engine="continuous") as c:
        alone = c.chat(ask, seeded)
        others = [[Message(role="user", content=f"Count to {k}.")] for k in range(3)]
        company = Sampling(temperature=0.7, top_p=0.95, max_tokens=24, seed=7)
        futures = [c._submit(*c._prepare(m, company, None), company) for m in others]
        shared = c.chat(ask, seeded)
        for f in futures:
            f.result()
        other_seed = c.chat(ask, seeded.model_copy(update={"seed": 99}))
    assert shared.token_ids == alone.token_ids
    assert other_seed.token_ids != alone.token_ids  # the seed, not luck, made them equal


def test_engine_choice_and_fallback(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import GenerationConfig

    monkeypatch.setenv(ENGINE_ENV, "static")
    with LocalChatClient(tiny_llama_dir) as c:
        assert c.engine == "static"
    monkeypatch.setenv(ENGINE_ENV, "paged")
    with pytest.raises(ValueError, match=r"\$RLMDISTILL_LOCAL_ENGINE = 'paged'"):
        LocalChatClient(tiny_llama_dir)
    monkeypatch.delenv(ENGINE_ENV)
    with LocalChatClient(tiny_llama_dir) as c:  # the default
        assert c.engine == "continuous"
    # a checkpoint whose generation config asks for a repetition penalty: generate applies
    # it, the continuous engine would not, so the client runs the static engine
    penalised = tiny_llama_dir.parent / "penalised"
    if not penalised.exists():
        import shutil

        shutil.copytree(tiny_llama_dir, penalised)
        GenerationConfig(repetition_penalty=1.2).save_pretrained(penalised)
    with pytest.warns(UserWarning, match="repetition_penalty = 1.2"):
        c = LocalChatClient(penalised, engine="continuous")
    with c:
        assert c.engine == "static"
        r = c.chat([Message(role="user", content="hi")], Sampling(temperature=0.0, max_tokens=4))
        assert r.usage.completion_tokens == 4


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95, 1.0])
def test_nucleus_candidates_keep_the_ids_transformers_keeps(scale: float, top_p: float) -> None:
    """The ids a row may draw are those ``TopPLogitsWarper`` leaves finite, for peaked rows
    (the top-k path) and flat ones (the full-sort fallback), with each id's probability."""
    import torch
    from transformers import TopPLogitsWarper

    from rlmdistill.models.continuous import nucleus_candidates

    torch.manual_seed(0)
    logits = torch.randn(4, 5000) * scale
    probs = torch.softmax(logits, dim=-1)
    cand_p, cand_ids = nucleus_candidates(probs, torch.full((4, 1), top_p), first_k=64)
    warped = TopPLogitsWarper(top_p)(None, logits.clone())
    for r in range(4):
        expected = set(torch.nonzero(torch.isfinite(warped[r])).view(-1).tolist())
        kept = cand_ids[r][cand_p[r] > 0].tolist()
        assert set(kept) == expected
        assert len(kept) == len(expected)
        assert cand_p[r][cand_p[r] > 0].tolist() == probs[r, kept].tolist()
    fits = bool((torch.topk(probs, 64).values.sum(dim=-1) >= top_p).all()) and top_p < 1.0
    assert cand_ids.shape[1] == (64 if fits else 5000)
    if (scale, top_p) == (12.0, 0.5):
        assert fits  # a peaked row: the top-k path
    if (scale, top_p) == (0.5, 0.95):
        assert not fits  # a flat row: the whole vocabulary sorted
