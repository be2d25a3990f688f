"""``rlmdistill loop``: the whole self-distillation loop, stage by stage, resumable.

Round ``r`` (1..N) of an experiment::

    rooms (once, train / held-out split checked)
    runs/eval-base        base root on the held-out rooms            (once, shared by rounds)
    runs/r<r>-train       root of the round on the training rooms    (r=1: train_root or base;
                                                                      r>1: base + adapters/r<r-1>)
    datasets/r<r>         filter (rejection sampling) + export of runs/r<r>-train
    adapters/r<r>         LoRA SFT of the base on datasets/r<r>
    runs/r<r>-check-<s>   checkpoint_check only: base + each checkpoint (step s) of
                          adapters/r<r> on the TRAINING rooms; adapters/r<r>/selected.json
                          names the one chosen by behaviour (loop.checkpoints), which the
                          tuned arm (and round r+1's training root) then loads
    runs/r<r>-eval-tuned  base + adapters/r<r> on the held-out rooms, same seeds as eval-base
    adapters/grpo         arms grpo / sft+grpo, round 1 only: online GRPO (rlmdistill rl, the
    adapters/sft-grpo     experiment's rl settings) on the training rooms, from the base or
                          from the base with adapters/r1's chosen checkpoint merged in
                          (adapters/sft-merged)
    runs/eval-grpo        each RL arm on the held-out rooms, same seeds as eval-base
    runs/eval-sft-grpo
    datasets/r<r>-sub     train: [root, sub] only: the kept episodes' sub-calls that
                          sub_where keeps (filter --target sub), exported for the sub model
    adapters/r<r>-sub     LoRA SFT of the sub model on datasets/r<r>-sub
    runs/r<r>-eval-sub    base root + tuned sub, and tuned root + tuned sub, on the held-out
    runs/r<r>-eval-both   rooms (same seeds; -d2 with depth_arms in the last round); round
                          r+1 collects its training run with both tuned models
    runs/eval-base-d2     depth_arms [2], last round only: the base root at depth 2, and
    runs/r<N>-eval-tuned-d2   base + adapters/r<N> at depth 2 (same rooms and seeds)
    reports/r<r>          base, tuned-r1 .. tuned-r<r>, grpo, sft+grpo, sub-r<i>, both-r<i>
                          (+ base-d2, tuned-r<N>-d2, sub-r<N>-d2, both-r<N>-d2 in the last
                          round) on the same held-out rooms, base the baseline; greedy-change
                          check of the adapter

Each stage is one :class:`Stage` row (its name, its typed config, its inputs and output, its
fingerprint, its skip rule and its stage function ``<stage>.main.run``), built just before it
runs (a row reads what the rows before it wrote); one executor, ``_Loop.execute``, skips,
runs, times, logs and records every row the same way.

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
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from rlmdistill.loop.checkpoints import SELECTED_FILE, CheckpointChoice
from rlmdistill.loop.config import (
    RL_ARMS,
    ExperimentConfig,
    ExperimentError,
    TrainedModel,
    TrainingArm,
)
from rlmdistill.loop.paths import legacy_match, to_record
from rlmdistill.traces import layout
from rlmdistill.traces.artefacts import load_sft_manifest
from rlmdistill.traces.lineage import ArtefactKind, LineageRecord, latest_records, record

if TYPE_CHECKING:  # the stages are imported when their row is built (torch, transformers)
    from rlmdistill.analysis.main import ReportConfig
    from rlmdistill.analysis.schema import Report
    from rlmdistill.collect.config import CollectConfig
    from rlmdistill.collect.executor import CollectResult
    from rlmdistill.export.dataset import ExportReport
    from rlmdistill.export.options import ExportOptions
    from rlmdistill.filter.main import FilterConfig, FilterOutcome
    from rlmdistill.judge.main import JudgeConfig, JudgeReport
    from rlmdistill.loop.adapter_check import GreedyCheck
    from rlmdistill.loop.rooms import PreparedRooms
    from rlmdistill.rl.config import RLConfig
    from rlmdistill.rl.train import RLResult
    from rlmdistill.sft.config import SFTConfig
    from rlmdistill.sft.train import SFTResult

__all__ = [
    "Arm",
    "DatasetResult",
    "LoopResult",
    "ReportResult",
    "RoundResult",
    "Stage",
    "report_arms",
    "rl_name",
    "run_loop",
]

Log = Callable[[str], None]
Detail = dict[str, object]
"""Stage facts kept in a lineage record's ``detail`` (JSON values: counts, specs, losses)."""

C = TypeVar("C")
R = TypeVar("R")


_MERGED_ROOT = re.compile(r"^local:([^+]+)\+adapter=([^+]+)$")
"""A root spec of a merged checkpoint with an adapter (the sft+grpo arm's)."""


def _no_lines(result: object) -> list[str]:
    return []


def _never() -> bool:
    return False


