"""Preflight: check every ``openai:`` server a stage will use before anything is written.

``collect``, ``loop`` and ``judge`` with an LLM judge call :func:`preflight` first. For each
distinct server (base URL + key variable) it sends one ``GET /v1/models`` and checks that every
model id the stage will ask for is listed. A server that cannot be reached, refuses the key or
does not serve an id stops the stage with :class:`ServerUnavailableError`, naming the role
(``--root``, ``--sub``, ``judge``), the server and the ids it does serve, before ``run.json``
or any other file exists, so the corrected command with the same ``--out`` runs.
``local:`` specs need no server and are skipped. Every replica of a spec with several
servers is checked.

:func:`probe_sampling` then sends one tiny chat request per role with the run's own sampling
settings and prefill (``max_tokens`` capped at :data:`PROBE_MAX_TOKENS`): a server that
answers HTTP 400/422 to them (a hosted API's "Unsupported parameter: 'max_tokens'" or
"Unsupported value: 'temperature'"), or a prefill the spec cannot send (``+prefill=none``),
would fail every request of the run the same way, so the stage stops with
:class:`SamplingRefusedError` naming the role, the server and the parameter.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

import urllib3

from rlmdistill.models.base import FatalModelError, Message, ModelError, Sampling
from rlmdistill.models.spec import ModelSpec, parse_spec

__all__ = [
    "PROBE_MAX_TOKENS",
    "SamplingRefusedError",
    "ServerUnavailableError",
    "list_served_models",
    "preflight",
    "probe_sampling",
    "refused_parameter",
]

PROBE_MAX_TOKENS = 16
"""Most tokens the sampling probe asks for (the run's ``max_tokens`` when smaller)."""

PROBE_MESSAGES = [Message(role="user", content="Reply with the word OK.")]
"""The sampling probe's prompt."""

_REFUSED_PARAMETER = re.compile(
    r"(?:unsupported (?:parameter|value)|unrecognized request argument supplied|"
    r"extra inputs are not permitted|unknown parameter)\W+'?([A-Za-z_][\w.]*)'?",
    re.IGNORECASE,
)


class ServerUnavailableError(ValueError):
    """An ``openai:`` server is unreachable, refuses the key, or does not serve a model id."""


class SamplingRefusedError(ServerUnavailableError):
    """A server refuses the run's sampling settings (HTTP 400/422 to the probe) or its prefill
    (a spec with ``+prefill=none`` and a prefill set): a configuration fault, every request
    would fail alike. ``role``, ``parameter`` (``None`` when the server names none) and
    ``status`` (0: nothing was sent) say which."""

    def __init__(self, message: str, role: str, parameter: str | None, status: int) -> None:
        super().__init__(message)
        self.role = role
        self.parameter = parameter
        self.status = status


def refused_parameter(message: str) -> str | None:
    """The request field an HTTP 400 text names as refused (``"Unsupported parameter:
    'max_tokens' ..."`` -> ``max_tokens``; also "Unsupported value", "Unrecognized request
    argument supplied", pydantic's "Extra inputs are not permitted"), else ``None``."""
    match = _REFUSED_PARAMETER.search(message)
    return match.group(1) if match else None


def list_served_models(base_url: str, key_env: str, timeout_s: float = 10.0) -> list[str]:
    """Model ids listed by ``GET {base_url}/models`` (the OpenAI ``{"data": [{"id": ...}]}``).

    ``timeout_s`` bounds connect and read, each (one attempt, no retries: a preflight must
    fail fast). Raises :class:`ServerUnavailableError` naming the URL and what went wrong.
    """
    url = base_url.rstrip("/") + "/models"
    key = os.environ.get(key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        resp = urllib3.request(
            "GET",
            url,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
            retries=False,
        )
    except urllib3.exceptions.HTTPError as exc:
        raise ServerUnavailableError(
            f"server {base_url} is not reachable ({type(exc).__name__}: {exc}); start it or "
            "fix the URL in the model spec"
        ) from None
    if resp.status in (401, 403):
        raise ServerUnavailableError(
            f"server {base_url} refused the API key (HTTP {resp.status} on GET {url}); put the "
            f"right key in ${key_env}"
        )
    if resp.status >= 400:
        raise ServerUnavailableError(
            f"server {base_url} answered HTTP {resp.status} to GET {url}: is this the "
            "OpenAI-compatible base URL (usually ending in /v1)?"
        )
    try:
        data = json.loads(resp.data)
        return [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise ServerUnavailableError(
            f"server {base_url}: GET {url} did not return an OpenAI model list "
            f"({resp.data[:200]!r}); is this the OpenAI-compatible base URL (usually ending "
            "in /v1)?"
        ) from None


def preflight(roles: Mapping[str, ModelSpec | str | None], *, timeout_s: float = 10.0) -> None:
    """Check every ``openai:`` spec of ``roles`` (role name -> spec; ``None`` and ``local:``
    specs are skipped): its server answers ``GET /v1/models`` and lists its model id.

    One request per distinct (base URL, key variable); a spec with replicas
    (``openai:M@URL1,URL2``) has each of its servers checked. Raises :class:`ServerUnavailableError`
    (a ``ValueError``: the CLI exits 2) naming the role, the spec, the server and the ids it
    serves; ``ValueError`` for a spec that does not parse.
    """
    by_server: dict[tuple[str, str], list[tuple[str, ModelSpec]]] = {}
    for role, raw in roles.items():
        if raw is None:
            continue
        spec = raw if isinstance(raw, ModelSpec) else parse_spec(raw)
        if spec.kind != "openai" or spec.base_url is None:
            continue
        for url in spec.base_urls:  # every replica: a run must not start with one down
            by_server.setdefault((url, spec.key_env), []).append((role, spec))
    for (base_url, key_env), wanted in by_server.items():
        try:
            served = list_served_models(base_url, key_env, timeout_s)
        except ServerUnavailableError as exc:
            users = ", ".join(f"{role} {spec}" for role, spec in wanted)
            raise ServerUnavailableError(f"{exc} (needed by {users})") from None
        for role, spec in wanted:
            if spec.name not in served:
                raise ServerUnavailableError(
                    f"server {base_url} does not serve model {spec.name!r} (needed by {role} "
                    f"{spec}); it serves: {', '.join(served) or '(nothing)'}. Fix the model "
                    "name in the spec, or load the adapter / start the server with that model"
                )


def probe_sampling(
    roles: Mapping[str, tuple[ModelSpec | str | None, Sampling, str | None]],
    *,
    timeout_s: float = 10.0,
) -> None:
    """Send one tiny chat request per ``openai:`` role with its real sampling settings.

    ``roles``: role name (``--root``, ``--sub``) -> (spec, sampling, prefill). The request is
    :data:`PROBE_MESSAGES` with every sampling field as the run sends it, except
    ``max_tokens`` capped at :data:`PROBE_MAX_TOKENS`, and the prefill sent as the run sends
    it; one attempt, no retry, to the spec's first server (replicas run the same server).
    Equal (spec, sampling, prefill) are sent once. Only a refusal that every request of the
    run would get stops the stage; any other answer or failure (a timeout, a 5xx, a
    reasoning-only reply) is left to the run's own fault handling (``docs/serving.md``).

    Raises :class:`SamplingRefusedError` (a ``ValueError``: the CLI exits 2) naming the
    role, the spec, the server's message and the refused parameter, when the server answers
    HTTP 400/422 that is not a context-length error, or when the spec cannot send the prefill.
    """
    from rlmdistill.models.openai_client import OpenAIChatClient

    seen: set[tuple[str, str, str | None]] = set()
    for role, (raw, sampling, prefill) in roles.items():
        if raw is None:
            continue
        spec = raw if isinstance(raw, ModelSpec) else parse_spec(raw)
        if spec.kind != "openai" or spec.base_url is None:
            continue
        key = (str(spec.without_replicas()), sampling.model_dump_json(), prefill)
        if key in seen:
            continue
        seen.add(key)
        probe = sampling.model_copy(
            update={"max_tokens": min(sampling.max_tokens, PROBE_MAX_TOKENS)}
        )
        client = OpenAIChatClient(
            spec.name,
            spec.base_url,
            key_env=spec.key_env,
            prefill_mode=spec.prefill_mode,
            timeout_s=timeout_s,
            max_retries=0,
        )
        try:
            client.chat(list(PROBE_MESSAGES), probe, prefill=prefill)
        except FatalModelError as exc:
            _raise_refusal(role, spec, sampling, prefill, exc)
        except ModelError:
            pass  # not a configuration fault: the run handles it (attempts, statuses)
        finally:
            client.close()


def _raise_refusal(
    role: str, spec: ModelSpec, sampling: Sampling, prefill: str | None, exc: FatalModelError
) -> None:
    """Raise :class:`SamplingRefusedError` for a refusal every request would get; return for
    a fatal answer that is the reply's own (empty, reasoning only)."""
    if exc.attempts == 0 and prefill:  # +prefill=none with a prefill: nothing was sent
        raise SamplingRefusedError(
            f"{role} {spec}: the run sets a reply prefill ({prefill!r}) but the spec sends none "
            "(+prefill=none), so every root turn would fail. Drop the prefill (prefill: null, "
            "--prefill '') or serve the model with vLLM/SGLang and remove +prefill=none",
            role,
            None,
            0,
        ) from exc
    match = re.fullmatch(r"http_(\d+)", exc.cause)
    if match is None or int(match.group(1)) not in (400, 422):
        return
    status = int(match.group(1))
    message = str(exc)
    parameter = refused_parameter(message)
    settings = ", ".join(
        f"{k}={v!r}" for k, v in sampling.model_dump().items() if v not in (None, [])
    )
    named = f"parameter {parameter!r}" if parameter else "a request field (not named)"
    raise SamplingRefusedError(
        f"{role} {spec}: the server refuses {named} of the run's sampling settings "
        f"(HTTP {status} to a one-request probe with {settings}"
        f"{f', prefill {prefill!r}' if prefill else ''}): {message}. Every request of the run "
        "would fail the same way; change the setting (root_sampling / sub_sampling in the "
        "collect config) or use a server that accepts it. Nothing was written",
        role,
        parameter,
        status,
    ) from exc
