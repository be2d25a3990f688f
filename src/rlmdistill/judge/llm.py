"""LLM judge: grades a memo criterion by criterion with a chat model (PASS/FAIL + a short reason).

Works with any :class:`~rlmdistill.models.base.ModelClient`: an OpenAI-compatible server
(``openai:MODEL@URL``) or the in-process back end (``local:NAME``). Method:

1. A missing or blank memo FAILs every criterion without a request.
2. Criteria already judged for this memo (same criterion content, judge model and prompt
   version) come from the :class:`~rlmdistill.judge.cache.VerdictCache` without a request.
3. The others are sent in batches of :attr:`LLMJudgeConfig.criteria_per_request`, in task
   order, at temperature 0 (seed 0): a system prompt with the reply format, then the memo and
   the batch's criteria (id, type, title and ``match_criteria``, the LAB PASS/FAIL wording).
   Batches of one episode run concurrently (:attr:`LLMJudgeConfig.max_concurrency`).
4. The reply must be one JSON object ``{"verdicts": [{"id", "verdict", "reason"}]}``; it is
   validated with pydantic (:func:`parse_reply`; a fenced block or text around the object is
   tolerated, ``verdict`` is case-insensitive, ``reason`` must be non-empty). When it is
   malformed, or some criteria of the batch have no valid verdict, the judge is asked again in
   the same conversation, told exactly what was wrong and which ids are still missing; valid
   verdicts already received are kept. At most :attr:`LLMJudgeConfig.max_attempts` requests
   per batch.
5. Never a silent default: a criterion still without a valid verdict after the last attempt,
   or whose request failed (HTTP error after the client's own bounded retries, context
   exceeded), is UNGRADABLE with the reason. UNGRADABLE counts as failed in the pass rate and
   is counted apart (:func:`rlmdistill.judge.base.pass_rates`). A batch that does not fit the
   judge's context window is split in halves first; a single criterion that still does not fit
   is UNGRADABLE.

Every request is logged as a :class:`~rlmdistill.traces.schema.JudgeRequestRecord` (tokens,
latency, cost from a :class:`~rlmdistill.models.limits.PriceTable`) in the usage file
``verdicts/<grader>.usage.jsonl``, apart from the agent's own tokens.
"""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from rlmdistill.judge.cache import CacheKey, VerdictCache, criterion_hash
from rlmdistill.models.base import (
    ChatResult,
    ContextExceededError,
    Message,
    ModelClient,
    ModelError,
    Sampling,
    Usage,
)
from rlmdistill.models.limits import DEFAULT_PRICES, PriceTable
from rlmdistill.models.spec import ModelSpec, parse_spec
from rlmdistill.rooms.room import DataRoom
from rlmdistill.rooms.task import Criterion, Task
from rlmdistill.traces.schema import JudgeCacheEntry, JudgeRequestRecord, Verdict
from rlmdistill.traces.scores import memo_sha256 as sha256_of_memo
from rlmdistill.traces.store import append_records

__all__ = [
    "JUDGE_PROMPT_VERSION",
    "JUDGE_SYSTEM_PROMPT",
    "JudgeStats",
    "LLMGrader",
    "LLMJudgeConfig",
    "ParsedReply",
    "judge_model_key",
    "llm_grader_id",
    "parse_reply",
]

JUDGE_PROMPT_VERSION = "llm-judge-v1"
"""Version of :data:`JUDGE_SYSTEM_PROMPT`, the user message layout and the reply format; part
of every cache key and the verdicts' ``grader_version``. Bump on any change to them."""