@dataclass(frozen=True)
class Stage(Generic[C, R]):
    """One row of the loop's table of stages: what the stage runs with, what it reads and
    writes, its fingerprint, and when it is up to date.

    :meth:`_Loop.execute` runs every row the same way: skip it when ``done()`` (logging
    ``[skip]``, and refreshing its lineage record when the stage's own rule found it done but
    the record is not current), else log ``[run ]``, call ``run(config)``, log ``ran_lines``,
    append its lineage record and call ``check``; the time from building the row to its end is
    added to ``loop_timing.json`` under ``clock or name``. ``C`` is the config type, ``R`` the
    stage's result type (``CollectResult``, ``JudgeReport``, ``SFTResult`` ...).
    """

    name: str
    """The row's name: ``rooms``, ``collect-train-r1``, ``judge-train-r1``, ``filter-r1``,
    ``sft-r1``, ``collect-eval-tuned-r1``, ``report-r1`` ..."""
    step: str
    """The ``stage`` of its lineage record: rooms, collect-train, collect-eval, judge, filter,
    sft, report."""
    kind: ArtefactKind
    """The ``kind`` of its lineage record."""
    round: int
    """Loop round (0: shared by every round: the rooms and the base arms)."""
    config: C
    """What it runs with: the stage's own config (``CollectConfig``, ``JudgeConfig``,
    ``SFTConfig``, ``ReportConfig``; filter + export: ``(FilterConfig, ExportOptions)``; the
    rooms: the experiment)."""
    inputs: tuple[Path, ...]
    """The artefacts it is made from (recorded relative to the workspace)."""
    output: Path
    """The artefact its lineage record names (a run folder, ``verdicts/<grader>.jsonl``,
    ``export.json``, ``sft.json``, a report folder, ``rooms/split.json``)."""
    fingerprint: str | Callable[[], str]
    """Fingerprint of its inputs and settings (``ExperimentConfig.fingerprint``); a callable
    is read when the record is written (a hash of what the stage wrote: the split, the
    verdicts)."""
    run: Callable[[C], R]
    """Runs the stage on ``config``, through the stage's typed ``<stage>.main.run``."""
    done: Callable[[], bool]
    """True when the output is up to date: the row is skipped."""
    detail: Callable[[R], Detail | None]
    """The detail of the lineage record of a run (``None``: no record, as when the judge
    graded nothing)."""
    skip_line: str = ""
    """What a skip logs after ``[skip] ``."""
    run_line: str = ""
    """What a run logs before it starts, after ``[run ] `` (empty: nothing)."""
    ran_lines: Callable[[R], list[str]] = _no_lines
    """Whole lines logged after it ran."""
    skipped_detail: Callable[[], Detail] | None = None
    """The detail recorded when the row is done by its own rule while its lineage record
    does not carry ``fingerprint`` (a run whose every episode is done, an adapter recorded
    with an older version's fingerprint); ``None``: nothing recorded."""
    check: Callable[[R], None] | None = None
    """Called after the record is written; raises to stop the loop (a collection that a
    server left unfinished)."""
    clock: str = ""
    """Key in ``loop_timing.json`` when not ``name`` (a run's grading counts with its
    collection)."""
    built_at: float = field(default_factory=time.monotonic, compare=False)
    """``time.monotonic()`` when the row was built: its time counts from here (building it
    reads the run's episodes, hashes inputs, resolves the base checkpoint)."""

    def current_fingerprint(self) -> str:
        """``fingerprint``, read now when it is a callable."""
        return self.fingerprint if isinstance(self.fingerprint, str) else self.fingerprint()


class DatasetResult(NamedTuple):
    """What the filter + export row did."""

    filtered: FilterOutcome
    exported: ExportReport


class ReportResult(NamedTuple):
    """What the report row did: the report, and the greedy check of the round's adapter
    (``None`` when ``check_greedy_change`` is off)."""

    report: Report
    check: GreedyCheck | None


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


def report_arms(
    ws: Path,
    rnd: int,
    last: int,
    depth_arms: Sequence[int],
    training_arms: Sequence[TrainingArm] = ("sft",),
    train: Sequence[TrainedModel] = ("root",),
) -> list[Arm]:
    """Held-out arms of round ``rnd``'s report in workspace ``ws``: ``base``, then
    ``tuned-r1`` .. ``tuned-r<rnd>`` (``runs/r<i>-eval-tuned``), then the RL arms of
    ``training_arms`` (trained once, in round 1: ``grpo`` (``runs/eval-grpo``) and
    ``sft+grpo`` (``runs/eval-sft-grpo``)), then, when ``train`` has the sub, per round ``i``
    ``sub-r<i>`` (base root + tuned sub, ``runs/r<i>-eval-sub``) and ``both-r<i>`` (tuned root +
    tuned sub, ``runs/r<i>-eval-both``), then, when ``rnd`` is the ``last`` round, for each
    depth ``d`` of ``depth_arms`` ``base-d<d>`` (``runs/eval-base-d<d>``),
    ``tuned-r<rnd>-d<d>`` (``runs/r<rnd>-eval-tuned-d<d>``) and, with the sub,
    ``sub-r<rnd>-d<d>`` and ``both-r<rnd>-d<d>``."""
    runs = ws / layout.RUNS
    subs = ["sub", "both"] if "sub" in train else []
    arms = [Arm("base", runs / "eval-base")]
    arms += [Arm(f"tuned-r{i}", runs / f"r{i}-eval-tuned") for i in range(1, rnd + 1)]
    arms += [Arm(a, runs / f"eval-{rl_name(a)}") for a in training_arms if a in RL_ARMS]
    arms += [Arm(f"{k}-r{i}", runs / f"r{i}-eval-{k}") for i in range(1, rnd + 1) for k in subs]
    if rnd == last:
        for d in depth_arms:
            arms += [
                Arm(f"base-d{d}", runs / f"eval-base-d{d}"),
                Arm(f"tuned-r{rnd}-d{d}", runs / f"r{rnd}-eval-tuned-d{d}"),
            ]
            arms += [Arm(f"{k}-r{rnd}-d{d}", runs / f"r{rnd}-eval-{k}-d{d}") for k in subs]
    return arms


def rl_name(arm: TrainingArm) -> str:
    """The folder name of an RL arm's adapter and held-out run: ``grpo``, ``sft-grpo``."""
    return arm.replace("+", "-")


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


def _graded_verdicts(run: Path) -> list[Path]:
    """A run's verdict files, without the LLM judges' cache and usage files beside them."""
    side = (".cache.jsonl", ".usage.jsonl")
    return sorted(p for p in layout.verdicts_dir(run).glob("*.jsonl") if not p.name.endswith(side))


