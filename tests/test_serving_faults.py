"""Every server fault of the docs/serving.md table, one by one and 100 episodes at random (T4).

The table in ``docs/serving.md`` is parsed here and checked against :data:`EXPECTED`, so the
docs, the client and these tests cannot drift apart.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from rlmdistill.collect.config import CollectConfig, EpisodeLimits
from rlmdistill.collect.runner import collect
from rlmdistill.models.base import (
    ContextExceededError,
    EmptyReplyError,
    FatalModelError,
    Message,
    ModelError,
    ReasoningOnlyError,
    RetryableModelError,
    Sampling,
    Usage,
)
from rlmdistill.models.limits import ModelPrice, PriceTable
from rlmdistill.models.openai_client import OpenAIChatClient, is_context_error_message
from rlmdistill.testing.fake_openai import (
    FAULT_KINDS,
    FakeOpenAIServer,
    FakeReply,
    FaultInjector,
    ScriptedHandler,
    fail_first,
)
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary, TrajectoryRecord
from rlmdistill.traces.store import parse_records

DOCS = Path(__file__).resolve().parents[1] / "docs" / "serving.md"
GREEDY = Sampling(temperature=0.0, max_tokens=32)
MAX_RETRIES = 2

# fault -> (error class once retries are spent or at once, cause, retried in the request)
EXPECTED: dict[str, tuple[type[ModelError], str, bool]] = {
    "http_429_retry_after": (RetryableModelError, "http_429", True),
    "http_429": (RetryableModelError, "http_429", True),
    "http_500": (RetryableModelError, "http_500", True),
    "http_502": (RetryableModelError, "http_502", True),
    "http_503": (RetryableModelError, "http_503", True),
    "timeout": (RetryableModelError, "timeout", True),
    "connection_reset": (RetryableModelError, "connection_reset", True),
    "non_json": (RetryableModelError, "non_json", True),
    "no_choices": (RetryableModelError, "no_choices", True),
    "empty_reply": (EmptyReplyError, "empty_reply", False),
    "reasoning_only": (ReasoningOnlyError, "reasoning_only", False),
    "context_top_level": (ContextExceededError, "context_exceeded", False),
    "context_input_tokens": (ContextExceededError, "context_exceeded", False),
    "context_characters": (ContextExceededError, "context_exceeded", False),
    "finish_abort": (RetryableModelError, "finish_abort", True),
    "unsupported_parameter": (FatalModelError, "http_400", False),
}
RETRIED = {k for k, (_, _, retried) in EXPECTED.items() if retried}


def user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


def client(server: FakeOpenAIServer, model: str = "fake", **kw: object) -> OpenAIChatClient:
    opts: dict[str, object] = {
        "timeout_s": 0.5,  # below the 2 s the injected "timeout" fault hangs
        "max_retries": MAX_RETRIES,
        "backoff_initial_s": 0.001,
        "backoff_max_s": 0.02,
    }
    opts.update(kw)
    return OpenAIChatClient(model, server.base_url, api_key="k", **opts)  # type: ignore[arg-type]


def docs_table() -> dict[str, list[str]]:
    """Rows of the fault table in docs/serving.md keyed by their ``FAULT_KINDS`` cell."""
    rows: dict[str, list[str]] = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and (m := re.fullmatch(r"`(\w+)`", cells[1])):
            rows[m.group(1)] = cells
    return rows


def test_docs_table_has_one_row_per_fault_and_says_what_the_client_does() -> None:
    rows = docs_table()
    assert set(FAULT_KINDS) <= set(rows)
    assert set(EXPECTED) == set(FAULT_KINDS)
    for kind, (_, cause, retried) in EXPECTED.items():
        row = rows[kind]
        assert f"`{cause}`" in row[2], (kind, row)
        assert row[3].startswith("retried" if retried else "no"), (kind, row)


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_each_fault_forever_is_classified_with_bounded_attempts_case_t4(kind: str) -> None:
    error, cause, retried = EXPECTED[kind]
    with (
        FakeOpenAIServer(lambda r: FAULT_KINDS[kind]) as server,
        client(server) as c,
        pytest.raises(error) as info,
    ):
        c.chat(user("hello"), GREEDY)
    n = MAX_RETRIES + 1 if retried else 1  # 1 + max_retries HTTP attempts when retried
    assert (info.value.cause, info.value.attempts, len(server.requests)) == (cause, n, n)


@pytest.mark.parametrize("kind", sorted(RETRIED))
def test_each_retried_fault_once_then_success_case_t4(kind: str) -> None:
    calls = [0]

    def handler(request: dict) -> FakeReply | str:
        calls[0] += 1
        return FAULT_KINDS[kind] if calls[0] == 1 else "recovered"

    with FakeOpenAIServer(handler) as server, client(server) as c:
        result = c.chat(user("hello"), GREEDY)
    assert (result.text, result.attempts, len(server.requests)) == ("recovered", 2, 2)


def test_the_three_context_length_texts_and_their_bare_fragments() -> None:
    """vLLM words it differently across versions; the bare fragments (without "maximum
    context length") are matched too (vllm#33418)."""
    for kind in ("context_top_level", "context_input_tokens", "context_characters"):
        reply = FAULT_KINDS[kind]
        assert reply.status == 400
    assert is_context_error_message("However, your request has 2100 input tokens.")
    assert is_context_error_message(
        "you requested 200 output tokens and your prompt contains 9000 characters"
    )
    assert not is_context_error_message("rate limited")


def test_context_text_on_a_429_is_a_rate_limit_not_context() -> None:
    """A 429 that mentions input tokens per minute is retried, never context_exceeded."""
    reply = FakeReply.error(429, "Rate limit reached: 40000 input tokens per minute")
    with (
        FakeOpenAIServer(lambda r: reply) as server,
        client(server) as c,
        pytest.raises(RetryableModelError),
    ):
        c.chat(user("hello"), GREEDY)
    assert len(server.requests) == MAX_RETRIES + 1


def test_empty_string_content_is_a_reply_null_is_not() -> None:
    with FakeOpenAIServer(lambda r: FakeReply(text="")) as server, client(server) as c:
        assert c.chat(user("x"), GREEDY).text == ""


def test_cached_tokens_unknown_when_not_reported_case_vllm16162() -> None:
    """No ``prompt_tokens_details``: cached tokens are unknown (None), not 0; a sum with an
    unknown part is unknown; cost prices every prompt token as uncached (an upper bound)."""
    with FakeOpenAIServer(lambda r: "abcdefgh") as server, client(server) as c:
        plain = c.chat(user("abcdefgh"), GREEDY).usage
    with (
        FakeOpenAIServer(lambda r: FakeReply(text="abcdefgh", cached_tokens=0)) as s2,
        client(s2) as c2,
    ):
        zero = c2.chat(user("abcdefgh"), GREEDY).usage
    assert plain.cached_tokens is None and zero.cached_tokens == 0
    assert (Usage(cached_tokens=5) + plain).cached_tokens is None
    assert (Usage(cached_tokens=5) + zero).cached_tokens == 5
    prices = PriceTable(
        version="t", prices=[ModelPrice(pattern="m", input=1.0, cached_input=0.5, output=2.0)]
    )
    # 1,000,000 prompt tokens at $1/M (none known cached) + 0 completion = $1.00
    unknown = Usage(prompt_tokens=1_000_000, cached_tokens=None)
    assert prices.cost_usd("m", unknown) == pytest.approx(1.0)
    # the same with 400,000 known cached: 0.6 * 1.0 + 0.4 * 0.5 = $0.80
    known = Usage(prompt_tokens=1_000_000, cached_tokens=400_000)
    assert prices.cost_usd("m", known) == pytest.approx(0.8)


def test_rate_limit_burst_counts_attempts() -> None:
    with (
        FakeOpenAIServer(fail_first(2, 429, lambda r: "ok")) as server,
        client(server) as c,
    ):
        assert c.chat(user("x"), GREEDY).attempts == 3


# ----------------------------------------------------------------- 100 episodes at random
ROOT_SCRIPT: list[str | FakeReply] = [
    "```repl\nanswer = llm_query('Summarise contract c0.')\nprint(answer[:40])\n```",
    "FINAL(memo after one sub-call)",
]


def outcome(faults: list[str | None], max_retries: int) -> str:
    """What the table says one chat call ends as, given the fault of each HTTP attempt:
    ``ok``, ``exhausted`` (retries spent) or the first fault that is not retried."""
    for f in faults:
        if f is None:
            return "ok"
        if f not in RETRIED:
            return f
    assert len(faults) == max_retries + 1, faults  # retries stay within their bound
    return "exhausted"


def check_run(
    run: Path,
    injector: FaultInjector,
    new_summaries: list[EpisodeSummary],
    new_attempts: list[AttemptRecord],
    max_retries: int,
) -> Counter[str]:
    """Check every episode attempt of one run against the table and the server's log.

    Returns the outcomes of its chat calls (for the coverage assertions of the caller).
    """
    log = injector.log
    by_seed: dict[tuple[str, int | None], list[str | None]] = {}
    for e in log:
        by_seed.setdefault((e.model, e.seed), []).append(e.fault)
    adapter = TypeAdapter(TrajectoryRecord)
    seen: Counter[str] = Counter()
    n_requests = 0
    ended = {s.episode_id: s for s in new_summaries}
    attempted = {a.episode_id: a for a in new_attempts}
    for eid in set(ended) | set(attempted):
        records = list(parse_records(run / "trajectories" / f"{eid}.jsonl", adapter))
        expected_status, infra_cause = "completed", None
        for rec in records:
            if rec.record_type not in ("turn", "sub_call"):
                continue
            model = "root" if rec.record_type == "turn" else "sub"
            faults = by_seed[(model, rec.seed)]
            assert rec.attempts == len(faults) <= max_retries + 1, (eid, rec.attempts, faults)
            n_requests += len(faults)
            got = outcome(faults, max_retries)
            seen[f"{model}:{got}"] += 1
            if got == "exhausted" and model == "root":  # ends the episode: an attempt
                infra_cause = EXPECTED[str(faults[-1])][1]
            if model == "sub":
                if got == "ok":
                    assert rec.response is not None
                else:  # shown to the root; the episode goes on
                    kind = "retryable" if got == "exhausted" else EXPECTED[got][0].kind
                    assert rec.error_kind == kind, (eid, got, rec.error_kind)
            elif got != "ok":  # a root call that did not answer ends the episode
                expected_status = "context_exceeded" if got.startswith("context") else "model_error"
        if infra_cause is not None:
            attempt = attempted[eid]
            assert (attempt.status, attempt.cause) == (expected_status, infra_cause)
            if attempt.final:
                assert ended[eid].status == expected_status
            else:
                assert eid not in ended
        else:
            assert eid not in attempted
            assert ended[eid].status == expected_status, (eid, ended[eid].status_detail)
    assert n_requests == len(log)  # every request the server saw belongs to a recorded call
    return seen


def test_100_episodes_with_20_percent_random_faults_end_as_the_table_says(
    tmp_path: Path,
) -> None:
    from rlmdistill.testing.rooms import write_clause_room

    room = write_clause_room(tmp_path / "room", n_documents=3, repeats=5)
    run = tmp_path / "run"
    max_retries = 1  # small, so retries run out now and then: the attempt path is exercised
    injector = FaultInjector(ScriptedHandler(ROOT_SCRIPT, lambda p: "sub answer"), rate=0.2, seed=7)
    seen: Counter[str] = Counter()
    with FakeOpenAIServer(injector) as server:
        cfg = CollectConfig(
            rooms=[str(room)],
            root=f"openai:root@{server.base_url}",
            sub=f"openai:sub@{server.base_url}",
            episodes=100,
            concurrency=8,
            max_attempts=3,
            limits=EpisodeLimits(max_turns=3),
        )
        runs = 0
        while True:
            runs += 1
            assert runs <= 40, "collect never finished"
            injector.new_run()
            root = client(server, "root", max_retries=max_retries)
            sub = client(server, "sub", max_retries=max_retries)
            res = collect(cfg, run, root, sub, progress=False)
            root.close()
            sub.close()
            seen += check_run(run, injector, res.summaries, list(res.failed_attempts), max_retries)
            if not res.unfinished and not res.not_started:
                break
    summaries = list(parse_records(run / "episodes.jsonl", EpisodeSummary))
    ids = [s.episode_id for s in summaries]
    assert len(ids) == 100 and len(set(ids)) == 100  # nothing lost, nothing duplicated
    attempts = list(parse_records(run / "attempts.jsonl", AttemptRecord))
    per_episode: dict[str, list[int]] = {}
    for a in attempts:
        per_episode.setdefault(a.episode_id, []).append(a.attempt)
    for eid, numbers in per_episode.items():
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) <= 3
        assert eid in set(ids)
    statuses = Counter(s.status for s in summaries)
    # with seed 7 the draws cover every way a chat call can end (independent of thread timing:
    # a draw hashes the request body, see FaultInjector)
    assert seen["root:ok"] > 0 and seen["sub:ok"] > 0
    assert seen["root:exhausted"] + seen["sub:exhausted"] > 0 and runs > 1
    assert statuses["completed"] > 0 and statuses["context_exceeded"] > 0
    assert statuses["model_error"] > 0
