"""An LLM judge's requests spread over the nodes of a Ray cluster (``judge --executor ray``).

:class:`SpreadChatClient` is a :class:`~rlmdistill.models.base.ModelClient` whose ``chat``
calls run on the nodes of the cluster: one :class:`ChatWorker` actor per node that may run
work (the same node selection and caps as ``collect --executor ray``:
:func:`rlmdistill.cluster.ray_cluster.eligible_nodes`), each holding the judge's client (a
``local:`` judge is loaded once per node; an ``openai:`` one is a client of the shared server),
and each request goes to the node with the fewest requests in flight. Everything else of the
judge stays in the driver: the grader, its verdict cache, its usage log and the verdict file,
so grading with or without Ray writes the same records. A request whose node is lost is sent
again to another node (up to ``max_reschedules`` times), then fails as an
:class:`~rlmdistill.models.base.InfrastructureError` (the grader makes its criteria
UNGRADABLE, as for any server failure).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rlmdistill.cluster.options import RayOptions
from rlmdistill.cluster.ray_cluster import connect, eligible_nodes, import_ray, lost_errors
from rlmdistill.models.base import (
    ChatResult,
    InfrastructureError,
    Message,
    ModelError,
    Sampling,
    chat_concurrently,
)

__all__ = ["ChatWorker", "SpreadChatClient"]


class ChatWorker:
    """Holds one client of ``spec`` on its node (a threaded Ray actor) and answers ``chat``.

    Returns the :class:`ChatResult` or the :class:`ModelError` it raised (as a value, so the
    driver re-raises the same classified error)."""

    def __init__(self, spec: str, opts: dict[str, Any]) -> None:
        from rlmdistill.models.spec import get_client

        self.client = get_client(spec, **opts)

    def chat(
        self, messages: list[Message], sampling: Sampling, prefill: str | None
    ) -> ChatResult | ModelError:
        try:
            return self.client.chat(messages, sampling, prefill=prefill)
        except ModelError as exc:
            return exc


class SpreadChatClient:
    """A judge client whose requests run on the Ray cluster's nodes (see the module docstring).

    Args:
        spec: the judge's model spec as given (``openai:...`` or ``local:...``).
        model_id: the id the driver-side client reports (recorded in verdicts and usage).
        opts: client options (timeouts, retries) for ``get_client`` on each node.
        ray_options: cluster address, node selection and per-node caps.

    Raises :class:`~rlmdistill.cluster.ray_cluster.RayUnavailable` without Ray and
    ``ValueError`` when no node of the cluster may run requests.
    """

    def __init__(
        self, spec: str, model_id: str, opts: dict[str, Any], ray_options: RayOptions
    ) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = import_ray()
        self._ray = ray
        self._started = connect(ray, ray_options)
        self.model_id = model_id
        self._opts = ray_options
        self._lost = lost_errors(ray)
        self._lock = threading.Lock()
        self._workers: list[list[Any]] = []  # [actor, cap (0 = lost), in flight, label]
        self.requests_per_node: dict[str, int] = {}
        """Requests sent to each node (by node label), for progress and tests."""
        worker_cls = ray.remote(ChatWorker)
        for node_id, label, cap in eligible_nodes(ray.nodes(), ray_options):
            actor = worker_cls.options(
                num_cpus=0,
                max_concurrency=cap,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(spec, opts)
            self._workers.append([actor, cap, 0, label])
        if not self._workers:
            self.close()
            raise ValueError("ray: no live node of the cluster can run judge requests")
        self.max_concurrency = sum(w[1] for w in self._workers)
        """Requests the cluster answers at once (the sum of the node caps)."""

    def _pick(self) -> list[Any]:
        with self._lock:
            live = [w for w in self._workers if w[1] > 0]
            if not live:
                raise InfrastructureError(
                    "ray: every node running judge requests was lost", attempts=0,
                    cause="ray_nodes_lost",
                )  # fmt: skip
            worker = min(live, key=lambda w: w[2] / w[1])
            worker[2] += 1
            self.requests_per_node[worker[3]] = self.requests_per_node.get(worker[3], 0) + 1
            return worker

    def chat(
        self, messages: list[Message], sampling: Sampling, *, prefill: str | None = None
    ) -> ChatResult:
        """Answer on the least busy node. Raises the node's :class:`ModelError`, or an
        :class:`InfrastructureError` (cause ``ray_nodes_lost``) when nodes kept being lost."""
        for _ in range(self._opts.max_reschedules + 1):
            worker = self._pick()
            try:
                out = self._ray.get(worker[0].chat.remote(messages, sampling, prefill))
            except self._lost:
                with self._lock:
                    worker[1] = 0  # the node is gone: no more requests there
                continue
            finally:
                with self._lock:
                    worker[2] -= 1
            if isinstance(out, ModelError):
                raise out
            return out
        raise InfrastructureError(
            f"ray: judge request lost with its node {self._opts.max_reschedules + 1} times",
            attempts=0,
            cause="ray_nodes_lost",
        )

    def chat_batch(
        self, batch: Sequence[list[Message]], sampling: Sampling, *, prefill: str | None = None
    ) -> list[ChatResult | ModelError]:
        """:meth:`chat` for each conversation, up to :attr:`max_concurrency` at once."""
        return chat_concurrently(
            self.chat, self.model_id, batch, sampling, prefill=prefill,
            max_concurrency=self.max_concurrency, thread_name_prefix="rlmd-spread",
        )  # fmt: skip

    def close(self) -> None:
        """Stop the node workers (and the Ray this client started). Idempotent."""
        for worker in self._workers:
            try:
                self._ray.kill(worker[0], no_restart=True)
            except Exception:  # gone with its node
                continue
        self._workers = []
        if self._started:
            self._ray.shutdown()
            self._started = False
