"""What an episode is told to do: its budgets (:class:`EpisodeLimits`) and the settings the
harness reads (:class:`EpisodeSettings`).

The collect stage's ``CollectConfig`` satisfies :class:`EpisodeSettings` as it is (the field
names are the same), so the harness reads a run's config without importing the collect stage;
any other caller (a test, a trainer's rollout) may hand in any object with these attributes.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.harness.repl import ReplLimits
from rlmdistill.harness.sandbox import SandboxMode
from rlmdistill.models.base import Sampling

__all__ = ["DEFAULT_MAX_WALL_S", "EpisodeLimits", "EpisodeSettings", "TokenIds"]

TokenIds = Literal["root", "all", "off"]
"""Which requests record their token ids and logprobs: root turns, all requests, or none."""

DEFAULT_MAX_WALL_S = 21_600.0
"""Default episode wall limit (6 h): a safety net against a hung episode, not a budget. The
budgets that decide an episode's outcome are counted in turns, tokens and sub-calls, which do
not depend on how loaded the machine is; on a loaded 2-core machine 4 of the quickstart's 8
base episodes hit the old 1,800 s default (status ``timeout``) where an idle one ended them
``no_memo`` at the turn cap."""


class EpisodeLimits(BaseModel):
    """Per-episode budgets; exceeding one ends the episode with an explicit status.

    ``max_turns``, ``max_sub_calls`` and ``max_tokens`` are the budgets that decide outcomes
    (counted, the same on any machine); ``max_wall_s`` is a safety net against a hung episode
    (``timeout``), operational since fingerprint version 2 (see
    ``CollectConfig.fingerprint_version``).
    """

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(6, ge=1, description="Root turns before the episode ends as no_memo.")
    max_sub_calls: int = Field(
        256, ge=0, description="Sub-calls allowed; further llm_query calls raise in the REPL."
    )
    max_tokens: int = Field(
        2_000_000,
        ge=1,
        description="Root + sub tokens (prompt + completion) before budget_exceeded.",
    )
    max_wall_s: float = Field(
        DEFAULT_MAX_WALL_S,
        gt=0,
        description="Episode wall time (seconds) before timeout: a safety net against a hung "
        "episode, not a budget (turns, tokens and sub-calls decide outcomes). Operational in "
        "runs of fingerprint version 2: not part of their episode ids.",
    )
    observation_head_chars: int = Field(
        2500, ge=0, description="Characters of each block's output the root sees from the start."
    )
    observation_tail_chars: int = Field(
        1000, ge=0, description="Characters of each block's output the root sees from the end."
    )


class EpisodeSettings(Protocol):
    """The settings one episode reads (read-only). Units: ``limits`` in turns, sub-calls,
    tokens and seconds; ``repl`` the REPL process's limits; samplings per request.

    ``CollectConfig`` (:mod:`rlmdistill.collect.config`) is the one implementation in the
    package; each attribute is documented on its field there."""

    @property
    def depth(self) -> Literal[1, 2]:
        """1: sub-calls are plain completions; 2: each sub-call runs a subagent."""

    @property
    def few_shot(self) -> bool:
        """Put the packaged worked example before the task."""

    @property
    def prefill(self) -> str | None:
        """Text every root reply starts with."""

    @property
    def root_sampling(self) -> Sampling:
        """Sampling of the root's turns (its seed is replaced by the episode's)."""

    @property
    def sub_sampling(self) -> Sampling:
        """Sampling of sub-calls and depth-2 subagent turns."""

    @property
    def sub_concurrency(self) -> int:
        """Sub-calls of one batch in flight at once."""

    @property
    def subagent_max_turns(self) -> int:
        """Depth 2: turns a subagent may take."""

    @property
    def subagent_prefill(self) -> str | None:
        """Depth 2: text every subagent reply starts with."""

    @property
    def limits(self) -> EpisodeLimits:
        """The episode's budgets and wall-time safety net."""

    @property
    def repl(self) -> ReplLimits:
        """Limits of the REPL processes (root and subagents)."""

    @property
    def sandbox(self) -> SandboxMode:
        """Isolation of the REPL processes."""

    @property
    def token_ids(self) -> TokenIds:
        """Which requests record token ids: ``root``, ``all`` or ``off``."""
