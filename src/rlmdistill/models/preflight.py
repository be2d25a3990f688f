"""Preflight: check every ``openai:`` server a stage will use before anything is written.

``collect``, ``loop`` and ``judge`` with an LLM judge call :func:`preflight` first. For each
distinct server (base URL + key variable) it sends one ``GET /v1/models`` and checks that every
model id the stage will ask for is listed. A server that cannot be reached, refuses the key or
does not serve an id stops the stage with :class:`ServerUnavailableError`, naming the role
(``--root``, ``--sub``, ``judge``), the server and the ids it does serve, before ``run.json``
or any other file exists, so the corrected command with the same ``--out`` runs.
``local:`` specs need no server and are skipped. Every replica of a spec with several
servers is checked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import urllib3

from rlmdistill.models.spec import ModelSpec, parse_spec

__all__ = ["ServerUnavailableError", "list_served_models", "preflight"]


class ServerUnavailableError(ValueError):
    """An ``openai:`` server is unreachable, refuses the key, or does not serve a model id."""


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
