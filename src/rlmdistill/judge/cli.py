"""Commands of the judge stage: ``rlmdistill judge`` and ``rlmdistill judge-agreement``.

Commands::

    rlmdistill judge runs/NAME                                  # reference grader
    rlmdistill judge runs/NAME --judge openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1
    rlmdistill judge runs/NAME --judge local:qwen2.5-coder-1.5b --criteria-per-request 10
    rlmdistill judge-agreement runs/NAME                         # reference vs the other grader
    rlmdistill judge-agreement runs/NAME --a reference --b llm-qwen2.5-coder-1.5b --json

``judge-agreement`` on a run with fewer than two graders says so, names the ``judge`` command
that adds the missing one, and exits 1 (nothing to compare; like ``filter`` with nothing kept).

The plain functions :func:`judge_main` and :func:`agreement_main` do the work (tests call them);
:func:`register` adds both typer commands to an app.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NamedTuple

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlmdistill.collect.config import RayOptions
from rlmdistill.judge.agreement import AgreementTable, agreement_table
from rlmdistill.judge.cache import VerdictCache
from rlmdistill.judge.llm import (
    JudgeStats,
    LLMGrader,
    LLMJudgeConfig,
    judge_model_key,
    llm_grader_id,
)
from rlmdistill.judge.reference import ReferenceGrader
from rlmdistill.judge.run import JudgeResult, judge_run, load_verdicts, verdicts_path
from rlmdistill.models.base import ModelClient
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable
from rlmdistill.models.spec import get_client, parse_spec

__all__ = [
    "JudgeReport",
    "TooFewGradersError",
    "agreement_main",
    "judge_main",
    "list_graders",
    "load_prices",
    "register",
    "render_agreement",
]

_SIDE_SUFFIXES = (".cache", ".usage")


class TooFewGradersError(ValueError):
    """The run has verdicts from fewer than two graders, so there is no agreement to compute;
    the message names the ``rlmdistill judge`` command that adds the missing grader."""


class JudgeReport(NamedTuple):
    """What :func:`judge_main` did."""

    result: JudgeResult
    grader_id: str
    stats: JudgeStats | None
    """LLM judge counters (requests, tokens, cost, cache hits); ``None`` for the reference."""
    cache_path: Path | None
    usage_path: Path | None
    requests_per_node: dict[str, int] | None = None
    """``--executor ray``: judge requests sent to each Ray node (by node label)."""


def load_prices(path: Path) -> PriceTable:
    """Read a :class:`PriceTable` from a YAML or JSON file; ``ValueError`` names the file."""
    try:
        return PriceTable.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ValueError(f"{path}: not a valid price table: {exc}") from exc


def judge_main(
    run_dir: Path,
    judge: str = "reference",
    *,
    criteria_per_request: int = 20,
    max_attempts: int = 3,
    max_tokens_per_criterion: int = 96,
    concurrency: int = 4,
    request_concurrency: int = 4,
    cache_path: Path | None = None,
    regrade_ungradable: bool = False,
    prices: PriceTable | None = None,
    timeout_s: float = 300.0,
    max_retries: int = 4,
    executor: str = "thread",
    ray_options: RayOptions | None = None,
) -> JudgeReport:
    """Grade every episode of ``run_dir`` with the reference grader or an LLM judge.

    Args:
        run_dir: the run directory.
        judge: ``"reference"`` or a model spec (``openai:MODEL@URL``, ``local:NAME``); the LLM
            grader id is :func:`~rlmdistill.judge.llm.llm_grader_id` of the spec.
        criteria_per_request: criteria per judge request (LLM only).
        max_attempts: judge requests per batch at most, retries after malformed or partial
            replies included (LLM only).
        max_tokens_per_criterion: new tokens allowed per criterion asked, on top of a base of
            64 per request (LLM only).
        concurrency: episodes graded at once (LLM only; the reference grades in turn).
        request_concurrency: batches of one episode in flight at once (LLM only); at most
            ``concurrency * request_concurrency`` requests are in flight.
        cache_path: verdict cache file (default ``verdicts/<grader>.cache.jsonl`` of the run).
        regrade_ungradable: grade again episodes whose latest verdicts hold an UNGRADABLE one
            (LLM only; ``ValueError`` with the reference grader).
        prices: price table for judge cost (default :data:`DEFAULT_PRICES`).
        timeout_s / max_retries: per HTTP attempt timeout and retries (openai specs only).
        executor: ``"thread"`` (requests from this process) or ``"ray"``: an LLM judge's
            requests run on the nodes of a Ray cluster (:mod:`rlmdistill.judge.spread`;
            ``ray_options`` as for ``collect``); verdicts, cache and usage log are written here
            either way.

    Raises:
        ValueError: bad spec or settings; room changed since collection; an LLM judge's
            server unreachable or not serving its model (``ServerUnavailableError``).
        FileNotFoundError: not a run directory; local model not pulled.
    """
    run_dir = Path(run_dir)
    if judge == "reference":
        if regrade_ungradable:
            raise ValueError(
                "--regrade-ungradable applies to LLM judges: the reference grader's UNGRADABLE "
                "verdicts are deterministic (criteria without evidence)"
            )
        # CPU-bound pure Python: threads would not help, so episodes are graded in turn.
        result = judge_run(run_dir, ReferenceGrader())
        return JudgeReport(result, "reference", None, None, None)
    if not (run_dir / "run.json").exists():
        raise FileNotFoundError(f"{run_dir / 'run.json'} not found: is {run_dir} a run directory?")
    spec = parse_spec(judge)
    config = LLMJudgeConfig(
        criteria_per_request=criteria_per_request,
        max_attempts=max_attempts,
        max_tokens_per_criterion=max_tokens_per_criterion,
        max_concurrency=request_concurrency,
    )
    grader_id = llm_grader_id(spec)
    cache_file = cache_path or run_dir / "verdicts" / f"{grader_id}.cache.jsonl"
    usage_file = run_dir / "verdicts" / f"{grader_id}.usage.jsonl"
    opts: dict[str, object] = {}
    if spec.kind == "openai":
        from rlmdistill.models.preflight import preflight

        preflight({"judge": spec})  # fail fast, before any verdict or cache file is written
        opts = {"timeout_s": timeout_s, "max_retries": max_retries}
    if executor == "ray":  # the requests spread over the cluster's nodes
        from rlmdistill.judge.spread import SpreadChatClient

        client: ModelClient = SpreadChatClient(
            str(spec), spec.model_id, opts, ray_options or RayOptions()
        )
    elif executor == "thread":
        client = get_client(spec, **opts)
    else:
        raise ValueError(f"executor must be thread or ray, got {executor!r}")
    grader = LLMGrader(
        client,
        judge_model=judge_model_key(spec),
        grader_id=grader_id,
        config=config,
        cache=VerdictCache(cache_file),
        usage_path=usage_file,
        prices=prices if prices is not None else DEFAULT_PRICES,
    )
    try:
        result = judge_run(
            run_dir, grader, concurrency=concurrency, regrade_ungradable=regrade_ungradable
        )
    finally:
        if executor == "ray":
            client.close()
    per_node = getattr(client, "requests_per_node", None)
    return JudgeReport(result, grader_id, grader.stats, cache_file, usage_file, per_node)


def list_graders(run_dir: Path) -> list[str]:
    """Grader ids with a verdict file in ``run_dir/verdicts`` (side files excluded), sorted."""
    return sorted(
        p.stem
        for p in (Path(run_dir) / "verdicts").glob("*.jsonl")
        if not p.stem.endswith(_SIDE_SUFFIXES)
    )


def agreement_main(run_dir: Path, a: str = "reference", b: str | None = None) -> AgreementTable:
    """Agreement table of graders ``a`` and ``b`` on ``run_dir`` (method in
    :mod:`rlmdistill.judge.agreement`).

    ``b`` defaults to the one grader other than ``a`` that judged the run. Raises
    :class:`TooFewGradersError` (a ``ValueError``) when the run has verdicts from fewer than
    two graders, ``FileNotFoundError`` when a grader's verdict file is missing and
    ``ValueError`` when ``b`` is not given and there is not exactly one candidate (the message
    lists them); ``FileNotFoundError`` too when ``run_dir`` is not a run directory.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").exists():
        raise FileNotFoundError(f"{run_dir / 'run.json'} not found: is {run_dir} a run directory?")
    graders = list_graders(run_dir)
    if len(graders) < 2:
        raise TooFewGradersError(_too_few_graders(run_dir, graders))
    if b is None:
        others = [g for g in graders if g != a]
        if len(others) != 1:
            raise ValueError(
                f"{run_dir}: pick the second grader with --b; graders with verdicts: "
                + (", ".join(graders) or "none")
            )
        b = others[0]
    for g in (a, b):
        if g not in graders:
            raise FileNotFoundError(
                f"{verdicts_path(run_dir, g)} not found; graders with verdicts: "
                + (", ".join(graders) or "none")
            )
    return agreement_table(
        load_verdicts(run_dir, a), load_verdicts(run_dir, b), grader_a=a, grader_b=b
    )


