"""Supervised fine-tuning of the root with TRL's ``SFTTrainer`` and a ``peft`` LoRA adapter.

``rlmdistill sft --dataset datasets/NAME --base MODEL --out adapters/NAME`` calls
:func:`train`. The dataset is pre-tokenised by the export stage (``input_ids`` +
``assistant_masks``); TRL treats a dataset with ``input_ids`` as processed and turns
``assistant_masks`` into labels (-100 elsewhere), so the loss covers the root's own turns only
(assistant-only loss). Before any step runs the dataset is checked against the base tokenizer
(:mod:`rlmdistill.sft.data`: template/vocabulary, supervised and end-of-turn tokens, lengths). Whole episodes can be
held out (``eval_fraction``) for an eval loss computed by the Trainer's own eval loop with the
same masks, before training and at the end of every epoch (``sft.json``). Packing, when asked
for, is TRL's best-fit-decreasing packing in padding-free form: whole examples only, position
ids restart at 0 per example, and ``transformers`` turns the restarts into a block-diagonal
attention mask.

Writes the adapter folder ``adapters/NAME/``: ``adapter_config.json`` +
``adapter_model.safetensors`` (peft), ``sft.json`` (:class:`SFTManifest`), ``train_log.jsonl``
(:class:`TrainLogRecord` per logging step) and ``checkpoints/checkpoint-<step>/`` (for
``--resume``). Runs unchanged under ``accelerate launch`` (DDP on CPU with gloo, DDP/FSDP/
DeepSpeed on GPUs; configs in ``examples/accelerate/``), and in Ray Train workers
(``--workers N``, :mod:`rlmdistill.sft.ray_train`, through :class:`TrainHooks`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from transformers import TrainerCallback

from rlmdistill.compat import library_warning_filter
from rlmdistill.hardware import CpuProbe, choose_compute_dtype, machine_info
from rlmdistill.models.spec import resolve_base
from rlmdistill.provenance import current_provenance
from rlmdistill.sft.config import SFTConfig
from rlmdistill.sft.data import (
    DatasetError,
    check_rows,
    check_tokenizer,
    load_export,
    split_eval,
)
from rlmdistill.traces.artefacts import (
    SFT_SCHEMA_VERSION,
    EvalLossRecord,
    SFTManifest,
    SFTStatus,
    TrainLogRecord,
    load_sft_manifest,
    read_train_log,
)
from rlmdistill.traces.layout import SFT_MANIFEST, TRAIN_LOG
from rlmdistill.traces.store import append_records

logger = logging.getLogger(__name__)


class SFTError(ValueError):
    """An SFT run cannot start: bad base model, target modules, device, or output folder."""


class SFTResult(NamedTuple):
    """What :func:`train` returns (losses are ``None`` on ranks other than 0)."""

    out_dir: Path
    global_step: int
    first_loss: float | None
    """First logged loss of this attempt."""
    final_loss: float | None
    """Last logged loss of this attempt."""
    tokens_seen: int
    train_runtime_s: float
    n_examples: int
    dropped: dict[str, int]
    resumed_from: str | None
    eval_losses: tuple[EvalLossRecord, ...] = ()
    """Eval losses of this attempt (empty when the eval loss is off, and on ranks but 0)."""
    eval_note: str = ""
    """What was held out for the eval loss, or why it is off."""
    rank_weights_sha256: tuple[str, ...] = ()
    """sha256 of each rank's trainable (LoRA) weights at the end, by rank, when a Ray Train run
    measured them (:mod:`rlmdistill.sft.ray_train`); empty otherwise."""


@dataclasses.dataclass(frozen=True)
class TrainHooks:
    """How a caller that drives :func:`train` in worker processes (Ray Train:
    :mod:`rlmdistill.sft.ray_train`) changes it; the defaults are the in-process run.

    Every field's default leaves :func:`train` exactly as ``rlmdistill sft`` runs it.
    """

    resume_from: str | None = None
    """Checkpoint folder to resume from instead of the newest one in ``out/checkpoints``
    (Ray Train's latest reported checkpoint after a restart); implies ``resume``."""
    callbacks: Sequence[TrainerCallback] = ()
    """More ``transformers`` callbacks, after the train-log callback."""
    rotate_checkpoints: bool = True
    """False: the Trainer keeps every checkpoint (the caller deletes old ones: Ray Train's
    ``CheckpointConfig.num_to_keep``)."""
    clean_log_on_resume: bool = False
    """On resume, drop the lines of ``train_log.jsonl`` past the checkpoint's step (work of an
    attempt that was lost) and mark the first line written after it with
    ``resumed_from_step``, so each step has one line; starting from step 0, drop them all."""
    output_checked: bool = False
    """The caller checked the output folder before the first attempt (Ray Train's driver), so
    files found there now are an earlier attempt's of the same run: an attempt that starts
    over replaces them instead of refusing the folder."""


def _now() -> datetime:
    return datetime.now(UTC)


def linear_module_names(model: Any) -> list[str]:
    """Sorted distinct last-component names of the model's ``torch.nn.Linear`` layers
    (the valid LoRA ``target_modules``), e.g. ``['down_proj', 'gate_proj', 'k_proj', ...]``."""
    import torch

    return sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    )


