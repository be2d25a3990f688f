"""Model clients: one :class:`ModelClient` protocol, two back ends, specs, embedded models.

- :mod:`.base`: the protocol, messages, sampling, usage, results and classified errors;
- :mod:`.spec`: ``local:NAME[+adapter=DIR]`` / ``openai:MODEL@URL`` specs and a shared
  client cache;
- :mod:`.openai_client`: any OpenAI-compatible server, with bounded retries;
- :mod:`.local`: in-process ``transformers`` with request batching;
- :mod:`.limits`: per-run spend cap (USD, from a versioned price table) and request rate;
- :mod:`.registry` / :mod:`.pull`: the models embedded in PyPI wheels and ``models pull``.

Importing this package does not import ``torch``.
"""

from rlmdistill.models.base import (
    ChatResult,
    ContextExceededError,
    FatalModelError,
    InfrastructureError,
    Message,
    ModelClient,
    ModelError,
    RetryableModelError,
    Sampling,
    ServerRefusedError,
    Usage,
)
from rlmdistill.models.limits import (
    DEFAULT_PRICES,
    LimitedClient,
    ModelPrice,
    PriceTable,
    RunLimits,
    SpendCapExceeded,
)
from rlmdistill.models.local import LocalChatClient
from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.pull import PullError, list_main, pull, pull_main, resolve_local
from rlmdistill.models.registry import EMBEDDED_MODELS, EmbeddedModel, get_embedded
from rlmdistill.models.spec import ModelSpec, close_all, get_client, open_client, parse_spec

__all__ = [
    "DEFAULT_PRICES",
    "EMBEDDED_MODELS",
    "ChatResult",
    "ContextExceededError",
    "EmbeddedModel",
    "FatalModelError",
    "InfrastructureError",
    "LimitedClient",
    "LocalChatClient",
    "Message",
    "ModelClient",
    "ModelError",
    "ModelPrice",
    "ModelSpec",
    "OpenAIChatClient",
    "PriceTable",
    "PullError",
    "RetryableModelError",
    "RunLimits",
    "Sampling",
    "ServerRefusedError",
    "SpendCapExceeded",
    "Usage",
    "close_all",
    "get_client",
    "get_embedded",
    "list_main",
    "open_client",
    "parse_spec",
    "pull",
    "pull_main",
    "resolve_local",
]