def _too_few_graders(run_dir: Path, graders: list[str]) -> str:
    reference = f"  rlmdistill judge {run_dir}"
    llm = (
        f"  rlmdistill judge {run_dir} --judge openai:MODEL@URL"
        "   (or --judge local:qwen2.5-coder-1.5b)"
    )
    if not graders:
        return (
            f"{run_dir}: judge agreement needs verdicts from two graders; this run has none "
            f"yet. Grade it with the reference grader and an LLM judge:\n{reference}\n{llm}"
        )
    (only,) = graders
    add = llm if only == "reference" else reference
    return (
        f"{run_dir}: judge agreement needs verdicts from two graders; this run has one "
        f"({only}). Add a second, then run judge-agreement again:\n{add}"
    )


def render_agreement(table: AgreementTable, console: Console) -> None:
    """Print ``table`` as a rich table (undefined kappa shown as ``undefined`` + reason)."""
    out = Table(title=f"judge agreement: {table.grader_a} (a) vs {table.grader_b} (b)")
    for col in ("criterion type", "n", "agree", "kappa", "a+b+", "a-b-", "a+b-", "a-b+", "ungr."):
        out.add_column(col, justify="left" if col == "criterion type" else "right")
    notes: list[str] = []
    for row in table.rows:
        if row.kappa is None:
            kappa = "undefined"
            notes.append(f"{row.criterion_type}: kappa undefined: {row.kappa_undefined}")
        else:
            kappa = f"{row.kappa:.3f}"
        out.add_row(
            row.criterion_type,
            str(row.n),
            "-" if row.agreement is None else f"{row.agreement:.3f}",
            kappa,
            str(row.both_pass),
            str(row.both_fail),
            str(row.a_pass_b_fail),
            str(row.a_fail_b_pass),
            str(row.n_ungradable),
        )
    console.print(out)
    for note in notes:
        console.print(note)
    console.print(
        f"pairs judged by one grader only: {table.grader_a} {table.n_only_a}, "
        f"{table.grader_b} {table.n_only_b}; UNGRADABLE pairs are left out of agree/kappa"
    )