JUDGE_SYSTEM_PROMPT = """\
You are a strict grader of M&A due-diligence memos. You receive a memo and a numbered list of \
rubric criteria. Judge each criterion on its own, using only what the memo says: PASS when the \
memo meets the criterion's PASS condition, FAIL otherwise (also when the memo is silent, vague \
or wrong about it).

Reply with one JSON object and nothing else, in this exact form:
{"verdicts": [{"id": "<criterion id>", "verdict": "PASS", "reason": "<one short sentence>"}]}

- one entry per criterion id you are asked about, in the order given;
- "verdict" is "PASS" or "FAIL";
- "reason" names what the memo says or lacks, in at most 40 words."""
"""System prompt of the judge (versioned by :data:`JUDGE_PROMPT_VERSION`)."""

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)
_SANITISE = re.compile(r"[^a-z0-9._-]+")


class LLMJudgeConfig(BaseModel):
    """Settings of the LLM judge (all validated; defaults are this project's choices)."""

    model_config = ConfigDict(extra="forbid")

    criteria_per_request: int = Field(
        20, ge=1, description="Criteria judged in one request (one batch)."
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Requests per batch at most: the first plus retries after a malformed or "
        "partial reply. HTTP retries happen inside the client and are not counted here.",
    )
    max_tokens_base: int = Field(
        64, ge=1, description="New-token budget of a request: this plus the per-criterion part."
    )
    max_tokens_per_criterion: int = Field(
        96, ge=8, description="New tokens allowed per criterion asked (JSON entry + reason)."
    )
    max_concurrency: int = Field(4, ge=1, description="Batches of one episode in flight at once.")

    def sampling(self, n_criteria: int) -> Sampling:
        """Greedy sampling (temperature 0, seed 0) with room for ``n_criteria`` entries."""
        return Sampling(
            temperature=0.0,
            top_p=1.0,
            seed=0,
            max_tokens=self.max_tokens_base + self.max_tokens_per_criterion * n_criteria,
        )


def judge_model_key(spec: ModelSpec | str) -> str:
    """The judge's identity in cache keys: ``openai:<model name>`` (the server URL is left out,
    so the same served model judged through another address reuses the cache) or
    ``local:<name>[+adapter=<dir>][+quant=int8]``."""
    s = parse_spec(spec) if isinstance(spec, str) else spec
    if s.kind == "openai":
        return f"openai:{s.name}"
    key = f"local:{s.name}" + (f"+adapter={s.adapter}" if s.adapter else "")
    return key + (f"+quant={s.quant}" if s.quant != "none" else "")


def llm_grader_id(spec: ModelSpec | str) -> str:
    """Grader id (and verdict file stem) of the LLM judge for ``spec``: ``llm-`` plus the model
    name lowercased, runs of characters outside ``[a-z0-9._-]`` replaced by ``-`` (a local
    checkpoint path contributes its last part, an adapter its last part after a ``+``).

    Example: ``openai:Qwen/Qwen2.5-7B-Instruct@http://h:8000/v1`` -> ``llm-qwen-qwen2.5-7b-instruct``.
    """
    s = parse_spec(spec) if isinstance(spec, str) else spec
    name = Path(s.name).name if s.kind == "local" else s.name
    if s.adapter:
        name += "+" + Path(s.adapter).name
    slug = _SANITISE.sub("-", name.lower()).strip("-.")
    if not slug:
        raise ValueError(f"model spec {s} gives an empty grader id")
    return f"llm-{slug}"


