"""Access to a Ray cluster for rlmdistill's executors: import Ray (or say which extra to
install), join the cluster, pick the nodes that may run work, and tell a lost node from a bug.

Used by ``collect --executor ray`` (:mod:`rlmdistill.collect.ray_executor`) and ``judge
--executor ray`` (:mod:`rlmdistill.judge.spread`). Nothing here imports Ray at module level.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from rlmdistill.cluster.options import RayOptions

__all__ = [
    "RAY_EXTRA",
    "RayClusterUnreachable",
    "RayUnavailable",
    "check_address",
    "connect",
    "eligible_nodes",
    "import_ray",
    "lost_errors",
]

RAY_EXTRA = "pip install 'rlmdistill[ray]'"
"""How to install what ``executor: ray`` needs."""


class RayUnavailable(ValueError):
    """``executor: ray`` was asked for, but Ray cannot be imported here."""


class RayClusterUnreachable(ValueError):
    """``--ray-address`` (or ``$RAY_ADDRESS``) names a cluster that does not answer."""


RAY_CLIENT_PORT = 10001
"""Ray Client's default port (``ray://HOST`` without a port)."""


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address: ``HOST:PORT`` (the head's GCS) or ``ray://HOST[:PORT]``
    (Ray Client, port 10001 by default); ``None`` for an address that names no host
    (``auto``, ``local``): Ray resolves those itself. IPv6 hosts may be bracketed."""
    text = address.strip()
    client = text.startswith("ray://")
    if client:
        text = text[len("ray://") :]
    elif "://" in text or text in ("auto", "local", ""):
        return None
    text = text.split("/", 1)[0]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or (host.count(":") and not host.startswith("[")):
        host, port = text, ""
    host = host.strip("[]")
    if not port:
        if not client:
            raise RayClusterUnreachable(
                f"ray address {address!r} has no port: give HOST:PORT of the head's GCS "
                "(usually 6379) or ray://HOST:10001"
            )
        return host, RAY_CLIENT_PORT
    return host, int(port)


def check_address(address: str | None, timeout_s: float = 3.0) -> None:
    """Fail fast when the Ray cluster at ``address`` (``None``: ``$RAY_ADDRESS``) is not there.

    One TCP connection to the head (``HOST:PORT``: its GCS; ``ray://HOST:PORT``: its Ray
    Client server) within ``timeout_s`` seconds, no retries: ``ray.init`` itself retries for
    about a minute and raises only after the run folder exists. ``auto`` is resolved the way
    Ray does it (the cluster this machine's ``ray start`` recorded) when this Ray version
    exposes that lookup. No address at all (a Ray started here for the run) and ``local`` need
    no check. Raises :class:`RayClusterUnreachable` (a ``ValueError``: the CLI exits 2) naming
    the address, what failed and the fix.
    """
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        return
    if address.strip() == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # another Ray layout: ray.init reports it
            return
        try:
            resolved = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError as exc:
            raise RayClusterUnreachable(
                f"ray address 'auto': no Ray cluster runs on this machine ({exc}); start one "
                "with `ray start --head`, or give --ray-address HOST:PORT"
            ) from None
        hp = _host_port(resolved)
    else:
        hp = _host_port(address)
    if hp is None:
        return
    host, port = hp
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise RayClusterUnreachable(
            f"ray address {address!r}: nothing answers at {host}:{port} ({why} within "
            f"{timeout_s:g} s); start the cluster (`ray start --head` on the head node) or fix "
            "--ray-address / $RAY_ADDRESS. Nothing was written."
        ) from None


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
    Ray is initialised already. True when this call initialised it (the caller shuts it down).
    Raises :class:`RayClusterUnreachable` when the address does not answer
    (:func:`check_address`)."""
    if ray.is_initialized():
        return False
    address = opts.address or os.environ.get("RAY_ADDRESS")
    if address:
        check_address(address)  # a clear error now, not Ray's minute of retries
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