def check_target_modules(model: Any, targets: list[str]) -> None:
    """Raise :class:`SFTError` listing the valid names when a LoRA target is not a linear
    layer name of ``model`` (``all-linear`` is always valid)."""
    if targets == ["all-linear"]:
        return
    valid = linear_module_names(model)
    bad = [t for t in targets if t not in valid]
    if bad:
        raise SFTError(
            f"target_modules {bad} are not linear layers of this model; valid names: "
            f"{', '.join(valid)} (or ['all-linear'])"
        )


def check_embedding_rows(model: Any, tokenizer: Any) -> None:
    """Refuse a tokenizer with more tokens than the model's input embedding matrix has rows.

    A token id ``>= rows`` makes the embedding lookup fail mid-training with ``IndexError:
    index out of range in self``; a tokenizer *smaller* than the matrix is normal
    (Qwen2.5 pads its 151,665 tokens to 151,936 rows) and passes.

    Args:
        model: a loaded ``transformers`` model (``get_input_embeddings()`` gives the matrix).
        tokenizer: its tokenizer; ``len(tokenizer)`` counts added tokens too.

    Raises:
        SFTError: naming both sizes and the two fixes.
    """
    n_tokens = len(tokenizer)
    n_rows = int(model.get_input_embeddings().weight.shape[0])
    if n_tokens > n_rows:
        raise SFTError(
            f"the tokenizer has {n_tokens} tokens but the model's input embedding matrix has "
            f"{n_rows} rows ({n_tokens - n_rows} token ids would index past it and training "
            "would crash with 'IndexError: index out of range in self'); resize the "
            "embeddings (model.resize_token_embeddings(len(tokenizer)), then save the base "
            "and train on that folder) or use the model's own tokenizer"
        )


class Precision(NamedTuple):
    """Where and in what precision SFT runs, and why (printed, recorded in ``sft.json``)."""

    device: str
    """``cuda`` or ``cpu``."""
    bf16: bool
    """bfloat16 mixed precision (float32 master weights) when True, plain float32 otherwise."""
    reason: str


def resolve_precision(option: str, probe: CpuProbe | None = None) -> Precision:
    """The device and precision for the ``bf16`` option (:data:`~rlmdistill.sft.config.Bf16Option`).

    ``auto``: bfloat16 on a CUDA device that supports it; on CPU only where the CPU runs
    bfloat16 natively (:func:`rlmdistill.hardware.choose_compute_dtype`, the same decision as
    ``dtype: auto`` for collection): emulated bfloat16 on an AVX2-only CPU is several times
    slower than float32. ``on`` where neither holds is an error; ``off`` is float32.

    Args:
        option: ``auto`` | ``on`` | ``off``.
        probe: the CPU to decide for (default this machine; tests pass either kind).

    Raises:
        SFTError: ``on`` where bfloat16 is not native on the device that would train.
    """
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        supported = bool(torch.cuda.is_bf16_supported())
        reason = "CUDA device " + ("supports" if supported else "does not support") + " bfloat16"
    else:
        choice = choose_compute_dtype(probe)
        supported, reason = choice.dtype == "bfloat16", choice.reason
    if option == "on" and not supported:
        raise SFTError(
            f"bf16: on needs native bfloat16 on the training device; {reason} (use bf16: auto or off)"
        )
    bf16 = option != "off" and supported
    if option == "off":
        reason = "bf16: off"
    return Precision("cuda" if cuda else "cpu", bf16, reason)


