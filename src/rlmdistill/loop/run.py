"""``rlmdistill loop``: the whole self-distillation loop, stage by stage, resumable.

Round ``r`` (1..N) of an experiment::

    rooms (once, train / held-out split checked)
    runs/eval-base        base root on the held-out rooms            (once, shared by rounds)
    runs/r<r>-train       root of the round on the training rooms    (r=1: train_root or base;
                                                                      r>1: base + adapters/r<r-1>)
    datasets/r<r>         filter (rejection sampling) + export of runs/r<r>-train
    adapters/r<r>         LoRA SFT of the base on datasets/r<r>
    runs/r<r>-eval-tuned  base + adapters/r<r> on the held-out rooms, same seeds as eval-base
    runs/eval-base-d2     depth_arms [2], last round only: the base root at depth 2, and
    runs/r<N>-eval-tuned-d2   base + adapters/r<N> at depth 2 (same rooms and seeds)
    reports/r<r>          base, tuned-r1 .. tuned-r<r> (+ base-d2, tuned-r<N>-d2 in the last
                          round) on the same held-out rooms, base the baseline; greedy-change
                          check of the adapter

Each stage is skipped when its output exists and is up to date: collection resumes by
episode (a finished run loads no model), grading skips graded episodes, and the dataset,
adapter and report are rebuilt only when the fingerprint of their inputs and settings
changed (recorded in ``lineage.jsonl``, see :mod:`rlmdistill.traces.lineage`). Every round
fine-tunes the *base* model on that round's data (expert iteration restarts from the base,
as in STaR, Zelikman et al. 2022); the tuned root of round r collects round r+1's data.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rlmdistill.loop.config import ExperimentConfig, ExperimentError
from rlmdistill.loop.paths import legacy_match, to_record
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import load_sft_manifest
from rlmdistill.traces.lineage import LineageRecord, latest_records, record

__all__ = ["Arm", "LoopResult", "RoundResult", "report_arms", "run_loop"]

Log = Callable[[str], None]


class Arm(NamedTuple):
    """One held-out arm of a report: its label and its run folder."""

    label: str
    """``base``, ``tuned-r<i>``, ``base-d2``, ``tuned-r<N>-d2``."""
    run: Path


class RoundResult(NamedTuple):
    """Artefacts of one round (absolute paths)."""

    round: int
    train_run: Path
    dataset: Path
    adapter: Path
    tuned_run: Path
    report: Path
    arms: tuple[Arm, ...] = ()
    """The arms its report compares, baseline first (:func:`report_arms`)."""


def report_arms(ws: Path, rnd: int, last: int, depth_arms: Sequence[int]) -> list[Arm]:
    """Held-out arms of round ``rnd``'s report in workspace ``ws``: ``base``, then
    ``tuned-r1`` .. ``tuned-r<rnd>`` (``runs/r<i>-eval-tuned``), then, when ``rnd`` is the
    ``last`` round, for each depth ``d`` of ``depth_arms`` ``base-d<d>``
    (``runs/eval-base-d<d>``) and ``tuned-r<rnd>-d<d>`` (``runs/r<rnd>-eval-tuned-d<d>``)."""
    runs = ws / layout.RUNS
    arms = [Arm("base", runs / "eval-base")]
    arms += [Arm(f"tuned-r{i}", runs / f"r{i}-eval-tuned") for i in range(1, rnd + 1)]
    if rnd == last:
        for d in depth_arms:
            arms += [
                Arm(f"base-d{d}", runs / f"eval-base-d{d}"),
                Arm(f"tuned-r{rnd}-d{d}", runs / f"r{rnd}-eval-tuned-d{d}"),
            ]
    return arms


class LoopResult(NamedTuple):
    """What :func:`run_loop` did."""

    workspace: Path
    base_run: Path
    rounds: list[RoundResult]
    wall_s: float
    stage_s: dict[str, float]
    """Wall seconds per stage (``collect-train-r1``, ``sft-r1``, ...), skipped stages near 0."""


def _sha_files(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p.name).encode())
        h.update(p.read_bytes() if p.exists() else b"<missing>")
    return h.hexdigest()[:16]


class _Loop:
    strict = False
    """Collect with ``strict=True``: a document whose text cannot be extracted is an error."""

    def __init__(self, cfg: ExperimentConfig, log: Log, progress: bool) -> None:
        self.cfg = cfg
        self.ws = cfg.workspace
        self.log = log
        self.progress = progress
        self.stage_s: dict[str, float] = {}

    # -- helpers ---------------------------------------------------------------------
    def rel(self, path: Path) -> str:
        return str(Path(path).resolve().relative_to(self.ws))

    def recorded_root(self, out: Path, root: str) -> tuple[str, dict[str, str]]:
        """The root spec to record for run ``out`` and the spec to open for it.

        A tuned root is recorded with its adapter relative to the workspace
        (``local:BASE+adapter=adapters/r1``, see :meth:`tuned_root`) and opened with the
        adapter's absolute path. A run started by an older version recorded the absolute
        path; its recorded spec is kept (episode ids derive from it) when it names the same
        adapter, even from where the workspace used to be, so the run resumes.
        """
        head = f"{self.cfg.base}+adapter="
        if not root.startswith(head) or Path(root[len(head) :]).is_absolute():
            return root, {}
        rel = root[len(head) :]
        recorded = root
        if (out / layout.RUN_MANIFEST).is_file():
            raw = json.loads((out / layout.RUN_MANIFEST).read_text(encoding="utf-8"))
            old = str(raw["config"]["root"])
            if old.startswith(head) and legacy_match(old[len(head) :], rel):
                recorded = old
        return recorded, {recorded: head + str(self.ws / rel)}

    def timed(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.stage_s[name] = round(time.monotonic() - t0, 1)

    def up_to_date(self, artefact: Path, fingerprint: str) -> bool:
        rec = latest_records(self.ws).get(self.rel(artefact))
        return artefact.exists() and rec is not None and rec.fingerprint == fingerprint

    def note(self, artefact: Path, kind: Any, stage: str, rnd: int, inputs: list[Path],
             fingerprint: str, **detail: Any) -> None:  # fmt: skip
        record(
            self.ws,
            LineageRecord(
                artefact=self.rel(artefact),
                kind=kind,
                stage=stage,
                round=rnd,
                inputs=[self.rel(p) for p in inputs],
                fingerprint=fingerprint,
                detail=detail,
            ),
        )

    def tuned_root(self, adapter: Path, rnd: int) -> str:
        """Root spec of base + ``adapter``: in process, or loaded into the vLLM server."""
        if self.cfg.serving is None:  # recorded relative to the workspace: see recorded_root
            return f"{self.cfg.base}+adapter={self.rel(adapter)}"
        from rlmdistill.loop.serving import load_lora_adapter

        name = f"{self.cfg.name}-r{rnd}"
        self.log(
            f"[run ] load adapter {self.rel(adapter)} into {self.cfg.serving.base_url} as {name}"
        )
        return load_lora_adapter(self.cfg.serving, name, adapter)

    # -- stages ----------------------------------------------------------------------
    def collect(
        self, out: Path, root: str, rooms: list[Path], settings: dict[str, Any], stage: str,
        rnd: int, inputs: list[Path],
    ) -> None:  # fmt: skip
        from rlmdistill.collect.config import for_run
        from rlmdistill.collect.main import (
            build_config,
            check_finished,
            pending_episodes,
        )
        from rlmdistill.collect.main import run as collect_stage
        from rlmdistill.compat import library_warning_filter

        root, open_specs = self.recorded_root(out, root)
        cfg = build_config(
            None, {**settings, "rooms": [str(p) for p in rooms], "root": root, "sub": self.cfg.sub}
        )
        cfg = for_run(cfg, out)  # a run keeps the fingerprint version it was written with
        fp = self.cfg.fingerprint(cfg.fingerprint(), sorted(to_record(p, self.ws) for p in rooms))
        pending = pending_episodes(cfg, out)
        if pending == 0:
            self.log(f"[skip] {self.rel(out)}: all {cfg.episodes * len(rooms)} episodes done")
            if not self.up_to_date(out, fp):
                self.note(out, "run", stage, rnd, inputs, fp, root=root, new_episodes=0)
        else:
            self.log(f"[run ] {stage} -> {self.rel(out)} ({pending} episodes to collect)")
            with library_warning_filter():  # peft's is_gradient_checkpointing (tuned roots)
                res = collect_stage(cfg, out, progress=self.progress, open_specs=open_specs,
                                  strict=self.strict,
                                  log=lambda line: self.log(f"[note] {line}"))  # fmt: skip
            statuses: dict[str, int] = {}
            for s in res.summaries:
                statuses[s.status] = statuses.get(s.status, 0) + 1
            self.note(out, "run", stage, rnd, inputs, fp, root=root, new_episodes=len(res.summaries),
                      **{f"status_{k}": v for k, v in statuses.items()})  # fmt: skip
            check_finished(res)  # a server failed: stop here, naming the run and the cause
        self.judge(out, rnd)

    def judge(self, run: Path, rnd: int) -> None:
        from rlmdistill.judge.main import JudgeConfig
        from rlmdistill.judge.main import run as judge

        rep = judge(JudgeConfig(run_dir=run, judge=self.cfg.grader))
        if rep.result.graded:
            self.log(f"[run ] judge {self.rel(run)}: {rep.result.graded} episodes graded")
            verdicts = layout.verdicts_path(run, rep.grader_id)
            self.note(verdicts, "verdicts", "judge", rnd, [run], _sha_files(verdicts),
                      graded=rep.result.graded)  # fmt: skip

    def dataset(self, train_run: Path, out: Path, rnd: int) -> None:
        from rlmdistill.export.main import ExportConfig
        from rlmdistill.export.main import run as export_stage
        from rlmdistill.export.options import build_export_options
        from rlmdistill.filter.main import FilterConfig
        from rlmdistill.filter.main import run as filter_stage
        from rlmdistill.models.spec import resolve_base

        export = {"tokenizer": str(resolve_base(self.cfg.base)), **self.cfg.export}
        options = build_export_options(**export)
        rules = self.cfg.filter.model_copy(update={"grader": self.cfg.grader})
        fp = self.cfg.fingerprint(
            _sha_files(train_run / layout.EPISODES, *sorted((train_run / layout.VERDICTS).glob("*.jsonl"))),
            rules.model_dump(mode="json"),
            options.model_dump(mode="json"),
        )  # fmt: skip
        if self.up_to_date(out / layout.EXPORT_MANIFEST, fp):
            self.log(f"[skip] {self.rel(out)}: dataset up to date")
            return
        self.log(f"[run ] filter + export {self.rel(train_run)} -> {self.rel(out)}")
        outcome = filter_stage(FilterConfig(runs=[train_run], out=out, rules=rules, force=True))
        outcome.require_kept()
        exported = export_stage(
            ExportConfig(
                out=out,
                options=options,
                episodes=outcome.decisions,
                card_extra=outcome.card_section(),
            ),
            progress=self.progress,
        )
        self.note(out / layout.EXPORT_MANIFEST, "dataset", "filter", rnd, [train_run], fp,
                  kept=outcome.report.n_kept, total=outcome.report.n_total,
                  examples=exported.n_examples)  # fmt: skip

    def adapter(self, dataset: Path, out: Path, rnd: int) -> None:
        from rlmdistill.sft.config import build_config as sft_config
        from rlmdistill.sft.main import run as sft_stage

        cfg = sft_config(
            None, {**self.cfg.sft, "dataset": dataset, "base": self.cfg.base, "out": out}
        )
        settings = cfg.model_dump(mode="json", exclude={"out"})
        export_sha = _sha_files(dataset / layout.EXPORT_MANIFEST)
        fp = self.cfg.fingerprint(export_sha, {**settings, "dataset": self.rel(dataset)})
        legacy = None  # older versions fingerprinted the dataset's absolute path
        if (out / layout.SFT_MANIFEST).is_file():
            old_dataset = str(load_sft_manifest(out).config.get("dataset", ""))
            if legacy_match(old_dataset, self.rel(dataset)):
                legacy = self.cfg.fingerprint(export_sha, {**settings, "dataset": old_dataset})
        if legacy is not None and self.up_to_date(out / layout.SFT_MANIFEST, legacy):
            self.log(f"[skip] {self.rel(out)}: adapter up to date")
            old_rec = latest_records(self.ws)[self.rel(out / layout.SFT_MANIFEST)]
            self.note(out / layout.SFT_MANIFEST, "adapter", "sft", rnd, [dataset / layout.EXPORT_MANIFEST], fp,
                      **old_rec.detail)  # fmt: skip
            return
        if self.up_to_date(out / layout.SFT_MANIFEST, fp):
            self.log(f"[skip] {self.rel(out)}: adapter up to date")
            return
        if out.exists():  # stale: a new dataset or new settings; the old adapter is replaced
            shutil.rmtree(out)
        self.log(f"[run ] sft {self.rel(dataset)} -> {self.rel(out)}")
        res = sft_stage(cfg, progress=self.progress)
        evals = [r.loss for r in res.eval_losses]
        self.log(f"[ok  ] sft {self.rel(out)}: {res.eval_note}"
                 + (f"; eval loss {' -> '.join(f'{x:.4f}' for x in evals)}" if evals else ""))  # fmt: skip
        self.note(out / layout.SFT_MANIFEST, "adapter", "sft", rnd, [dataset / layout.EXPORT_MANIFEST], fp,
                  steps=res.global_step, first_loss=res.first_loss, final_loss=res.final_loss,
                  examples=res.n_examples, eval_losses=evals)  # fmt: skip

    def report(self, arms: list[Arm], adapters: list[Path], out: Path, rnd: int) -> None:
        """Report the arms (base first, the baseline) with every adapter's training curve, and
        the greedy check of this round's adapter (``adapters[-1]``) as a report section.

        Up to date, hence skipped, when its fingerprint is unchanged: the fingerprint is its
        inputs (each arm's label, ``episodes.jsonl`` and verdict files, each adapter's
        ``sft.json`` and ``train_log.jsonl``, their paths, the report settings, and the greedy
        check's: the base and whether it runs; its prompt is the base run's first episode),
        and the report's statistical methods (``analysis.sections.METHODS`` and
        ``analysis.arms.ARM_METHODS``: a report of an earlier method is rebuilt), not the clock.
        """
        from rlmdistill.analysis.arms import ARM_METHODS
        from rlmdistill.analysis.checks import AdapterCheck
        from rlmdistill.analysis.main import ReportConfig
        from rlmdistill.analysis.main import run as analysis_stage
        from rlmdistill.analysis.sections import METHODS

        base_run, adapter = arms[0].run, adapters[-1]  # baseline arm; this round's adapter
        runs = [a.run for a in arms]
        config = ReportConfig(
            runs=runs, out=out, grader=self.cfg.grader, sft=list(adapters),
            labels=[a.label for a in arms], overwrite=True,
        )  # fmt: skip
        settings = config.model_dump(mode="json", exclude={"runs", "out", "sft", "overwrite"})
        verdicts = [
            sorted(p for p in layout.verdicts_dir(r).glob("*.jsonl")
                   if not p.name.endswith((".cache.jsonl", ".usage.jsonl")))
            for r in runs
        ]  # fmt: skip
        # absolute paths: report.json names the runs and the adapters by path, so a moved
        # workspace rebuilds its report (every other input is content)
        fp = self.cfg.fingerprint(
            "report",
            [[str(r.resolve()), _sha_files(r / layout.EPISODES, *v)] for r, v in zip(runs, verdicts, strict=True)],
            [[str(a.resolve()), _sha_files(a / layout.SFT_MANIFEST, a / layout.TRAIN_LOG)] for a in adapters],
            settings,
            {"check_greedy_change": self.cfg.check_greedy_change, "base": self.cfg.base},
            METHODS, ARM_METHODS,  # a changed statistical method rebuilds the report
        )  # fmt: skip
        if self.up_to_date(out, fp) and (out / layout.REPORT_JSON).is_file():
            self.log(f"[skip] {self.rel(out)}: report up to date")
            return
        self.log(f"[run ] report {' vs '.join(self.rel(p) for p in runs)} -> {self.rel(out)}")
        check = None
        checks: list[AdapterCheck] = []
        if self.cfg.check_greedy_change:
            check = self.greedy_check(base_run, adapter)
            checks.append(AdapterCheck(
                adapter=self.rel(adapter), prompt_source=check.prompt_source,
                max_new_tokens=check.max_new_tokens, changed=check.changed,
                first_difference=check.first_difference,
                max_abs_logit_diff=check.max_abs_logit_diff, base_text=check.base_text,
                tuned_text=check.tuned_text,
            ))  # fmt: skip
        analysis_stage(config.model_copy(update={"adapter_checks": checks}))
        if check is not None:
            (out / "adapter_check.json").write_text(check.model_dump_json(indent=2) + "\n")
        else:  # a check of an earlier build would not match this report
            (out / "adapter_check.json").unlink(missing_ok=True)
        self.note(out, "report", "report", rnd, [*runs, *(a / layout.SFT_MANIFEST for a in adapters)], fp,
                  adapter_changed_greedy=None if check is None else check.changed)  # fmt: skip

    def greedy_check(self, base_run: Path, adapter: Path) -> Any:
        from rlmdistill.compat import library_warning_filter
        from rlmdistill.loop.adapter_check import greedy_change
        from rlmdistill.models.spec import resolve_base
        from rlmdistill.traces.runs import load_summaries, load_trajectory

        summaries = load_summaries(base_run)
        if not summaries:
            raise ExperimentError(f"{base_run}: no episodes to take a greedy-check prompt from")
        first = min(summaries, key=lambda s: (s.room.room_id, s.sample_index))
        start = load_trajectory(base_run, first.episode_id).start
        with library_warning_filter():  # PeftModel.from_pretrained reads a deprecated property
            return greedy_change(
                resolve_base(self.cfg.base),
                adapter,
                start.initial_messages,
                prefill=start.root.prefill,
                prompt_source=f"the first root prompt of episode {first.episode_id} "
                f"({self.rel(base_run)}, room {first.room.room_id})",
            )


def _experiment_record(cfg: ExperimentConfig) -> str:
    """``experiment.json``: the resolved experiment with paths inside the workspace relative to
    it (the workspace itself is ``"."``), so :func:`~rlmdistill.loop.config.load_experiment`
    on the file gives the same experiment wherever the workspace now is."""
    data = cfg.model_dump(mode="json")
    data["workspace"] = "."
    data["train_rooms"] = [to_record(p, cfg.workspace) for p in cfg.train_rooms]
    data["holdout_rooms"] = [to_record(p, cfg.workspace) for p in cfg.holdout_rooms]
    return json.dumps(data, indent=2)


def run_loop(
    cfg: ExperimentConfig,
    *,
    rounds: int | None = None,
    log: Log = lambda s: None,
    progress: bool = True,
    strict: bool = False,
) -> LoopResult:
    """Run (or resume) every stage of every round; see the module docstring for the layout.

    Rooms' notes (documents not UTF-8, with replacement characters, or skipped) are logged as
    ``[note]`` lines when a collection starts; ``strict`` makes a document whose text cannot be
    extracted an error instead (:class:`~rlmdistill.rooms.RoomError`). Every ``openai:`` server
    of the experiment (base root, sub, ``train_root``, an LLM grader) is checked before
    anything is written (:class:`~rlmdistill.models.preflight.ServerUnavailableError`).

    Raises :class:`ExperimentError` (rooms share documents, no episode to check),
    :class:`~rlmdistill.collect.attempts.UnfinishedEpisodes` when a server failed during a
    collection (re-run to resume), and the stage errors unchanged: ``RunConfigMismatch`` when a
    run folder holds episodes of other
    settings (never overwritten: use a new workspace), ``NothingKeptError`` when the filter
    keeps no episode, ``SFTError``/``DatasetError`` from SFT.
    """
    from rlmdistill.loop.rooms import prepare_rooms
    from rlmdistill.models.preflight import preflight

    t0 = time.monotonic()
    n_rounds = rounds or cfg.rounds
    ws = cfg.workspace
    preflight(
        {
            "base root": cfg.base_root(),
            "sub": cfg.sub,
            "train_root": cfg.train_root,
            "grader": cfg.grader if cfg.grader != "reference" else None,
        }
    )
    ws.mkdir(parents=True, exist_ok=True)
    (ws / layout.EXPERIMENT).write_text(_experiment_record(cfg) + "\n", encoding="utf-8")
    loop = _Loop(cfg, log, progress)
    loop.strict = strict
    rooms = loop.timed("rooms", prepare_rooms, cfg)
    train, holdout, check = rooms.train, rooms.holdout, rooms.check
    for d in rooms.draws:
        if d.attempt:
            log(f"[note] rooms: {d.name} drawn again {d.attempt} time(s) until it had a rubric "
                f"criterion (kept seed {d.seed}; see rooms/split.json)")  # fmt: skip
    split = ws / layout.ROOMS / layout.SPLIT
    loop.note(split, "check", "rooms", 0, [], _sha_files(split),
              train_rooms=len(train), holdout_rooms=len(holdout),
              train_documents=check.n_train_documents, holdout_documents=check.n_holdout_documents,
              shared_documents=len(check.shared_documents), min_criteria=min(rooms.n_criteria.values()),
              redrawn_rooms=sum(1 for d in rooms.draws if d.attempt))  # fmt: skip
    n_crit = [sum(rooms.n_criteria[str(p)] for p in side) for side in (train, holdout)]
    log(
        f"[ok  ] rooms: {len(train)} training ({check.n_train_documents} documents, "
        f"{n_crit[0]} criteria), {len(holdout)} held-out ({check.n_holdout_documents} "
        f"documents, {n_crit[1]} criteria), none shared"
    )
    if rooms.cuad_source is not None:
        from rlmdistill.rooms.cuad import SAMPLE_SOURCE

        sample = Path(rooms.cuad_source).resolve() == SAMPLE_SOURCE
        log(f"[ok  ] rooms: CUAD contracts from {rooms.cuad_source}"
            + (" (the packaged 16-contract sample; rooms.source names a larger CUAD folder)"
               if sample else ""))  # fmt: skip
    base_run = ws / layout.RUNS / "eval-base"
    loop.timed("collect-eval-base", loop.collect, base_run, cfg.base_root(), holdout,
               cfg.collect_eval, "collect-eval", 0, [split])  # fmt: skip
    results: list[RoundResult] = []
    last = max(cfg.rounds, n_rounds)  # depth arms: the experiment's last round (or --rounds')
    for r in range(1, n_rounds + 1):
        prev = ws / layout.ADAPTERS / f"r{r - 1}"
        root = (cfg.train_root or cfg.base_root()) if r == 1 else loop.tuned_root(prev, r - 1)
        train_run = ws / layout.RUNS / f"r{r}-train"
        inputs = [split] if r == 1 else [split, prev / layout.SFT_MANIFEST]
        loop.timed(f"collect-train-r{r}", loop.collect, train_run, root, train, cfg.collect_train,
                   "collect-train", r, inputs)  # fmt: skip
        dataset = ws / layout.DATASETS / f"r{r}"
        loop.timed(f"filter-r{r}", loop.dataset, train_run, dataset, r)
        adapter = ws / layout.ADAPTERS / f"r{r}"
        loop.timed(f"sft-r{r}", loop.adapter, dataset, adapter, r)
        tuned_run = ws / layout.RUNS / f"r{r}-eval-tuned"
        tuned = loop.tuned_root(adapter, r)
        tuned_inputs = [split, adapter / layout.SFT_MANIFEST]
        loop.timed(f"collect-eval-tuned-r{r}", loop.collect, tuned_run, tuned,
                   holdout, cfg.collect_eval, "collect-eval", r, tuned_inputs)  # fmt: skip
        arms = report_arms(ws, r, last, cfg.depth_arms)
        if r == last:  # depth arms: the base root and this (last) round's tuned root
            for d in cfg.depth_arms:
                settings = cfg.eval_settings(d)
                loop.timed(f"collect-eval-base-d{d}", loop.collect, ws / layout.RUNS / f"eval-base-d{d}",
                           cfg.base_root(), holdout, settings, "collect-eval", 0, [split])  # fmt: skip
                loop.timed(f"collect-eval-tuned-r{r}-d{d}", loop.collect,
                           ws / layout.RUNS / f"r{r}-eval-tuned-d{d}", tuned, holdout, settings,
                           "collect-eval", r, tuned_inputs)  # fmt: skip
        adapters = [ws / layout.ADAPTERS / f"r{i}" for i in range(1, r + 1)]
        report = ws / layout.REPORTS / f"r{r}"
        loop.timed(f"report-r{r}", loop.report, arms, adapters, report, r)
        results.append(RoundResult(r, train_run, dataset, adapter, tuned_run, report, tuple(arms)))
    wall = time.monotonic() - t0
    (ws / "loop_timing.json").write_text(
        json.dumps({"wall_s": round(wall, 1), "stages_s": loop.stage_s}, indent=2) + "\n"
    )
    return LoopResult(ws, base_run, results, wall, loop.stage_s)
