"""Model specs: the strings behind every ``--root/--sub/--judge/--base`` flag.

Grammar::

    local:NAME[+adapter=DIR][+dtype=auto|float32|bfloat16][+quant=int8][+ctx=N]
    openai:MODEL@BASE_URL[,BASE_URL2,...][+key_env=ENV_VAR][+ctx=N][+prefill=continue|none]

Several URLs name replicas of one model (vLLM servers with the same weights): requests are
spread over them (:class:`~rlmdistill.models.replicas.ReplicaClient`). The replica list is
operational: :func:`identity` (the spec with its first URL only) is what enters episode ids,
so adding or removing replicas resumes the same run.

``NAME`` is a pulled embedded model (``qwen2.5-coder-0.5b``, see ``rlmdistill models list``) or
a checkpoint directory. ``BASE_URL`` is an ``http(s)://`` URL of an OpenAI-compatible server,
usually ending in ``/v1``. The API key is read from the environment variable ``key_env``
(default ``RLMDISTILL_API_KEY``) when the client is opened; it is never part of a spec, of
``str(spec)`` or of a ``model_id``.

:func:`get_client` keeps one client per distinct spec for the whole process, so a local model
used as both root and sub is loaded once and its batching worker serves both.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from rlmdistill.models.base import ModelClient
from rlmdistill.models.local import INT8_DTYPES, LocalDtype, LocalQuant
from rlmdistill.models.openai_client import DEFAULT_KEY_ENV

SpecKind = Literal["local", "openai"]
"""Back end of a spec: in-process ``transformers`` or an OpenAI-compatible server."""

_OPTION_SPLIT = re.compile(r"\+(?=[a-z_]+=)")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOCAL_OPTIONS = {"adapter", "dtype", "quant", "ctx"}
_OPENAI_OPTIONS = {"key_env", "ctx", "prefill"}
_SECRET_OPTIONS = {"key", "api_key", "token", "password", "secret"}


class ModelSpec(BaseModel):
    """A parsed model spec (immutable and hashable; ``str(spec)`` is the canonical form)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SpecKind
    """``local`` or ``openai``."""
    name: str
    """Embedded model name or checkpoint path (local); served model name (openai)."""
    adapter: str | None = None
    """LoRA adapter directory (local only)."""
    base_url: str | None = None
    """Server URL (openai only), without a trailing slash."""
    key_env: str = DEFAULT_KEY_ENV
    """Environment variable holding the API key (openai only)."""
    dtype: LocalDtype = "auto"
    """Compute dtype (local only)."""
    quant: LocalQuant = "none"
    """Weight quantisation for generation (local only): ``int8`` = dynamic int8 weights with
    float32 activations (:func:`rlmdistill.models.local.quantize_int8`). Part of the model id:
    int8 outputs differ from float32's, so its episodes are another model's."""
    context_window: int | None = None
    """Context window in tokens if given with ``+ctx=N``."""
    prefill_mode: Literal["continue_final_message", "none"] = "continue_final_message"
    """How a reply prefill is sent (openai only)."""
    replicas: tuple[str, ...] = ()
    """Further server URLs serving the same model (openai only; ``base_url`` is the first)."""

    @property
    def base_urls(self) -> list[str]:
        """Every server URL of the spec, ``base_url`` first (openai only; else empty)."""
        return [self.base_url, *self.replicas] if self.base_url is not None else []

    def without_replicas(self) -> ModelSpec:
        """The same spec on its first server only."""
        return self.model_copy(update={"replicas": ()})

    def __str__(self) -> str:
        if self.kind == "local":
            out = f"local:{self.name}"
            if self.adapter:
                out += f"+adapter={self.adapter}"
            if self.dtype != "auto":
                out += f"+dtype={self.dtype}"
            if self.quant != "none":
                out += f"+quant={self.quant}"
        else:
            out = f"openai:{self.name}@{','.join(self.base_urls)}"
            if self.key_env != DEFAULT_KEY_ENV:
                out += f"+key_env={self.key_env}"
            if self.prefill_mode == "none":
                out += "+prefill=none"
        if self.context_window is not None:
            out += f"+ctx={self.context_window}"
        return out

    @property
    def model_id(self) -> str:
        """Id recorded in traces: the canonical spec (never contains a secret)."""
        return str(self)