class TrainLogCallback(TrainerCallback):
    """Appends a :class:`TrainLogRecord` to ``<adapter_dir>/train_log.jsonl`` at every logging
    step (rank 0 only).

    ``tokens_seen`` continues across ``--resume``: TRL's ``num_tokens`` restarts at 0 in a new
    process, so the count of the last line at or before the resumed step is added. Lines of an
    interrupted attempt after its last checkpoint stay in the file; readers keep the last line
    per step. With ``clean_on_resume`` (Ray Train runs, :class:`TrainHooks`) those lines are
    dropped instead and the first line after the resume carries ``resumed_from_step``.
    """

    def __init__(self, adapter_dir: Path, *, clean_on_resume: bool = False):
        self.adapter_dir = Path(adapter_dir)
        self.clean_on_resume = clean_on_resume
        self._resumed_from_step: int | None = None
        self.path = self.adapter_dir / TRAIN_LOG
        self.losses: list[float] = []
        self.eval_losses: list[EvalLossRecord] = []
        self.tokens_seen = 0
        self._offset = 0
        self._last_tokens = 0
        self._last_t = time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Set the clock and, on resume, the token offset from earlier lines."""
        self._last_t = time.perf_counter()
        log = read_train_log(self.adapter_dir) if self.path.exists() else None
        earlier = [r for r in (log.records if log else []) if r.step <= state.global_step]
        if self.clean_on_resume and log is not None and not state.global_step:
            earlier = []  # starting over: the lost attempt's lines all go
            if state.is_world_process_zero:
                self.path.unlink()
        elif self.clean_on_resume and log is not None:
            self._resumed_from_step = state.global_step
            if state.is_world_process_zero and (
                len(earlier) < len(log.records) or log.torn_tail
            ):  # lines of the lost attempt past the checkpoint go
                kept = [row for row, r in zip(log.rows, log.records, strict=True)
                        if r.step <= state.global_step]  # fmt: skip
                tmp = self.path.with_suffix(".jsonl.tmp")
                tmp.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
                os.replace(tmp, self.path)
        self._offset = int(earlier[-1].tokens_seen or 0) if earlier and state.global_step else 0
        self._last_tokens = self.tokens_seen = self._offset

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        """Write one line when ``logs`` holds a training loss."""
        if logs is None or "loss" not in logs:
            return
        now = time.perf_counter()
        tokens = self._offset + int(logs.get("num_tokens", 0))
        rate = (tokens - self._last_tokens) / max(now - self._last_t, 1e-9)
        self._last_t, self._last_tokens, self.tokens_seen = now, tokens, tokens
        self.losses.append(float(logs["loss"]))
        if not state.is_world_process_zero:
            return
        grad = logs.get("grad_norm")
        record = TrainLogRecord(
            step=state.global_step,
            epoch=float(logs.get("epoch", state.epoch or 0.0)),
            loss=float(logs["loss"]),
            learning_rate=float(logs.get("learning_rate", 0.0)),
            grad_norm=None if grad is None else float(grad),
            tokens_seen=tokens,
            tokens_per_s=round(rate, 3),
            time=_now(),
        )
        if self._resumed_from_step is not None:  # the first line after a restart says so
            record = TrainLogRecord.model_validate(
                {**record.model_dump(), "resumed_from_step": self._resumed_from_step}
            )
            self._resumed_from_step = None
        append_records(self.path, [record])

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        """Keep the eval loss (``metrics["eval_loss"]``) with its step and epoch."""
        if metrics is None or "eval_loss" not in metrics:
            return
        record = EvalLossRecord(
            step=state.global_step,
            epoch=float(state.epoch or 0.0),
            loss=float(metrics["eval_loss"]),
        )
        self.eval_losses.append(record)
        if state.is_world_process_zero:
            logger.info("eval loss %.4f at step %d (epoch %.2f)", record.loss, record.step,
                        record.epoch)  # fmt: skip


def _checkpointing_args(trl_config: Any, enabled: bool) -> dict[str, Any]:
    """Activation-checkpointing arguments under the name this transformers knows: 5.x renamed
    ``gradient_checkpointing[_kwargs]`` to ``activation_checkpointing[_kwargs]`` and warns on
    the old names (FutureWarning); older 5.x releases only know the old ones."""
    fields = {f.name for f in dataclasses.fields(trl_config)}
    name = (
        "activation_checkpointing"
        if "activation_checkpointing" in fields
        else "gradient_checkpointing"
    )
    return {name: enabled, f"{name}_kwargs": {"use_reentrant": False} if enabled else None}


def _token_sums(ds: Any, rows: list[int]) -> tuple[int, int]:
    """(input tokens, supervised tokens) of ``rows``."""
    sel = ds.select(rows)
    return sum(len(x) for x in sel["input_ids"]), sum(sum(m) for m in sel["assistant_masks"])


def _by_step(*records: list[EvalLossRecord]) -> list[EvalLossRecord]:
    """Eval losses in step order, the last one per step (a resumed attempt re-measures)."""
    return sorted({r.step: r for rs in records for r in rs}.values(), key=lambda r: r.step)


def _write_manifest(path: Path, manifest: SFTManifest) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _existing_output(out: Path) -> list[str]:
    names = ["adapter_model.safetensors", TRAIN_LOG, SFT_MANIFEST]
    found = [n for n in names if (out / n).exists()]
    ckpt = out / "checkpoints"
    if ckpt.is_dir() and any(ckpt.glob("checkpoint-*")):
        found.append("checkpoints/")
    return found


def _unprepare_after_eval(trainer: Any) -> None:
    """Let training wrap the model in DDP after an evaluation that ran before it.

    ``Trainer.evaluate()`` before ``train()`` prepares the bare model for evaluation
    (``accelerator.prepare_model(model, evaluation_mode=True)``), which marks it
    ``_is_accelerate_prepared``; ``train()``'s own ``prepare`` then returns it as is, not
    wrapped in ``DistributedDataParallel``, so with several processes the gradients were never
    averaged and each rank trained on its own shard (transformers 5.25, accelerate 1.16; found
    by the ranks' differing weights in ``benchmarks/bench_sft_ray.py``, where 16 episodes turn
    the eval loss on). With one process nothing is wrapped either way, so this does nothing
    there.
    """
    if trainer.args.world_size <= 1:
        return
    model = trainer.model
    if getattr(model, "_is_accelerate_prepared", False) and trainer.model_wrapped is model:
        model._is_accelerate_prepared = False
        models = trainer.accelerator._models
        models[:] = [m for m in models if m is not model]


def train(
    config: SFTConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    hooks: TrainHooks | None = None,
) -> SFTResult:
    """Fine-tune a LoRA adapter on ``config.base`` with ``config.dataset``; write ``config.out``.

    Steps: check the output folder (a folder holding a run needs ``resume=True``), resolve the
    base model, check the dataset against its tokenizer (:mod:`rlmdistill.sft.data`), hold
    out whole episodes for the eval loss (``eval_fraction``, :func:`~rlmdistill.sft.data.
    split_eval`), load the model in float32, check the LoRA targets, train with TRL
    ``SFTTrainer`` (checkpoints every ``save_steps`` into ``out/checkpoints/``; eval loss
    before training and at each epoch end), save the adapter and ``sft.json``.
    ``resume=True`` continues from the newest checkpoint (same dataset required); the step
    count continues. Call it in every process under ``accelerate launch``. ``hooks`` is for
    a caller that runs it in Ray Train workers (:class:`TrainHooks`; None: run as here).

    Raises:
        SFTError: output folder already holds a run (without ``resume``), ``resume`` without a
            checkpoint or with another dataset, base given as an adapter/HTTP spec, bad
            ``target_modules`` (lists valid names), ``bf16: on`` without support, a tokenizer with
            more tokens than the model's embedding rows (:func:`check_embedding_rows`).
        DatasetError: the dataset fails a check (names the row and episode).
        FileNotFoundError: base model not pulled / not found.
    """
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    hooks = hooks or TrainHooks()
    out = Path(config.out).resolve()
    dataset_dir = Path(config.dataset).resolve()
    ckpt_dir = out / "checkpoints"
    manifest_path = out / SFT_MANIFEST
    previous: SFTManifest | None = None
    resume_ckpt: str | None = None
    if hooks.resume_from is not None:
        resume, resume_ckpt = True, hooks.resume_from
    elif resume:
        resume_ckpt = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    if resume:
        if resume_ckpt is None:
            raise SFTError(f"{out}: --resume given but there is no checkpoint in {ckpt_dir}")
        if manifest_path.is_file():
            previous = load_sft_manifest(out)
    elif not hooks.output_checked and (found := _existing_output(out)):
        raise SFTError(
            f"{out} already holds an SFT run ({', '.join(found)}); pass --resume to continue "
            "it or choose another --out"
        )

    set_seed(config.seed)
    base_dir = resolve_base(config.base)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    ds, export, export_sha = load_export(dataset_dir)
    if previous is not None and previous.export_sha256 != export_sha:
        raise SFTError(
            f"{out}: --resume with another dataset (export.json sha256 {export_sha}, the run "
            f"was started on {previous.export_sha256})"
        )
    tok_check = check_tokenizer(ds, export, tokenizer, dataset_dir)
    export_eot = export.tokenizer.end_of_turn
    rows = check_rows(
        ds,
        tokenizer,
        dataset_dir,
        max_length=config.max_length,
        policy=config.length_policy,
        extra_end_of_turn=[str(t) for t in export_eot],
    )
    split = split_eval(ds, rows.kept, config.eval_fraction, config.seed)
    logger.info("sft: %s", split.note)
    columns = ["input_ids", "assistant_masks"]
    train_ds = ds.select(split.train).select_columns(columns)
    eval_ds = ds.select(split.eval).select_columns(columns) if split.eval else None
    n_tokens, n_supervised = (
        _token_sums(ds, split.train) if split.eval else (rows.n_tokens, rows.n_supervised)
    )

    precision = resolve_precision(config.bf16)
    device, bf16 = precision.device, precision.bf16
    logger.info("sft: %s %s (%s)", device, "bf16" if bf16 else "float32", precision.reason)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    model.config.use_cache = False  # a KV cache would defeat the packed-sequence mask (S8)
    check_embedding_rows(model, tokenizer)
    check_target_modules(model, config.target_modules)
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=(
            "all-linear" if config.target_modules == ["all-linear"] else config.target_modules
        ),
        task_type="CAUSAL_LM",
    )
    args = TRLSFTConfig(
        output_dir=str(ckpt_dir),
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler_type,
        warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        **_checkpointing_args(TRLSFTConfig, config.gradient_checkpointing),
        eval_strategy="epoch" if eval_ds is not None else "no",
        per_device_eval_batch_size=config.per_device_train_batch_size,
        prediction_loss_only=True,  # the loss only: no logits kept across the eval set
        bf16=bf16,
        use_cpu=device == "cpu",
        max_length=config.max_length,
        packing=config.packing,
        packing_strategy="bfd",
        padding_free=config.packing,
        assistant_only_loss=False,  # masks come pre-computed; TRL applies assistant_masks
        save_strategy=config.save_strategy,
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit if hooks.rotate_checkpoints else None,
        logging_steps=config.logging_steps,
        logging_first_step=True,
        seed=config.seed,
        data_seed=config.seed,
        report_to=config.report_to or "none",
        disable_tqdm=not progress,
        dataloader_num_workers=config.dataloader_num_workers,
        ddp_find_unused_parameters=False,
    )
    log_cb = TrainLogCallback(out, clean_on_resume=hooks.clean_log_on_resume)
    with library_warning_filter():
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=train_ds,
            eval_dataset=eval_ds,
            processing_class=tokenizer,
            peft_config=lora,
            callbacks=[log_cb, *hooks.callbacks],
        )
    trainer.accelerator.wait_for_everyone()  # every rank passed the output-folder check
    is_main = trainer.is_world_process_zero()
    manifest = SFTManifest(
        created_at=previous.created_at if previous else _now(),
        updated_at=_now(),
        status="running",
        config=config.model_dump(mode="json"),
        base_path=str(base_dir),
        dataset_path=str(dataset_dir),
        export_sha256=export_sha,
        sources=[src.model_dump(mode="json") for src in export.sources],
        tokenizer_check=tok_check.as_dict(),
        n_rows=rows.n_rows,
        n_examples=len(split.train),
        dropped=rows.dropped,
        n_tokens=n_tokens,
        n_supervised=n_supervised,
        eval_fraction=split.fraction,
        eval_note=split.note,
        eval_episodes=split.eval_episodes,
        n_eval_examples=len(split.eval),
        eval_losses=list(previous.eval_losses) if previous else [],
        device=device,
        precision="bf16" if bf16 else "float32",
        precision_reason=precision.reason,
        world_size=trainer.args.world_size,
        backend=trainer.accelerator.state.backend if trainer.args.world_size > 1 else None,
        seed=config.seed,
        **current_provenance(machine_info()).model_dump(),
        global_step=previous.global_step if previous else 0,
        resumed_from=[
            *(previous.resumed_from if previous else []),
            *([resume_ckpt] if resume_ckpt else []),
        ],
    )
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        _write_manifest(manifest_path, manifest)
    try:
        with library_warning_filter():
            if eval_ds is not None and resume_ckpt is None:
                trainer.evaluate()  # the baseline: eval loss of the base model (step 0)
                _unprepare_after_eval(trainer)
            output = trainer.train(resume_from_checkpoint=resume_ckpt)
    except BaseException as exc:
        if is_main:
            manifest.status, manifest.updated_at = "failed", _now()
            manifest.error = f"{type(exc).__name__}: {exc}"
            manifest.global_step = trainer.state.global_step
            manifest.eval_losses = _by_step(manifest.eval_losses, log_cb.eval_losses)
            _write_manifest(manifest_path, manifest)
        raise
    trainer.save_model(str(out))  # adapter_config.json + adapter_model.safetensors (rank 0)
    runtime = float(output.metrics.get("train_runtime", 0.0))
    if is_main:
        manifest.status, manifest.updated_at = "completed", _now()
        manifest.global_step = trainer.state.global_step
        manifest.train_loss = float(output.training_loss)
        manifest.train_runtime_s = runtime
        manifest.eval_losses = _by_step(manifest.eval_losses, log_cb.eval_losses)
        _write_manifest(manifest_path, manifest)
    trainer.accelerator.wait_for_everyone()
    return SFTResult(
        out_dir=out,
        global_step=trainer.state.global_step,
        first_loss=log_cb.losses[0] if log_cb.losses and is_main else None,
        final_loss=log_cb.losses[-1] if log_cb.losses and is_main else None,
        tokens_seen=log_cb.tokens_seen,
        train_runtime_s=runtime,
        n_examples=len(split.train),
        dropped=rows.dropped,
        resumed_from=resume_ckpt,
        eval_losses=tuple(log_cb.eval_losses) if is_main else (),
        eval_note=split.note,
    )


__all__ = [
    "SFT_SCHEMA_VERSION",
    "DatasetError",
    "EvalLossRecord",
    "SFTError",
    "SFTManifest",
    "SFTResult",
    "SFTStatus",
    "TrainHooks",
    "TrainLogCallback",
    "TrainLogRecord",
    "check_embedding_rows",
    "check_target_modules",
    "linear_module_names",
    "resolve_precision",
    "train",
]