class _Loop:
    strict = False
    """Collect with ``strict=True``: a document whose text cannot be extracted is an error."""

    def __init__(self, cfg: ExperimentConfig, log: Log, progress: bool) -> None:
        self.cfg = cfg
        self.ws = cfg.workspace
        self.log = log
        self.progress = progress
        self.seconds: dict[str, float] = {}
        """Wall seconds per ``loop_timing.json`` key, unrounded."""

    @property
    def stage_s(self) -> dict[str, float]:
        """Wall seconds per stage, to 0.1 s."""
        return {k: round(v, 1) for k, v in self.seconds.items()}

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
        merged = _MERGED_ROOT.match(root)
        if not root.startswith(head) and merged is not None:  # sft+grpo: both in the workspace
            base, adapter = merged.group(1), merged.group(2)
            if not (Path(base).is_absolute() or Path(adapter).is_absolute()):
                return root, {root: f"local:{self.ws / base}+adapter={self.ws / adapter}"}
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

    def up_to_date(self, artefact: Path, fingerprint: str) -> bool:
        """``artefact`` exists and its newest lineage record carries ``fingerprint``."""
        rec = latest_records(self.ws).get(self.rel(artefact))
        return artefact.exists() and rec is not None and rec.fingerprint == fingerprint

    def tuned_root(self, adapter: Path, rnd: int, suffix: str = "") -> str:
        """Root spec of base + ``adapter``: in process, or loaded into the vLLM server (as
        ``<name>-r<rnd><suffix>``)."""
        if self.cfg.serving is None:  # recorded relative to the workspace: see recorded_root
            return f"{self.cfg.base}+adapter={self.rel(adapter)}"
        from rlmdistill.loop.serving import load_lora_adapter

        name = f"{self.cfg.name}-r{rnd}{suffix}"
        self.log(
            f"[run ] load adapter {self.rel(adapter)} into {self.cfg.serving.base_url} as {name}"
        )
        return load_lora_adapter(self.cfg.serving, name, adapter)

    def tuned_sub(self, adapter: Path) -> str:
        """Sub spec of the sub model + ``adapter``, recorded relative to the workspace (opened
        with its absolute path: :meth:`collect_stage`)."""
        return f"{self.cfg.sub}+adapter={self.rel(adapter)}"

    def chosen_adapter(self, adapter: Path) -> Path:
        """The adapter folder a tuned root loads: the checkpoint that the round's behaviour
        check chose (``selected.json``), else ``adapter`` itself."""
        from rlmdistill.loop.checkpoints import load_choice

        choice = load_choice(adapter)
        return adapter if choice is None else adapter / choice.chosen

    def check_checkpoints(self, rnd: int, adapter: Path, rooms: list[Path], split: Path) -> None:
        """The behaviour check of every checkpoint of ``adapter`` on the training ``rooms``
        (``runs/r<rnd>-check-<step>``, collected and graded), then the choice row.

        Raises :class:`ExperimentError` when SFT kept no checkpoint to check."""
        from rlmdistill.loop.checkpoints import checkpoint_step, list_checkpoints

        checkpoints = list_checkpoints(adapter)
        if not checkpoints:
            raise ExperimentError(
                f"{self.rel(adapter)}: checkpoint_check is set but SFT kept no checkpoint in "
                f"{self.rel(adapter)}/checkpoints; set sft.save_strategy: epoch"
            )
        candidates: list[tuple[Path, Path]] = []
        for ckpt in checkpoints:
            step = checkpoint_step(ckpt)
            run = self.ws / layout.RUNS / f"r{rnd}-check-{step}"
            self.collect(
                f"collect-check-r{rnd}-{step}",
                run,
                root=self.tuned_root(ckpt, rnd, f"-{step}"),
                rooms=rooms,
                settings=self.cfg.check_settings(),
                step="collect-check",
                rnd=rnd,
                inputs=[split, adapter / layout.SFT_MANIFEST],
            )
            candidates.append((ckpt, run))
        self.execute(self.select_stage(rnd, adapter, candidates))

    # -- the one executor --------------------------------------------------------------
    def execute(self, stage: Stage[C, R]) -> R | None:
        """Run ``stage`` unless it is up to date (see :class:`Stage`); its result, or ``None``
        when skipped. The stage's errors pass through unchanged."""
        try:
            if stage.done():
                self.log(f"[skip] {stage.skip_line}")
                if stage.skipped_detail is not None and not self.up_to_date(
                    stage.output, stage.current_fingerprint()
                ):
                    self.note(stage, stage.skipped_detail())
                return None
            if stage.run_line:
                self.log(f"[run ] {stage.run_line}")
            result = stage.run(stage.config)
            for line in stage.ran_lines(result):
                self.log(line)
            detail = stage.detail(result)
            if detail is not None:
                self.note(stage, detail)
            if stage.check is not None:
                stage.check(result)
            return result
        finally:
            key = stage.clock or stage.name
            self.seconds[key] = self.seconds.get(key, 0.0) + time.monotonic() - stage.built_at

    def note(self, stage: Stage[C, R], detail: Detail) -> None:
        """Append ``stage``'s lineage record with ``detail``."""
        made = LineageRecord(
            artefact=self.rel(stage.output),
            kind=stage.kind,
            stage=stage.step,
            round=stage.round,
            inputs=[self.rel(p) for p in stage.inputs],
            fingerprint=stage.current_fingerprint(),
            detail=detail,
        )
        record(self.ws, made)

    def collect(
        self,
        name: str,
        out: Path,
        *,
        root: str,
        rooms: list[Path],
        settings: Mapping[str, object],
        step: str,
        rnd: int,
        inputs: Sequence[Path],
        sub: str | None = None,
    ) -> None:
        """Collect run ``out`` (resumed by episode), then grade it: two rows on one clock."""
        self.execute(self.collect_stage(name, out, root, rooms, settings, step, rnd, inputs, sub))
        self.execute(self.judge_stage(name, out, rnd))

    # -- the rows ----------------------------------------------------------------------
    def rooms_stage(self) -> Stage[ExperimentConfig, PreparedRooms]:
        """The rooms, built or read back, and the train/held-out split checked on document
        bytes (``rooms/split.json``); always runs (its check is recorded every time)."""
        from rlmdistill.loop.rooms import prepare_rooms

        split = self.ws / layout.ROOMS / layout.SPLIT

        def detail(rooms: PreparedRooms) -> Detail:
            check = rooms.check
            return {
                "train_rooms": len(rooms.train),
                "holdout_rooms": len(rooms.holdout),
                "train_documents": check.n_train_documents,
                "holdout_documents": check.n_holdout_documents,
                "shared_documents": len(check.shared_documents),
                "min_criteria": min(rooms.n_criteria.values()),
                "redrawn_rooms": sum(1 for d in rooms.draws if d.attempt),
            }

        return Stage(
            name="rooms",
            step="rooms",
            kind="check",
            round=0,
            config=self.cfg,
            inputs=(),
            output=split,
            fingerprint=lambda: _sha_files(split),
            run=prepare_rooms,
            done=_never,
            detail=detail,
            ran_lines=_rooms_lines,
        )

    def collect_stage(
        self,
        name: str,
        out: Path,
        root: str,
        rooms: list[Path],
        settings: Mapping[str, object],
        step: str,
        rnd: int,
        inputs: Sequence[Path],
        sub: str | None = None,
    ) -> Stage[CollectConfig, CollectResult]:
        """Run ``out`` of ``root`` (and ``sub``, default the experiment's) on ``rooms`` with
        the collect ``settings``: done when every episode is (a finished run loads no model);
        its fingerprint is the run's config fingerprint (which makes the episode ids) and its
        rooms."""
        from rlmdistill.collect.config import for_run
        from rlmdistill.collect.main import build_config, check_finished, pending_episodes
        from rlmdistill.collect.main import run as collect
        from rlmdistill.compat import library_warning_filter

        recorded, open_specs = self.recorded_root(out, root)
        sub_spec = sub or self.cfg.sub
        sub_head = f"{self.cfg.sub}+adapter="
        if sub_spec.startswith(sub_head) and not Path(sub_spec[len(sub_head) :]).is_absolute():
            open_specs = {
                **open_specs,
                sub_spec: sub_head + str(self.ws / sub_spec[len(sub_head) :]),
            }
        merged = {**settings, "rooms": [str(p) for p in rooms], "root": recorded}
        config = build_config(None, {**merged, "sub": sub_spec, "out": str(out)})
        config = for_run(config, out)  # a run keeps the fingerprint version it was written with
        room_records = sorted(to_record(p, self.ws) for p in rooms)
        fp = self.cfg.fingerprint(config.fingerprint(), room_records)
        pending = pending_episodes(config)

        def run(c: CollectConfig) -> CollectResult:
            with library_warning_filter():  # peft's is_gradient_checkpointing (tuned roots)
                return collect(
                    c,
                    progress=self.progress,
                    open_specs=open_specs,
                    strict=self.strict,
                    log=lambda line: self.log(f"[note] {line}"),
                )

        def detail(res: CollectResult) -> Detail:
            statuses = Counter(s.status for s in res.summaries)
            counts = {f"status_{k}": v for k, v in statuses.items()}
            return {"root": recorded, "new_episodes": len(res.summaries), **counts}

        return Stage(
            name=name,
            step=step,
            kind="run",
            round=rnd,
            config=config,
            inputs=tuple(inputs),
            output=out,
            fingerprint=fp,
            run=run,
            done=lambda: pending == 0,
            detail=detail,
            skip_line=f"{self.rel(out)}: all {config.episodes * len(rooms)} episodes done",
            run_line=f"{step} -> {self.rel(out)} ({pending} episodes to collect)",
            skipped_detail=lambda: {"root": recorded, "new_episodes": 0},
            check=check_finished,  # a server failed: stop here, naming the run and the cause
        )

    def judge_stage(self, clock: str, run: Path, rnd: int) -> Stage[JudgeConfig, JudgeReport]:
        """Grade every episode of ``run`` not yet graded (the judge skips the others itself, so
        the row always runs); recorded when it graded any, fingerprinted by the verdicts."""
        from rlmdistill.judge.main import JudgeConfig, grader_id_of
        from rlmdistill.judge.main import run as judge

        verdicts = layout.verdicts_path(run, grader_id_of(self.cfg.grader))

        def graded(rep: JudgeReport) -> list[str]:
            n = rep.result.graded
            return [f"[run ] judge {self.rel(run)}: {n} episodes graded"] if n else []

        return Stage(
            name=clock.replace("collect-", "judge-", 1),
            step="judge",
            kind="verdicts",
            round=rnd,
            config=JudgeConfig(run_dir=run, judge=self.cfg.grader),
            inputs=(run,),
            output=verdicts,
            fingerprint=lambda: _sha_files(verdicts),
            run=judge,
            done=_never,
            detail=lambda rep: {"graded": rep.result.graded} if rep.result.graded else None,
            ran_lines=graded,
            clock=clock,
        )

    def dataset_stage(
        self, rnd: int, train_run: Path, out: Path, target: TrainedModel = "root"
    ) -> Stage[tuple[FilterConfig, ExportOptions], DatasetResult]:
        """Filter (rejection sampling) then export ``train_run`` into dataset ``out``;
        fingerprint: the run's episodes, verdict and labels files, the rules and the export
        options (fields added since with their pre-field behaviour left out, so datasets written
        by earlier versions stay up to date). ``target="sub"``: the kept episodes' sub-calls
        that :meth:`ExperimentConfig.sub_rules` keep, exported for the sub model (its
        tokenizer; :mod:`rlmdistill.export.sub`)."""
        from rlmdistill.export.main import ExportConfig
        from rlmdistill.export.main import run as export
        from rlmdistill.export.options import build_export_options
        from rlmdistill.filter.main import FilterConfig
        from rlmdistill.filter.main import run as filter_episodes
        from rlmdistill.models.spec import resolve_base

        model = self.cfg.base if target == "root" else self.cfg.sub
        options = build_export_options(**{"tokenizer": str(resolve_base(model)), **self.cfg.export})
        rules = self.cfg.filter if target == "root" else self.cfg.sub_rules()
        rules = rules.model_copy(update={"grader": self.cfg.grader})
        verdicts = sorted((train_run / layout.VERDICTS).glob("*.jsonl"))
        labels = train_run / layout.LABELS  # people's labels change what is kept
        labelled = [labels] if labels.is_file() else []
        rule_fields = rules.model_dump(mode="json")
        if rule_fields.get("human_reject_wins") is True:  # the only behaviour before the
            del rule_fields["human_reject_wins"]  # field: datasets filtered then stay up to date
        fp = self.cfg.fingerprint(
            _sha_files(train_run / layout.EPISODES, *verdicts, *labelled),
            rule_fields,
            options.model_dump(mode="json"),
            *(["sub"] if target == "sub" else []),  # the root's keeps its fingerprint
        )
        manifest = out / layout.EXPORT_MANIFEST

        def run(config: tuple[FilterConfig, ExportOptions]) -> DatasetResult:
            from rlmdistill.export.sub import SubExportConfig
            from rlmdistill.export.sub import run as export_sub

            selection, export_options = config
            filtered = filter_episodes(selection)
            filtered.require_kept()
            if filtered.sub_decisions is not None:
                sub = SubExportConfig(
                    decisions=filtered.sub_decisions,
                    out=out,
                    options=export_options,
                    card_extra=filtered.card_section(),
                )
                return DatasetResult(filtered, export_sub(sub, progress=self.progress))
            exported = export(
                ExportConfig(
                    out=out,
                    options=export_options,
                    episodes=filtered.decisions,
                    card_extra=filtered.card_section(),
                ),
                progress=self.progress,
            )
            return DatasetResult(filtered, exported)

        def detail(res: DatasetResult) -> Detail:
            kept = res.filtered.report
            return {"kept": kept.n_kept, "total": kept.n_total, "examples": res.exported.n_examples}

        selection = FilterConfig(runs=[train_run], out=out, rules=rules, force=True, target=target)
        return Stage(
            name=f"filter-r{rnd}" + ("-sub" if target == "sub" else ""),
            step="filter",
            kind="dataset",
            round=rnd,
            config=(selection, options),
            inputs=(train_run,),
            output=manifest,
            fingerprint=fp,
            run=run,
            done=lambda: self.up_to_date(manifest, fp),
            detail=detail,
            skip_line=f"{self.rel(out)}: dataset up to date",
            run_line=f"filter + export {self.rel(train_run)} -> {self.rel(out)}",
        )

    def adapter_stage(
        self, rnd: int, dataset: Path, out: Path, target: TrainedModel = "root"
    ) -> Stage[SFTConfig, SFTResult]:
        """LoRA SFT of the base (``target="sub"``: of the sub model, with
        :meth:`ExperimentConfig.sub_sft`) on ``dataset`` into ``out`` (a stale adapter is
        replaced); fingerprint: ``export.json`` and the SFT settings with the dataset's
        workspace path. Also up to date by an older version's fingerprint, which named the
        dataset's absolute path (then its record is written again with the current
        fingerprint)."""
        from rlmdistill.sft.config import build_config as sft_config
        from rlmdistill.sft.main import run as sft

        fields, base = (
            (self.cfg.sft, self.cfg.base)
            if target == "root"
            else (self.cfg.sub_sft(), self.cfg.sub)
        )
        config = sft_config(None, {**fields, "dataset": dataset, "base": base, "out": out})
        settings = config.model_dump(mode="json", exclude={"out"})
        if settings.get("save_strategy") == "steps":  # the only strategy before the field:
            del settings["save_strategy"]  # adapters trained then stay up to date
        export = dataset / layout.EXPORT_MANIFEST
        manifest = out / layout.SFT_MANIFEST
        export_sha = _sha_files(export)
        fp = self.cfg.fingerprint(export_sha, {**settings, "dataset": self.rel(dataset)})
        legacy = None  # older versions fingerprinted the dataset's absolute path
        if manifest.is_file():
            old_dataset = str(load_sft_manifest(out).config.get("dataset", ""))
            if legacy_match(old_dataset, self.rel(dataset)):
                legacy = self.cfg.fingerprint(export_sha, {**settings, "dataset": old_dataset})

        def done() -> bool:
            by_legacy = legacy is not None and self.up_to_date(manifest, legacy)
            return by_legacy or self.up_to_date(manifest, fp)

        def run(c: SFTConfig) -> SFTResult:
            if out.exists():  # stale: a new dataset or new settings; the old adapter is replaced
                shutil.rmtree(out)
            return sft(c, progress=self.progress)

        def trained(res: SFTResult) -> list[str]:
            evals = " -> ".join(f"{r.loss:.4f}" for r in res.eval_losses)
            losses = f"; eval loss {evals}" if evals else ""
            return [f"[ok  ] sft {self.rel(out)}: {res.eval_note}{losses}"]

        def detail(res: SFTResult) -> Detail:
            return {
                "steps": res.global_step,
                "first_loss": res.first_loss,
                "final_loss": res.final_loss,
                "examples": res.n_examples,
                "eval_losses": [r.loss for r in res.eval_losses],
            }

        return Stage(
            name=f"sft-r{rnd}" + ("-sub" if target == "sub" else ""),
            step="sft",
            kind="adapter",
            round=rnd,
            config=config,
            inputs=(export,),
            output=manifest,
            fingerprint=fp,
            run=run,
            done=done,
            detail=detail,
            skip_line=f"{self.rel(out)}: adapter up to date",
            run_line=f"sft {self.rel(dataset)} -> {self.rel(out)}",
            ran_lines=trained,
            skipped_detail=lambda: latest_records(self.ws)[self.rel(manifest)].detail,
        )

    def rl_stage(
        self, arm: TrainingArm, train_rooms: list[Path], split: Path, sft_adapter: Path
    ) -> Stage[RLConfig, RLResult]:
        """Online GRPO of an RL ``arm`` on the training rooms (``rlmdistill rl`` with the
        experiment's ``rl`` settings) into ``adapters/<grpo|sft-grpo>``: ``grpo`` from the
        base; ``sft+grpo`` from the base with round 1's chosen SFT adapter (``sft_adapter``)
        merged in (``adapters/sft-merged``, written first). A stale adapter is replaced.
        Fingerprint: the RL settings with the rooms' workspace paths, the split and, for
        ``sft+grpo``, the SFT adapter's ``sft.json`` and its checkpoint choice."""
        from rlmdistill.rl.config import finish_config
        from rlmdistill.rl.main import run as rl_train
        from rlmdistill.rl.train import read_rl_manifest

        out = self.ws / layout.ADAPTERS / rl_name(arm)
        merged = self.ws / layout.ADAPTERS / "sft-merged"
        base = self.cfg.base if arm == "grpo" else f"local:{merged}"
        config = finish_config(
            {
                **self.cfg.rl,
                "rooms": [str(p) for p in train_rooms],
                "out": str(out),
                "base": base,
                "sub": self.cfg.sub,
            }
        )
        settings = config.model_dump(mode="json", exclude={"rooms", "out", "base"})
        inputs: list[Path] = [split]
        parts: list[object] = [arm, settings, [self.rel(p) for p in train_rooms]]
        if arm == "sft+grpo":
            chosen = self.chosen_adapter(sft_adapter)
            inputs.append(sft_adapter / layout.SFT_MANIFEST)
            parts += [self.rel(chosen), _sha_files(*inputs[1:], sft_adapter / SELECTED_FILE)]
        manifest = out / layout.RL_MANIFEST
        fp = self.cfg.fingerprint("rl", _sha_files(split), *parts)

        def done() -> bool:
            if not self.up_to_date(manifest, fp):
                return False
            return read_rl_manifest(manifest).status == "completed"

        def run(c: RLConfig) -> RLResult:
            from rlmdistill.compat import library_warning_filter
            from rlmdistill.models.spec import resolve_base
            from rlmdistill.sft.merge import merge_adapter

            if out.exists():  # stale: new settings, rooms or SFT root; replaced
                shutil.rmtree(out)
            if arm == "sft+grpo":
                if merged.exists():
                    shutil.rmtree(merged)
                base_dir = str(resolve_base(self.cfg.base))
                merge_adapter(self.chosen_adapter(sft_adapter), merged, base=base_dir)
            with library_warning_filter():
                return rl_train(c, progress=self.progress)

        def ran(res: RLResult) -> list[str]:
            rewards = ", ".join(f"{r.get('reward_mean', 0.0):.3f}" for r in res.steps)
            return [f"[ok  ] rl {arm} {self.rel(out)}: {res.global_step} steps, reward {rewards}"]

        def detail(res: RLResult) -> Detail:
            return {
                "arm": arm,
                "steps": res.global_step,
                "reward_means": [r.get("reward_mean") for r in res.steps],
                "zero_variance_groups": [r.get("zero_variance_groups") for r in res.steps],
            }

        return Stage(
            name=f"rl-{rl_name(arm)}",
            step="rl",
            kind="adapter",
            round=1,
            config=config,
            inputs=tuple(inputs),
            output=manifest,
            fingerprint=fp,
            run=run,
            done=done,
            detail=detail,
            skip_line=f"{self.rel(out)}: {arm} adapter up to date",
            run_line=f"rl {arm} on {len(train_rooms)} training rooms -> {self.rel(out)}",
            ran_lines=ran,
        )

    def rl_arm_root(self, arm: TrainingArm) -> str:
        """Root spec of an RL arm's held-out runs: base + ``adapters/grpo``, or the merged
        SFT root + ``adapters/sft-grpo`` (both recorded relative to the workspace)."""
        out = self.ws / layout.ADAPTERS / rl_name(arm)
        if arm == "grpo":
            return self.tuned_root(out, 1, "-grpo")
        merged = self.ws / layout.ADAPTERS / "sft-merged"
        return f"local:{self.rel(merged)}+adapter={self.rel(out)}"

    def report_stage(
        self,
        rnd: int,
        arms: list[Arm],
        adapters: list[Path],
        out: Path,
        rl_adapters: Sequence[Path] = (),
        sub_adapters: Sequence[Path] = (),
    ) -> Stage[ReportConfig, ReportResult]:
        """Report the arms (base first, the baseline) with every adapter's training curve, and
        the greedy check of this round's adapter (``adapters[-1]``) as a report section, and
        the per-step logs of the RL arms' adapters (``rl_adapters``: ``rl.json`` and
        ``rl_log.jsonl`` are inputs, when there are any).

        Up to date, hence skipped, when its fingerprint is unchanged: the fingerprint is its
        inputs (each arm's ``episodes.jsonl`` and verdict files, each adapter's ``sft.json``
        and ``train_log.jsonl``, their paths, the report settings with the arms' labels, and
        the greedy check's: the base and whether it runs; its prompt is the base run's first
        episode), and the report's statistical methods (``analysis.sections.METHODS`` and
        ``analysis.arms.ARM_METHODS``: a report of an earlier method is rebuilt), not the clock.
        """
        from rlmdistill.analysis.arms import ARM_METHODS
        from rlmdistill.analysis.checks import AdapterCheck
        from rlmdistill.analysis.main import ReportConfig
        from rlmdistill.analysis.main import run as analysis
        from rlmdistill.analysis.sections import METHODS

        base_run, adapter = arms[0].run, adapters[-1]  # baseline arm; this round's adapter
        runs = [a.run for a in arms]
        config = ReportConfig(
            runs=runs,
            out=out,
            grader=self.cfg.grader,
            sft=[*adapters, *sub_adapters],
            rl=list(rl_adapters),
            labels=[a.label for a in arms],
            overwrite=True,
        )
        settings = config.model_dump(mode="json", exclude={"runs", "out", "sft", "rl", "overwrite"})
        # absolute paths: report.json names the runs and the adapters by path, so a moved
        # workspace rebuilds its report (every other input is content)
        arm_inputs = [
            [str(r.resolve()), _sha_files(r / layout.EPISODES, *_graded_verdicts(r))] for r in runs
        ]
        adapter_inputs = [  # the sub's adapters only when there are any (fingerprints kept)
            [str(a.resolve()), _sha_files(a / layout.SFT_MANIFEST, a / layout.TRAIN_LOG)]
            for a in [*adapters, *sub_adapters]
        ]
        check_inputs = {"check_greedy_change": self.cfg.check_greedy_change, "base": self.cfg.base}
        methods = (METHODS, ARM_METHODS)  # a changed statistical method rebuilds the report
        rl_inputs = [  # only with RL arms: reports without them keep their fingerprint
            [str(a.resolve()), _sha_files(a / layout.RL_MANIFEST, a / layout.RL_LOG)]
            for a in rl_adapters
        ]
        fp = self.cfg.fingerprint(
            "report",
            arm_inputs,
            adapter_inputs,
            settings,
            check_inputs,
            *methods,
            *([rl_inputs] if rl_inputs else []),
        )

        def run(c: ReportConfig) -> ReportResult:
            chosen = self.chosen_adapter(adapter)
            check = self.greedy_check(base_run, chosen) if self.cfg.check_greedy_change else None
            sections: list[AdapterCheck] = []
            if check is not None:
                sections.append(AdapterCheck(adapter=self.rel(chosen), **check.model_dump()))
            report = analysis(c.model_copy(update={"adapter_checks": sections}))
            if check is not None:
                (out / "adapter_check.json").write_text(check.model_dump_json(indent=2) + "\n")
            else:  # a check of an earlier build would not match this report
                (out / "adapter_check.json").unlink(missing_ok=True)
            return ReportResult(report, check)

        def detail(res: ReportResult) -> Detail:
            return {"adapter_changed_greedy": None if res.check is None else res.check.changed}

        return Stage(
            name=f"report-r{rnd}",
            step="report",
            kind="report",
            round=rnd,
            config=config,
            inputs=(
                *runs,
                *(a / layout.SFT_MANIFEST for a in [*adapters, *sub_adapters]),
                *(a / layout.RL_MANIFEST for a in rl_adapters),
            ),
            output=out,
            fingerprint=fp,
            run=run,
            done=lambda: self.up_to_date(out, fp) and (out / layout.REPORT_JSON).is_file(),
            detail=detail,
            skip_line=f"{self.rel(out)}: report up to date",
            run_line=f"report {' vs '.join(self.rel(p) for p in runs)} -> {self.rel(out)}",
        )

    def select_stage(
        self, rnd: int, adapter: Path, candidates: list[tuple[Path, Path]]
    ) -> Stage[list[tuple[Path, Path]], CheckpointChoice]:
        """Choose among ``candidates`` (checkpoint folder, its check run) by behaviour
        (:func:`~rlmdistill.loop.checkpoints.choose_checkpoint`) into
        ``adapter/selected.json``; fingerprint: the check runs' episodes and verdicts."""
        from rlmdistill.loop.checkpoints import (
            SELECTED_FILE,
            checkpoint_step,
            choose_checkpoint,
            score_run,
        )

        out = adapter / SELECTED_FILE
        fp = self.cfg.fingerprint(
            "select",
            [
                [self.rel(c), _sha_files(r / layout.EPISODES, *_graded_verdicts(r))]
                for c, r in candidates
            ],
        )

        def run(pairs: list[tuple[Path, Path]]) -> CheckpointChoice:
            scores = [
                score_run(
                    r,
                    self.cfg.grader,
                    checkpoint=c.relative_to(adapter).as_posix(),
                    step=checkpoint_step(c),
                    run_name=self.rel(r),
                )
                for c, r in pairs
            ]
            choice = choose_checkpoint(scores)
            out.write_text(choice.model_dump_json(indent=2) + "\n", encoding="utf-8")
            return choice

        def ran(choice: CheckpointChoice) -> list[str]:
            lines = [
                f"[note] check {c.checkpoint}: memo rate {c.memo_rate:.2f}, pass rate "
                f"{c.pass_rate:.3f}, coverage {c.coverage:.2f} over {c.episodes} episodes "
                f"({c.run})"
                for c in choice.candidates
            ]
            return [*lines, f"[ok  ] select {self.rel(adapter)}: {choice.chosen}"]

        def detail(choice: CheckpointChoice) -> Detail:
            return {
                "chosen": choice.chosen,
                "memo_rates": {c.checkpoint: c.memo_rate for c in choice.candidates},
                "pass_rates": {c.checkpoint: c.pass_rate for c in choice.candidates},
            }

        return Stage(
            name=f"select-r{rnd}",
            step="select",
            kind="check",
            round=rnd,
            config=candidates,
            inputs=tuple(r for _, r in candidates),
            output=out,
            fingerprint=fp,
            run=run,
            done=lambda: self.up_to_date(out, fp),
            detail=detail,
            skip_line=f"{self.rel(out)}: checkpoint choice up to date",
            run_line=f"select a checkpoint of {self.rel(adapter)} by behaviour on the "
            "training rooms",
            ran_lines=ran,
        )

    def greedy_check(self, base_run: Path, adapter: Path) -> GreedyCheck:
        """Greedy decode of base vs base + ``adapter`` on the first root prompt of
        ``base_run`` (its first room's first sample). Raises :class:`ExperimentError` when the
        run has no episode."""
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