def parse_spec(text: str) -> ModelSpec:
    """Parse ``local:...`` or ``openai:...`` (grammar in the module docstring).

    Raises:
        ValueError: unknown kind, empty name, missing/invalid URL, credentials in the URL,
            unknown or duplicated option, a secret given inline, or a bad option value; the
            message quotes the spec and shows the expected form.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty model spec; expected local:NAME or openai:MODEL@URL")
    text = text.strip()
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("local", "openai"):
        raise ValueError(
            f"bad model spec {text!r}: must start with 'local:' or 'openai:' "
            "(e.g. local:qwen2.5-coder-0.5b or openai:Qwen/Qwen2.5-7B-Instruct@http://host:8000/v1)"
        )
    head, *option_parts = _OPTION_SPLIT.split(rest)
    options: dict[str, str] = {}
    allowed = _LOCAL_OPTIONS if kind == "local" else _OPENAI_OPTIONS
    for part in option_parts:
        key, _, value = part.partition("=")
        if key in _SECRET_OPTIONS:
            raise ValueError(
                f"bad model spec: secrets never go into a spec (option {key!r}); put the key in "
                f"an environment variable and name it with +key_env=VAR (default {DEFAULT_KEY_ENV})"
            )
        if key not in allowed:
            raise ValueError(
                f"bad model spec {text!r}: unknown option {key!r} for {kind}: specs; "
                f"allowed: {', '.join(sorted(allowed))}"
            )
        if key in options:
            raise ValueError(f"bad model spec {text!r}: option {key!r} given twice")
        if not value:
            raise ValueError(f"bad model spec {text!r}: option {key!r} has an empty value")
        options[key] = value
    fields: dict[str, Any] = {"kind": kind}
    if "ctx" in options:
        try:
            ctx = int(options["ctx"])
        except ValueError:
            raise ValueError(f"bad model spec {text!r}: +ctx must be an integer") from None
        if ctx <= 0:
            raise ValueError(f"bad model spec {text!r}: +ctx must be positive")
        fields["context_window"] = ctx
    if kind == "local":
        if not head:
            raise ValueError(
                f"bad model spec {text!r}: expected local:NAME where NAME is a pulled model "
                "(see `rlmdistill models list`) or a checkpoint directory"
            )
        fields["name"] = head
        if "adapter" in options:
            fields["adapter"] = options["adapter"]
        if "dtype" in options:
            if options["dtype"] not in ("auto", "float32", "bfloat16", "float16"):
                raise ValueError(
                    f"bad model spec {text!r}: +dtype must be auto, float32, bfloat16 or float16"
                )
            fields["dtype"] = options["dtype"]
        if "quant" in options:
            if options["quant"] not in get_args(LocalQuant):
                raise ValueError(f"bad model spec {text!r}: +quant must be int8 or none")
            if options["quant"] == "int8" and fields.get("dtype", "auto") not in INT8_DTYPES:
                raise ValueError(
                    f"bad model spec {text!r}: +quant=int8 runs float32 activations; "
                    "drop +dtype or give +dtype=float32"
                )
            fields["quant"] = options["quant"]
        return ModelSpec(**fields)
    match = re.search(r"@(https?://)", head)
    if match is None:
        raise ValueError(
            f"bad model spec {text!r}: expected openai:MODEL@BASE_URL with an http(s) URL, "
            "e.g. openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1"
        )
    model, url_list = head[: match.start()], head[match.start() + 1 :]
    if not model:
        raise ValueError(f"bad model spec {text!r}: empty model name before '@'")
    urls = [_check_url(text, u) for u in url_list.split(",")]
    if len(set(urls)) != len(urls):
        raise ValueError(f"bad model spec {text!r}: a server URL is listed twice")
    url = urls[0]
    fields["replicas"] = tuple(urls[1:])
    fields.update(name=model, base_url=url)
    if "key_env" in options:
        if not _ENV_NAME.match(options["key_env"]):
            raise ValueError(f"bad model spec {text!r}: +key_env must name an environment variable")
        fields["key_env"] = options["key_env"]
    if "prefill" in options:
        mode = {"continue": "continue_final_message", "none": "none"}.get(options["prefill"])
        if mode is None:
            raise ValueError(f"bad model spec {text!r}: +prefill must be continue or none")
        fields["prefill_mode"] = mode
    return ModelSpec(**fields)


def _check_url(text: str, url: str) -> str:
    """One server URL of an ``openai:`` spec, without its trailing slash (``ValueError``
    naming the spec when it is not an http(s) URL with a host, or carries credentials)."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://", url):
        raise ValueError(
            f"bad model spec {text!r}: {url!r} is not an http(s) URL; replicas are listed as "
            "openai:MODEL@http://host1:8000/v1,http://host2:8000/v1"
        )
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    if not netloc:
        raise ValueError(f"bad model spec {text!r}: URL has no host")
    if "@" in netloc:
        raise ValueError(
            "bad model spec: credentials in the URL are not allowed (they would be recorded "
            f"in traces); use +key_env=VAR (default {DEFAULT_KEY_ENV})"
        )
    return url


def identity(text: str) -> str:
    """What of a spec string decides episodes: the string itself, except that an ``openai:``
    spec listing several servers keeps only its first (replicas are operational). A string
    that does not parse is returned unchanged (the fingerprint never raises)."""
    if not text.strip().startswith("openai:") or "," not in text:
        return text
    try:
        spec = parse_spec(text)
    except ValueError:
        return text
    if not spec.replicas:
        return text
    head, *options = _OPTION_SPLIT.split(text.strip())
    first = head.split(",", 1)[0]
    return "+".join([first, *options])


