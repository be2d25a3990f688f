"""Access to a Ray cluster for rlmdistill's executors: import Ray (or say which extra to
install), join the cluster, pick the nodes that may run work, and tell a lost node from a bug.

Used by ``collect --executor ray`` (:mod:`rlmdistill.collect.ray_executor`) and ``judge
--executor ray`` (:mod:`rlmdistill.judge.spread`). Nothing here imports Ray at module level.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rlmdistill.collect.config import RayOptions

__all__ = [
    "RAY_EXTRA",
    "RayUnavailable",
    "connect",
    "eligible_nodes",
    "import_ray",
    "lost_errors",
]

RAY_EXTRA = "pip install 'rlmdistill[ray]'"
"""How to install what ``executor: ray`` needs."""


class RayUnavailable(ValueError):
    """``executor: ray`` was asked for, but Ray cannot be imported here."""


def import_ray() -> Any:
    """The ``ray`` module. Raises :class:`RayUnavailable` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            f"--executor ray needs Ray, which cannot be imported here ({exc}). Install the "
            f"extra: {RAY_EXTRA} (or run with --executor thread, the default)"
        ) from exc
    return ray


_BUILTIN_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}


def _label(node: dict[str, Any]) -> str:
    """``address/node-id-prefix [custom resources]`` of a ``ray.nodes()`` entry."""
    custom = sorted(
        k for k in node.get("Resources", {}) if k not in _BUILTIN_RESOURCES and ":" not in k
    )
    extra = f" [{', '.join(custom)}]" if custom else ""
    return f"{node.get('NodeManagerAddress', '?')}/{node['NodeID'][:8]}{extra}"


def eligible_nodes(nodes: Sequence[dict[str, Any]], opts: RayOptions) -> list[tuple[str, str, int]]:
    """``(node_id, label, cap)`` of every live node of ``nodes`` (``ray.nodes()`` entries) that
    may run episodes: it has every resource of ``opts.node_resources`` and a cap > 0
    (``opts.episodes_per_node``, or its amount of ``opts.slots_resource``)."""
    out = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        if any(res.get(k, 0.0) < v for k, v in opts.node_resources.items()):
            continue
        cap = opts.episodes_per_node
        if opts.slots_resource:
            cap = int(res.get(opts.slots_resource, 0))
        if cap > 0:
            out.append((node["NodeID"], _label(node), cap))
    return out


def connect(ray: Any, opts: RayOptions) -> bool:
    """Join ``opts.address`` (or ``$RAY_ADDRESS``; else start a Ray here, no dashboard) unless
    Ray is initialised already. True when this call initialised it (the caller shuts it down)."""
    if ray.is_initialized():
        return False
    address = opts.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
    else:
        ray.init(include_dashboard=False)
    return True


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's exception types that mean a call's worker or node is gone (not a bug in the call):
    ``RayActorError`` (``ActorDiedError``), ``WorkerCrashedError``, ``NodeDiedError``,
    ``ObjectLostError``, ``LocalRayletDiedError``, ``ActorUnschedulableError`` (its node went
    away before the actor started) and ``GetTimeoutError`` (a worker that never started),
    those this Ray version has."""
    names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError",
             "LocalRayletDiedError", "ActorUnschedulableError", "GetTimeoutError")  # fmt: skip
    found = (getattr(ray.exceptions, n, None) for n in names)
    return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))
