"""The validated configuration of ``rlmdistill collect`` (one object, saved in ``run.json``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.cluster.options import RayOptions
from rlmdistill.harness.prompts import PROMPT_VERSION, SUBAGENT_PROMPT_VERSION
from rlmdistill.harness.repl import OPERATIONAL_FIELDS as REPL_OPERATIONAL_FIELDS
from rlmdistill.harness.repl import ReplLimits
from rlmdistill.harness.sandbox import DEFAULT_MODE, SandboxMode
from rlmdistill.harness.settings import DEFAULT_MAX_WALL_S, EpisodeLimits
from rlmdistill.models.base import Sampling
from rlmdistill.models.spec import identity
from rlmdistill.traces.layout import RUN_MANIFEST

__all__ = [
    "DEFAULT_MAX_WALL_S",
    "DEFAULT_MODEL",
    "FINGERPRINT_VERSION",
    "LIMITS_OPERATIONAL_FIELDS",
    "OPERATIONAL_FIELDS",
    "CollectConfig",
    "EpisodeLimits",
    "QuickstartConfig",
    "RayOptions",
    "episode_id",
    "episode_seed",
    "for_run",
]

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
"""The embedded default root and sub model (docs/models.md: measured, and how weak it is)."""

OPERATIONAL_FIELDS = frozenset(
    {
        "concurrency",
        "max_usd",
        "requests_per_minute",
        "prices",
        "max_attempts",
        "request_timeout_s",
        "token_ids",
        "sandbox",
        "executor",
        "ray",
        "servers",
        "out",
    }
)
"""Fields that change how a run goes, not what its episodes are: left out of the episode id,
so a run resumes when they change (tests/test_crash_resume.py)."""

LIMITS_OPERATIONAL_FIELDS = frozenset({"max_wall_s"})
"""``EpisodeLimits`` fields that are safety nets, not budgets: left out of the episode id of
runs of fingerprint version 2 and later (:data:`FINGERPRINT_VERSION`). Runs of version 1
(every run written before versions existed) keep them in, so their ids do not change."""

FINGERPRINT_VERSION = 2
"""The fingerprint rule new runs get (:func:`rlmdistill.collect.main.build_config`).