def register(app: typer.Typer) -> None:
    """Add the ``judge``, ``judge-agreement`` and ``judge-eval`` commands to ``app``."""
    from rlmdistill.judge.eval_cli import register_eval

    register_eval(app)
    err = Console(stderr=True)

    @app.command("judge")
    def judge_cmd(
        run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
        judge: Annotated[
            str,
            typer.Option(
                "--judge",
                "--grader",
                help="'reference' or a judge model spec (openai:MODEL@URL, local:NAME).",
            ),
        ] = "reference",
        criteria_per_request: Annotated[
            int, typer.Option(min=1, help="Criteria per judge request (LLM judge).")
        ] = 20,
        max_attempts: Annotated[
            int,
            typer.Option(
                min=1, help="Judge requests per batch, retries after bad replies included."
            ),
        ] = 3,
        max_tokens_per_criterion: Annotated[
            int, typer.Option(min=8, help="New tokens per criterion asked (+64 per request).")
        ] = 96,
        concurrency: Annotated[int, typer.Option(min=1, help="Episodes graded at once.")] = 4,
        request_concurrency: Annotated[
            int, typer.Option(min=1, help="Requests in flight per episode (LLM judge).")
        ] = 4,
        cache: Annotated[
            Path | None,
            typer.Option(help="Verdict cache file (default verdicts/<grader>.cache.jsonl)."),
        ] = None,
        regrade_ungradable: Annotated[
            bool, typer.Option(help="Grade again episodes with UNGRADABLE verdicts.")
        ] = False,
        prices: Annotated[
            Path | None, typer.Option(help="Price table (YAML/JSON) for judge cost.")
        ] = None,
        timeout_s: Annotated[
            float, typer.Option(min=1.0, help="Timeout of each HTTP attempt, seconds.")
        ] = 300.0,
        executor: Annotated[
            str,
            typer.Option(
                help="thread, or ray: an LLM judge's requests run on a Ray cluster's nodes."
            ),
        ] = "thread",
        ray_address: Annotated[
            str | None, typer.Option(help="Ray cluster for --executor ray (auto, HOST:6379).")
        ] = None,
    ) -> None:
        """Grade every episode's memo against its room's rubric criteria."""
        try:
            report = judge_main(
                run_dir,
                judge,
                criteria_per_request=criteria_per_request,
                max_attempts=max_attempts,
                max_tokens_per_criterion=max_tokens_per_criterion,
                concurrency=concurrency,
                request_concurrency=request_concurrency,
                cache_path=cache,
                regrade_ungradable=regrade_ungradable,
                prices=load_prices(prices) if prices is not None else None,
                timeout_s=timeout_s,
                executor=executor,
                ray_options=RayOptions(address=ray_address),
            )
        except (ValueError, FileNotFoundError) as exc:  # one clear line, exit 2 (like main())
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(2) from exc
        res = report.result
        counts = ", ".join(f"{k} {res.counts.get(k, 0)}" for k in ("PASS", "FAIL", "UNGRADABLE"))
        err.print(
            f"graded {res.graded} episodes ({res.skipped} already graded) -> {res.verdicts_path}"
        )
        err.print(f"verdicts written: {counts}")
        s = report.stats
        if s is not None:
            cost = f"${s.cost_usd:.4f}" + (
                f" ({s.unpriced_requests} request(s) unpriced)" if s.unpriced_requests else ""
            )
            err.print(
                f"judge requests: {s.requests} ({s.retries} retries, {s.failed_requests} failed); "
                f"criteria from cache: {s.cache_hits}, judged: {s.judged}, no memo: {s.no_memo}; "
                f"judge tokens: prompt {s.usage.prompt_tokens}, "
                f"completion {s.usage.completion_tokens}; cost {cost} -> {report.usage_path}"
            )
        if report.requests_per_node:
            err.print(
                "judge requests per node: "
                + "; ".join(f"{k}: {n}" for k, n in report.requests_per_node.items()),
                highlight=False,
                markup=False,
            )
        others = [g for g in list_graders(run_dir) if g != report.grader_id]
        if others:
            err.print(
                f"other graders on this run: {', '.join(others)} "
                f"(compare: rlmdistill judge-agreement {run_dir})"
            )

    @app.command("judge-agreement")
    def agreement_cmd(
        run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
        a: Annotated[str, typer.Option("--a", help="First grader id.")] = "reference",
        b: Annotated[
            str | None,
            typer.Option("--b", help="Second grader id (default: the only other grader)."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
    ) -> None:
        """Agreement of two graders per criterion type: n, agreement share, Cohen's kappa."""
        try:
            table = agreement_main(run_dir, a, b)
        except TooFewGradersError as exc:  # nothing to compare: exit 1 (as filter, nothing kept)
            err.print(str(exc), highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(1) from exc
        except (ValueError, FileNotFoundError) as exc:  # one clear line, exit 2 (like main())
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from exc
        console = Console(width=140)
        if as_json:
            typer.echo(json.dumps(table.model_dump(mode="json"), indent=2))
        else:
            render_agreement(table, console)