# ------------------------------------------------------------------------------ reply parsing
class _ReplyItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(validation_alias=AliasChoices("id", "criterion_id"), min_length=1)
    verdict: Literal["PASS", "FAIL"]
    reason: str = Field(min_length=1)

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: Any) -> Any:
        return str(value).strip() if isinstance(value, str | int) else value

    @field_validator("verdict", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("reason", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


class ParsedReply(NamedTuple):
    """What :func:`parse_reply` could use from one judge reply."""

    verdicts: dict[str, tuple[Literal["PASS", "FAIL"], str]]
    """Valid verdicts of asked criteria: id -> (label, reason)."""
    problems: dict[str, str]
    """Asked criterion id -> why it has no valid verdict (every asked id not in ``verdicts``)."""
    notes: list[str]
    """Reply-level problems (no JSON, wrong shape, unknown ids); empty for a clean reply."""


def _find_json(text: str) -> tuple[Any, str | None]:
    """The judge's JSON in ``text``: the first top-level object holding ``"verdicts"`` or the
    first top-level array (fenced blocks searched first); else the first decode error; else the
    first other object; else an error."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    first_error: str | None = None
    first_other: Any = None
    for chunk in candidates:
        inside_until = 0  # start positions inside an object already decoded are skipped
        for match in re.finditer(r"[{\[]", chunk):
            if match.start() < inside_until:
                continue
            try:
                obj, inside_until = decoder.raw_decode(chunk, match.start())
            except json.JSONDecodeError as exc:
                first_error = first_error or f"invalid JSON ({exc.msg} at char {exc.pos})"
                continue
            if isinstance(obj, list) or (isinstance(obj, dict) and "verdicts" in obj):
                return obj, None
            if first_other is None and isinstance(obj, dict):
                first_other = obj
    if first_error is not None:
        return None, first_error
    if first_other is not None:
        return first_other, None
    return None, "no JSON object in the reply"


def parse_reply(text: str, asked: list[str]) -> ParsedReply:
    """Validate a judge reply against the criteria ids it was asked about.

    Accepts ``{"verdicts": [...]}`` (or a bare list of entries), possibly inside a fenced
    block or surrounded by text. Each entry needs ``id`` (or ``criterion_id``), ``verdict``
    PASS/FAIL (any case) and a non-empty ``reason``. An entry for an id not asked is ignored
    (noted); two entries with different verdicts for one id leave it without a verdict.
    Never raises for a bad reply: every asked id ends either in ``verdicts`` or ``problems``.
    """
    obj, error = _find_json(text)
    notes: list[str] = []
    items: list[Any] = []
    if error is not None:
        notes.append(error)
    elif isinstance(obj, dict):
        got = obj.get("verdicts")
        if isinstance(got, list):
            items = got
        else:
            keys = ", ".join(sorted(map(str, obj))) or "none"
            notes.append(f'the JSON object has no "verdicts" list (keys: {keys})')
    else:
        items = obj
    asked_set = set(asked)
    verdicts: dict[str, tuple[Literal["PASS", "FAIL"], str]] = {}
    problems: dict[str, str] = {}
    conflicts: set[str] = set()
    unknown: list[str] = []
    for k, raw in enumerate(items):
        try:
            item = _ReplyItem.model_validate(raw)
        except ValidationError as exc:
            rid = raw.get("id", raw.get("criterion_id")) if isinstance(raw, dict) else None
            msgs = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            if isinstance(rid, str | int) and str(rid).strip() in asked_set:
                problems.setdefault(str(rid).strip(), f"invalid entry ({msgs})")
            else:
                notes.append(f"entry {k} is invalid ({msgs})")
            continue
        if item.id not in asked_set:
            unknown.append(item.id)
            continue
        previous = verdicts.get(item.id)
        if previous is not None and previous[0] != item.verdict:
            conflicts.add(item.id)
        elif previous is None:
            verdicts[item.id] = (item.verdict, item.reason)
    for cid in conflicts:
        verdicts.pop(cid, None)
        problems[cid] = "two entries with different verdicts"
    if unknown:
        notes.append("entries for ids not asked were ignored: " + ", ".join(unknown[:10]))
    for cid in asked:
        if cid not in verdicts:
            problems.setdefault(cid, "no entry for this id")
        else:
            problems.pop(cid, None)
    return ParsedReply(verdicts, problems, notes)


# ------------------------------------------------------------------------------ the grader
@dataclass
class JudgeStats:
    """Counters of one :class:`LLMGrader` since it was built (all episodes it graded)."""

    requests: int = 0
    """Chat requests sent (each retry counts)."""
    failed_requests: int = 0
    """Requests that raised a model error (HTTP error after the client's retries, context)."""
    retries: int = 0
    """Requests sent because an earlier reply was malformed or partial."""
    usage: Usage = field(default_factory=Usage)
    """Judge tokens (apart from the agent's)."""
    cost_usd: float = 0.0
    """Sum of priced requests, USD."""
    unpriced_requests: int = 0
    """Requests whose model had no entry in the price table (not in ``cost_usd``)."""
    cache_hits: int = 0
    """Criteria answered from the cache."""
    judged: int = 0
    """Criteria sent to the model."""
    no_memo: int = 0
    """Criteria FAILed without a request because the episode had no memo."""
    ungradable: int = 0
    """Criteria that ended UNGRADABLE."""


class _Outcome(NamedTuple):
    label: Literal["PASS", "FAIL", "UNGRADABLE"]
    reason: str


class LLMGrader:
    """A :class:`~rlmdistill.judge.base.Grader` backed by a chat model (method in the module
    docstring).

    Args:
        client: the judge model (any :class:`ModelClient`; thread-safe ``chat`` required).
        judge_model: cache identity of the model (:func:`judge_model_key`).
        grader_id: verdict file stem, e.g. :func:`llm_grader_id` of the spec.
        config: batching, retry and token settings.
        cache: verdict cache; ``None`` = no caching.
        usage_path: where :class:`JudgeRequestRecord` lines are appended; ``None`` = keep
            only the counters in :attr:`stats`.
        prices: price table for ``cost_usd`` (default :data:`DEFAULT_PRICES`: local and
            loopback models are free, others unpriced unless you pass your table).
    """

    version: str = JUDGE_PROMPT_VERSION

    def __init__(
        self,
        client: ModelClient,
        *,
        judge_model: str,
        grader_id: str,
        config: LLMJudgeConfig | None = None,
        cache: VerdictCache | None = None,
        usage_path: Path | None = None,
        prices: PriceTable | None = DEFAULT_PRICES,
    ) -> None:
        self.client = client
        self.judge_model = judge_model
        self.grader_id = grader_id
        self.config = config or LLMJudgeConfig()
        self.cache = cache
        self.usage_path = usage_path
        self.prices = prices
        self.stats = JudgeStats()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- Grader protocol
    def grade(
        self,
        memo: str | None,
        task: Task,
        room: DataRoom | None,
        *,
        episode_id: str,
        memo_sha256: str | None,
    ) -> list[Verdict]:
        """One verdict per criterion of ``task``, in task order (``room`` is not used).

        Raises ``ValueError`` naming the episode when ``memo_sha256`` does not match the memo.
        Model errors never raise: they make the affected criteria UNGRADABLE.
        """
        if memo is None or not memo.strip():
            why = "no memo: the episode produced none" if memo is None else "empty memo"
            with self._lock:
                self.stats.no_memo += len(task.criteria)
            return [self._verdict(episode_id, c, "FAIL", why, memo_sha256) for c in task.criteria]
        sha = sha256_of_memo(memo)
        if memo_sha256 is not None and memo_sha256 != sha:
            raise ValueError(
                f"episode {episode_id}: memo_sha256 {memo_sha256[:12]}... does not match the "
                f"memo text ({sha[:12]}...); the episode record is inconsistent"
            )
        outcomes: dict[str, _Outcome] = {}
        todo: list[Criterion] = []
        keys = {c.id: self._key(sha, c) for c in task.criteria}
        for criterion in task.criteria:
            hit = self.cache.get(keys[criterion.id]) if self.cache is not None else None
            if hit is not None:
                outcomes[criterion.id] = _Outcome(hit.verdict, hit.reason)
            else:
                todo.append(criterion)
        n = self.config.criteria_per_request
        batches = [todo[i : i + n] for i in range(0, len(todo), n)]
        if len(batches) > 1 and self.config.max_concurrency > 1:
            workers = min(self.config.max_concurrency, len(batches))
            with ThreadPoolExecutor(workers, thread_name_prefix="rlmd-judge") as pool:
                results = list(pool.map(lambda b: self._judge_batch(memo, b, episode_id), batches))
        else:
            results = [self._judge_batch(memo, b, episode_id) for b in batches]
        fresh: list[JudgeCacheEntry] = []
        for result in results:
            outcomes.update(result)
            for cid, (label, reason) in result.items():
                if label != "UNGRADABLE":
                    key = keys[cid]
                    fresh.append(
                        JudgeCacheEntry(
                            memo_sha256=key.memo_sha256,
                            criterion_id=key.criterion_id,
                            criterion_hash=key.criterion_hash,
                            judge_model=key.judge_model,
                            prompt_version=key.prompt_version,
                            verdict=label,
                            reason=reason,
                        )
                    )
        if self.cache is not None:
            self.cache.put(fresh)
        with self._lock:
            self.stats.cache_hits += len(task.criteria) - len(todo)
            self.stats.judged += len(todo)
            self.stats.ungradable += sum(o.label == "UNGRADABLE" for o in outcomes.values())
        return [
            self._verdict(episode_id, c, *outcomes[c.id], memo_sha256 or sha) for c in task.criteria
        ]

    # ---------------------------------------------------------------- internals
    def _key(self, sha: str, criterion: Criterion) -> CacheKey:
        return CacheKey(
            sha, criterion.id, criterion_hash(criterion), self.judge_model, JUDGE_PROMPT_VERSION
        )

    def _verdict(
        self,
        episode_id: str,
        criterion: Criterion,
        label: Literal["PASS", "FAIL", "UNGRADABLE"],
        reason: str,
        sha: str | None,
    ) -> Verdict:
        return Verdict(
            episode_id=episode_id,
            grader=self.grader_id,
            grader_version=self.version,
            criterion_id=criterion.id,
            criterion_type=criterion.type,
            weight=criterion.weight,
            verdict=label,
            reason=reason,
            memo_sha256=sha,
        )

    def messages(self, memo: str, batch: list[Criterion]) -> list[Message]:
        """The first request of a batch: system prompt, then memo and criteria (public so
        that tests and docs can show exactly what the judge reads)."""
        lines = [
            "Memo to grade (between the markers):",
            "<<<MEMO",
            memo,
            "MEMO>>>",
            "",
            f"Criteria ({len(batch)}):",
        ]
        for k, c in enumerate(batch, 1):
            lines += [
                f"{k}. id: {c.id}",
                f"   type: {c.type}",
                f"   title: {c.title}",
                f"   PASS/FAIL rule: {c.match_criteria}",
            ]
        ids = ", ".join(json.dumps(c.id) for c in batch)
        lines += ["", f"Reply with the JSON object for these {len(batch)} ids: {ids}."]
        return [
            Message(role="system", content=JUDGE_SYSTEM_PROMPT),
            Message(role="user", content="\n".join(lines)),
        ]

    @staticmethod
    def _feedback(parsed: ParsedReply, pending: list[str], cut_off: bool) -> str:
        parts = ["Your reply could not be fully used."]
        if cut_off:
            parts.append("It was cut off at the token limit: keep each reason shorter.")
        parts += [f"Problem: {note}." for note in parsed.notes]
        parts += [f"Id {json.dumps(cid)}: {parsed.problems[cid]}." for cid in pending]
        ids = ", ".join(json.dumps(cid) for cid in pending)
        parts.append(
            f'Reply again with only the JSON object {{"verdicts": [...]}} for these '
            f"{len(pending)} ids: {ids}. Each entry needs "
            '"id", "verdict" ("PASS" or "FAIL") and a non-empty "reason".'
        )
        return "\n".join(parts)

    def _log(
        self,
        episode_id: str,
        asked: list[str],
        attempt: int,
        outcome: Literal["ok", "partial", "malformed", "error"],
        result: ChatResult | None,
        *,
        error: str | None = None,
        problem: str | None = None,
    ) -> None:
        usage = result.usage if result is not None else Usage()
        cost = self.prices.cost_usd(self.client.model_id, usage) if self.prices else None
        record = JudgeRequestRecord(
            episode_id=episode_id,
            grader=self.grader_id,
            judge_model=self.client.model_id,
            prompt_version=JUDGE_PROMPT_VERSION,
            criterion_ids=asked,
            attempt=attempt,
            outcome=outcome,
            usage=usage,
            latency_s=result.latency_s if result is not None else 0.0,
            finish_reason=result.finish_reason if result is not None else None,
            cost_usd=cost,
            price_table=self.prices.version if self.prices else None,
            error=error,
            problem=problem,
        )
        with self._lock:
            self.stats.requests += 1
            self.stats.retries += attempt > 1
            self.stats.failed_requests += outcome == "error"
            self.stats.usage = self.stats.usage + usage
            if cost is None:
                self.stats.unpriced_requests += 1
            else:
                self.stats.cost_usd += cost
        if self.usage_path is not None:
            append_records(self.usage_path, [record])

    def _judge_batch(
        self, memo: str, batch: list[Criterion], episode_id: str
    ) -> dict[str, _Outcome]:
        """Judge one batch with bounded re-asks; every criterion of ``batch`` gets an outcome."""
        out: dict[str, _Outcome] = {}
        pending = [c.id for c in batch]
        messages = self.messages(memo, batch)
        last_problem: dict[str, str] = {}
        attempts = self.config.max_attempts
        for attempt in range(1, attempts + 1):
            asked = list(pending)
            try:
                result = self.client.chat(messages, self.config.sampling(len(asked)))
            except ContextExceededError as exc:
                self._log(episode_id, asked, attempt, "error", None, error=f"{exc.kind}: {exc}")
                if attempt == 1 and len(batch) > 1:
                    half = len(batch) // 2
                    out.update(self._judge_batch(memo, batch[:half], episode_id))
                    out.update(self._judge_batch(memo, batch[half:], episode_id))
                    return out
                why = f"judge context exceeded (memo and criterion do not fit): {exc}"
                out.update((cid, _Outcome("UNGRADABLE", why)) for cid in pending)
                return out
            except ModelError as exc:
                self._log(episode_id, asked, attempt, "error", None, error=f"{exc.kind}: {exc}")
                why = (
                    f"judge request failed ({exc.kind}, {exc.attempts} HTTP attempt(s)) on "
                    f"judge attempt {attempt}: {exc}"
                )
                out.update((cid, _Outcome("UNGRADABLE", why)) for cid in pending)
                return out
            parsed = parse_reply(result.text, asked)
            for cid, (label, reason) in parsed.verdicts.items():
                out[cid] = _Outcome(label, reason)
            pending = [cid for cid in asked if cid not in parsed.verdicts]
            cut_off = result.finish_reason == "length"
            outcome: Literal["ok", "partial", "malformed"] = (
                "ok" if not pending else "partial" if parsed.verdicts else "malformed"
            )
            problem = None
            if pending:
                problem = self._feedback(parsed, pending, cut_off)
                notes = "; ".join(parsed.notes)
                for cid in pending:
                    detail = parsed.problems[cid] + (f" ({notes})" if notes else "")
                    if cut_off:
                        detail += " (reply cut off at the token limit)"
                    last_problem[cid] = detail
            self._log(episode_id, asked, attempt, outcome, result, problem=problem)
            if not pending:
                return out
            if attempt < attempts and problem is not None:
                messages = [
                    *messages,
                    Message(role="assistant", content=result.text),
                    Message(role="user", content=problem),
                ]
        for cid in pending:
            out[cid] = _Outcome(
                "UNGRADABLE",
                f"no valid verdict after {attempts} judge request(s): {last_problem[cid]}",
            )
        return out