1: every field but :data:`OPERATIONAL_FIELDS` and the REPL's abuse caps (runs written before
this versioning: ``run.json`` without ``fingerprint_version``). 2: also leaves out
:data:`LIMITS_OPERATIONAL_FIELDS` (the episode wall limit), so a run resumes with another
wall limit."""


class CollectConfig(BaseModel):
    """Everything that decides what a run's episodes are. Saved resolved in ``run.json``.

    Fields that only change *how fast* episodes run (``concurrency``) are excluded from the
    episode id, so resuming with more workers continues the same run.
    """

    model_config = ConfigDict(extra="forbid")

    rooms: list[str] = Field(description="Data room folders (absolute paths once resolved).")
    out: str | None = Field(
        None,
        description="Run folder to write (runs/NAME); a re-run with the same folder finishes "
        "the run. Operational: not part of episode ids, and not recorded in run.json (the "
        "run is the folder run.json sits in).",
    )
    root: str = Field(description="Root model spec: local:NAME[+adapter=DIR] or openai:MODEL@URL.")
    sub: str = Field(description="Sub-call model spec (same syntax as root).")
    episodes: int = Field(4, ge=1, description="Episodes (samples) per room.")
    concurrency: int = Field(
        4,
        ge=1,
        description="Episodes run at once (executor ray: across the cluster, within each "
        "node's cap).",
    )
    sub_concurrency: int = Field(8, ge=1, description="Sub-calls of one batch in flight at once.")
    depth: Literal[1, 2] = Field(
        1,
        description="1: sub-calls are plain completions; 2: each sub-call runs a subagent with "
        "its own REPL over the text it was given, which may make plain sub-calls itself.",
    )
    subagent_max_turns: int = Field(3, ge=1, description="Depth 2: turns a subagent may take.")
    subagent_prefill: str | None = Field(
        None, description="Depth 2: text every subagent reply starts with."
    )
    seed: int = Field(0, description="Base seed; each episode's seed derives from it and its id.")
    root_sampling: Sampling = Field(
        default_factory=lambda: Sampling(temperature=0.7, top_p=0.95, max_tokens=768),
        description="Sampling of the root's turns (temperature, top_p, max_tokens per reply).",
    )
    sub_sampling: Sampling = Field(
        default_factory=lambda: Sampling(temperature=0.2, top_p=0.95, max_tokens=200),
        description="Sampling of sub-calls (and of depth-2 subagent turns).",
    )
    few_shot: bool = Field(False, description="Put the packaged worked example before the task.")
    prefill: str | None = Field(
        None, description='Text every root reply starts with, e.g. "```repl\\n".'
    )
    limits: EpisodeLimits = Field(
        default_factory=EpisodeLimits,
        description="Per-episode budgets (turns, sub-calls, tokens) and the wall-time safety net.",
    )
    max_usd: float | None = Field(
        None, ge=0, description="Spend cap of the whole run in USD (hosted APIs); None = none."
    )
    requests_per_minute: float | None = Field(
        None, gt=0, description="Model requests started per minute across the run; None = any."
    )
    prices: str | None = Field(
        None,
        description="Price table file (YAML/JSON, rlmdistill.models.limits.PriceTable); "
        "default: the packaged example table (local models and loopback servers cost 0).",
    )
    repl: ReplLimits = Field(
        default_factory=ReplLimits,
        description="Limits of the REPL process that runs the root's code (time, memory, "
        "scratch, processes, message sizes).",
    )
    token_ids: Literal["root", "all", "off"] = Field(
        "root",
        description="Token ids + logprobs in the trace: root turns (default), all requests "
        "(root, sub-calls, subagent turns), or off (for a server that rejects the request "
        "fields). Operational: not part of episode ids.",
    )
    sandbox: SandboxMode = Field(
        DEFAULT_MODE,
        description="Isolation of the REPL: bwrap (bubblewrap, the default on Linux), audit "
        "(audit hook only: stops mistakes, not deliberate escapes) or none. Operational: not "
        "part of the episode id.",
    )
    executor: Literal["thread", "ray"] = Field(
        "thread",
        description="Where episodes run: 'thread' (this process's thread pool, the default) or "
        "'ray' (the nodes of a Ray cluster; needs the extra: pip install 'rlmdistill[ray]'). "
        "Operational: not part of episode ids.",
    )
    ray: RayOptions = Field(
        default_factory=RayOptions,
        description="Ray cluster options for executor 'ray'. Operational: not part of episode ids.",
    )
    fingerprint_version: Literal[1, 2] = Field(
        1,
        description="Which fields define episodes (FINGERPRINT_VERSION): 1 keeps the episode "
        "wall limit in the episode id (every run written before this field), 2 leaves it out "
        "(safety net). New runs get the current version (build_config); a run resumes with "
        "the version its run.json records. The default 1 is what a stored config without the "
        "field means.",
    )
    servers: list[str] = Field(
        default_factory=list,
        description="Replicas of the openai: servers (base URLs): a root or sub spec whose URL "
        "is one of them is served by all of them (least outstanding requests, one replica per "
        "episode's root turns, failover). Operational: not part of the episode id; nor are the "
        "extra URLs of a spec openai:MODEL@URL1,URL2 (its first URL is).",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Attempts of an episode that the serving infrastructure cuts short (server "
        "down, unknown model, retries spent) before it is recorded as finished with its status; "
        "earlier ones go to attempts.jsonl and the next run retries them.",
    )
    request_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds each HTTP attempt to an openai: server may take (connect, then the "
        "whole non-streamed reply); None = the client's default (120). A safety net, not a "
        "budget: on a slow server (vLLM on CPU) raise it so that max_tokens and max_turns end "
        "replies, not the clock. Operational: not part of episode ids.",
    )

    def fingerprint(self) -> str:
        """sha256 (16 hex) of what defines episodes: every field but the operational ones
        (:data:`OPERATIONAL_FIELDS`: concurrency, spend cap, request rate, price table,
        attempts, token ids, sandbox, executor and its Ray options, servers, the run folder;
        a spec's replica URLs; and the REPL's abuse caps
        :data:`~rlmdistill.harness.repl.OPERATIONAL_FIELDS`) and ``rooms`` (rooms enter ids by
        content hash), plus the packaged prompt version(s). From ``fingerprint_version`` 2
        the episode wall limit (:data:`LIMITS_OPERATIONAL_FIELDS`) is left out too and the
        version is part of the hash; version 1 hashes exactly what it always did."""
        exclude: dict[str, Any] = dict.fromkeys(
            ["rooms", "fingerprint_version", *OPERATIONAL_FIELDS], True
        )
        exclude["repl"] = dict.fromkeys(REPL_OPERATIONAL_FIELDS, True)
        if self.fingerprint_version >= 2:
            exclude["limits"] = dict.fromkeys(LIMITS_OPERATIONAL_FIELDS, True)
        data = self.model_dump(mode="json", exclude=exclude)
        data["root"], data["sub"] = identity(self.root), identity(self.sub)  # replicas: operational
        if self.fingerprint_version >= 2:
            data["fingerprint_version"] = self.fingerprint_version
        data["prompt_version"] = PROMPT_VERSION
        if self.depth == 2:
            data["subagent_prompt_version"] = SUBAGENT_PROMPT_VERSION
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def for_run(config: CollectConfig, run_dir: Path) -> CollectConfig:
    """``config`` as the run in ``run_dir`` defines its episodes: with the fingerprint version
    its ``run.json`` records (none recorded: 1, the rule of every run written before
    versions), so resuming a run never changes its episode ids. A run of version 1 also keeps
    its recorded ``limits.max_wall_s`` (part of its ids) unless ``config`` sets one itself, in
    which case a different value is the mismatch it always was. ``config`` is returned
    unchanged when ``run_dir`` holds no ``run.json`` (a new run) or one that is not a run
    manifest (the runner reports that).
    """
    path = Path(run_dir) / RUN_MANIFEST
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["config"]
        version = int(recorded.get("fingerprint_version", 1))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return config
    if version not in (1, 2):
        return config  # written by a newer version: the runner's mismatch check names it
    update: dict[str, Any] = {}
    if version != config.fingerprint_version:
        update["fingerprint_version"] = version
    if version == 1 and "max_wall_s" not in config.limits.model_fields_set:
        wall = (recorded.get("limits") or {}).get("max_wall_s")
        number = isinstance(wall, int | float) and not isinstance(wall, bool)
        if number and isinstance(wall, int | float) and float(wall) != config.limits.max_wall_s:
            update["limits"] = config.limits.model_copy(update={"max_wall_s": float(wall)})
    return config.model_copy(update=update) if update else config


def episode_id(config: CollectConfig, room_hash: str, task_id: str, sample_index: int) -> str:
    """Stable id of one episode: sha256 over (config fingerprint, room, task, sample index).

    The room enters by content hash, so moving a room folder keeps ids; editing it changes them.
    """
    key = json.dumps([config.fingerprint(), room_hash, task_id, sample_index])
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def episode_seed(config: CollectConfig, room_hash: str, task_id: str, sample_index: int) -> int:
    """Per-episode seed (31-bit) from the base seed, the room, the task and the sample index.

    It leaves out the models and every other setting on purpose: two runs that differ only
    in their root (base vs tuned arm of an experiment) give sample ``k`` of a room the same
    seed, so their episodes are paired draws.
    """
    key = f"{config.seed}:{room_hash}:{task_id}:{sample_index}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


class QuickstartConfig(BaseModel):
    """``rlmdistill quickstart``: a first run on the embedded default (pull the model, build a
    CUAD room, collect, judge, show). Its collection is a :class:`CollectConfig` made from
    these fields (sub-calls sampled at temperature 0.2, top-p 0.95, at most 128 tokens)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str = DEFAULT_MODEL
    """Embedded model for root and sub."""
    sub_model: str | None = None
    """Embedded model for sub-calls (default: --model)."""
    cuad: Path | None = None
    """CUAD-format source folder (default: the packaged 16-contract sample)."""
    contracts: int = 10
    """Contracts in the room."""
    episodes: int = 4
    """Episodes."""
    concurrency: int = 4
    """Episodes at once."""
    seed: int = 0
    """Room sampling and episode seed."""
    out: Path = Path("runs/quickstart")
    """Run directory."""
    room_dir: Path | None = None
    """Room folder (default: rooms/cuad<N>-s<seed>)."""
    max_turns: int = 4
    """Root turns per episode."""