def with_servers(text: str, servers: list[str]) -> str:
    """``text`` with the replicas of ``servers`` added when its first URL is one of them
    (the ``servers:`` list of a collect config): ``openai:M@A`` with ``[A, B]`` gives
    ``openai:M@A,B``. Other specs are returned unchanged. Raises ``ValueError`` for a bad
    URL in ``servers``."""
    urls = [_check_url(f"servers: {servers}", u) for u in servers]
    if not text.strip().startswith("openai:") or not urls:
        return text
    spec = parse_spec(text)
    if spec.base_url not in urls:
        return text
    extra = [u for u in urls if u not in spec.base_urls]
    return str(spec.model_copy(update={"replicas": (*spec.replicas, *extra)}))


class BaseModelError(ValueError):
    """A ``--base`` that names no local weights to train: a spec of another kind, or one
    with an adapter."""


def resolve_base(base: str, cache_dir: Path | str | None = None) -> Path:
    """Checkpoint directory of a base model to train (SFT, RL, the loop): an embedded model
    name, ``local:NAME`` or a directory.

    Raises:
        BaseModelError: a spec with an adapter or of another kind (``openai:``).
        FileNotFoundError: the errors of :func:`rlmdistill.models.pull.resolve_local` (not
            pulled, unknown name, directory without ``config.json``).
    """
    from rlmdistill.models.pull import resolve_local

    name = base
    if base.startswith(("local:", "openai:")):
        spec = parse_spec(base)
        if spec.kind != "local":
            raise BaseModelError(
                f"--base {base!r}: training needs local weights (local:NAME or a directory)"
            )
        if spec.adapter:
            raise BaseModelError(
                f"--base {base!r}: training on top of an adapter is not supported; merge it "
                "first with `rlmdistill sft merge` and train on the merged checkpoint"
            )
        name = spec.name
    return resolve_local(name, cache_dir).resolve()


def _as_spec(spec: ModelSpec | str) -> ModelSpec:
    return spec if isinstance(spec, ModelSpec) else parse_spec(spec)


def open_client(spec: ModelSpec | str, **opts: Any) -> ModelClient:
    """Build a new client for ``spec``; ``opts`` go to the client constructor.

    ``local`` -> :class:`~rlmdistill.models.local.LocalChatClient` on
    :func:`~rlmdistill.models.pull.resolve_local` of the name (``opts`` e.g. ``max_batch``,
    ``num_threads``); ``openai`` -> :class:`~rlmdistill.models.openai_client.OpenAIChatClient`
    with the key read from ``$key_env`` now (``opts`` e.g. ``timeout_s``, ``max_retries``,
    ``max_concurrency``, ``logprobs``).

    Raises:
        ValueError: bad spec string.
        FileNotFoundError: local model not pulled / directory missing.
        FatalModelError: the local checkpoint cannot be loaded.
    """
    s = _as_spec(spec)
    if s.kind == "local":
        from rlmdistill.models.local import LocalChatClient
        from rlmdistill.models.pull import resolve_local

        directory = resolve_local(s.name)
        return LocalChatClient(
            directory,
            adapter=s.adapter,
            dtype=opts.pop("dtype", s.dtype),
            quantize=opts.pop("quantize", s.quant),
            context_window=opts.pop("context_window", s.context_window),
            model_id=opts.pop("model_id", s.model_id),
            **opts,
        )
    from rlmdistill.models.openai_client import OpenAIChatClient

    assert s.base_url is not None
    if s.replicas:
        from rlmdistill.models.replicas import ReplicaClient

        opts.setdefault("prefill_mode", s.prefill_mode)
        opts.setdefault("context_window", s.context_window)
        return ReplicaClient(
            [
                OpenAIChatClient(
                    s.name,
                    url,
                    api_key=os.environ.get(s.key_env),
                    key_env=s.key_env,
                    retry_transport=False,  # a dead replica fails over at once
                    **opts,
                )
                for url in s.base_urls
            ],
            model_id=str(s.without_replicas()),
        )
    return OpenAIChatClient(
        s.name,
        s.base_url,
        api_key=os.environ.get(s.key_env),
        key_env=s.key_env,
        prefill_mode=opts.pop("prefill_mode", s.prefill_mode),
        context_window=opts.pop("context_window", s.context_window),
        **opts,
    )


_CACHE: dict[tuple[str, str], ModelClient] = {}
_CACHE_LOCK = threading.Lock()


def get_client(spec: ModelSpec | str, **opts: Any) -> ModelClient:
    """Return the process-wide shared client of ``spec`` (opening it on first use).

    Equal specs with equal ``opts`` give the same instance, so ``--root local:X --sub
    local:X`` loads X once. Thread-safe; the first caller loads, the others wait.
    """
    s = _as_spec(spec)
    key = (str(s), repr(sorted(opts.items())))
    with _CACHE_LOCK:
        client = _CACHE.get(key)
        if client is None:
            client = open_client(s, **opts)
            _CACHE[key] = client
        return client


def close_all() -> None:
    """Close and forget every client opened by :func:`get_client`."""
    with _CACHE_LOCK:
        clients = list(_CACHE.values())
        _CACHE.clear()
    for client in clients:
        client.close()
