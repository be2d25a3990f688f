"""The ``judge`` stage as a function: :func:`run` takes a :class:`JudgeConfig` and returns a
:class:`JudgeReport` (``rlmdistill judge``, the loop and tests call it; the typer command in
:mod:`rlmdistill.judge.cli` maps the report to output and an exit code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.cluster.options import RayOptions
from rlmdistill.judge.cache import VerdictCache
from rlmdistill.judge.executor import executor_for
from rlmdistill.judge.llm import (
    JudgeStats,
    LLMGrader,
    LLMJudgeConfig,
    judge_model_key,
    llm_grader_id,
)
from rlmdistill.judge.reference import ReferenceGrader
from rlmdistill.judge.run import JudgeResult, judge_run
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable
from rlmdistill.models.spec import parse_spec
from rlmdistill.traces import layout

__all__ = ["JudgeConfig", "JudgeReport", "grader_id_of", "run"]


class JudgeReport(NamedTuple):
    """What :func:`run` did."""

    result: JudgeResult
    grader_id: str
    stats: JudgeStats | None
    """LLM judge counters (requests, tokens, cost, cache hits); ``None`` for the reference."""
    cache_path: Path | None
    usage_path: Path | None
    requests_per_node: dict[str, int] | None = None
    """``executor="ray"``: judge requests sent to each Ray node (by node label)."""


class JudgeConfig(BaseModel):
    """What :func:`run` grades, and how (the fields of ``rlmdistill judge``; each field's
    description is its flag's help). The LLM grader id is
    :func:`~rlmdistill.judge.llm.llm_grader_id` of the ``judge`` spec; with ``executor="ray"``
    an LLM judge's requests run on the nodes of a Ray cluster (:mod:`rlmdistill.judge.spread`),
    and verdicts, cache and usage log are written here either way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_dir: Path = Field(description="Run directory.")
    judge: str = Field(
        "reference",
        description="'reference' or a judge model spec (openai:MODEL@URL, local:NAME).",
    )
    criteria_per_request: int = Field(
        20, ge=1, description="Criteria per judge request (LLM judge)."
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Judge requests per batch, retries after malformed or partial replies "
        "included (LLM judge).",
    )
    max_tokens_per_criterion: int = Field(
        96, ge=8, description="New tokens per criterion asked (+64 per request; LLM judge)."
    )
    concurrency: int = Field(
        4, ge=1, description="Episodes graded at once (LLM judge; the reference grades in turn)."
    )
    request_concurrency: int = Field(
        4,
        ge=1,
        description="Requests in flight per episode (LLM judge); at most concurrency x "
        "request_concurrency in all.",
    )
    cache_path: Path | None = Field(
        None, description="Verdict cache file (default verdicts/<grader>.cache.jsonl)."
    )
    regrade_ungradable: bool = Field(
        False,
        description="Grade again episodes with UNGRADABLE verdicts (LLM judge only; an error "
        "with the reference grader).",
    )
    prices: PriceTable | None = Field(
        None, description="Price table for judge cost (default: the packaged table)."
    )
    timeout_s: float = Field(
        300.0, ge=1.0, description="Timeout of each HTTP attempt, seconds (openai specs)."
    )
    max_retries: int = Field(
        4, ge=0, description="Retries of a failed HTTP attempt (openai specs)."
    )
    executor: Literal["thread", "ray"] = Field(
        "thread",
        description="thread, or ray: an LLM judge's requests run on a Ray cluster's nodes.",
    )
    ray: RayOptions | None = Field(
        None, description="Ray cluster options for executor ray (the address, node selection)."
    )


def grader_id_of(judge: str) -> str:
    """The grader id (and verdict file stem, ``verdicts/<id>.jsonl``) that :func:`run` writes
    for ``judge``: ``reference`` for the reference grader, else
    :func:`~rlmdistill.judge.llm.llm_grader_id` of the spec. Raises ``ValueError`` for a
    spec that does not parse."""
    return "reference" if judge == "reference" else llm_grader_id(parse_spec(judge))


def run(config: JudgeConfig) -> JudgeReport:
    """The ``judge`` stage: grade every episode of ``config.run_dir`` not yet graded, with
    the reference grader or an LLM judge, appending to ``verdicts/<grader>.jsonl``.

    Raises:
        ValueError: bad spec or settings; room changed since collection; an LLM judge's
            server unreachable or not serving its model (``ServerUnavailableError``).
        FileNotFoundError: not a run directory; local model not pulled.
    """
    c = config
    run_dir, judge = Path(c.run_dir), c.judge
    if judge == "reference":
        if c.regrade_ungradable:
            raise ValueError(
                "--regrade-ungradable applies to LLM judges: the reference grader's UNGRADABLE "
                "verdicts are deterministic (criteria without evidence)"
            )
        # CPU-bound pure Python: threads would not help, so episodes are graded in turn.
        result = judge_run(run_dir, ReferenceGrader())
        return JudgeReport(result, grader_id_of(judge), None, None, None)
    if not (run_dir / layout.RUN_MANIFEST).exists():
        raise FileNotFoundError(
            f"{run_dir / layout.RUN_MANIFEST} not found: is {run_dir} a run directory?"
        )
    spec = parse_spec(judge)
    llm_config = LLMJudgeConfig(
        criteria_per_request=c.criteria_per_request,
        max_attempts=c.max_attempts,
        max_tokens_per_criterion=c.max_tokens_per_criterion,
        max_concurrency=c.request_concurrency,
    )
    grader_id = grader_id_of(judge)
    cache_file = c.cache_path or layout.verdict_side_path(run_dir, grader_id, "cache")
    usage_file = layout.verdict_side_path(run_dir, grader_id, "usage")
    opts: dict[str, object] = {}
    if spec.kind == "openai":
        from rlmdistill.models.preflight import preflight

        preflight({"judge": spec})  # fail fast, before any verdict or cache file is written
        opts = {"timeout_s": c.timeout_s, "max_retries": c.max_retries}
    executor = executor_for(c.executor, c.ray)  # where the requests run: thread or Ray nodes
    client = executor.open(spec, opts)
    grader = LLMGrader(
        client,
        judge_model=judge_model_key(spec),
        grader_id=grader_id,
        config=llm_config,
        cache=VerdictCache(cache_file),
        usage_path=usage_file,
        prices=c.prices if c.prices is not None else DEFAULT_PRICES,
    )
    try:
        result = judge_run(
            run_dir, grader, concurrency=c.concurrency, regrade_ungradable=c.regrade_ungradable
        )
    finally:
        executor.close(client)
    per_node = getattr(client, "requests_per_node", None)
    return JudgeReport(result, grader_id, grader.stats, cache_file, usage_file, per_node)
