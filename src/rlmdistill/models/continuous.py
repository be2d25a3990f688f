"""Continuous batching for the in-process back end: requests join and leave the running batch
between decode steps.

:class:`~rlmdistill.models.local.LocalChatClient`'s ``static`` engine hands up to
``max_batch`` queued requests to one ``model.generate`` call and takes no new request until
every row of it is done. In an RLM episode the rows finish far apart: a root turn that runs
to ``max_tokens`` (10 of the base root's 22 turns in the main job's seed-1 run hit 512) holds
back every root turn and sub-call queued behind it, so episodes wait for a row that is not
theirs.

:class:`ContinuousBatcher` keeps one batch running instead, with its own KV cache
(``transformers.DynamicCache``), and between two decode steps

1. drops the rows that are done (EOS, ``max_tokens``, a stop string) and hands back their
   results at once;
2. prefills the requests that arrived, up to ``max_batch`` rows in all, and joins their caches
   to the running one (left-padded to a common length: each row keeps its own positions and
   its padding is masked, as ``generate`` does for a left-padded batch);
3. runs one decode step for every row.

This is the scheduling vLLM and TGI call continuous (iteration-level) batching (Yu et al.,
"Orca", OSDI 2022).

A :class:`PrefixCache` keeps the KV of rows that finished (prompt + reply), and a request whose
prompt starts with one of them prefills only the ids after that shared prefix. An RLM root
re-sends its whole conversation every turn (the last prompt + reply + the REPL's output), and
the first turns of a run share their system prompt, so most root prompt ids were computed
before: 79-93% of them in the runs of ``docs/results/quickstart/workspace.tar.xz``. vLLM calls
this automatic prefix caching (its hash of KV blocks); here it is a lookup of the longest
common prefix over whole finished rows, bounded in bytes, least recently used first out.

``transformers``' own continuous batching (``generate_batch``) was measured on the 2-core CPU
of docs/results/quickstart.md at 12.3 new tokens/s for 16 requests against ~25 for one static
``generate`` call, so it is not used here.

Each row samples with its own ``torch.Generator`` seeded from its request's seed, so a
sampled reply no longer depends on which requests shared its batch (beyond the rounding of
batched matmuls). Temperature and top-p apply per row; the recorded logprob of a generated id
is the model's own log-softmax at that id, before temperature and top-p, as the static
engine's and vLLM's default. Models whose generation config asks for other logits processors
(a repetition penalty, ``no_repeat_ngram_size``, ...) or whose cache has sliding-window layers
are refused (:func:`unsupported_reason`); the client then runs the static engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

_NEUTRAL = {
    "repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_repetition_penalty": (None, 1.0),
    "bad_words_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "min_new_tokens": (None, 0),
    "min_length": (None, 0),
    "sequence_bias": (None,),
}
"""Generation-config fields ``generate`` turns into logits processors, with their values that
turn nothing on."""


NUCLEUS_FIRST_K = 1024
"""How many of the most likely ids :func:`nucleus_candidates` looks at before it falls back to
sorting the whole vocabulary."""


def nucleus_candidates(probs: Any, top_p: Any, first_k: int = NUCLEUS_FIRST_K) -> tuple[Any, Any]:
    """Per row, the ids top-p (nucleus) sampling may draw and their probabilities.

    Args:
        probs: ``[rows, vocab]`` float probabilities (after temperature).
        top_p: ``[rows, 1]`` nucleus mass per row, in (0, 1].
        first_k: ids looked at first (:data:`NUCLEUS_FIRST_K`).

    Returns:
        ``(cand_p, cand_ids)``, both ``[rows, k]``: the candidates' probabilities, 0 for those
        outside the nucleus (so ``torch.multinomial(cand_p[r], 1)`` draws from the nucleus
        renormalised), and their vocabulary ids. ``k`` is ``first_k`` when every row's nucleus
        lies within its ``first_k`` most likely ids, else the whole vocabulary.

    The nucleus is Holtzman et al.'s (ICLR 2020) as ``transformers``' ``TopPLogitsWarper``
    keeps it: an id stays when the ids more likely than it hold less than ``top_p`` of the
    mass, so the most likely id always stays, and ``top_p == 1`` keeps every id. The same set
    as sorting the whole vocabulary (up to float rounding at the boundary), from a
    ``torch.topk`` of ``first_k`` ids instead of a sort of all of them: measured on a 2-core
    Xeon (one thread, 6 rows of Qwen2.5's 151,936 ids), 2.6 ms against 77 ms for the sort,
    and drawing among 1,024 ids instead of 151,936 saves ~20 ms more.
    """
    import torch

    if bool((top_p >= 1.0).all()):  # no nucleus: every id, unsorted
        return probs, torch.arange(probs.shape[-1]).expand_as(probs)
    k = min(int(first_k), probs.shape[-1])
    vals, ids = torch.topk(probs, k, dim=-1)  # descending
    if k < probs.shape[-1] and bool((vals.sum(dim=-1, keepdim=True) < top_p).any()):
        vals, ids = torch.sort(probs, dim=-1, descending=True)  # a flat row: all of them
    above = vals.cumsum(dim=-1) - vals  # mass of the ids more likely than each
    keep = above < top_p
    keep[:, 0] = True
    return vals.masked_fill(~keep, 0.0), ids


def unsupported_reason(model: Any) -> str | None:
    """Why :class:`ContinuousBatcher` cannot run ``model`` exactly as ``generate`` would, or
    ``None``: a generation-config field from :data:`_NEUTRAL` set to something else (the
    static engine applies it), or a config with sliding-window attention layers."""
    gen = getattr(model, "generation_config", None)
    for name, neutral in _NEUTRAL.items():
        value = getattr(gen, name, None)
        if value not in neutral:
            return f"generation_config.{name} = {value!r}"
    config: Any = getattr(model, "config", None)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    kinds = set(getattr(text, "layer_types", None) or [])
    if kinds - {"full_attention"}:
        return f"attention layer types {sorted(kinds)}"
    return None


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """``(ids, mask)``: long tensors of shape ``[len(prompts), longest]``, each prompt at the
    right end of its row, ``pad_id`` before it; ``mask`` 1 on prompt ids, 0 on padding."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


PREFIX_MIN_TOKENS = 64
"""Shortest shared prefix :class:`PrefixCache` reuses: a hit is prefilled alone (one row),
not in the batch of new requests, which only pays when it skips enough ids."""


@dataclass(eq=False)  # rows are told apart by identity (tensor fields do not compare)
class _Prefix:
    ids: Any
    """``[n]`` long tensor: the ids whose keys and values ``layers`` hold."""
    layers: list[tuple[Any, Any]]
    """Per layer ``(keys, values)``, each ``[1, kv_heads, n, head_dim]``."""
    nbytes: int


class PrefixCache:
    """The keys and values of finished rows, found again by their ids' longest common prefix
    with a new prompt.

    Args:
        max_bytes: most bytes of keys and values held (``0``: nothing is kept). A row larger
            than this is not kept; the least recently used rows go first to make room.
        min_tokens: shortest shared prefix :meth:`lookup` returns
            (:data:`PREFIX_MIN_TOKENS`).

    Raises:
        ValueError: a negative ``max_bytes`` or a ``min_tokens`` below 1.

    The keys and values are the model's own for those ids at those positions (each row's real
    tokens start at position 0), so a prompt that continues a kept row attends to the same
    numbers it would compute itself, up to the rounding of a different batch shape.
    Not thread-safe: the batcher's worker thread owns it.
    """

    def __init__(self, max_bytes: int, min_tokens: int = PREFIX_MIN_TOKENS) -> None:
        if max_bytes < 0:
            raise ValueError(f"prefix cache: max_bytes must be >= 0, got {max_bytes}")
        if min_tokens < 1:
            raise ValueError(f"prefix cache: min_tokens must be >= 1, got {min_tokens}")
        self.max_bytes = int(max_bytes)
        self.min_tokens = int(min_tokens)
        self._rows: list[_Prefix] = []  # least recently used first
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    @staticmethod
    def _shared(a: Any, b: Any) -> int:
        n = min(len(a), len(b))
        differ = (a[:n] != b[:n]).nonzero()
        return int(differ[0]) if len(differ) else n

    def lookup(self, prompt_ids: Sequence[int]) -> tuple[int, list[tuple[Any, Any]]] | None:
        """The longest kept prefix of ``prompt_ids``, at most ``len(prompt_ids) - 1`` ids (the
        last prompt id is always run, for its logits): ``(n, layers)`` with each layer's keys
        and values cut to ``n`` positions (views, never written to), or ``None`` when no kept
        row shares ``min_tokens`` ids with it. A hit becomes the most recently used row."""
        import torch

        best, best_n = None, 0
        if self._rows:
            ids = torch.tensor(list(prompt_ids), dtype=torch.long)
            for row in self._rows:
                n = self._shared(ids, row.ids)
                if n > best_n:
                    best, best_n = row, n
        best_n = min(best_n, len(prompt_ids) - 1)
        if best is None or best_n < self.min_tokens:
            self.misses += 1
            return None
        self.hits += 1
        self._rows.remove(best)
        self._rows.append(best)
        return best_n, [(k[:, :, :best_n, :], v[:, :, :best_n, :]) for k, v in best.layers]

    def add(self, ids: Sequence[int], layers: list[tuple[Any, Any]]) -> None:
        """Keep ``layers`` (per layer ``(keys, values)``, ``[1, kv_heads, len(ids),
        head_dim]``, owned by the cache from now on) as the keys and values of ``ids``. Rows
        whose ids are a prefix of ``ids`` go (this one holds all they hold); then the least
        recently used go until it fits in ``max_bytes``. Raises ``ValueError`` when a layer's
        length is not ``len(ids)``."""
        import torch

        n = len(ids)
        for k, v in layers:
            if k.shape[-2] != n or v.shape[-2] != n:
                raise ValueError(
                    f"prefix cache: {n} ids but keys/values of length {k.shape[-2]}/{v.shape[-2]}"
                )
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if n < self.min_tokens or nbytes > self.max_bytes:
            return
        tensor = torch.tensor(list(ids), dtype=torch.long)
        kept = []
        for row in self._rows:
            if len(row.ids) <= n and self._shared(row.ids, tensor) == len(row.ids):
                self.nbytes -= row.nbytes
            else:
                kept.append(row)
        self._rows = kept
        while self._rows and self.nbytes + nbytes > self.max_bytes:
            self.nbytes -= self._rows.pop(0).nbytes
        self._rows.append(_Prefix(tensor, layers, nbytes))
        self.nbytes += nbytes


class Job(Protocol):
    """What the batcher reads of a request (``rlmdistill.models.local._Request``)."""

    prompt_ids: list[int]
    max_tokens: int

    @property
    def sampling(self) -> Any: ...


@dataclass
class Finished:
    """A row that is done: its job, the generated ids (up to and including the id that ended
    it; at most ``max_tokens``), the logprob of each, and per step the logprob of
    ``turn_end_id`` (``None`` when none was asked for)."""

    job: Any
    ids: list[int]
    logprobs: list[float]
    turn_end_logprobs: list[float] | None
    reused: int = 0
    """Leading prompt ids whose keys and values came from the :class:`PrefixCache`."""


@dataclass
class _Row:
    job: Any
    generator: Any
    temperature: float
    top_p: float
    stops: list[str]
    position: int
    """Position id of the row's next input token, the id it chose last (= the real tokens in
    its cache)."""
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_end_logprobs: list[float] = field(default_factory=list)
    reused: int = 0


class ContinuousBatcher:
    """One running batch over ``model`` (a ``transformers`` causal LM in eval mode).

    Args:
        model: the model; called as ``model(input_ids=, attention_mask=, position_ids=,
            cache=, use_cache=True, logits_to_keep=1)``.
        tokenizer: decodes a row's tail for its stop strings.
        eos_ids: ids that end a row (kept in its ids).
        pad_id: id written into padded input positions (masked out).
        turn_end_id: id whose logprob is recorded per step (see
            :func:`rlmdistill.models.local.normalise_turn_end`), or ``None``.
        prefix_cache: where finished rows' keys and values are kept and new prompts look for
            their longest kept prefix (:class:`PrefixCache`), or ``None``: every prompt is
            prefilled whole.

    :meth:`admit` adds requests, :meth:`step` runs one decode step and returns the rows that
    finished. Not thread-safe: one worker thread drives it.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        eos_ids: Sequence[int],
        pad_id: int,
        turn_end_id: int | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.eos = set(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.turn_end_id = turn_end_id
        self.rows: list[_Row] = []
        self.cache: Any = None
        self.mask: Any = None  # [rows, cache length] long, 1 = a real token
        self.next_ids: Any = None  # [rows] the id each row feeds next
        self._device = next(model.parameters()).device
        self._torch = torch
        self.prefix_cache = prefix_cache
        self.prefill_tokens = 0
        """Prompt tokens prefilled so far (padding and reused prefixes excluded)."""
        self.reused_tokens = 0
        """Prompt tokens whose keys and values came from the prefix cache instead."""
        self.decode_steps = 0
        self.row_steps = 0
        """Sum over decode steps of the rows in the batch (mean batch = row_steps / steps)."""

    def __len__(self) -> int:
        return len(self.rows)

    # -- joining ---------------------------------------------------------------------

    def admit(self, jobs: Sequence[Any]) -> list[Finished]:
        """Prefill ``jobs``, sample each one's first id and join them to the batch. Jobs whose
        prompt continues a row of the prefix cache prefill only the ids after it, one job per
        forward pass; the others share one forward pass. Returns those already done after
        that id (EOS, ``max_tokens`` 1)."""
        if not jobs:
            return []
        fresh = []
        for j in jobs:
            hit = self.prefix_cache.lookup(j.prompt_ids) if self.prefix_cache else None
            if hit is None:
                fresh.append(j)
            else:
                self._prefill_after(j, *hit)
        if fresh:
            self._prefill(fresh)
        return self._collect_done()

    def _new_row(self, j: Any, reused: int = 0) -> _Row:
        torch = self._torch
        s = j.sampling
        gen = torch.Generator(device="cpu")
        seed = s.seed if s.seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        gen.manual_seed(int(seed))
        return _Row(
            job=j,
            generator=gen,
            temperature=float(s.temperature),
            top_p=float(s.top_p),
            stops=[x for x in s.stop if x],
            position=len(j.prompt_ids),
            reused=reused,
        )

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
        with self._torch.inference_mode():
            return self.model(
                input_ids=ids.to(self._device),
                attention_mask=mask.to(self._device),
                position_ids=positions.to(self._device),
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )

    def _prefill(self, jobs: Sequence[Any]) -> None:
        """Whole prompts of ``jobs``, left-padded into one forward pass."""
        from transformers import DynamicCache

        ids, mask = left_pad([j.prompt_ids for j in jobs], self.pad_id)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self._forward(ids, mask, positions, DynamicCache(config=self.model.config))
        self.prefill_tokens += int(mask.sum())
        rows = [self._new_row(j) for j in jobs]
        self._join(out.cache, mask, rows, self._sample(out.logits[:, -1, :], rows))

    def _prefill_after(self, job: Any, n: int, layers: list[tuple[Any, Any]]) -> None:
        """``job``'s prompt after its first ``n`` ids, on the cache's keys and values of
        those ``n`` (positions ``n..``; no padding: one row)."""
        torch = self._torch
        from transformers import DynamicCache

        prompt = job.prompt_ids
        ids = torch.tensor([list(prompt[n:])], dtype=torch.long)
        mask = torch.ones((1, len(prompt)), dtype=torch.long)
        positions = torch.arange(n, len(prompt), dtype=torch.long).view(1, -1)
        cache = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        out = self._forward(ids, mask, positions, cache)
        self.prefill_tokens += len(prompt) - n
        self.reused_tokens += n
        rows = [self._new_row(job, reused=n)]
        self._join(out.cache, mask, rows, self._sample(out.logits[:, -1, :], rows))

    def _join(self, cache: Any, mask: Any, rows: list[_Row], chosen: Any) -> None:
        torch = self._torch
        from transformers import DynamicCache

        if self.cache is None:
            self.cache, self.mask, self.rows, self.next_ids = cache, mask, rows, chosen
            return
        old_len, new_len = self.mask.shape[1], mask.shape[1]
        total = max(old_len, new_len)

        def pad(t: Any, n: int) -> Any:  # left-pad the sequence axis (-2 of a K/V tensor)
            if n == 0:
                return t
            shape = list(t.shape)
            shape[-2] = n
            return torch.cat([t.new_zeros(shape), t], dim=-2)

        layers = []
        for (k0, v0, *_), (k1, v1, *_) in zip(self.cache, cache, strict=True):
            k = torch.cat([pad(k0, total - old_len), pad(k1, total - new_len)], dim=0)
            v = torch.cat([pad(v0, total - old_len), pad(v1, total - new_len)], dim=0)
            layers.append((k, v))
        self.cache = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        self.mask = torch.cat(
            [
                torch.cat(
                    [self.mask.new_zeros((self.mask.shape[0], total - old_len)), self.mask], 1
                ),
                torch.cat([mask.new_zeros((mask.shape[0], total - new_len)), mask], 1),
            ],
            dim=0,
        )
        self.rows = self.rows + rows
        self.next_ids = torch.cat([self.next_ids, chosen])

    # -- decoding --------------------------------------------------------------------

    def step(self) -> list[Finished]:
        """One decode step for every row; returns the rows it finished (removed)."""
        torch = self._torch
        if not self.rows:
            return []
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        positions = torch.tensor([[r.position] for r in self.rows], dtype=torch.long)
        with torch.inference_mode():
            out = self.model(
                input_ids=self.next_ids.view(-1, 1).to(self._device),
                attention_mask=self.mask.to(self._device),
                position_ids=positions.to(self._device),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
            )
        self.cache = out.cache
        for r in self.rows:
            r.position += 1
        self.decode_steps += 1
        self.row_steps += len(self.rows)
        self.next_ids = self._sample(out.logits[:, -1, :], self.rows)
        return self._collect_done()

    def _sample(self, logits: Any, rows: list[_Row]) -> Any:
        """Choose each row's next id; record its logprob (and the turn-end id's)."""
        torch = self._torch
        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        chosen = torch.empty(len(rows), dtype=torch.long)
        greedy = [i for i, r in enumerate(rows) if r.temperature == 0]
        if greedy:
            chosen[greedy] = logits[greedy].argmax(dim=-1)
        sampled = [i for i, r in enumerate(rows) if r.temperature > 0]
        if sampled:
            temps = torch.tensor([[rows[i].temperature] for i in sampled])
            probs = torch.softmax(logits[sampled] / temps, dim=-1)
            top_p = torch.tensor([[rows[i].top_p] for i in sampled])
            cand_p, cand_ids = nucleus_candidates(probs, top_p)
            for k, i in enumerate(sampled):
                pick = torch.multinomial(cand_p[k], 1, generator=rows[i].generator)[0]
                chosen[i] = cand_ids[k, pick]
        picked = logp.gather(1, chosen.view(-1, 1)).view(-1).tolist()
        ends = logp[:, self.turn_end_id].tolist() if self.turn_end_id is not None else None
        for i, r in enumerate(rows):
            r.ids.append(int(chosen[i]))
            r.logprobs.append(float(picked[i]))
            if ends is not None:
                r.turn_end_logprobs.append(float(ends[i]))
        return chosen

    def _done(self, r: _Row) -> bool:
        if r.ids[-1] in self.eos or len(r.ids) >= r.job.max_tokens:
            return True
        if r.stops:
            longest = max(len(s) for s in r.stops)
            tail = self.tokenizer.decode(r.ids[-(longest + 8) :])
            return any(s in tail for s in r.stops)
        return False

    def _collect_done(self) -> list[Finished]:
        done = [i for i, r in enumerate(self.rows) if self._done(r)]
        if not done:
            return []
        finished = [
            Finished(
                r.job,
                r.ids,
                r.logprobs,
                r.turn_end_logprobs if self.turn_end_id is not None else None,
                r.reused,
            )
            for r in (self.rows[i] for i in done)
        ]
        if self.prefix_cache is not None and self.prefix_cache.max_bytes > 0:
            for i in done:
                self._remember(i)
        gone = set(done)
        keep = [i for i in range(len(self.rows)) if i not in gone]
        self._keep(keep)
        return finished

    def _remember(self, i: int) -> None:
        """Hand row ``i``'s keys and values (its prompt and every generated id but the last,
        which was never fed) to the prefix cache, copied out of the batch's tensors."""
        r = self.rows[i]
        ids = list(r.job.prompt_ids) + r.ids[:-1]
        n = len(ids)
        if int(self.mask[i].sum()) != n:  # not the row this engine thinks it is: keep nothing
            return
        layers = [(k[i : i + 1, :, -n:, :].clone(), v[i : i + 1, :, -n:, :].clone())
                  for k, v, *_ in self.cache]  # fmt: skip
        self.prefix_cache.add(ids, layers)  # type: ignore[union-attr]

    def _keep(self, keep: list[int]) -> None:
        """Keep only rows ``keep``; drop cache columns that are padding in every kept row."""
        torch = self._torch
        from transformers import DynamicCache

        if not keep:
            self.rows, self.cache, self.mask, self.next_ids = [], None, None, None
            return
        index = torch.tensor(keep, dtype=torch.long)
        mask = self.mask[index]
        used = mask.any(dim=0).nonzero()
        start = int(used[0]) if len(used) else mask.shape[1]
        layers = [(k[index][:, :, start:, :], v[index][:, :, start:, :]) for k, v, *_ in self.cache]
        self.cache = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        self.mask = mask[:, start:]
        self.rows = [self.rows[i] for i in keep]
        self.next_ids = self.next_ids[index]

    def fail_all(self, why: str, fail: Callable[[Any, str], None]) -> None:
        """Fail every row (``fail(job, why)``) and empty the batch."""
        for r in self.rows:
            fail(r.job, why)
        self.rows, self.cache, self.mask, self.next_ids = [], None, None, None


__all__ = [
    "NUCLEUS_FIRST_K",
    "PREFIX_MIN_TOKENS",
    "ContinuousBatcher",
    "Finished",
    "Job",
    "PrefixCache",
    "left_pad",
    "nucleus_candidates",
    "unsupported_reason",
]
