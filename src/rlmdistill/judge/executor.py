"""Where an LLM judge's requests run: the :class:`Executor` protocol and its two
implementations, resolved once from ``JudgeConfig.executor`` (:func:`executor_for`).

- ``thread`` (:class:`ThreadExecutor`): this process's shared client of the judge's spec
  (:func:`rlmdistill.models.spec.get_client`), requests on the grader's threads;
- ``ray`` (:class:`RayExecutor`): a :class:`~rlmdistill.judge.spread.SpreadChatClient` whose
  requests run on the nodes of a Ray cluster (``ray`` options as for ``collect``).

Either way the grader, its verdict cache, usage log and verdict file stay in this process,
so both write the same records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rlmdistill.cluster.options import RayOptions
from rlmdistill.models.base import ModelClient
from rlmdistill.models.spec import ModelSpec, get_client

__all__ = ["EXECUTORS", "Executor", "RayExecutor", "ThreadExecutor", "executor_for"]


class Executor(Protocol):
    """Opens the judge's model client where its requests run, and closes it after grading."""

    name: str
    """The ``JudgeConfig.executor`` value it implements."""

    def open(self, spec: ModelSpec, options: Mapping[str, Any]) -> ModelClient:
        """A client of ``spec`` opened with ``options`` (``timeout_s``, ``max_retries`` for an
        ``openai:`` spec). Raises ``ValueError`` for a spec or cluster it cannot serve."""

    def close(self, client: ModelClient) -> None:
        """Release what :meth:`open` started (idempotent)."""


class ThreadExecutor:
    """``thread``: the process-wide shared client of the spec (closed with every shared client
    at exit, :func:`rlmdistill.models.spec.close_all`; :meth:`close` leaves it open)."""

    name = "thread"

    def open(self, spec: ModelSpec, options: Mapping[str, Any]) -> ModelClient:
        """:func:`~rlmdistill.models.spec.get_client` of ``spec``."""
        return get_client(spec, **options)

    def close(self, client: ModelClient) -> None:
        """Nothing: the shared client may serve other callers of this process."""


class RayExecutor:
    """``ray``: the requests spread over a Ray cluster's nodes (:mod:`rlmdistill.judge.spread`)."""

    name = "ray"

    def __init__(self, ray: RayOptions | None = None) -> None:
        self.ray = ray or RayOptions()

    def open(self, spec: ModelSpec, options: Mapping[str, Any]) -> ModelClient:
        """A :class:`~rlmdistill.judge.spread.SpreadChatClient` over the cluster of
        ``self.ray``. Raises :class:`~rlmdistill.cluster.ray_cluster.RayUnavailable` (a
        ``ValueError``) without Ray, ``ValueError`` when no node may run requests."""
        from rlmdistill.judge.spread import SpreadChatClient

        return SpreadChatClient(str(spec), spec.model_id, dict(options), self.ray)

    def close(self, client: ModelClient) -> None:
        """Stop the workers (and the Ray this process started)."""
        client.close()


EXECUTORS: Mapping[str, Callable[[RayOptions | None], Executor]] = {
    ThreadExecutor.name: lambda _ray: ThreadExecutor(),
    RayExecutor.name: RayExecutor,
}
"""Every judge :class:`Executor` by its ``JudgeConfig.executor`` name, made from the config's
Ray options."""


def executor_for(name: str, ray: RayOptions | None = None) -> Executor:
    """The executor ``name`` names, with the Ray options ``ray`` (``ray`` only). Raises
    ``ValueError`` for a name without one."""
    try:
        make = EXECUTORS[name]
    except KeyError:
        names = ", ".join(sorted(EXECUTORS))
        raise ValueError(f"executor must be one of {names}, got {name!r}") from None
    return make(ray)
