"""``executor: thread``: a run's episodes on this process's thread pool (the default).

One thread per running episode, as many at once as ``concurrency`` and the node's room
(:mod:`rlmdistill.collect.admission`: descriptors, tasks, memory) allow; the sub-calls of
every episode go through the process's one bounded dispatch
(:mod:`rlmdistill.harness.dispatch`). Each ended episode is committed at once by this
process (:func:`rlmdistill.collect.executor.commit_episode`).
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from tqdm import tqdm

from rlmdistill import heap
from rlmdistill.collect.admission import Gate, capacity
from rlmdistill.collect.config import CollectConfig, episode_seed
from rlmdistill.collect.executor import CollectResult, EpisodePlan, commit_episode
from rlmdistill.collect.prepare import check_sandbox
from rlmdistill.collect.trajectory import TrajectoryFile
from rlmdistill.harness.dispatch import shared_dispatch
from rlmdistill.harness.episode import Episode, EpisodeSpec, RoomHandle
from rlmdistill.harness.sandbox import scratch_parent
from rlmdistill.traces import layout
from rlmdistill.traces.schema import AttemptRecord, EpisodeSummary

__all__ = ["ThreadExecutor", "frozen_heap"]


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive when the episodes start out of the cyclic GC while they run
    (``gc.freeze()``, then ``gc.unfreeze()``; CPython's documented way to spare a long-lived
    heap from full collections).

    Why: a full collection walks every tracked object of the process with the GIL held, so
    it stalls every episode thread and the sub-call event loop at once. With the concurrency
    benchmark's modules imported that is ~51,000 objects and ~37 ms of CPU per full
    collection on the 2-core machine; ~190,000 objects are alive during a run of
    ``benchmarks/bench_concurrency.py`` (~140 ms by proportion), more with ``torch`` loaded;
    one full collection landed in a 16 x 64 run (README, "Measured"). The run's own objects are
    still collected as usual, and everything frozen goes back to the collector's oldest
    generation when the run ends (nested or concurrent runs: the first to end unfreezes)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class ThreadExecutor:
    """Runs a run's episodes on this process's threads (:class:`~rlmdistill.collect.executor.
    Executor` ``thread``)."""

    name = "thread"

    def check(self, config: CollectConfig) -> None:
        """The local sandbox can start (:func:`~rlmdistill.collect.prepare.check_sandbox`):
        raises :class:`~rlmdistill.harness.sandbox.SandboxUnavailable` (a ``ValueError``)
        naming the cause, before any model request or file write."""
        check_sandbox(config.sandbox, config.repl)

    def run(self, job: EpisodePlan, *, progress: bool = True) -> CollectResult:
        """Run ``job``'s episodes, ``config.concurrency`` at a time (fewer when the node's
        admission says so, with a warning); see :func:`rlmdistill.collect.runner.collect`
        for what is recorded. Raises what :meth:`check` raises and ``OSError`` when the run
        folder cannot be written."""
        config, run_dir, run_id, manifest = job.config, job.run_dir, job.run_id, job.manifest
        plan, root, sub, attempts_before = job.episodes, job.root, job.sub, job.attempts_before
        skipped = job.skipped
        check_sandbox(config.sandbox, config.repl)
        infrastructure_down = threading.Event()  # after a server failure, start none more
        dispatch = shared_dispatch()
        gate = Gate()

        def run_one(item: tuple[RoomHandle, int, str]) -> EpisodeSummary | AttemptRecord | None:
            handle, k, eid = item
            if infrastructure_down.is_set():
                return None
            with gate.admit():  # waits while memory for its REPL is short (never fails)
                if infrastructure_down.is_set():
                    return None
                scratch = Path(tempfile.mkdtemp(prefix=f"{eid}-", dir=scratch_parent()))
                try:
                    ep = Episode(
                        config,
                        EpisodeSpec(
                            run_id=run_id,
                            episode_id=eid,
                            sample_index=k,
                            seed=episode_seed(config, handle.info.room_hash, handle.task_id, k),
                            trace=TrajectoryFile(layout.trajectory_path(run_dir, eid)),
                            scratch_dir=scratch,
                        ),
                        handle,
                        root,
                        sub,
                        config.root,
                        config.sub,
                        dispatch,
                    )
                    # the summary line is written while the REPL's processes are reaped
                    return ep.run_then(lambda summary: _commit_episode(ep, summary, eid))
                finally:  # after the summary line: the scratch folder is not part of the episode
                    shutil.rmtree(scratch, ignore_errors=True)

        def _commit_episode(
            ep: Episode, summary: EpisodeSummary, eid: str
        ) -> EpisodeSummary | AttemptRecord:
            if ep.infrastructure_failure is not None:
                infrastructure_down.set()
            manifest.result()  # raises what writing run.json raised
            n_prior = attempts_before.get(eid, 0)
            attempt = commit_episode(
                run_dir, summary, ep.infrastructure_failure, n_prior, config.max_attempts
            )
            if attempt is not None and not attempt.final:
                return attempt
            if attempt is not None:
                failed.append(attempt)
            return summary

        summaries: list[EpisodeSummary] = []
        failed: list[AttemptRecord] = []  # final failed attempts (their episode is finished)
        unfinished: list[AttemptRecord] = []
        not_started = 0
        # admission: no more episode threads than descriptors, tasks and memory allow; the rest
        # of the plan waits in the executor's queue (collect/admission.py)
        room_for = capacity(
            fds_per_episode=config.sub_concurrency,
            extra_repls=dispatch.agent_threads if config.depth == 2 else 0,
        )
        n_parallel = min(config.concurrency, len(plan), room_for.episodes)
        if n_parallel < min(config.concurrency, len(plan)):
            warnings.warn(
                f"collect {run_dir.name}: running {n_parallel} episodes at once, not "
                f"{config.concurrency}: {room_for.bound} allow no more on this node "
                f"({room_for}); the others wait their turn",
                stacklevel=2,
            )
        desc = f"collect {run_dir.name}"
        bar = tqdm(total=len(plan), desc=desc, unit="ep", disable=not progress)
        heap.limit_arenas()  # episode threads' freed memory stays in few arenas (heap.py)
        with frozen_heap(), ThreadPoolExecutor(n_parallel, thread_name_prefix="episode") as ex:
            futures = [ex.submit(run_one, item) for item in plan]
            for fut in as_completed(futures):
                s = fut.result()
                if s is None:
                    not_started += 1
                    continue
                if isinstance(s, AttemptRecord):
                    unfinished.append(s)
                    bar.set_postfix_str(f"server failed: {s.cause}; starting no more episodes")
                else:
                    summaries.append(s)
                    bar.set_postfix_str(f"last: {s.status}")
                bar.update(1)
        bar.close()
        manifest.result()  # a run that only skipped episodes still has its run.json
        return CollectResult(
            run_dir, summaries, skipped, unfinished, not_started, [*unfinished, *failed]
        )
