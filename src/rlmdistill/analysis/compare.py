"""Behaviour-shift report over runs: what changed between a baseline run and the others.

``rlmdistill report runs/A runs/B [...] --out reports/NAME`` (see :mod:`rlmdistill.analysis.cli`)
calls :func:`build_report`, which writes::

    reports/NAME/report.md            the report (every number comes from report.json)
    reports/NAME/report.json          :class:`Report`: every number shown + each figure's data
    reports/NAME/figures/*.png        matplotlib figures drawn from report.json's figure data
    reports/NAME/metrics/<arm>.jsonl  one EpisodeMetrics row per episode of each arm

The first run is the baseline (arm A); every other run is compared with it. Rooms pair up by
content hash (``room_hash``), so a room rebuilt elsewhere from the same documents still pairs.
The ``report.json`` records are in :mod:`rlmdistill.analysis.schema` (re-exported here), the
sections in :mod:`rlmdistill.analysis.sections`, the figure data in
:mod:`rlmdistill.analysis.figure_data`; statistics in :mod:`rlmdistill.stats`,
metrics in :mod:`rlmdistill.analysis.metrics`; all are defined in ``docs/analysis.md``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from multiprocessing.process import BaseProcess
from pathlib import Path

from rlmdistill.analysis import arms as arm_sections
from rlmdistill.analysis import sections
from rlmdistill.analysis.figure_data import report_figures
from rlmdistill.analysis.figures import FigureData, render_figure
from rlmdistill.analysis.markdown import render_markdown
from rlmdistill.analysis.metrics import (
    GIVE_UP_READ_SHARE,
    REACH_NGRAM,
    EpisodeMetrics,
    load_runs_metrics,
)
from rlmdistill.analysis.schema import (
    EMA_BETA,
    REPORT_VERSION,
    AdapterCheck,
    ArmInfo,
    ArmMetric,
    Comparison,
    ComparisonRow,
    DepthAblation,
    FlippedCriterion,
    FlipTable,
    Grid,
    GridCell,
    ModelGap,
    Report,
    RoomInfoRow,
    SizeCorrelation,
    TokenShares,
    TrainingCurve,
)
from rlmdistill.analysis.sections import (
    BASE_METRICS,
    METHODS,
    SectionContext,
    read_training_curve,
)
from rlmdistill.analysis.trajectory_cache import cache_file
from rlmdistill.hardware import runnable_tasks
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable
from rlmdistill.provenance import git_state, package_versions
from rlmdistill.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from rlmdistill.traces import layout

__all__ = [
    "BASE_METRICS",
    "CACHE_DIR",
    "EMA_BETA",
    "METHODS",
    "REPORT_VERSION",
    "AdapterCheck",
    "ArmInfo",
    "ArmMetric",
    "Comparison",
    "ComparisonRow",
    "DepthAblation",
    "FlipTable",
    "FlippedCriterion",
    "Grid",
    "GridCell",
    "ModelGap",
    "Report",
    "RoomInfoRow",
    "SizeCorrelation",
    "TokenShares",
    "TrainingCurve",
    "build_report",
    "read_training_curve",
]

CACHE_DIR = ".cache"
"""Under the report folder: the trajectory-metrics cache of each run
(:mod:`rlmdistill.analysis.trajectory_cache`), so a rebuilt report reads only the trajectories
that changed."""


def _labels(run_dirs: Sequence[Path], labels: Sequence[str] | None) -> list[str]:
    if labels:
        if len(labels) != len(run_dirs):
            raise ValueError(f"{len(labels)} labels given for {len(run_dirs)} runs")
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels must be unique: {list(labels)}")
        return list(labels)
    out: list[str] = []
    for p in run_dirs:
        base = Path(p).resolve().name or str(p)
        label, k = base, 2
        while label in out:
            label, k = f"{base}#{k}", k + 1
        out.append(label)
    return out


def build_report(
    run_dirs: Sequence[Path],
    out: Path,
    *,
    grader: str | None = None,
    sft_dirs: Sequence[Path] = (),
    rl_dirs: Sequence[Path] = (),
    prices: PriceTable = DEFAULT_PRICES,
    labels: Sequence[str] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    trajectories: bool = True,
    adapter_checks: Sequence[AdapterCheck] = (),
    overwrite: bool = False,
    draw: bool = True,
) -> Report:
    """Compare runs and write ``report.md``, ``report.json``, figures and per-arm metrics.

    Args:
        run_dirs: run folders; the first is the baseline every other run is compared with.
        out: report folder (created).
        grader: verdict file to score with (``None``: each run's only grader).
        sft_dirs: adapter folders whose ``train_log.jsonl`` becomes training curves.
        rl_dirs: RL adapter folders whose ``rl_log.jsonl`` becomes the RL training section.
        prices: price table for cost.
        labels: arm labels (default: run folder names, made unique).
        n_resamples, seed, confidence: interval settings (see :mod:`rlmdistill.stats`; B and
            seed are those of the correlation changes' bootstrap).
        trajectories: compute the trajectory metrics (reads every trajectory file once, or only
            those changed since this report was last built: ``out/.cache``).
        overwrite: replace a report already in ``out``.
        adapter_checks: checks computed by the caller (the loop's greedy check), stored in
            ``report.json`` and rendered into ``report.md`` from there.
        draw: render the PNG figures (``False`` writes only the data, e.g. for benchmarks).

    Raises:
        ValueError: no runs, bad labels, unknown grader, bad settings.
        FileExistsError: ``out`` already holds a report and ``overwrite`` is false.
        NotARunError / FileNotFoundError / TraceFileError: unreadable runs or logs (named).
    """
    if not run_dirs:
        raise ValueError("report needs at least one run directory")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be >= 100, got {n_resamples}")
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    out = Path(out)
    if (out / layout.REPORT_JSON).exists() and not overwrite:
        raise FileExistsError(f"{out} already holds a report; use --overwrite to replace it")
    arm_labels = _labels(run_dirs, labels)
    ctx = SectionContext(n_resamples, seed, confidence)
    cache_writes: list[Callable[[], None]] = []  # run by the forked helper, or here
    loaded = load_runs_metrics(  # one set of trajectory readers for every run
        [Path(d) for d in run_dirs],
        grader,
        prices=prices,
        trajectories=trajectories,
        trajectory_caches=[cache_file(out / CACHE_DIR, Path(d)) for d in run_dirs],
        cache_writes=cache_writes,
    )
    rows = {label: lm.rows for label, lm in zip(arm_labels, loaded, strict=True)}
    rooms = sections.room_labels(list(rows.values()))
    arms = [
        sections.arm_info(label, d, lm)
        for label, d, lm in zip(arm_labels, run_dirs, loaded, strict=True)
    ]
    sizes = sections.size_correlations(arms, rows, rooms, ctx)
    shares = sections.token_shares(arms, rows)
    ablations = sections.depth_ablations(arms, rows, rooms, ctx)
    grids = sections.grids(arms, rows, rooms, ctx)
    training = [read_training_curve(Path(d)) for d in sft_dirs]
    rl_training = [sections.read_rl_curve(Path(d)) for d in rl_dirs]
    figures = report_figures(
        arms, rows, rooms, sizes, shares, ablations, grids, training, prices.version, rl_training
    )
    # the figures are drawn, then the last run's metrics caches written, by a forked
    # helper (while a CPU is free) as this process computes the rest of the statistics and
    # writes the report (one helper: a second one beside it was slower on 2 cores, 5.2-5.3
    # vs 4.8-5.0 s); the figures into a scratch folder, so a report that fails before it is
    # written leaves none in ``out``
    scratch = Path(tempfile.mkdtemp(prefix="rlmdistill-figures-")) if draw else None
    to_draw = figures if scratch is not None else []  # with draw=False: the caches only
    helper = _fork(to_draw, scratch or out, cache_writes) if to_draw or cache_writes else None
    if helper is None:
        _run_all(cache_writes)
    try:
        metrics = sections.report_metrics(rows)
        per_arm = sections.per_arm_metrics(arms, rows, rooms, ctx, metrics)
        flags = arm_sections.timeout_flags(arms, rows, ablations)
        report = Report(
            created_at=dt.datetime.now(dt.UTC),
            settings={
                "n_resamples": n_resamples,
                "seed": seed,
                "confidence": confidence,
                "grader": grader,
                "price_table": prices.version,
                "give_up_read_share": GIVE_UP_READ_SHARE,
                "reach_ngram": REACH_NGRAM,
                "trajectories": trajectories,
                "baseline": arms[0].label,
            },
            versions=_versions(),
            git_commit=git_state()[0],
            git_dirty=git_state()[1],
            arms=arms,
            rooms=sorted(rooms.values(), key=lambda r: r.label),
            methods={**METHODS, **arm_sections.ARM_METHODS},
            metric_descriptions={m.name: m.description for m in metrics},
            per_arm=per_arm,
            comparisons=sections.comparisons(arms, rows, rooms, ctx, per_arm),
            size_correlations=sizes,
            token_shares=shares,
            depth_ablations=ablations,
            grids=grids,
            training=training,
            figures=figures,
            notes=[*sections.report_notes(arms), *(f.note for f in flags)],
            arm_table=arm_sections.arm_table(arms, rows, rooms, ctx),
            size_correlation_changes=arm_sections.size_correlation_changes(arms, rows, rooms, ctx),
            timeouts=arm_sections.timeouts(arms, rows),
            timeout_flags=flags,
            adapter_checks=list(adapter_checks),
            rl_training=rl_training,
            corrected_rates=sections.corrected_rates(arms, sections.read_calibrations(arms), ctx),
        )
        _write(
            report,
            rows,
            out,
            overwrite=overwrite,
            draw=draw,
            helper=helper,
            drawn=scratch,
        )
        if helper is not None and helper.exitcode != 0:
            _run_all(cache_writes)  # written here (again): an error is raised
    except BaseException:
        if helper is not None:  # the report failed: stop the helper
            if helper.is_alive():
                helper.terminate()
            helper.join()
            if helper.exitcode != 0:  # the caches, as a failed report wrote them before
                with contextlib.suppress(Exception):
                    _run_all(cache_writes)
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return report


def _versions() -> dict[str, str]:
    """Package versions of the report's provenance, plus scipy, numpy and matplotlib."""
    versions = package_versions()
    for name in ("scipy", "numpy", "matplotlib"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


HELPER_FIGURE_FAILED = 1
"""Exit code of the forked helper when a figure failed (the caller draws them all again,
and writes the caches)."""
HELPER_CACHE_FAILED = 2
"""Exit code of the forked helper when the figures were drawn but a cache write failed (the
caller writes the caches again, raising the error)."""


def _run_all(calls: Sequence[Callable[[], None]]) -> None:
    """Call each of ``calls`` in order (the metrics caches' writes)."""
    for call in calls:
        call()


def _help(figures: Sequence[FigureData], out: Path, after: Sequence[Callable[[], None]]) -> None:
    """The forked helper's task: draw ``figures`` into ``out``, then run ``after``; an error
    exits with :data:`HELPER_FIGURE_FAILED` or :data:`HELPER_CACHE_FAILED`, without a
    traceback, and the parent does that part again, raising it."""
    try:
        for fig in figures:
            render_figure(fig, out)
    except Exception:
        sys.exit(HELPER_FIGURE_FAILED)
    try:
        _run_all(after)
    except Exception:
        sys.exit(HELPER_CACHE_FAILED)


def _free_cpu(cpus: int, loadavg: Path = Path("/proc/loadavg")) -> bool:
    """Whether one of ``cpus`` is free now: fewer runnable tasks than CPUs, this process
    among them (the fourth field of ``/proc/loadavg``, "running/total", ``proc(5)``), in
    the least of 3 reads 5 ms apart (one read caught a passing task now and then). The
    1-minute load average was used before, but it lags: it still counted the report's own
    trajectory readers, so on an idle 2-core machine reports run back to back read 1.4-1.6
    and drew in this process. Where the file cannot be read: a 1-minute load average below
    the CPUs less half of one."""
    counts = []
    for i in range(3):
        if i:
            time.sleep(0.005)
        n = runnable_tasks(loadavg)
        if n is None:
            return os.getloadavg()[0] < cpus - 0.5
        counts.append(n)
    return min(counts) < cpus


def _fork(
    figures: Sequence[FigureData], out: Path, after: Sequence[Callable[[], None]] = ()
) -> BaseProcess | None:
    """Start :func:`_help` in a forked process, so another core draws the figures (Agg
    drawing and PNG encoding, ~0.6 s for 7 figures) and writes the last run's metrics
    caches (their JSON, ~0.5 s for a 5,000-episode run; 2-core AMD EPYC) while this one
    computes the rest of the report and writes it. ``None`` (the caller does both) with one
    usable CPU, off Linux, when the process runs other Python threads (forking a threaded
    process can copy a held lock), or when no CPU is free (:func:`_free_cpu`; on a
    saturated machine the forked drawer cost ~1.0 s of CPU for ~0.7 s drawn)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if cpus < 2 or sys.platform != "linux" or threading.active_count() > 1 or not _free_cpu(cpus):
        return None
    proc = multiprocessing.get_context("fork").Process(
        target=_help, args=(figures, out, after), daemon=True
    )
    proc.start()
    return proc


def _write(
    report: Report,
    rows: dict[str, list[EpisodeMetrics]],
    out: Path,
    *,
    overwrite: bool,
    draw: bool,
    helper: BaseProcess | None = None,
    drawn: Path | None = None,
) -> None:
    """Write the report folder. ``helper``: the process drawing the figures into ``drawn``
    (:func:`_fork`): its figures are moved into ``out`` when it drew them all, else they
    are drawn here (a figure that fails raises its error)."""
    out.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for sub in ("figures", "metrics"):
            if (out / sub).is_dir():
                shutil.rmtree(out / sub)
    (out / "metrics").mkdir(exist_ok=True)
    for label, arm_rows in rows.items():
        safe = "".join(ch if ch.isalnum() or ch in "-_.#" else "_" for ch in label)
        with (out / "metrics" / f"{safe}.jsonl").open("w", encoding="utf-8") as f:
            for r in arm_rows:
                f.write(r.model_dump_json() + "\n")
    # a report without checks or labels keeps the version-1 bytes (no empty keys of those)
    empty = {
        k for k in ("adapter_checks", "corrected_rates", "rl_training") if not getattr(report, k)
    }
    text = report.model_dump_json(indent=1, exclude=empty or None)
    json.loads(text)  # fails loudly rather than write an unreadable file
    markdown = render_markdown(report)
    if helper is not None:
        helper.join()
    if draw:
        drawn_there = helper is not None and helper.exitcode in (0, HELPER_CACHE_FAILED)
        if drawn_there and drawn is not None:
            for fig in report.figures:
                (out / fig.file).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(drawn / fig.file, out / fig.file)
        else:
            for fig in report.figures:  # drawn here: a figure that fails raises its error
                render_figure(fig, out)
    (out / layout.REPORT_JSON).write_text(text + "\n", encoding="utf-8")
    (out / layout.REPORT_MD).write_text(markdown, encoding="utf-8")
