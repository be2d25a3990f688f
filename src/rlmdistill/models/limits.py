"""Per-run limits on hosted model APIs: a spend cap in US dollars and a request rate.

A run shares one :class:`RunLimits` between all its clients (root and sub model); each client
is wrapped in a :class:`LimitedClient`, which asks :meth:`RunLimits.before_request` for
permission before every ``chat`` call and reports the token usage afterwards
(:meth:`RunLimits.after_response`). Cost comes from a versioned :class:`PriceTable` (USD per
million tokens, per model-id pattern).

Semantics and their limits:

- The cap is checked *before* each request: the request that crosses ``max_usd`` completes and
  is paid for; every later one raises :class:`SpendCapExceeded` without reaching the server.
  With ``n`` requests in flight at once the overshoot is at most the cost of those ``n``
  requests (the cap cannot know what a request costs until it answers).
- Cost is computed from the usage the server reports. A request that fails (no usage) adds
  nothing, although some providers bill failed or timed-out requests.
- The rate limit spaces ``chat`` calls evenly (a token bucket of capacity one):
  ``requests_per_minute=600`` starts at most one call every 0.1 s, across all threads. Retries
  inside a client (e.g. after HTTP 429) are that client's own business and are not re-counted.
- Prices change: the table carries a ``version`` so a run can record which prices it used.
  :data:`DEFAULT_PRICES` only knows local models (free); its hosted entries are illustrative
  examples, not current list prices — load a table of your own for real spend caps.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlmdistill.cliconfig import ConfigFileError, read_config_file
from rlmdistill.models.base import (
    ChatResult,
    FatalModelError,
    Message,
    ModelClient,
    ModelError,
    Sampling,
    Usage,
    chat_concurrently,
)

__all__ = [
    "DEFAULT_PRICES",
    "LimitedClient",
    "ModelPrice",
    "PriceTable",
    "RunLimits",
    "SpendCapExceeded",
    "load_prices",
]


class ModelPrice(BaseModel):
    """Prices of the models whose id matches ``pattern``, in USD per one million tokens."""

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(
        description="fnmatch pattern over the client's model_id, e.g. 'openai:gpt-4o-mini@*'."
    )
    input: float = Field(ge=0, description="USD per 1M uncached prompt tokens.")
    cached_input: float | None = Field(
        None, ge=0, description="USD per 1M prompt tokens served from cache; None = input price."
    )
    output: float = Field(ge=0, description="USD per 1M completion tokens.")
    note: str = Field("", description="Where the price comes from (free text).")


class PriceTable(BaseModel):
    """A versioned list of :class:`ModelPrice`; the first pattern that matches a model wins."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="Identifier of this price list, recorded with a run.")
    prices: list[ModelPrice] = Field(
        default_factory=list, description="Prices by model-id pattern; the first match wins."
    )

    def price_for(self, model_id: str) -> ModelPrice | None:
        """The first entry whose pattern matches ``model_id`` (case-sensitive), else ``None``."""
        for price in self.prices:
            if fnmatch.fnmatchcase(model_id, price.pattern):
                return price
        return None

    def cost_usd(self, model_id: str, usage: Usage) -> float | None:
        """Cost of one request in USD, or ``None`` when no entry matches ``model_id``.

        ``usage.cached_tokens`` are a subset of ``usage.prompt_tokens`` (clamped to it) and are
        priced at ``cached_input``; the rest of the prompt at ``input``; completion tokens at
        ``output``. When ``cached_tokens`` is ``None`` (the server did not report it) every
        prompt token is priced at ``input``: an upper bound, which callers report as such.
        """
        price = self.price_for(model_id)
        if price is None:
            return None
        prompt = max(0, usage.prompt_tokens)
        cached = min(max(0, usage.cached_tokens or 0), prompt)
        cached_price = price.input if price.cached_input is None else price.cached_input
        micro_usd = (
            (prompt - cached) * price.input
            + cached * cached_price
            + max(0, usage.completion_tokens) * price.output
        )
        return micro_usd / 1_000_000