def _rooms_lines(rooms: PreparedRooms) -> list[str]:
    """What the rooms row logs: rooms drawn again for a rubric criterion, the split, and the
    CUAD source."""
    lines = [
        f"[note] rooms: {d.name} drawn again {d.attempt} time(s) until it had a rubric "
        f"criterion (kept seed {d.seed}; see rooms/split.json)"
        for d in rooms.draws
        if d.attempt
    ]
    check = rooms.check
    n_crit = [sum(rooms.n_criteria[str(p)] for p in side) for side in (rooms.train, rooms.holdout)]
    lines.append(
        f"[ok  ] rooms: {len(rooms.train)} training ({check.n_train_documents} documents, "
        f"{n_crit[0]} criteria), {len(rooms.holdout)} held-out ({check.n_holdout_documents} "
        f"documents, {n_crit[1]} criteria), none shared"
    )
    if rooms.cuad_source is not None:
        from rlmdistill.rooms.cuad import SAMPLE_SOURCE

        sample = Path(rooms.cuad_source).resolve() == SAMPLE_SOURCE
        packaged = " (the packaged 16-contract sample; rooms.source names a larger CUAD folder)"
        lines.append(
            f"[ok  ] rooms: CUAD contracts from {rooms.cuad_source}" + (packaged if sample else "")
        )
    return lines


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
    rooms = loop.execute(loop.rooms_stage())
    assert rooms is not None  # the rooms row has no skip rule
    train, holdout = rooms.train, rooms.holdout
    split = ws / layout.ROOMS / layout.SPLIT
    runs = ws / layout.RUNS
    base_run = runs / "eval-base"

    def evaluate(
        name: str,
        run: Path,
        root: str,
        settings: Mapping[str, object],
        rnd: int,
        inputs: Sequence[Path],
        sub: str | None = None,
    ) -> None:
        """Collect and grade a held-out run (``runs/eval-*``, ``runs/r<r>-eval-*``)."""
        loop.collect(
            name,
            run,
            root=root,
            rooms=holdout,
            settings=settings,
            step="collect-eval",
            rnd=rnd,
            inputs=inputs,
            sub=sub,
        )

    evaluate("collect-eval-base", base_run, cfg.base_root(), cfg.collect_eval, 0, [split])
    results: list[RoundResult] = []
    last = max(cfg.rounds, n_rounds)  # depth arms: the experiment's last round (or --rounds')
    for r in range(1, n_rounds + 1):
        prev = ws / layout.ADAPTERS / f"r{r - 1}"
        root = (
            (cfg.train_root or cfg.base_root())
            if r == 1
            else loop.tuned_root(loop.chosen_adapter(prev), r - 1)
        )
        train_sub = None  # later rounds collect with the last tuned sub when it trains
        train_inputs = [split] if r == 1 else [split, prev / layout.SFT_MANIFEST]
        if r > 1 and "sub" in cfg.train:
            prev_sub = ws / layout.ADAPTERS / f"r{r - 1}-sub"
            train_sub = loop.tuned_sub(prev_sub)
            train_inputs.append(prev_sub / layout.SFT_MANIFEST)
        train_run = runs / f"r{r}-train"
        loop.collect(
            f"collect-train-r{r}",
            train_run,
            root=root,
            rooms=train,
            settings=cfg.collect_train,
            step="collect-train",
            rnd=r,
            inputs=train_inputs,
            sub=train_sub,
        )
        dataset = ws / layout.DATASETS / f"r{r}"
        loop.execute(loop.dataset_stage(r, train_run, dataset))
        adapter = ws / layout.ADAPTERS / f"r{r}"
        loop.execute(loop.adapter_stage(r, dataset, adapter))
        sub_adapter = ws / layout.ADAPTERS / f"r{r}-sub"
        if "sub" in cfg.train:  # the sub's dataset (the kept episodes' sub-calls) and adapter
            sub_dataset = ws / layout.DATASETS / f"r{r}-sub"
            loop.execute(loop.dataset_stage(r, train_run, sub_dataset, "sub"))
            loop.execute(loop.adapter_stage(r, sub_dataset, sub_adapter, "sub"))
        tuned_inputs = [split, adapter / layout.SFT_MANIFEST]
        if cfg.checkpoint_check is not None:
            loop.check_checkpoints(r, adapter, train, split)
            tuned_inputs.append(adapter / SELECTED_FILE)
        tuned_run = runs / f"r{r}-eval-tuned"
        tuned = loop.tuned_root(loop.chosen_adapter(adapter), r)
        evaluate(f"collect-eval-tuned-r{r}", tuned_run, tuned, cfg.collect_eval, r, tuned_inputs)
        if r == 1:  # the RL arms: trained once, from the base (sft+grpo: from this SFT root)
            for arm in (a for a in cfg.arms if a in RL_ARMS):
                loop.execute(loop.rl_stage(arm, train, split, adapter))
                evaluate(
                    f"collect-eval-{rl_name(arm)}",
                    runs / f"eval-{rl_name(arm)}",
                    loop.rl_arm_root(arm),
                    cfg.collect_eval,
                    1,
                    [split, ws / layout.ADAPTERS / rl_name(arm) / layout.RL_MANIFEST],
                )
        sub_arms: list[tuple[str, str, list[Path]]] = []  # (name, root, inputs) with tuned sub
        if "sub" in cfg.train:
            sub_inputs = [split, sub_adapter / layout.SFT_MANIFEST]
            sub_arms = [
                ("sub", cfg.base_root(), sub_inputs),
                ("both", tuned, [*tuned_inputs, sub_adapter / layout.SFT_MANIFEST]),
            ]
            for k, k_root, k_inputs in sub_arms:
                k_run, k_sub = runs / f"r{r}-eval-{k}", loop.tuned_sub(sub_adapter)
                evaluate(
                    f"collect-eval-{k}-r{r}", k_run, k_root, cfg.collect_eval, r, k_inputs, k_sub
                )
        arms = report_arms(ws, r, last, cfg.depth_arms, cfg.arms, cfg.train)
        if r == last:  # depth arms: the base root, this (last) round's tuned root (+ sub arms)
            for d in cfg.depth_arms:
                settings = cfg.eval_settings(d)
                base_d = runs / f"eval-base-d{d}"
                evaluate(f"collect-eval-base-d{d}", base_d, cfg.base_root(), settings, 0, [split])
                tuned_d = runs / f"r{r}-eval-tuned-d{d}"
                evaluate(f"collect-eval-tuned-r{r}-d{d}", tuned_d, tuned, settings, r, tuned_inputs)
                for k, k_root, k_inputs in sub_arms:
                    k_run = runs / f"r{r}-eval-{k}-d{d}"
                    k_sub = loop.tuned_sub(sub_adapter)
                    evaluate(
                        f"collect-eval-{k}-r{r}-d{d}", k_run, k_root, settings, r, k_inputs, k_sub
                    )
        adapters = [ws / layout.ADAPTERS / f"r{i}" for i in range(1, r + 1)]
        report = ws / layout.REPORTS / f"r{r}"
        rl_adapters = [ws / layout.ADAPTERS / rl_name(a) for a in cfg.arms if a in RL_ARMS]
        sub_adapters = (
            [ws / layout.ADAPTERS / f"r{i}-sub" for i in range(1, r + 1)]
            if "sub" in cfg.train
            else []
        )
        loop.execute(loop.report_stage(r, arms, adapters, report, rl_adapters, sub_adapters))
        results.append(RoundResult(r, train_run, dataset, adapter, tuned_run, report, tuple(arms)))
    wall = time.monotonic() - t0
    (ws / "loop_timing.json").write_text(
        json.dumps({"wall_s": round(wall, 1), "stages_s": loop.stage_s}, indent=2) + "\n"
    )
    return LoopResult(ws, base_run, results, wall, loop.stage_s)
