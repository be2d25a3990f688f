"""``executor: ray``: a run's episodes on the nodes of a Ray cluster, driver-side commit.

This module is the driver; what runs on the nodes is :mod:`rlmdistill.collect.ray_node`, and
cluster access (importing Ray, node selection) :mod:`rlmdistill.cluster.ray_cluster`; their
public names are re-exported here. Needs the optional extra (``pip install 'rlmdistill[ray]'``); asking for it without Ray raises
:class:`RayUnavailable` naming the extra. Layout (the pattern of verl's agent-loop workers:
one long-lived worker actor per node, pinned with ``NodeAffinitySchedulingStrategy``, the
driver dispatching rollouts to them):

- **One worker actor per node** (:class:`NodeWorker`, a threaded actor pinned to its node,
  ``num_cpus=0``) that may run episodes: nodes with every resource of
  ``RayOptions.node_resources``; a node's cap is ``RayOptions.episodes_per_node`` or its
  amount of ``RayOptions.slots_resource``. The worker checks the sandbox on its node
  (``prepare.check_sandbox``), opens the root/sub clients once (an ``openai:`` spec is a client
  of the shared server; a ``local:`` spec is loaded once per node), starts its sub-call pools
  and runs each episode exactly as the thread executor does (same ``Episode``, same sandboxed
  REPL) over a room snapshot in the node's own room cache.
- **Rooms** go to a node once: ``object_store`` puts the room's texts in Ray's object store
  once per run (each node pulls it once, on its first episode of that room); ``shared_fs``
  loads the room folder at its recorded path. The node rebuilds the room, checks that its
  content hash is the run's ``room_hash`` (else the episode's node raises
  :class:`RoomMismatch`), and writes / checks its snapshot (``prepare.ensure_snapshot``).
- **Spread**: the driver sends each episode to the live node with the most free slots, at most
  ``concurrency`` in flight across the cluster.
- **The driver is the only writer** of the run folder: the episode's trajectory comes back as
  bytes with its summary, and the driver writes ``trajectories/<id>.jsonl`` (atomically),
  then commits through :func:`rlmdistill.collect.executor.commit_episode` (``episodes.jsonl``
  or ``attempts.jsonl``), once per episode id. It also appends one
  :class:`Placement` line per committed episode to ``placement.jsonl`` (which node ran it).
- **A node that dies** (its worker's calls fail with ``RayActorError`` /
  ``WorkerCrashedError`` / ``NodeDiedError`` / ``ObjectLostError``) loses nothing: its
  in-flight episodes were never committed, so the driver reruns them on other nodes (at most
  ``max_reschedules`` times each) and prints which ones. Nodes that join mid-run get a worker.
- **One limiter for the cluster**: with ``max_usd`` or ``requests_per_minute`` every node's
  clients ask one :class:`LimiterActor` (a ``RunLimits`` in an actor), so the cap and the rate
  hold for the whole cluster, not per node.

A run is the same run whichever executor collects it (the executor and its options are
operational, out of episode ids): a run started here can be finished by the thread executor
and the other way round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from tqdm import tqdm

from rlmdistill.cluster.ray_cluster import (
    RAY_EXTRA,
    RayUnavailable,
    check_address,
    connect,
    eligible_nodes,
    import_ray,
    lost_errors,
)
from rlmdistill.collect.config import CollectConfig, episode_seed
from rlmdistill.collect.executor import CollectResult, EpisodePlan, commit_episode
from rlmdistill.collect.ray_node import (
    ClusterLimits,
    EpisodeJob,
    EpisodeResult,
    LimiterActor,
    NodeWorker,
    RoomMismatch,
    RoomTicket,
    ShippedRoom,
)
from rlmdistill.rooms import DataRoom
from rlmdistill.traces import layout
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary
from rlmdistill.traces.store import append_records

if TYPE_CHECKING:
    from rlmdistill.harness.episode import RoomHandle

__all__ = [
    "PLACEMENT_FILE",
    "RAY_EXTRA",
    "ClusterLimits",
    "LimiterActor",
    "NodeWorker",
    "Placement",
    "RayExecutor",
    "RayUnavailable",
    "RoomMismatch",
    "ShippedRoom",
    "collect_on_ray",
    "connect",
    "eligible_nodes",
    "import_ray",
    "lost_errors",
]

PLACEMENT_FILE = layout.PLACEMENT
"""Per-run file of :class:`Placement` lines (which node ran each committed episode)."""


class Placement(BaseModel):
    """One line of ``placement.jsonl``: where and when a committed episode ran (driver clock)."""

    episode_id: str
    node_id: str
    node: str
    """Readable node label: ``address/node-id-prefix [custom resources]``."""
    rescheduled: int
    """Times this episode was rerun after a node running it was lost (in this call)."""
    dispatched_at: dt.datetime
    committed_at: dt.datetime
    round_trip_s: float
    """Dispatch to commit as seen by the driver (episode wall time + executor overhead)."""


NODE_POLL_S = 10.0
"""Seconds between looks at the cluster for nodes that joined (each gets a worker)."""

START_TIMEOUT_S = 900.0
"""How long a node's worker may take to start (sandbox check, opening the clients: a
``local:`` model loads here) before the node counts as lost."""


@dataclasses.dataclass
class _Node:
    node_id: str
    label: str
    cap: int
    actor: Any = None
    running: int = 0
    done: int = 0
    failed: int = 0
    lost: bool = False

    def line(self) -> str:
        return f"{self.label}: {self.running} running, {self.done} done, {self.failed} failed"


@dataclasses.dataclass
class _InFlight:
    job: EpisodeJob
    rescheduled: int
    node: _Node
    t0: float
    dispatched_at: dt.datetime


def _write_trajectory(path: Path, data: bytes) -> None:
    """Write a trajectory file atomically and durably (before its summary commits it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _say(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


class _RayRun:
    """The driver of one ``collect_on_ray`` call (see there)."""

    def __init__(
        self,
        ray: Any,
        config: CollectConfig,
        run_dir: Path,
        run_id: str,
        attempts_before: dict[str, int],
        progress: bool,
        say: Callable[[str], None],
        n_episodes: int,
        open_specs: Mapping[str, str] | None = None,
    ) -> None:
        self.ray = ray
        self.config = config
        self.open_specs = dict(open_specs or {})
        self.opts = config.ray
        self.run_dir = run_dir
        self.run_id = run_id
        self.attempts_before = attempts_before
        self.say = say
        self.lost_errors = lost_errors(ray)
        self.actors: list[Any] = []
        self.limiter: Any = None
        self.nodes: dict[str, _Node] = {}
        self.pending: deque[tuple[EpisodeJob, int]] = deque()
        self.in_flight: dict[Any, _InFlight] = {}
        self.committed: set[str] = set()
        self.summaries: list[EpisodeSummary] = []
        self.unfinished: list[AttemptRecord] = []
        self.failed: list[AttemptRecord] = []
        self.not_started = 0
        self.infrastructure_down = False
        self.bar = tqdm(total=n_episodes, desc=f"collect {run_dir.name} (ray)", unit="ep",
                        disable=not progress)  # fmt: skip

    # -- set-up ----------------------------------------------------------------------------
    def start_limiter(self) -> None:
        """One :class:`LimiterActor` for the cluster, near the driver, when the run has limits."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rlmdistill.collect.executor import run_limits

        cfg = self.config
        if cfg.max_usd is None and cfg.requests_per_minute is None:
            return
        prices = run_limits(cfg).prices
        here = self.ray.get_runtime_context().get_node_id()
        self.limiter = (
            self.ray.remote(LimiterActor)
            .options(
                num_cpus=0,
                max_concurrency=256,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
            )
            .remote(cfg.max_usd, cfg.requests_per_minute, prices.model_dump_json())
        )
        self.actors.append(self.limiter)

    def add_nodes(self, initial: bool = False) -> None:
        """Start a worker on every eligible node that has none yet (at start, and when nodes
        join). A node that cannot run episodes raises ``ValueError`` naming it at the start
        (``initial``: before any episode); one that joins later is left out with a message."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        worker_cls = self.ray.remote(NodeWorker)
        config_json = self.config.model_dump_json()
        fresh = []
        for node_id, label, cap in eligible_nodes(self.ray.nodes(), self.opts):
            if node_id in self.nodes:
                continue
            actor = worker_cls.options(
                num_cpus=0,
                max_concurrency=cap + 2,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(config_json, self.run_id, cap, self.limiter, self.open_specs)
            self.actors.append(actor)
            node = _Node(node_id, label, cap, actor)
            self.nodes[node_id] = node
            fresh.append(node)
        for node in fresh:
            try:
                facts = self.ray.get(node.actor.start.remote(), timeout=START_TIMEOUT_S)
            except self.lost_errors as exc:
                node.lost = True
                self.say(f"ray: node {node.label} lost while starting ({_first_line(exc)})")
                continue
            if "error" in facts:
                message = f"ray: node {node.label} cannot run episodes: {facts['error']}"
                if initial:
                    raise ValueError(message)
                node.lost = True
                self.say(message + " (left out of this run)")

    def live(self) -> list[_Node]:
        return [n for n in self.nodes.values() if not n.lost]

    # -- running ---------------------------------------------------------------------------
    def show(self) -> None:
        self.bar.set_postfix_str("; ".join(n.line() for n in self.live()))

    def dispatch(self) -> None:
        """Send pending episodes to the nodes with the most free slots (spread), within each
        node's cap and ``concurrency`` in all; none after a server failure."""
        while (
            self.pending
            and not self.infrastructure_down
            and len(self.in_flight) < self.config.concurrency
        ):
            free = [n for n in self.live() if n.running < n.cap]
            if not free:
                break
            node = max(free, key=lambda n: (n.cap - n.running, -n.running))
            job, rescheduled = self.pending.popleft()
            ref = node.actor.run_episode.remote(job)
            node.running += 1
            now = dt.datetime.now(dt.UTC)
            self.in_flight[ref] = _InFlight(job, rescheduled, node, time.monotonic(), now)
        self.show()

    def lose(self, node: _Node, exc: BaseException) -> None:
        """``node``'s worker is gone: its in-flight episodes were never committed, so rerun them
        elsewhere (up to ``max_reschedules`` each) and say which."""
        node.lost = True
        again, given_up = [], []
        for ref in [r for r, f in self.in_flight.items() if f.node is node]:
            flight = self.in_flight.pop(ref)
            node.running -= 1
            node.failed += 1
            if flight.rescheduled < self.opts.max_reschedules:
                self.pending.appendleft((flight.job, flight.rescheduled + 1))
                again.append(flight.job.episode_id)
            else:
                given_up.append(flight.job.episode_id)
        self.not_started += len(given_up)
        self.bar.update(len(given_up))
        with contextlib.suppress(Exception):  # the actor or its node is gone already
            self.ray.kill(node.actor, no_restart=True)
        msg = (
            f"ray: node {node.label} lost ({_first_line(exc)}); rescheduled {len(again)} "
            f"episode(s) on other nodes: {', '.join(again) or 'none'}"
        )
        if given_up:
            msg += (
                f"; {len(given_up)} left unfinished after {self.opts.max_reschedules} "
                f"reschedules (run the same command again): {', '.join(given_up)}"
            )
        self.say(msg)

    def commit(self, flight: _InFlight, res: EpisodeResult) -> None:
        """Write the trajectory, then the commit record (once per episode id), then placement."""
        job, node = flight.job, flight.node
        node.running -= 1
        if job.episode_id in self.committed:  # never twice, whatever Ray delivers
            return
        summary = EpisodeSummary.model_validate_json(res.summary_json)
        path = layout.trajectory_path(self.run_dir, job.episode_id)
        _write_trajectory(path, res.trajectory)
        attempt = commit_episode(
            self.run_dir, summary, res.failure, self.attempts_before.get(job.episode_id, 0),
            self.config.max_attempts,
        )  # fmt: skip
        self.committed.add(job.episode_id)
        placement = Placement(
            episode_id=job.episode_id,
            node_id=node.node_id,
            node=node.label,
            rescheduled=flight.rescheduled,
            dispatched_at=flight.dispatched_at,
            committed_at=dt.datetime.now(dt.UTC),
            round_trip_s=time.monotonic() - flight.t0,
        )
        append_records(self.run_dir / PLACEMENT_FILE, [placement], fsync=False)
        if res.failure is not None:
            self.infrastructure_down = True
        if attempt is not None and not attempt.final:
            self.unfinished.append(attempt)
            node.failed += 1
        else:
            if attempt is not None:
                self.failed.append(attempt)
            self.summaries.append(summary)
            node.done += 1
            if summary.status != "completed":
                node.failed += 1
        self.bar.update(1)

    def wait_for_nodes(self, last_poll: float) -> float:
        """Nothing in flight but episodes pending: look for nodes (every 2 s); give up when
        none is left. Returns the time of the last poll."""
        if time.monotonic() - last_poll > 2.0:
            self.add_nodes()
            last_poll = time.monotonic()
        if not self.live():
            self.not_started += len(self.pending)
            self.bar.update(len(self.pending))
            self.say(
                f"ray: no node left to run {len(self.pending)} episode(s); they stay unfinished "
                "(run the same command again when the cluster is back)"
            )
            self.pending.clear()
            return last_poll
        self.dispatch()
        if not self.in_flight:
            time.sleep(0.5)
        return last_poll

    def run(self) -> None:
        """Dispatch, collect and commit until every episode is committed or cannot run."""
        self.dispatch()
        last_poll = time.monotonic()
        while self.in_flight or (self.pending and not self.infrastructure_down):
            if not self.in_flight:
                last_poll = self.wait_for_nodes(last_poll)
                continue
            ready, rest = self.ray.wait(list(self.in_flight), num_returns=1, timeout=1.0)
            if ready and rest:  # others that are done too, without waiting for them
                ready += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            if time.monotonic() - last_poll > NODE_POLL_S:  # nodes that joined get a worker
                self.add_nodes()
                last_poll = time.monotonic()
            for ref in ready:
                flight = self.in_flight.get(ref)
                if flight is None:  # dropped with its lost node
                    continue
                try:
                    res = self.ray.get(ref)
                except self.lost_errors as exc:
                    self.lose(flight.node, exc)
                    continue
                except self.ray.exceptions.RayTaskError as exc:
                    raise RuntimeError(
                        f"ray: episode {flight.job.episode_id} failed on node "
                        f"{flight.node.label}: {exc}"
                    ) from exc
                del self.in_flight[ref]
                self.commit(flight, res)
            self.dispatch()
        if self.infrastructure_down:
            self.not_started += len(self.pending)
        self.bar.close()
        self.say(
            "ray: episodes per node: "
            + "; ".join(
                f"{n.label}: {n.done} done ({n.failed} failed{', lost' if n.lost else ''})"
                for n in self.nodes.values()
            )
        )
        for node in self.live():
            with contextlib.suppress(*self.lost_errors):
                self.ray.get(node.actor.close.remote())

    def kill_actors(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):  # gone with its node
                self.ray.kill(actor, no_restart=True)


def collect_on_ray(
    config: CollectConfig,
    run_dir: Path,
    run_id: str,
    rooms: Sequence[DataRoom],
    plan: Sequence[tuple[RoomHandle, int, str]],
    skipped: int,
    attempts_before: dict[str, int],
    *,
    progress: bool = True,
    say: Callable[[str], None] = _say,
    open_specs: Mapping[str, str] | None = None,
) -> CollectResult:
    """Run the episodes of ``plan`` (``(room handle, sample index, episode id)``, none yet in
    ``episodes.jsonl``) on the Ray cluster of ``config.ray`` and commit each one here.

    Joins ``config.ray.address`` (or ``$RAY_ADDRESS``; else starts a Ray on this machine)
    unless Ray is initialised already. ``rooms`` are the run's loaded rooms (shipped with
    ``rooms: object_store``); ``attempts_before`` the failed attempts per episode so far.
    Messages (a node lost and what was rescheduled; per-node totals) go to ``say``
    (default: stderr). Returns the runner's ``CollectResult`` (``skipped`` passed through).
    Episodes left when no node can run them (all lost, or rescheduled ``max_reschedules``
    times) count as ``not_started``, like those after a server failure, so ``check_finished``
    asks for a re-run.

    ``open_specs`` maps a spec as recorded in ``config`` to the spec the nodes open (the loop
    records a tuned root's adapter relative to its workspace and opens it by its absolute
    path; :func:`rlmdistill.collect.main.run`); the episodes still record ``config``'s.

    Raises :class:`RayUnavailable` (Ray not installed), ``ValueError`` when no node may run
    episodes or a node cannot start (sandbox, model, price table: the message names the
    node), and ``RuntimeError`` for a bug in an episode on a node (naming episode and node).
    """
    ray = import_ray()
    started_ray = connect(ray, config.ray)
    driver = _RayRun(
        ray, config, run_dir, run_id, attempts_before, progress, say, len(plan), open_specs
    )
    try:
        driver.start_limiter()
        by_hash = {r.room_hash: r for r in rooms}
        tickets: dict[str, RoomTicket] = {}
        for handle, k, eid in plan:
            key = handle.info.room_hash
            if key not in tickets:
                ref = None
                if config.ray.rooms == "object_store":
                    ref = [ray.put(ShippedRoom.of(by_hash[key]))]
                tickets[key] = RoomTicket(handle.info, ref)
            seed = episode_seed(config, key, handle.task_id, k)
            driver.pending.append((EpisodeJob(tickets[key], k, eid, seed, handle.task_id), 0))
        driver.add_nodes(initial=True)
        if not driver.live():
            where = config.ray.address or os.environ.get("RAY_ADDRESS") or "local"
            need = f"resources {config.ray.node_resources}" if config.ray.node_resources else ""
            if config.ray.slots_resource:
                need += f"{' and ' if need else ''}a '{config.ray.slots_resource}' resource"
            raise ValueError(
                f"ray: no live node of the cluster ({where}) can run episodes"
                + (f" (they need {need})" if need else "")
            )
        driver.run()
        return CollectResult(
            run_dir,
            driver.summaries,
            skipped,
            driver.unfinished,
            driver.not_started,
            [*driver.unfinished, *driver.failed],
        )
    finally:
        driver.bar.close()
        driver.kill_actors()
        if started_ray:
            ray.shutdown()


class RayExecutor:
    """Runs a run's episodes on the nodes of a Ray cluster (:class:`~rlmdistill.collect.
    executor.Executor` ``ray``; :func:`collect_on_ray`)."""

    name = "ray"

    def check(self, config: CollectConfig) -> None:
        """Ray is installed and a cluster answers at ``config.ray.address`` (the nodes check
        their own sandboxes). Raises :class:`RayUnavailable` naming the extra, or
        :class:`~rlmdistill.cluster.ray_cluster.RayClusterUnreachable` (both ``ValueError``),
        before anything is written."""
        import_ray()
        check_address(config.ray.address)

    def run(self, job: EpisodePlan, *, progress: bool = True) -> CollectResult:
        """Wait for ``run.json``, then :func:`collect_on_ray` over ``job``'s episodes."""
        job.manifest.result()  # run.json before any episode line
        return collect_on_ray(
            job.config,
            job.run_dir,
            job.run_id,
            job.rooms,
            job.episodes,
            job.skipped,
            dict(job.attempts_before),
            progress=progress,
            open_specs=job.open_specs,
        )
