"""The node side of ``collect --executor ray``: what runs on each node of the cluster.

- :class:`NodeWorker`: a threaded actor pinned to one node; checks the sandbox there, opens the
  root/sub clients once (a ``local:`` spec loads once per node), starts the sub-call pools and
  runs each episode as the thread executor does, over the node's own room snapshot, sending
  the trajectory back as bytes (nothing of the run folder is written on a node).
- :class:`ShippedRoom`: a room's texts and task as put once into the object store; rebuilt on
  the node and checked by its content hash (:class:`RoomMismatch`).
- :class:`LimiterActor` / :class:`ClusterLimits`: the run's one ``RunLimits`` in an actor, and
  the view every node's ``LimitedClient`` calls, so the spend cap and the request rate hold
  for the whole cluster.

The driver (:mod:`rlmdistill.collect.ray_executor`) starts these and commits what they return.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmdistill.cluster.ray_cluster import import_ray
from rlmdistill.collect.config import CollectConfig
from rlmdistill.models.base import InfrastructureError, ModelClient, Usage
from rlmdistill.models.limits import PriceTable, RunLimits, SpendCapExceeded
from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.room import Document
from rlmdistill.rooms.task import Task
from rlmdistill.traces.schema import RoomInfo

if TYPE_CHECKING:
    from rlmdistill.harness.episode import RoomHandle

__all__ = [
    "ClusterLimits",
    "EpisodeJob",
    "EpisodeResult",
    "LimiterActor",
    "NodeWorker",
    "RoomMismatch",
    "RoomTicket",
    "ShippedRoom",
    "episode_task",
]


class RoomMismatch(ValueError):
    """A node's copy of a room does not hash to the run's ``room_hash``."""


# ------------------------------------------------------------------------------ rooms
def episode_task(task: Task) -> Task:
    """The part of ``task`` an episode needs on a node: its id, title and instructions (the
    root's prompt; ``collect.prepare.room_handle``). Rubric criteria, their gold evidence,
    deliverables and tags stay on the driver, so no worker node (nor code the root runs there)
    can read the answers it is graded against."""
    return Task(id=task.id, title=task.title, instructions=task.instructions)


@dataclasses.dataclass(frozen=True)
class ShippedRoom:
    """A room's texts, task and identity, as put once into Ray's object store.

    ``documents``: ``(id, folder, text, encoding, replaced)`` in id order. Memory: the room's
    text once (UTF-8 pickled) in the object store of each node that runs its episodes.
    """

    room_id: str
    room_hash: str
    path: str
    task: Task | None
    documents: list[tuple[str, str, str, str | None, int]]
    skipped: list[tuple[str, str]]

    @classmethod
    def of(cls, room: DataRoom) -> ShippedRoom:
        """Read every document's text of ``room`` (raises what ``Document.text`` raises).

        The task goes as :func:`episode_task`: what an episode's prompt uses, never the
        rubric criteria or their gold evidence, which only the judge (on the driver) reads."""
        docs = [(d.id, d.folder, d.text, d.encoding, d.replaced) for d in room.documents]
        task = episode_task(room.task) if room.task is not None else None
        return cls(room.room_id, room.room_hash, str(room.path), task, docs, room.skipped)

    def load(self) -> DataRoom:
        """The :class:`DataRoom` again (texts in memory). Raises :class:`RoomMismatch` when the
        texts do not hash to :attr:`room_hash` (a corrupted or wrong copy)."""
        path = Path(self.path)
        documents = []
        for doc_id, folder, text, encoding, replaced in self.documents:
            sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            documents.append(
                Document(doc_id, folder, path / doc_id, len(text), sha, text=text,
                         encoding=encoding, replaced=replaced)
            )  # fmt: skip
        room = DataRoom(path, documents, self.task, list(self.skipped), path)
        if room.room_hash != self.room_hash:
            raise RoomMismatch(
                f"room {self.room_id}: the copy shipped to node {socket.gethostname()} hashes to "
                f"{room.room_hash}, not the run's {self.room_hash}"
            )
        return room


@dataclasses.dataclass(frozen=True)
class RoomTicket:
    """What travels with each episode job about its room (small; the texts are ``ref``)."""

    info: RoomInfo
    ref: list[Any] | None
    """``[ObjectRef of ShippedRoom]`` (wrapped so Ray does not resolve it per call); ``None``
    with ``rooms: shared_fs``."""


@dataclasses.dataclass(frozen=True)
class EpisodeJob:
    room: RoomTicket
    sample_index: int
    episode_id: str
    seed: int
    task_id: str


@dataclasses.dataclass
class EpisodeResult:
    episode_id: str
    summary_json: str
    failure: tuple[str, str, InfrastructureError] | None
    trajectory: bytes
    node_id: str


# ------------------------------------------------------------------------------ limits
class LimiterActor:
    """The run's one :class:`~rlmdistill.models.limits.RunLimits`, held by a Ray actor that
    every node's clients call (threaded: a caller waiting for its rate slot blocks only its
    own thread of the actor)."""

    def __init__(
        self, max_usd: float | None, requests_per_minute: float | None, prices_json: str
    ) -> None:
        self.limits = RunLimits(
            max_usd=max_usd,
            requests_per_minute=requests_per_minute,
            prices=PriceTable.model_validate_json(prices_json),
        )

    def settings(self) -> tuple[float | None, float | None, str]:
        """``(max_usd, requests_per_minute, price table JSON)``: what nodes need locally."""
        lim = self.limits
        assert lim.prices is not None
        return lim.max_usd, lim.requests_per_minute, lim.prices.model_dump_json()

    def before_request(self) -> str | None:
        """``None`` when a request may start now (after its rate slot), else the cap message."""
        try:
            self.limits.before_request()
        except SpendCapExceeded as exc:
            return str(exc)
        return None

    def after_response(self, model_id: str, usage: Usage) -> None:
        """Charge one answered request."""
        self.limits.after_response(model_id, usage)

    def state(self) -> dict[str, float]:
        """``{"spent_usd", "n_requests", "n_unpriced"}`` so far."""
        lim = self.limits
        return {
            "spent_usd": lim.spent_usd,
            "n_requests": lim.n_requests,
            "n_unpriced": lim.n_unpriced,
        }


class ClusterLimits(RunLimits):
    """A node's view of the cluster's :class:`LimiterActor`: the same interface as
    ``RunLimits`` (so ``LimitedClient`` wraps clients as in a local run), but the cap, the
    spend and the rate live in the actor. Prices are known locally (for the unpriced-model
    check). One actor round trip per ``before_request`` / ``after_response`` (~1 ms)."""

    def __init__(self, actor: Any) -> None:
        ray = import_ray()
        max_usd, rpm, prices_json = ray.get(actor.settings.remote())
        prices = PriceTable.model_validate_json(prices_json)
        super().__init__(max_usd=max_usd, requests_per_minute=rpm, prices=prices)
        self._actor = actor

    def before_request(self) -> None:
        """Raises :class:`SpendCapExceeded` once the cluster has spent ``max_usd``."""
        ray = import_ray()
        message = ray.get(self._actor.before_request.remote())
        if message is not None:
            raise SpendCapExceeded(message, attempts=0)
        with self._lock:
            self.n_requests += 1

    def after_response(self, model_id: str, usage: Usage) -> None:
        """Charge the cluster's limiter for one answered request (and this node's own
        counters, as :meth:`RunLimits.after_response` does)."""
        ray = import_ray()
        ray.get(self._actor.after_response.remote(model_id, usage))
        super().after_response(model_id, usage)


# ------------------------------------------------------------------------------ node worker
class NodeWorker:
    """Runs episodes of one run on one node (a threaded Ray actor pinned to that node).

    Args:
        config_json: the run's :class:`CollectConfig` as JSON.
        run_id: the run's id (``run.json``).
        cap: episodes this node runs at once (the actor's concurrency is ``cap + 2``).
        limiter: handle of the run's :class:`LimiterActor`, or ``None`` without limits.
    """

    def __init__(
        self,
        config_json: str,
        run_id: str,
        cap: int,
        limiter: Any,
        open_specs: dict[str, str] | None = None,
    ) -> None:
        self.config = CollectConfig.model_validate_json(config_json)
        self.open_specs = dict(open_specs or {})
        """Spec as recorded -> spec to open (a loop's workspace-relative adapter path)."""
        self.run_id = run_id
        self.cap = cap
        self.limiter = limiter
        self._stack = ExitStack()
        self._handles: dict[str, RoomHandle] = {}
        self._room_lock = threading.Lock()
        self._root: ModelClient | None = None
        self._sub: ModelClient | None = None
        self._dispatch: Any = None

    def start(self) -> dict[str, Any]:
        """Check the sandbox, open the clients and take this process's shared sub-call
        dispatch (:func:`rlmdistill.harness.dispatch.shared_dispatch`) on this node.

        Returns ``{"node_id", "hostname", "pid"}`` and, when this node cannot run episodes,
        ``"error"`` (the sandbox cannot start, a model cannot be opened, ...)."""
        from rlmdistill.collect.prepare import check_sandbox
        from rlmdistill.harness.dispatch import shared_dispatch
        from rlmdistill.models.limits import LimitedClient
        from rlmdistill.models.reasoning import token_id_options
        from rlmdistill.models.spec import get_client

        ray = import_ray()
        facts: dict[str, Any] = {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }
        cfg = self.config
        try:
            check_sandbox(cfg.sandbox, cfg.repl)
            root_spec = self.open_specs.get(cfg.root, cfg.root)
            sub_spec = self.open_specs.get(cfg.sub, cfg.sub)
            root = get_client(root_spec, **token_id_options(cfg.root, cfg.token_ids != "off"))
            sub = get_client(sub_spec, **token_id_options(cfg.sub, cfg.token_ids == "all"))
            if self.limiter is not None:
                limits = ClusterLimits(self.limiter)  # prices come from the driver
                limited_root = LimitedClient(root, limits)
                sub = limited_root if sub is root else LimitedClient(sub, limits)
                root = limited_root
            self._root, self._sub = root, sub
            self._dispatch = shared_dispatch()
        except (ValueError, OSError) as exc:  # SandboxUnavailable is a ValueError
            facts["error"] = f"{type(exc).__name__}: {exc}"
        return facts

    def _room(self, ticket: RoomTicket) -> RoomHandle:
        """The node's handle of a room: shipped (or loaded) once, hash checked, snapshot in the
        node's own room cache."""
        from rlmdistill.collect.prepare import room_handle

        key = ticket.info.room_hash
        with self._room_lock:
            handle = self._handles.get(key)
            if handle is None:
                if ticket.ref is not None:
                    ray = import_ray()
                    room = ray.get(ticket.ref[0]).load()
                else:
                    room = DataRoom.load(ticket.info.path)
                    if room.room_hash != key:
                        raise RoomMismatch(
                            f"room {ticket.info.path} on node {socket.gethostname()} hashes to "
                            f"{room.room_hash}, not the run's {key} (rooms: shared_fs needs "
                            "the same room at the same path on every node)"
                        )
                handle = dataclasses.replace(room_handle(room), info=ticket.info)
                self._handles[key] = handle
            return handle

    def run_episode(self, job: EpisodeJob) -> EpisodeResult:
        """Run one episode here; its trajectory comes back as bytes (nothing of the run folder
        is written on the node). Raises :class:`RoomMismatch` for a wrong room copy."""
        from rlmdistill.collect.trajectory import TrajectoryFile
        from rlmdistill.harness.episode import Episode, EpisodeSpec

        assert self._root is not None and self._sub is not None and self._dispatch is not None
        handle = self._room(job.room)
        cfg = self.config
        work = Path(tempfile.mkdtemp(prefix=f"rlmdistill-{job.episode_id}-"))
        trajectory = work / "trajectory.jsonl"
        scratch = work / "episode"
        scratch.mkdir()
        try:
            ep = Episode(
                cfg,
                EpisodeSpec(
                    run_id=self.run_id,
                    episode_id=job.episode_id,
                    sample_index=job.sample_index,
                    seed=job.seed,
                    trace=TrajectoryFile(trajectory),
                    scratch_dir=scratch,
                ),
                handle,
                self._root,
                self._sub,
                cfg.root,
                cfg.sub,
                self._dispatch,
            )
            summary = ep.run()
            data = trajectory.read_bytes() if trajectory.exists() else b""
        finally:
            shutil.rmtree(work, ignore_errors=True)
        ray = import_ray()
        return EpisodeResult(
            job.episode_id,
            summary.model_dump_json(),
            ep.infrastructure_failure,
            data,
            ray.get_runtime_context().get_node_id(),
        )

    def close(self) -> None:
        """Shut the sub-call pools down (clients stay cached in the worker process)."""
        self._stack.close()
