"""A LAB-Diligence-scale room through the collector: cold set-up, warm episodes, ``result()``.

Builds a synthetic room (default 5,000 documents at ``--length-scale 4``, >= 320 M characters)
under a temporary folder (never in the repository; deleted at the end, ``--tmp`` picks the
parent folder), then, each step in a fresh process so that its peak RSS is its own:

1. **cold**: :meth:`DataRoom.load` + the REPL snapshot (``prepare.ensure_snapshot``) + the
   coverage index (:meth:`CoverageIndex.load_or_build`, empty cache): seconds for each and the
   process's peak RSS (``VmHWM``: heap plus every resident page of the files it maps),
   also as a multiple of the room's text (its UTF-8 bytes, the snapshot blob); the duplicate
   share (``duplicate_chars / n_chars``, the measure of ``docs/synth.md``);
2. **result()**: the index loaded from the cache (memory-mapped) and one episode's worth of
   model input (40 documents x 25,000 characters, ~1 M characters, plus prompts) observed;
   seconds per :meth:`CoverageProbe.result` (median of 3);
3. **warm, N episodes** (``--episodes``, default 1 and 8, N at once): ``collect`` against a
   loopback fake server (own process; L = 0 s) with a scripted root whose turn 0 reads 40
   random documents and sends each to a sub-call, then waits at a gate (it polls the fake
   server with a ``GATE`` sub-call, which answers ``open`` once all N episodes have asked and
   :data:`HOLD_S` more seconds have passed); turn 1 hands back a memo. REPLs run in
   ``--sandbox`` (default ``bwrap``, the sandbox users get). Sampled every 50 ms: the
   collector's RSS and PSS and the PSS of every process under it (REPL workers and, with
   bubblewrap, the bwrap processes around them; shared pages split between the processes
   mapping them, so the room's blob counts once).
   The figure is collector PSS + REPL PSS with **all N episodes live at the gate** (median of
   the samples in the hold), and the growth per extra episode from it; the sampled peak over
   the whole run is printed beside it. (Read off the peak alone, the per-episode growth
   depended on which samples caught which REPLs alive: 4.9%, 6.2% and 12.5% of the room in
   three runs of the same code.)

Targets (issue 17): cold <= 60 s and peak RSS <= 3x text; warm collector + REPLs <= 1.5x text,
<= 5% of the room per extra episode; ``result()`` <= 1 s. Needs ~3 GB free memory and ~2 GB of
disk under ``--tmp``.
``benchmarks/bench_scale.py`` runs this benchmark and ``bench_concurrency.py`` and checks every
target against their printed lines (percentages to 0.01 so that 5.04% does not read 5.0%).

    python benchmarks/bench_lab_room.py [--docs 5000] [--length-scale 4] [--episodes 1 8]
        [--tmp /tmp] [--room DIR] [--cache DIR] [--steps cold result warm]

To fit each step into a short measuring window (e.g. with other work paused): build the room
once (``rlmdistill rooms synth ... --out DIR``), then ``--room DIR --cache CACHE --steps cold``
(CACHE empty: the index is built there and left), then ``--room DIR --cache CACHE --steps
result warm`` (the index loaded from CACHE).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

TURN0 = (
    "```repl\nimport random, time, uuid\ndocs = list_documents()\npick = random.sample(docs, 40)\n"
    "parts = [read(d['id'], 0, 25000) for d in pick]\n"
    "answers = llm_query_batched(['Summarise for the memo:\\n' + p for p in parts])\n"
    "print(len(answers), sum(map(len, parts)))\n"
    # the gate: every episode holds here, its REPL and its collector state live, until all N
    # have arrived, then HOLD s more: the plateau that the memory figure is read on. It goes
    # through the model server (a sub-call asks whether the gate is open), so it works in any
    # sandbox: a bubblewrap REPL sees no host folder to meet in.
    "token = uuid.uuid4().hex\nt_end = time.time() + 300\n"
    "while llm_query('GATE ' + token) != 'open' and time.time() < t_end:\n    time.sleep(0.05)\n```"
)
HOLD_S = 1.5
"""Seconds every episode holds at the gate once all have arrived."""
TURN1 = "```repl\nmemo = 'Findings: ' + ' '.join(a[:40] for a in answers[:3])\nFINAL_VAR(memo)\n```"


def _peak_rss_mib() -> float:
    """Peak RSS of this process (``VmHWM``; ``ru_maxrss`` would carry the parent's peak
    across the spawn's ``execve``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _in_child(fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in a fresh (spawned) process and return its result."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def _cold(room_dir: str, cache: str) -> dict[str, Any]:
    os.environ["RLMDISTILL_ROOM_CACHE"] = cache
    from rlmdistill.collect.prepare import ensure_snapshot
    from rlmdistill.coverage.index import CoverageIndex
    from rlmdistill.rooms import DataRoom

    rss0 = _peak_rss_mib()
    t = time.perf_counter()
    room = DataRoom.load(room_dir)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    snap = ensure_snapshot(room, Path(cache) / f"{room.snapshot_key}.snapshot.json")
    snap_s = time.perf_counter() - t
    rss_snap = _peak_rss_mib()
    t = time.perf_counter()
    index = CoverageIndex.load_or_build(room, Path(cache))
    index_s = time.perf_counter() - t
    return {
        "docs": len(room),
        "chars": room.n_chars,
        "text_bytes": snap.with_suffix(".bin").stat().st_size,
        "norm_chars": index.n_chars,
        "dup_chars": index.duplicate_chars,
        "load_s": load_s,
        "snapshot_s": snap_s,
        "index_s": index_s,
        "rss_start_mib": rss0,
        "rss_after_snapshot_mib": rss_snap,
        "peak_rss_mib": _peak_rss_mib(),
        "cache_mib": sum(p.stat().st_size for p in Path(cache).glob("*.coverage-*")) / 2**20,
    }


def _result_time(room_dir: str, cache: str) -> dict[str, Any]:
    import random

    from rlmdistill.coverage.index import CoverageIndex, CoverageProbe
    from rlmdistill.rooms import DataRoom

    room = DataRoom.load(room_dir)
    t = time.perf_counter()
    index = CoverageIndex.load_or_build(room, Path(cache))
    load_s = time.perf_counter() - t
    rss_loaded = psutil.Process().memory_info().rss / 2**20
    rng = random.Random(0)
    times, overall = [], 0.0
    for _ in range(3):
        probe = CoverageProbe(index)
        for d in rng.sample(room.documents, 40):
            probe.observe("Summarise for the memo:\n" + d.read_text()[:25_000])
        t = time.perf_counter()
        overall = probe.result().overall
        times.append(time.perf_counter() - t)
    return {
        "cache_load_s": load_s,
        "rss_loaded_mib": rss_loaded,
        "result_s": statistics.median(times),
        "result_all": times,
        "overall": overall,
        "peak_rss_mib": _peak_rss_mib(),
    }


class _Gate:
    """The fake server's side of the gate: ``GATE <token>`` prompts. Each new token (one per
    episode) touches a file in ``folder`` (what the sampler counts); the answer is ``open``
    once ``n`` tokens have arrived and :data:`HOLD_S` more seconds have passed."""

    def __init__(self, folder: str, n: int) -> None:
        self.folder, self.n = folder, n
        self.tokens: set[str] = set()
        self.opened_at: float | None = None

    def __call__(self, prompt: str) -> str:
        if not prompt.startswith("GATE "):
            return "summary: " + prompt[24:64]
        token = prompt.split()[1]
        if token not in self.tokens:
            self.tokens.add(token)
            Path(self.folder, token).touch()
        if self.opened_at is None and len(self.tokens) >= self.n:
            self.opened_at = time.monotonic() + HOLD_S
        return (
            "open" if self.opened_at is not None and time.monotonic() >= self.opened_at else "wait"
        )


def _serve(urls: Any, stop: Any, gate: str, n: int) -> None:
    from rlmdistill.testing.fake_openai import FakeOpenAIServer, ScriptedHandler

    handler = ScriptedHandler([TURN0, TURN1], _Gate(gate, n))
    with FakeOpenAIServer(handler, latency_s=0.0) as server:
        urls.put(server.base_url)
        stop.wait()


def _pss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_full_info().pss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def _episodes(
    room_dir: str,
    cache: str,
    out: str,
    n: int,
    url: str,
    gate: str,
    sandbox: str = "bwrap",
    sub_concurrency: int = 40,
) -> dict[str, Any]:
    os.environ["RLMDISTILL_ROOM_CACHE"] = cache
    from rlmdistill.collect.config import CollectConfig, EpisodeLimits
    from rlmdistill.collect.runner import collect
    from rlmdistill.models.openai_client import OpenAIChatClient

    me = psutil.Process()
    peak = {"total": 0, "collector_pss": 0, "collector_rss": 0, "repl_pss": 0, "repls": 0}
    samples: list[tuple[float, int, int, int]] = []  # (time, collector PSS, REPL PSS, REPLs)
    all_in: list[float] = []  # when the n-th episode reached the gate
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            kids = me.children(recursive=True)
            repl = sum(_pss(k) for k in kids)
            own = _pss(me)
            rss = me.memory_info().rss
            now = time.perf_counter()
            samples.append((now, own, repl, len(kids)))
            if not all_in and len(os.listdir(gate)) >= n:
                all_in.append(now)
            if own + repl > peak["total"]:
                peak.update(total=own + repl, collector_pss=own, repl_pss=repl, repls=len(kids))
            peak["collector_rss"] = max(peak["collector_rss"], rss)

    thread = threading.Thread(target=sample, daemon=True)
    mk = lambda m: OpenAIChatClient(m, url, api_key="x", max_concurrency=64)  # noqa: E731
    cfg = CollectConfig(
        rooms=[room_dir],
        root=f"openai:root@{url}",
        sub=f"openai:sub@{url}",
        episodes=n,
        concurrency=n,
        sub_concurrency=sub_concurrency,
        limits=EpisodeLimits(max_turns=3),
        sandbox=sandbox,  # type: ignore[arg-type]
    )
    root, sub = mk("root"), mk("sub")
    t = time.perf_counter()
    thread.start()
    try:
        res = collect(cfg, Path(out), root, sub, progress=False)
    finally:
        done.set()
        thread.join()
        root.close()
        sub.close()
    statuses = [s.status for s in res.summaries]
    # the plateau: every episode held at the gate (its REPL and collector state live)
    held = [x for x in samples if all_in and all_in[0] + 0.1 <= x[0] <= all_in[0] + HOLD_S - 0.1]
    plateau = {
        "samples": len(held),
        "collector_pss": statistics.median(x[1] for x in held) if held else float("nan"),
        "repl_pss": statistics.median(x[2] for x in held) if held else float("nan"),
        "repls": max((x[3] for x in held), default=0),
    }
    return {
        "wall_s": time.perf_counter() - t,
        "statuses": statuses,
        "peak": peak,
        "plateau": plateau,
        "coverage": [round(s.coverage.overall, 5) if s.coverage else None for s in res.summaries],
    }


def _text_mib(room_dir: Path, cache: Path) -> float:
    """The room's text in MiB: its UTF-8 bytes, the size of the REPL snapshot's blob (read
    from the cache's snapshot where there is one, else by encoding every document)."""
    from rlmdistill.rooms import DataRoom

    room = DataRoom.load(room_dir)
    blob = cache / f"{room.snapshot_key}.snapshot.bin"
    if blob.is_file():
        return blob.stat().st_size / 2**20
    return sum(len(d.read_text().encode("utf-8", "surrogatepass")) for d in room.documents) / 2**20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--length-scale", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, nargs="*", default=[1, 8], help="none: skip")
    ap.add_argument("--tmp", default=None, help="parent folder of the temporary room")
    ap.add_argument(
        "--sandbox",
        choices=["bwrap", "audit", "none"],
        default="bwrap",
        help="REPL sandbox of the warm episodes (bwrap: the default users get; its processes "
        "count in the REPL figure)",
    )
    ap.add_argument("--room", default=None, help="use this room (left in place) instead")
    ap.add_argument(
        "--cache",
        default=None,
        help="cache folder to use and leave in place (cold needs it empty); default: temporary",
    )
    ap.add_argument(
        "--steps",
        nargs="+",
        choices=["cold", "result", "warm"],
        default=["cold", "result", "warm"],
        help="steps to run (result and warm need a built index: cold now or in --cache)",
    )
    args = ap.parse_args(argv)
    vm = psutil.virtual_memory()
    print(f"memory: {vm.available / 2**30:.1f} GiB available of {vm.total / 2**30:.1f} GiB")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    from rlmdistill.rooms.synth import build_synth_room

    tmp = Path(tempfile.mkdtemp(prefix="bench_lab_room_", dir=args.tmp))
    try:
        room_dir = Path(args.room) if args.room else tmp / "room"
        cache = Path(args.cache) if args.cache else tmp / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        if "cold" in args.steps and any(cache.glob("*.coverage-*")):
            raise SystemExit(f"{cache}: holds a coverage index already; cold needs it empty")
        if args.room is None:
            t = time.perf_counter()
            rep = build_synth_room(room_dir, args.docs, args.seed, length_scale=args.length_scale)
            print(
                f"room: rooms synth --docs {args.docs} --length-scale {args.length_scale:g} "
                f"--seed {args.seed}: {rep.n_docs:,} documents, {rep.n_chars:,} characters, "
                f"built in {time.perf_counter() - t:.1f} s",
                flush=True,
            )
        else:
            print(f"room: {room_dir} (given)", flush=True)
        text_mib = _text_mib(room_dir, cache)
        if "cold" in args.steps:
            cold = _in_child(_cold, str(room_dir), str(cache))
            text_mib = cold["text_bytes"] / 2**20
            print(
                f"cold: load {cold['load_s']:.1f} s + snapshot {cold['snapshot_s']:.1f} s + index "
                f"{cold['index_s']:.1f} s = {cold['load_s'] + cold['snapshot_s'] + cold['index_s']:.1f} s"
                f" | peak RSS {cold['peak_rss_mib']:.0f} MiB = {cold['peak_rss_mib'] / text_mib:.2f}x "
                f"the text ({text_mib:.0f} MiB UTF-8; {cold['rss_start_mib']:.0f} MiB at start, "
                f"{cold['rss_after_snapshot_mib']:.0f} MiB after the snapshot) | cache "
                f"{cold['cache_mib']:.0f} MiB",
                flush=True,
            )
            print(
                f"duplicated text: {cold['dup_chars']:,} of {cold['norm_chars']:,} normalised "
                f"characters = {cold['dup_chars'] / cold['norm_chars']:.1%}",
                flush=True,
            )
        if "result" in args.steps:
            rt = _in_child(_result_time, str(room_dir), str(cache))
            print(
                f"warm index: cache load {rt['cache_load_s']:.2f} s, RSS after load "
                f"{rt['rss_loaded_mib']:.0f} MiB | result() {rt['result_s']:.2f} s per episode "
                f"(median of {len(rt['result_all'])}: "
                + ", ".join(f"{x:.2f}" for x in rt["result_all"])
                + f"; overall coverage {rt['overall']:.4f}) | peak RSS {rt['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
        episodes = args.episodes if "warm" in args.steps else []
        ctx = mp.get_context("spawn")
        totals: dict[int, float] = {}
        live: dict[int, float] = {}
        for n in episodes:
            gate = tmp / f"gate{n}"
            gate.mkdir()
            urls, stop = ctx.Queue(), ctx.Event()
            server = ctx.Process(target=_serve, args=(urls, stop, str(gate), n), daemon=True)
            server.start()
            try:
                url = urls.get(timeout=60)
                run = str(tmp / f"run{n}")
                r = _in_child(
                    _episodes, str(room_dir), str(cache), run, n, url, str(gate), args.sandbox
                )
            finally:
                stop.set()
                server.join(timeout=10)
            p = {k: v / 2**20 for k, v in r["peak"].items() if k != "repls"}
            q = r["plateau"]
            totals[n] = p["total"]
            live[n] = (q["collector_pss"] + q["repl_pss"]) / 2**20
            print(
                f"warm, {n} episode(s) at once: {r['wall_s']:.1f} s, statuses "
                f"{sorted(set(r['statuses']))} | all {n} live (median of {q['samples']} samples "
                f"at the gate): collector PSS {q['collector_pss'] / 2**20:.0f} MiB + "
                f"{q['repls']} REPL PSS {q['repl_pss'] / 2**20:.0f} MiB = {live[n]:.0f} MiB = "
                f"{live[n] / text_mib:.2f}x the text | peak collector PSS "
                f"{p['collector_pss']:.0f} MiB + {r['peak']['repls']} REPL PSS "
                f"{p['repl_pss']:.0f} MiB = {p['total']:.0f} MiB = {p['total'] / text_mib:.2f}x"
                f" | collector peak RSS {p['collector_rss']:.0f} MiB | coverage "
                f"{r['coverage'][:3]}",
                flush=True,
            )
        first = min(totals, default=0)
        for n in sorted(totals):
            if n > first:
                extra = (live[n] - live[first]) / (n - first)
                extra_peak = (totals[n] - totals[first]) / (n - first)
                print(
                    f"each extra episode ({first} -> {n}), all live at the gate: {extra:.2f} MiB"
                    f" = {extra / text_mib:.2%} of the room (by the sampled peaks: "
                    f"{extra_peak:.2f} MiB = {extra_peak / text_mib:.2%})"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # never --room or --cache
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
