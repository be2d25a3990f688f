"""In-process ``transformers`` back end for local checkpoints and LoRA adapters.

:class:`LocalChatClient` implements :class:`~rlmdistill.models.base.ModelClient` for a
checkpoint directory (``config.json`` + safetensors + tokenizer, e.g. one converted by
``rlmdistill models pull``), optionally with a PEFT LoRA adapter on top. One background worker
thread owns the model; :meth:`LocalChatClient.chat` may be called from any number of threads:
each call enqueues a request and waits for it, and the worker gathers up to ``max_batch``
concurrent requests with compatible sampling settings into one left-padded ``generate`` call.
That is what makes sub-call fan-out cheap on a CPU (Qwen2.5-Coder-0.5B on 2 cores: ~11 tok/s
alone, ~59 tok/s in a batch of 8, the entry's ``notes`` in ``models/registry.py``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlmdistill.hardware import announce_once, choose_compute_dtype
from rlmdistill.models.base import (
    ChatResult,
    ContextExceededError,
    FatalModelError,
    FinishReason,
    Message,
    ModelError,
    Sampling,
    Usage,
)
from rlmdistill.models.continuous import left_pad

LocalQuant = Literal["none", "int8"]
"""Weight quantisation (``+quant=`` of a ``local:`` spec) of an in-process model for
generation: ``int8`` = dynamic int8 (:func:`quantize_int8`), ``none`` = the checkpoint's
weights in the compute dtype."""

INT8_DTYPES = ("auto", "float32")
"""The dtypes ``quantize="int8"`` combines with: its activations are float32."""

LocalEngine = Literal["static", "continuous"]
"""How the worker batches requests: ``static`` = up to ``max_batch`` queued requests per
``generate`` call, the next call once every row is done; ``continuous`` = one running batch
that requests join and leave between decode steps (:mod:`rlmdistill.models.continuous`)."""

ENGINE_ENV = "RLMDISTILL_LOCAL_ENGINE"
"""Environment variable choosing the engine of clients built without ``engine``
(``continuous`` when unset; ``static`` until 2026-12-07). An operational setting: not part of
a model spec, so episode ids do not change."""

PREFIX_CACHE_ENV = "RLMDISTILL_PREFIX_CACHE_MB"
"""Environment variable giving the continuous engine's prefix cache size in MiB for clients
built without ``prefix_cache_mb`` (:data:`PREFIX_CACHE_MB` when unset; ``0`` turns it off). An
operational setting: not part of a model spec, so episode ids do not change."""

PREFIX_CACHE_MB = 512.0
"""Default prefix cache size (MiB of keys and values). Qwen2.5-Coder-0.5B holds 12 KiB per
token in bfloat16 (24 layers x 2 key/value heads x 64 x 2 x 2 bytes), 24 KiB in float32, so
512 MiB keep ~43,000 / ~21,000 tokens: the conversations of 8 concurrent root episodes of the
main job several times over."""


def prefix_cache_bytes(prefix_cache_mb: float | None = None) -> int:
    """Bytes of the continuous engine's prefix cache: ``prefix_cache_mb``, else
    ``$RLMDISTILL_PREFIX_CACHE_MB``, else :data:`PREFIX_CACHE_MB` (MiB). ``ValueError``
    naming the setting for a value that is not a number >= 0."""
    where = "prefix_cache_mb"
    value: object = prefix_cache_mb
    if value is None:
        where, value = f"${PREFIX_CACHE_ENV}", os.environ.get(PREFIX_CACHE_ENV) or PREFIX_CACHE_MB
    try:
        mb = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        mb = -1.0
    if not mb >= 0 or mb == float("inf"):
        raise ValueError(
            f"{where}: expected MiB >= 0 (0 turns the prefix cache off), got {value!r}"
        )
    return int(mb * 2**20)


LocalDtype = Literal["auto", "float32", "bfloat16", "float16"]
"""Compute dtype; ``auto`` = bfloat16 where the CPU runs it natively, else float32
(:func:`rlmdistill.hardware.choose_compute_dtype`)."""

MIN_NEW_TOKENS = 16
"""``max_tokens`` is clamped to fit the context only if at least this many new tokens fit."""


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling
    enqueued_at: float
    future: Future[ChatResult] = field(default_factory=Future)
    cached_tokens: int = 0
    """Leading prompt ids the continuous engine took from its prefix cache."""

    @property
    def group_key(self) -> tuple[Any, ...]:
        s = self.sampling
        return ("greedy",) if s.temperature == 0 else ("sample", s.temperature, s.top_p)


_STOP = object()


class _LogprobRecorder:
    """A logits processor that records the log-probability of every generated token.

    ``generate`` calls it once per step with the scores of the next token; the token chosen
    at step ``k`` shows up as the last input id at step ``k + 1``, so each call gathers the
    previous step's log-softmax at that id and keeps only the current step's (one
    ``batch x vocab`` array, never all steps). :meth:`finish` gathers the last step. The
    scores are the model's logits after the processors ``generate`` runs before custom ones
    (e.g. a checkpoint's ``repetition_penalty``) and before temperature/top-p, i.e. the
    model's own distribution like vLLM's default ``raw_logprobs``.
    """

    def __init__(self, prompt_width: int, turn_end_id: int | None = None) -> None:
        self.width = prompt_width
        self.turn_end_id = turn_end_id
        self.previous: Any = None
        self.rows: list[list[float]] | None = None
        self.turn_end_rows: list[list[float]] | None = None
        """Per row and step, the log-probability of ``turn_end_id`` (when given): the logprob
        of the id a secondary end id is replaced by (:func:`normalise_turn_end`)."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.previous is not None:
            self._gather(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _gather(self, chosen: Any) -> None:
        vals = self.previous.gather(1, chosen.view(-1, 1).long()).view(-1).tolist()
        if self.rows is None:
            self.rows = [[] for _ in vals]
        for row, v in zip(self.rows, vals, strict=True):
            row.append(float(v))
        if self.turn_end_id is not None:
            ends = self.previous[:, self.turn_end_id].tolist()
            if self.turn_end_rows is None:
                self.turn_end_rows = [[] for _ in ends]
            for row, v in zip(self.turn_end_rows, ends, strict=True):
                row.append(float(v))

    def finish(self, out: Any) -> list[list[float] | None]:
        """Per row, the log-probabilities of the generated ids of ``out`` (rows of
        ``generate``'s output: prompt width + generated)."""
        if self.previous is not None and out.shape[1] > self.width:
            self._gather(out[:, -1])
            self.previous = None
        n = out.shape[0]
        return list(self.rows) if self.rows is not None else [None] * n


def declared_end_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Every id generation stops on, in order: ``generation_config.eos_token_id`` (an int or a
    list: Qwen3 ``[151645, 151643]``, Phi-3.5 ``[32007, 32001, 32000]``, gemma-3 ``[1, 106]``),
    the tokenizer's ``eos_token_id``, then whichever of ``<|im_end|>``, ``<|eot_id|>``,
    ``<|endoftext|>`` the vocabulary has. Empty when none is known."""
    ids: list[int] = []
    gen_eos = getattr(generation_config, "eos_token_id", None)
    for v in [gen_eos, tokenizer.eos_token_id]:
        if isinstance(v, int):
            ids.append(v)
        elif isinstance(v, list):
            ids.extend(int(x) for x in v)
    for special in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(special)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.append(tid)
    return list(dict.fromkeys(ids))


_PROBE = "rlmdistill turn-end probe"


def template_turn_end(tokenizer: Any, end_ids: Sequence[int]) -> int | None:
    """The end id the chat template writes after an assistant message, or ``None``.

    Renders ``[user, assistant(probe)]`` without a generation prompt and tokenises what
    follows the assistant's text: its first id, when it is one of ``end_ids`` (ChatML:
    ``<|im_end|>``; Llama 3: ``<|eot_id|>``; Phi-3: ``<|end|>``; Gemma: ``<end_of_turn>``).
    ``None`` when the template renders no end id of ``end_ids`` there (then nothing is
    normalised) or cannot render that conversation."""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}],
            tokenize=False,
        )
    except Exception:  # a template that refuses this conversation: nothing to normalise
        return None
    at = str(text).rfind(_PROBE)
    if at < 0:
        return None
    tail = str(text)[at + len(_PROBE) :]
    ids = list(tokenizer(tail, add_special_tokens=False)["input_ids"])
    return int(ids[0]) if ids and ids[0] in set(end_ids) else None


def normalise_turn_end(
    ids: list[int],
    logprobs: list[float] | None,
    end_ids: Sequence[int],
    turn_end_id: int | None,
    turn_end_logprobs: list[float] | None = None,
) -> tuple[list[int], list[float] | None]:
    """``ids`` (and ``logprobs``) with the first end id replaced by ``turn_end_id`` when it is a
    *secondary* end id (one of ``end_ids`` that the template does not write after a turn).

    Generation stops on every declared end id (Qwen: ``<|endoftext|>`` as well as
    ``<|im_end|>``), but the next prompt, rendered by the chat template, closes the turn with
    the template's own id; a completion kept with the secondary id does not extend into the
    next prompt, and the episode has no single token sequence (trl PR #7039 describes the same
    mismatch in GRPO). The replaced position's logprob becomes ``turn_end_logprobs`` at that
    position (the model's log-probability of the id now in the row) when given. Returns new
    lists; nothing changes when ``turn_end_id`` is ``None`` or no secondary end id occurs."""
    if turn_end_id is None:
        return ids, logprobs
    ends = set(end_ids)
    k = next((i for i, t in enumerate(ids) if t in ends), None)
    if k is None or ids[k] == turn_end_id:
        return ids, logprobs
    ids = [*ids[:k], turn_end_id, *ids[k + 1 :]]
    if logprobs is not None and turn_end_logprobs is not None and k < len(turn_end_logprobs):
        logprobs = [*logprobs[:k], turn_end_logprobs[k], *logprobs[k + 1 :]]
    return ids, logprobs


def quantize_int8(model: Any) -> int:
    """Quantise every ``torch.nn.Linear`` of ``model`` in place to dynamic int8; returns how many.

    Weights become int8 with one scale per output channel (``per_channel_dynamic_qconfig``);
    activations are quantised per batch at run time and outputs come back in float32
    (PyTorch's ``torch.ao.quantization.quantize_dynamic``, the fbgemm kernels on x86). The
    model must be float32. LoRA modules (names containing ``lora_``) are left in float32, so
    an adapter's update is applied exactly on top of the quantised base layer.

    Measured on a 2-core AVX2-only AMD EPYC (Qwen2.5-Coder-0.5B; ``docs/models.md``): a
    decode step at batch 8 and 1,500 tokens of context 118 ms against 401 ms in float32,
    prefill 242 against 164 tokens/s. Outputs differ from float32's (greedy decoding of a
    root prompt diverged at its 6th token), so it is a different model for the episode ids.

    Raises:
        ValueError: ``model`` is not float32.
    """
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    param = next(iter(model.parameters()), None)
    if param is not None and param.dtype != torch.float32:
        raise ValueError(f"int8 quantisation needs a float32 model, got {param.dtype}")
    names = {
        name: per_channel_dynamic_qconfig
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and "lora_" not in name
    }
    with warnings.catch_warnings():
        # torch 2.13 marks its eager quantisation API and quantised tensors as deprecated (to
        # move to torchao); torch is pinned, and tests/test_models_local.py fails on removal
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quant")
        quantize_dynamic(model, names, dtype=torch.qint8, inplace=True)
    return len(names)


def _engine_choice(engine: str | None) -> LocalEngine:
    """``engine``, else ``$RLMDISTILL_LOCAL_ENGINE``, else ``continuous``; ``ValueError``
    naming the value (and where it came from) when it is not a :data:`LocalEngine`."""
    value = engine if engine is not None else (os.environ.get(ENGINE_ENV) or "continuous")
    if value not in ("static", "continuous"):
        where = "engine" if engine is not None else f"${ENGINE_ENV}"
        raise ValueError(f"{where} = {value!r}: must be static or continuous")
    return value  # type: ignore[return-value]


def bf16_supported() -> bool:
    """True when this CPU runs bfloat16 natively (AVX512-BF16, AMX, Arm BF16).

    Until 2026-11 this answered "a bfloat16 matmul runs", which is also true where PyTorch
    emulates bfloat16 (AVX2-only CPUs, 9x slower than float32 there). It now asks
    :func:`rlmdistill.hardware.choose_compute_dtype`, the one decision ``dtype: auto`` uses.
    """
    return choose_compute_dtype().dtype == "bfloat16"


class LocalChatClient:
    """Batched in-process chat client over a ``transformers`` causal LM.

    Args:
        model_dir: checkpoint directory (``config.json``, safetensors, tokenizer files with a
            chat template).
        adapter: optional PEFT adapter directory loaded with ``PeftModel.from_pretrained``.
        dtype: compute dtype (``auto``: :func:`rlmdistill.hardware.choose_compute_dtype`,
            bfloat16 only where the CPU runs it natively, else float32; the choice and its
            reason are printed once per process and kept in ``dtype_reason``).
        max_batch: most requests generating at once: per ``generate`` call (static), in the
            running batch (continuous). Default 16: with the continuous engine's sampling a
            decode step of Qwen2.5-Coder-0.5B (bfloat16, 2-core Xeon with AMX, ~1,000 tokens
            of context) took 119 ms at 1 row, 142 ms at 8 and 186 ms at 16, so more rows are
            nearly free.
        batch_wait_s: after the first queued request, how long the worker waits for more
            before generating (seconds).
        context_window: override of ``config.max_position_embeddings`` (tokens).
        num_threads: ``torch.set_num_threads`` value; default ``$RLMDISTILL_NUM_THREADS``
            when set, else torch's default (which honours ``OMP_NUM_THREADS``).
        model_id: id recorded in traces; default ``local:<model_dir>[+adapter=<adapter>]``.
        merge_adapter: merge the LoRA weights into the base weights before generating
            (``W + (alpha / r) * B @ A`` per target, PEFT's ``merge_and_unload``). Default
            (``None``): merged, except with ``quantize="int8"``, where the LoRA path stays
            unmerged in float32 on top of the int8 base (:func:`quantize_int8`). Merged is
            the faster and no less exact: the unmerged path adds two small matmuls per target
            module per step. Measured (2-core Xeon, AVX-512 BF16, Qwen2.5-Coder-0.5B with the
            main job's rank-16 adapter on all 7 projections, bfloat16; 4 recorded root
            prompts of 674-762 tokens, 64 greedy tokens each at batch 1): 35.0 s merged
            against 44.6 s unmerged (base alone 30.5 s); greedy replies identical; per-token
            logprobs of the tuned root's 1,581 recorded reply tokens against a float32
            reference differ by 0.0016 on average merged and 0.0019 unmerged.
        quantize: ``int8``: dynamic int8 weights for generation (:func:`quantize_int8`;
            needs float32, so ``dtype`` ``auto`` means float32 then); ``none`` (default).
        engine: :data:`LocalEngine`; default ``$RLMDISTILL_LOCAL_ENGINE``, else
            ``continuous`` (1.4-1.6x faster on recorded RLM episodes, ``docs/models.md``).
            ``continuous`` falls back to ``static`` (with a warning) for a model it cannot run
            exactly (:func:`rlmdistill.models.continuous.unsupported_reason`); ``engine``
            then says ``static``.
        prefix_cache_mb: MiB of keys and values of finished requests the continuous engine
            keeps, so that a prompt continuing one of them (a root's next turn) prefills only
            its new ids (:class:`rlmdistill.models.continuous.PrefixCache`); default
            :func:`prefix_cache_bytes` (``$RLMDISTILL_PREFIX_CACHE_MB``, else 512); ``0``
            turns it off. Replies then report the reused ids as ``usage.cached_tokens``.

    Raises:
        ValueError: ``quantize="int8"`` with a ``dtype`` other than ``auto``/``float32``, an
            unknown ``engine``, or a ``prefix_cache_mb`` that is not a number >= 0.
        FatalModelError: the checkpoint or the adapter cannot be loaded.

    Determinism: greedy decoding (``temperature == 0``) of a given prompt is deterministic for
    a given batch composition. The static engine seeds one generator from the *first*
    request's ``seed`` per batch, so sampled outputs depend on which requests were batched
    together (and left padding can shift logits slightly), i.e. sampling is not reproducible
    across batch compositions. The continuous engine samples each request with a generator of
    its own seed: the same prompt and seed give the same reply up to the rounding of batched
    matmuls (a prefix taken from the prefix cache is one more such rounding).

    Attributes:
        generate_calls: number of ``model.generate`` calls made so far.
        requests_served: number of requests answered (success or error).
        batch_sizes: how many ``generate`` calls ran with each batch size.
        generate_s: seconds spent inside ``generate`` (continuous engine: in prefills and
            decode steps).
        engine: the engine the worker runs (:data:`LocalEngine`).
        adapter_merged: whether the adapter was merged into the base weights.
        batcher: the continuous engine's
            :class:`~rlmdistill.models.continuous.ContinuousBatcher` (its ``prefill_tokens``,
            ``reused_tokens``, ``decode_steps``, ``row_steps`` and ``prefix_cache``); absent
            with the static engine.
        prefix_cache_bytes: the prefix cache's size in bytes (0: off).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        adapter: str | Path | None = None,
        dtype: LocalDtype = "auto",
        max_batch: int = 16,
        batch_wait_s: float = 0.02,
        context_window: int | None = None,
        num_threads: int | None = None,
        model_id: str | None = None,
        merge_adapter: bool | None = None,
        quantize: LocalQuant = "none",
        engine: LocalEngine | None = None,
        prefix_cache_mb: float | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir)
        self.adapter = Path(adapter) if adapter is not None else None
        default_id = f"local:{model_dir}" + (f"+adapter={adapter}" if adapter else "")
        self.model_id = model_id or default_id
        self.max_batch = max(1, max_batch)
        self.batch_wait_s = batch_wait_s
        self.engine: LocalEngine = _engine_choice(engine)
        self.prefix_cache_bytes = prefix_cache_bytes(prefix_cache_mb)
        threads = num_threads or int(os.environ.get("RLMDISTILL_NUM_THREADS") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        self.dtype_reason = f"dtype {dtype} given"
        if quantize == "int8":
            if dtype not in INT8_DTYPES:
                raise ValueError(
                    f"{self.model_id}: int8 weights run with float32 activations; "
                    f"dtype {dtype} cannot be combined with quantize=int8"
                )
            dtype, self.dtype_reason = "float32", "int8 weights need float32 activations"
        if dtype == "auto":
            choice = choose_compute_dtype()
            announce_once(choice)
            dtype, self.dtype_reason = choice.dtype, choice.reason
        self.dtype: str = dtype
        self.quantize: LocalQuant = quantize
        self.adapter_merged = False
        t0 = time.perf_counter()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
            model: Any = AutoModelForCausalLM.from_pretrained(
                str(self.model_dir), dtype=getattr(torch, dtype)
            )
            if self.adapter is not None:
                from peft import PeftModel

                from rlmdistill.compat import library_warning_filter

                with library_warning_filter():  # peft reads a deprecated transformers property
                    model = PeftModel.from_pretrained(model, str(self.adapter))
                if merge_adapter is None:
                    merge_adapter = quantize != "int8"
                if merge_adapter:
                    model = model.merge_and_unload()
                self.adapter_merged = bool(merge_adapter)
            if quantize == "int8":
                quantize_int8(model)
        except (OSError, ValueError) as exc:
            raise FatalModelError(f"{self.model_id}: cannot load: {exc}", attempts=0) from exc
        model.eval()
        self.model: Any = model
        self.load_s = time.perf_counter() - t0
        self._start(context_window)

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        model_id: str,
        max_batch: int = 8,
        batch_wait_s: float = 0.02,
        context_window: int | None = None,
        prefix_cache_mb: float | None = None,
    ) -> LocalChatClient:
        """A client around a model already in memory (no second copy is loaded).

        Used by online RL (:mod:`rlmdistill.rl`): the root of each rollout is the very model
        being trained, so every episode samples from the current policy. The caller keeps
        ownership of ``model`` (its train/eval mode, its device); :meth:`close` stops the
        worker and drops this client's reference only. ``dtype`` is read from the model's
        first parameter; ``prefix_cache_mb`` as in the constructor (the cache lives as long as
        the client, so build a new client after the weights change). Raises
        ``FatalModelError`` when ``tokenizer`` has no chat template, ``ValueError`` for a bad
        ``prefix_cache_mb``.
        """
        self = cls.__new__(cls)
        self.model_dir = Path(str(getattr(model, "name_or_path", "") or "."))
        self.adapter = None
        self.adapter_merged = False
        self.model_id = model_id
        self.max_batch = max(1, max_batch)
        self.batch_wait_s = batch_wait_s
        self.prefix_cache_bytes = prefix_cache_bytes(prefix_cache_mb)
        param = next(iter(model.parameters()), None)
        self.dtype = str(param.dtype).removeprefix("torch.") if param is not None else "float32"
        self.dtype_reason = "the given model's dtype"
        self.quantize = "none"
        self.tokenizer = tokenizer
        self.model = model
        self.load_s = 0.0
        self._start(context_window)
        return self

    def _start(self, context_window: int | None) -> None:
        """Check the tokenizer, read limits off the model config, start the worker thread."""
        model = self.model
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise FatalModelError(f"{self.model_id}: tokenizer has no chat template", attempts=0)
        config = model.config
        self.context_window: int = int(
            context_window or getattr(config, "max_position_embeddings", 0) or 2048
        )
        self.eos_ids: list[int] = self._eos_ids()
        self.turn_end_id: int | None = template_turn_end(self.tokenizer, self.eos_ids)
        """The end id the chat template closes a turn with; a completion that stopped on
        another end id keeps this one instead (:func:`normalise_turn_end`)."""
        pad = self.tokenizer.pad_token_id
        self.pad_id: int = int(pad if pad is not None else self.eos_ids[0])
        self._tok_lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._close_lock = threading.Lock()
        self.generate_calls = 0
        self.requests_served = 0
        self.batch_sizes: Counter[int] = Counter()
        self.generate_s = 0.0
        engine = getattr(self, "engine", None) or _engine_choice(None)
        if engine == "continuous":
            from rlmdistill.models.continuous import unsupported_reason

            why = unsupported_reason(model)
            if why is not None:
                warnings.warn(
                    f"{self.model_id}: the continuous engine cannot run this model exactly "
                    f"({why}); using the static engine",
                    stacklevel=3,
                )
                engine = "static"
        self.engine = engine
        run = self._run_continuous if engine == "continuous" else self._run
        self._worker = threading.Thread(target=run, name="rlmd-local-worker", daemon=True)
        self._worker.start()

    def _eos_ids(self) -> list[int]:
        ids = declared_end_ids(self.tokenizer, getattr(self.model, "generation_config", None))
        if not ids:
            raise FatalModelError(f"{self.model_id}: no end-of-sequence token known", attempts=0)
        return ids

    # -- caller side ------------------------------------------------------------------

    def render(self, messages: list[Message], prefill: str | None = None) -> str:
        """The exact prompt string sent to the model: chat template with the generation
        prompt, then ``prefill``."""
        with self._tok_lock:
            text = self.tokenizer.apply_chat_template(
                [{"role": m.role, "content": m.content} for m in messages],
                tokenize=False,
                add_generation_prompt=True,
            )
        return str(text) + (prefill or "")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added special tokens (the chat template already
        writes any BOS it wants, so this never doubles it)."""
        with self._tok_lock:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt_ids(self, text: str) -> list[int]:
        """Ids of a rendered prompt (:meth:`encode`; a subclass may reuse earlier ids)."""
        return self.encode(text)

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """Complete ``messages`` (see :meth:`ModelClient.chat`); blocks until done.

        ``max_tokens`` is clamped to the context window when at least
        :data:`MIN_NEW_TOKENS` new tokens fit. ``usage.prompt_tokens`` counts the rendered
        prompt including the prefill; ``completion_tokens`` counts generated tokens up to and
        including EOS, or up to the token that completed a stop string; ``cached_tokens``: the
        leading prompt ids taken from the continuous engine's prefix cache (0 with the static
        engine).

        Raises:
            ContextExceededError: prompt + ``MIN_NEW_TOKENS`` do not fit the context.
            FatalModelError: the client is closed or generation failed.
        """
        if self._closed:
            raise FatalModelError(f"{self.model_id}: client is closed", attempts=0)
        ids, max_tokens = self._prepare(messages, sampling, prefill)
        return self._submit(ids, max_tokens, sampling).result()

    def _prepare(
        self, messages: list[Message], sampling: Sampling, prefill: str | None
    ) -> tuple[list[int], int]:
        ids = self._prompt_ids(self.render(messages, prefill))
        room = self.context_window - len(ids)
        max_tokens = sampling.max_tokens
        if len(ids) + max_tokens > self.context_window:
            if room < MIN_NEW_TOKENS:
                raise ContextExceededError(
                    f"{self.model_id}: prompt of {len(ids)} tokens leaves {room} of the "
                    f"{self.context_window}-token context (need >= {MIN_NEW_TOKENS})",
                    attempts=1,
                )
            max_tokens = room
        return ids, max_tokens

    def _submit(self, ids: list[int], max_tokens: int, sampling: Sampling) -> Future[ChatResult]:
        req = _Request(ids, max_tokens, sampling, time.perf_counter())
        self._queue.put(req)
        if self._closed:  # closed between the check and the put: the worker may be gone
            self._fail_pending()
        return req.future

    def chat_batch(
        self,
        batch: list[list[Message]],
        sampling: Sampling,
        *,
        prefill: str | None = None,
    ) -> list[ChatResult | ModelError]:
        """Complete every conversation of ``batch``; one entry per input, in order.

        All requests are queued at once, so they share ``generate`` calls (up to
        ``max_batch`` each). A prompt that fails (e.g. ``ContextExceededError``) yields its
        error in its slot and never fails the others.
        """
        slots: list[ChatResult | ModelError | Future[ChatResult]] = []
        for messages in batch:
            try:
                if self._closed:
                    raise FatalModelError(f"{self.model_id}: client is closed", attempts=0)
                ids, max_tokens = self._prepare(messages, sampling, prefill)
                slots.append(self._submit(ids, max_tokens, sampling))
            except ModelError as exc:
                slots.append(exc)
        out: list[ChatResult | ModelError] = []
        for slot in slots:
            if isinstance(slot, Future):
                try:
                    out.append(slot.result())
                except ModelError as exc:
                    out.append(exc)
            else:
                out.append(slot)
        return out

    # -- worker side ------------------------------------------------------------------

    def _gather(self, into: list[_Request], limit: int, wait_s: float) -> bool:
        """Append queued requests to ``into`` until it holds ``limit`` or ``wait_s`` seconds
        have passed (0: only those queued now). Returns True when the stop sentinel came."""
        deadline = time.perf_counter() + wait_s
        while len(into) < limit:
            timeout = deadline - time.perf_counter()
            try:
                item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            into.append(item)
        return False

    def _run(self) -> None:
        pending: list[_Request] = []
        while True:
            if not pending:
                item = self._queue.get()
                if item is _STOP:
                    break
                pending.append(item)
            if self._gather(pending, 4 * self.max_batch, self.batch_wait_s):
                pending.extend(self._drain())
                for req in pending:
                    self._fail(req, "client closed before the request ran")
                return
            key = pending[0].group_key
            batch = [r for r in pending if r.group_key == key][: self.max_batch]
            pending = [r for r in pending if r not in batch]
            self._generate(batch)
        self._fail_pending()

    def _run_continuous(self) -> None:
        """The continuous engine's loop (:mod:`rlmdistill.models.continuous`): between two
        decode steps, take queued requests up to ``max_batch`` rows (waiting
        ``batch_wait_s`` for company when the batch is empty) and hand back finished rows."""
        from rlmdistill.models.continuous import ContinuousBatcher, PrefixCache

        size = self.prefix_cache_bytes  # set by __init__ and from_model
        batcher = ContinuousBatcher(
            self.model,
            self.tokenizer,
            self.eos_ids,
            self.pad_id,
            self.turn_end_id,
            PrefixCache(size) if size else None,
        )
        self.batcher = batcher
        while True:
            new: list[_Request] = []
            if not len(batcher):
                item = self._queue.get()
                stop = item is _STOP
                if not stop:
                    new.append(item)
                    stop = self._gather(new, self.max_batch, self.batch_wait_s)
            else:
                stop = self._gather(new, self.max_batch - len(batcher), 0.0)
            if stop or self._closed:
                why = "client closed before the request ran"
                batcher.fail_all("client closed during generation", self._fail)
                for req in new + self._drain():
                    self._fail(req, why)
                return
            t0 = time.perf_counter()
            try:
                finished = batcher.admit(new) if new else []
                finished += batcher.step()
            except Exception as exc:
                why = f"generation failed: {type(exc).__name__}: {exc}"
                for req in new:
                    self._fail(req, why)
                batcher.fail_all(why, self._fail)
                continue
            self.generate_s += time.perf_counter() - t0
            self.generate_calls += 1
            self.batch_sizes[len(batcher) + len(finished)] += 1
            done_at = time.perf_counter()
            for f in finished:
                f.job.cached_tokens = f.reused
                self._deliver(f.job, f.ids, f.logprobs, f.turn_end_logprobs, done_at)

    def _drain(self) -> list[_Request]:
        out: list[_Request] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out
            if item is not _STOP:
                out.append(item)

    def _fail_pending(self) -> None:
        for req in self._drain():
            self._fail(req, "client closed before the request ran")

    def _fail(self, req: _Request, why: str) -> None:
        if not req.future.done():
            req.future.set_exception(FatalModelError(f"{self.model_id}: {why}", attempts=1))
            self.requests_served += 1

    def _generate(self, batch: list[_Request]) -> None:
        import torch
        from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

        try:
            input_ids, attention = left_pad([r.prompt_ids for r in batch], self.pad_id)
            width = input_ids.shape[1]
            limits = [r.max_tokens for r in batch]
            stops = [list(r.sampling.stop) for r in batch]
            tokenizer = self.tokenizer
            eos = torch.tensor(self.eos_ids)

            class _RowStop(StoppingCriteria):
                """Row i is done at its own max_tokens, at EOS, or once a stop string shows."""

                def __call__(self, ids: torch.Tensor, scores: Any, **kw: Any) -> torch.Tensor:
                    gen = ids[:, width:]
                    done = torch.isin(gen, eos).any(dim=1)
                    for i in range(gen.shape[0]):
                        if done[i]:
                            continue
                        if gen.shape[1] >= limits[i]:
                            done[i] = True
                        elif stops[i]:
                            longest = max(len(s) for s in stops[i])
                            tail = tokenizer.decode(gen[i, -(longest + 8) :].tolist())
                            done[i] = any(s in tail for s in stops[i])
                    return done

            sampling = batch[0].sampling
            recorder = _LogprobRecorder(width, self.turn_end_id)
            gen_kwargs: dict[str, Any] = {
                "max_new_tokens": max(limits),
                "pad_token_id": self.pad_id,
                "eos_token_id": self.eos_ids,
                "stopping_criteria": StoppingCriteriaList([_RowStop()]),
                "logits_processor": LogitsProcessorList([recorder]),
            }
            if sampling.temperature > 0:
                gen_kwargs.update(
                    do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0
                )
            else:
                gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            seed = next((r.sampling.seed for r in batch if r.sampling.seed is not None), None)
            rng = (
                torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
            )
            t0 = time.perf_counter()
            with rng, torch.inference_mode():
                if seed is not None:
                    torch.manual_seed(seed)
                out = self.model.generate(
                    input_ids=input_ids, attention_mask=attention, **gen_kwargs
                )
            self.generate_calls += 1
            self.batch_sizes[len(batch)] += 1
            self.generate_s += time.perf_counter() - t0
        except Exception as exc:
            for r in batch:
                self._fail(r, f"generation failed: {type(exc).__name__}: {exc}")
            return
        done_at = time.perf_counter()
        logprobs = recorder.finish(out)
        turn_end_lps: list[list[float] | None] = [None] * len(batch)
        if recorder.turn_end_rows is not None:
            turn_end_lps = list(recorder.turn_end_rows)
        for i, r in enumerate(batch):
            self._deliver(r, out[i, width:].tolist(), logprobs[i], turn_end_lps[i], done_at)

    def _deliver(
        self,
        req: _Request,
        ids: list[int],
        logprobs: list[float] | None,
        turn_end_logprobs: list[float] | None,
        done_at: float,
    ) -> None:
        """Answer ``req`` with its generated ``ids`` (end id normalised,
        :func:`normalise_turn_end`, then :meth:`_decode`), or fail it naming the error."""
        try:
            gen, lps = normalise_turn_end(
                ids, logprobs, self.eos_ids, self.turn_end_id, turn_end_logprobs
            )
            result = self._decode(gen, req, done_at, lps)
        except Exception as exc:
            self._fail(req, f"decoding failed: {type(exc).__name__}: {exc}")
            return
        req.future.set_result(result)
        self.requests_served += 1

    def _decode(
        self, gen: list[int], req: _Request, done_at: float, logprobs: list[float] | None = None
    ) -> ChatResult:
        finish: FinishReason = "length"
        eos = set(self.eos_ids)
        cut = next((k for k, t in enumerate(gen) if t in eos), None)
        text_ids = gen
        if cut is not None and cut < req.max_tokens:
            gen, text_ids, finish = gen[: cut + 1], gen[:cut], "stop"
        else:
            gen = text_ids = gen[: req.max_tokens]
        with self._tok_lock:
            text = str(self.tokenizer.decode(text_ids, skip_special_tokens=True))
            hits = [(text.find(s), s) for s in req.sampling.stop if s and s in text]
            if hits:
                pos, stop = min(hits)
                text, finish = text[:pos], "stop"
                lo, hi = 1, len(text_ids)  # first token count whose decode shows the stop
                while lo < hi:
                    mid = (lo + hi) // 2
                    if stop in self.tokenizer.decode(text_ids[:mid], skip_special_tokens=True):
                        hi = mid
                    else:
                        lo = mid + 1
                gen = text_ids[:lo]
        return ChatResult(
            text=text,
            usage=Usage(
                prompt_tokens=len(req.prompt_ids),
                cached_tokens=req.cached_tokens,
                completion_tokens=len(gen),
            ),
            latency_s=done_at - req.enqueued_at,
            finish_reason=finish,
            model=self.model_id,
            attempts=1,
            token_ids=gen,
            logprobs=logprobs[: len(gen)] if logprobs is not None else None,
            prompt_token_ids=list(req.prompt_ids),
        )

    # -- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker (queued requests fail with ``FatalModelError``) and drop the
        model. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(_STOP)
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout=600)
        self.model = None

    def __enter__(self) -> LocalChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalChatClient({self.model_id!r}, dtype={self.dtype}, max_batch={self.max_batch})"


__all__ = [
    "ENGINE_ENV",
    "LocalChatClient",
    "LocalEngine",
    "ModelError",
    "bf16_supported",
    "declared_end_ids",
    "normalise_turn_end",
    "quantize_int8",
    "template_turn_end",
]