DEFAULT_PRICES = PriceTable(
    version="rlmdistill-default-2025-01 (examples only)",
    prices=[
        ModelPrice(pattern="local:*", input=0, output=0, note="in-process model: no API cost"),
        ModelPrice(
            pattern="openai:*@http://127.0.0.1*", input=0, output=0, note="self-hosted (loopback)"
        ),
        ModelPrice(
            pattern="openai:*@http://localhost*", input=0, output=0, note="self-hosted (loopback)"
        ),
        ModelPrice(
            pattern="openai:example-small@*",
            input=0.15,
            cached_input=0.075,
            output=0.60,
            note="EXAMPLE entry showing the format; not a real price",
        ),
        ModelPrice(
            pattern="openai:example-large@*",
            input=2.50,
            cached_input=1.25,
            output=10.00,
            note="EXAMPLE entry showing the format; not a real price",
        ),
    ],
)
"""Free local/loopback models plus two clearly fake example entries; bring your own prices."""


def load_prices(path: str | Path | None) -> PriceTable:
    """The price table in ``path`` (YAML, JSON or TOML of the :class:`PriceTable` shape), or
    :data:`DEFAULT_PRICES` when ``path`` is ``None`` or empty: the one place a price file is
    read (``collect --prices``, ``judge --prices``, ``report --prices``, a config's ``prices:``).

    Raises ``FileNotFoundError`` naming the file when it is missing and ``ValueError`` naming it
    when it is not YAML/JSON or not a valid price table (the validation error says which field).
    """
    if path is None or str(path) == "":
        return DEFAULT_PRICES
    try:  # the one config-file reader (cliconfig): TOML too, any other suffix as YAML
        data = read_config_file(path, other_suffix_as_yaml=True)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path}: price table not found") from exc
    except (OSError, ConfigFileError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a valid price table: {exc}") from exc
    try:
        return PriceTable.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a valid price table: {exc}") from exc


class SpendCapExceeded(FatalModelError):
    """The run has spent its ``max_usd``; no further request is sent."""

    kind = "budget_exceeded"


class RunLimits:
    """Spend cap and request rate shared (thread-safely) by every client of one run.

    Args:
        max_usd: stop sending requests once this many US dollars are spent; ``None`` = no cap.
        requests_per_minute: most ``chat`` calls started per minute, evenly spaced, across all
            clients and threads; ``None`` = unlimited.
        prices: the price table; required for a cap to mean anything (see
            :class:`LimitedClient`). ``None`` = no prices (nothing is ever charged).

    Attributes ``spent_usd`` (USD so far), ``n_requests`` (requests let through) and
    ``n_unpriced`` (responses whose model had no price) can be read at any time.
    """

    def __init__(
        self,
        *,
        max_usd: float | None,
        requests_per_minute: float | None,
        prices: PriceTable | None,
    ) -> None:
        if max_usd is not None and max_usd < 0:
            raise ValueError("max_usd must be >= 0 (or None for no cap)")
        if requests_per_minute is not None and requests_per_minute <= 0:
            raise ValueError("requests_per_minute must be > 0 (or None for no limit)")
        self.max_usd = max_usd
        self.requests_per_minute = requests_per_minute
        self.prices = prices
        self.spent_usd = 0.0
        self.n_requests = 0
        self.n_unpriced = 0
        self._interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._next_slot = 0.0  # time.monotonic() at which the next request may start
        self._lock = threading.Lock()

    def cost_usd(self, model_id: str, usage: Usage) -> float | None:
        """Cost of ``usage`` on ``model_id`` in USD by :attr:`prices` (``None`` when unknown)."""
        return None if self.prices is None else self.prices.cost_usd(model_id, usage)

    def can_price(self, model_id: str) -> bool:
        """Whether :attr:`prices` has an entry for ``model_id``."""
        return self.prices is not None and self.prices.price_for(model_id) is not None

    def _check_cap(self) -> None:
        if self.max_usd is not None and self.spent_usd >= self.max_usd:
            raise SpendCapExceeded(
                f"spend cap reached: ${self.spent_usd:.4f} spent of max_usd=${self.max_usd:.4f} "
                f"after {self.n_requests} request(s); no further requests are sent",
                attempts=0,
            )

    def before_request(self) -> None:
        """Wait for the next rate slot, then count the request.

        Blocks the calling thread for up to one rate interval per request queued before it.

        Raises:
            SpendCapExceeded: ``spent_usd >= max_usd`` (checked before and after waiting).
        """
        with self._lock:
            self._check_cap()
            now = time.monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + self._interval
        if slot > now:
            time.sleep(slot - now)
        with self._lock:
            self._check_cap()
            self.n_requests += 1

    def after_response(self, model_id: str, usage: Usage) -> None:
        """Add the cost of one answered request (USD); an unpriced model adds nothing and is
        counted in ``n_unpriced``."""
        cost = self.cost_usd(model_id, usage)
        with self._lock:
            if cost is None:
                self.n_unpriced += 1
            else:
                self.spent_usd += cost

    def __repr__(self) -> str:
        return (
            f"RunLimits(spent_usd={self.spent_usd:.6f}, max_usd={self.max_usd}, "
            f"n_requests={self.n_requests}, requests_per_minute={self.requests_per_minute})"
        )


class LimitedClient:
    """A :class:`ModelClient` that obeys a shared :class:`RunLimits`.

    Every :meth:`chat` waits for :meth:`RunLimits.before_request` (rate, cap) and reports its
    usage to :meth:`RunLimits.after_response`. ``model_id`` is the inner client's, so traces do
    not change. Closing this client closes the inner one.

    Raises:
        ValueError: at construction, when ``limits.max_usd`` is set but the price table has no
            entry for ``inner.model_id`` — a spend cap that cannot be enforced is refused
            rather than silently ignored.
    """

    def __init__(self, inner: ModelClient, limits: RunLimits) -> None:
        if limits.max_usd is not None and not limits.can_price(inner.model_id):
            version = limits.prices.version if limits.prices is not None else "none"
            raise ValueError(
                f"max_usd={limits.max_usd} is set but the price table (version {version!r}) has "
                f"no price for model {inner.model_id!r}, so the spend cap cannot be enforced. "
                "Add a ModelPrice whose pattern matches this model id, or drop max_usd."
            )
        self.inner = inner
        self.limits = limits
        self.model_id = inner.model_id
        self.max_concurrency = max(1, int(getattr(inner, "max_concurrency", 8)))

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """Complete ``messages`` with the inner client, within the run's limits.

        Raises:
            SpendCapExceeded: the run's spend cap was reached before this request (nothing
                is sent).
            ModelError: whatever the inner client raises.
        """
        self.limits.before_request()
        result = self.inner.chat(messages, sampling, prefill=prefill)
        self.limits.after_response(self.model_id, result.usage)
        return result

    def chat_batch(
        self,
        batch: Sequence[list[Message]],
        sampling: Sampling,
        *,
        prefill: str | None = None,
    ) -> list[ChatResult | ModelError]:
        """:meth:`chat` for every conversation, on up to ``max_concurrency`` threads.

        One entry per input, in order: the result or that prompt's :class:`ModelError`
        (e.g. :class:`SpendCapExceeded` for the prompts that come after the cap is reached).
        Each prompt goes through the limits on its own, whatever the inner client's batching.
        """

        return chat_concurrently(
            self.chat,
            self.model_id,
            batch,
            sampling,
            prefill=prefill,
            max_concurrency=self.max_concurrency,
            thread_name_prefix="rlmd-limited",
        )

    def close(self) -> None:
        """Close the inner client. Idempotent if the inner client's ``close`` is."""
        self.inner.close()

    def __enter__(self) -> LimitedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LimitedClient({self.model_id!r}, {self.limits!r})"
