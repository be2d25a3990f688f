"""Cost of the coverage probe (``coverage/index.py``) on a large room.

Measures, for a room of ``--docs`` documents (default 5,000 documents of a seeded synthetic
data room from ``rlmdistill.rooms.synth`` at ``--length-scale 0.45``, ~40 M characters, 80
folders, and the earlier random-word room of 5-10k-character documents in 20 folders; one of
them with ``--filler synth|random``; or an existing room via ``--room``):

1. index build time (:meth:`CoverageIndex.build`), cache save and cache load time, and the
   index's cache size on disk;
2. probe time for one realistic episode: ``--root-requests`` root requests (default 10, each
   ~20k characters: a system prompt, then a growing history of code and REPL output that
   prints room excerpts) and ``--sub-calls`` sub-call prompts (default 200, ~4k characters:
   instructions plus a ~3.5k-character room slice). The probe is fed two ways: each message
   of each root request separately (identical earlier messages are skipped by digest), and
   each root request rendered as one string (worst case: nothing repeats exactly). Sub-call
   prompts are observed from ``--threads`` threads. ``result()`` is timed separately.

By default both generated rooms are measured (``--filler both``) and a summary prints both
rooms' figures, wall clock and CPU seconds (the machine may be shared, so CPU time is the
steadier figure). The summary's ``dup`` is the share of the room's normalised characters that
repeat text of an earlier document (64-character shingles): 29% for the synthetic room
(generator synth-v2; synth-v1 filler gave 96%), 9% for the random room.

Target (coverage issue #3, acceptance (c)): probe time per episode <= 1 s on 2 cores.

    python benchmarks/bench_coverage_probe.py [--docs 5000] [--room DIR] [--seed 0]
        [--filler both|synth|random] [--length-scale 0.45]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rlmdistill.coverage import index as cov_mod
from rlmdistill.coverage.index import CoverageIndex, CoverageProbe
from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.synth import build_synth_room


def _vocab(rng: np.random.Generator, n: int, lo: int = 2, hi: int = 11) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(lo, hi)))) for _ in range(n)]


def make_synth_room(root: Path, n_docs: int, seed: int, length_scale: float) -> Path:
    """A synthetic data room (:func:`rlmdistill.rooms.synth.build_synth_room`, no CUAD text):
    template filler with planted issues in 14 categories / up to 80 folders."""
    build_synth_room(root, n_docs, seed, length_scale=length_scale, cuad_source=None)
    return root


def make_room(root: Path, n_docs: int, seed: int) -> Path:
    """Write ``n_docs`` documents of 5-10k chars in 20 folders, with shared boilerplate.

    Each document is sentences of random words from a 5,000-word vocabulary (Zipf-like
    weights), and carries 2 of 40 boilerplate clauses (~400 chars each) shared verbatim
    across documents, so the duplicate rule has work to do.
    """
    rng = np.random.default_rng(seed)
    vocab = np.array(_vocab(rng, 5000))
    weights = 1.0 / np.arange(1, vocab.size + 1)
    weights /= weights.sum()
    clauses = [
        " ".join(rng.choice(vocab, size=60, p=weights)).capitalize() + "." for _ in range(40)
    ]
    for i in range(n_docs):
        target = int(rng.integers(5000, 10001))
        n_words = target // 6
        words = rng.choice(vocab, size=n_words, p=weights)
        parts: list[str] = []
        for j in range(0, n_words, 15):
            parts.append(" ".join(words[j : j + 15]).capitalize() + ".")
            if j % 150 == 0:
                parts.append("\n\n")
        for c in rng.choice(len(clauses), size=2, replace=False):
            parts.insert(int(rng.integers(0, len(parts))), "\n" + clauses[int(c)] + "\n")
        folder = root / "documents" / f"Folder{i % 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{i:05d}.txt").write_text(" ".join(parts)[:target], encoding="utf-8")
    return root


def make_episode(
    room: DataRoom, n_root: int, n_sub: int, seed: int
) -> tuple[list[list[str]], list[str]]:
    """Root requests (each a list of message texts, history growing) and sub-call prompts."""
    rng = random.Random(seed)
    docs = [d for d in room.documents if d.n_chars > 4000]
    noise_words = _vocab(np.random.default_rng(seed + 1), 800, 3, 9)

    def noise(n: int) -> str:
        out = []
        total = 0
        while total < n:
            w = rng.choice(noise_words)
            out.append(w)
            total += len(w) + 1
        return " ".join(out)[:n]

    def room_slice(n: int) -> str:
        d = rng.choice(docs)
        text = d.text
        start = rng.randrange(0, max(1, len(text) - n))
        return text[start : start + n]

    messages = [
        "SYSTEM " + noise(4000),
        "TASK " + noise(1500),
    ]
    requests: list[list[str]] = []
    per_turn = (20_000 - 5500) // max(1, n_root)
    for _ in range(n_root):
        requests.append(list(messages))
        code = "```repl\n" + noise(400) + "\n```"
        observation = "\n".join(
            f"--- excerpt {k} ---\n{room_slice(per_turn // 3)}" for k in range(2)
        )
        messages += [code, observation + "\n" + noise(per_turn - len(observation) - 420)]
    # Requests of ~20k chars each: pad the early ones with a long repeated preamble, as a
    # harness with few-shot examples would.
    fewshot = "EXAMPLE " + noise(20_000)
    requests = [[fewshot[: max(0, 20_000 - sum(len(m) for m in r))], *r] for r in requests]
    subs = [
        "Read the excerpt and list clauses. " + noise(500) + "\n\n" + room_slice(3500)
        for _ in range(n_sub)
    ]
    return requests, subs


def run_episode(
    index: CoverageIndex,
    requests: list[list[str]],
    subs: list[str],
    *,
    whole_requests: bool,
    threads: int,
) -> tuple[float, float, float, float]:
    """Seconds for (observe root, observe sub-calls, result) of one episode, wall clock, then
    the CPU seconds of ``result()`` (all threads of the process)."""
    probe = CoverageProbe(index)
    t0 = time.perf_counter()
    for req in requests:
        if whole_requests:
            probe.observe("\n".join(req))
        else:
            for msg in req:
                probe.observe(msg)
    t1 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(probe.observe, subs))
    t2 = time.perf_counter()
    c2 = time.process_time()
    cov = probe.result()
    t3 = time.perf_counter()
    c3 = time.process_time()
    print(
        f"    overall={cov.overall:.5f}  docs touched="
        f"{sum(v > 0 for v in cov.per_document.values())}"
    )
    return t1 - t0, t2 - t1, t3 - t2, c3 - c2


def bench_room(room_path: Path, cache: Path, args: argparse.Namespace) -> dict[str, float]:
    """Print and return one room's figures (seconds; ``*_cpu``: CPU seconds)."""
    t = time.perf_counter()
    room = DataRoom.load(room_path)
    print(f"room: {room!r} (loaded in {time.perf_counter() - t:.1f} s)")
    for d in room.documents:  # read the files now, so the build time is the index's own
        _ = d.text

    t, c = time.perf_counter(), time.process_time()
    index = CoverageIndex.build(room)
    build_s, build_cpu = time.perf_counter() - t, time.process_time() - c
    dup_share = index.duplicate_chars / max(1, index.n_chars)
    print(
        f"index build: {build_s:.2f} s (CPU {build_cpu:.2f} s) | normalised chars "
        f"{index.n_chars:,} | aligned windows {index.n_windows:,} | duplicate chars "
        f"{index.duplicate_chars:,} ({dup_share:.0%})"
    )
    t = time.perf_counter()
    CoverageIndex.load_or_build(room, cache)  # builds again and saves
    print(f"load_or_build, cold (build + save): {time.perf_counter() - t:.2f} s")
    cov_mod._LOADED.clear()  # forget the in-process copy, as a new process would
    t = time.perf_counter()
    loaded = CoverageIndex.load_or_build(room, cache)
    load_s = time.perf_counter() - t
    size = sum(p.stat().st_size for p in cache.iterdir()) / 2**20
    print(f"load_or_build, warm (load from disk): {load_s:.3f} s | cache {size:.1f} MiB")

    requests, subs = make_episode(room, args.root_requests, args.sub_calls, args.seed)
    root_chars = sum(len(m) for r in requests for m in r)
    sub_chars = sum(len(s) for s in subs)
    print(
        f"episode: {len(requests)} root requests ({root_chars:,} chars), "
        f"{len(subs)} sub-call prompts ({sub_chars:,} chars)"
    )
    out = {"build": build_s, "build_cpu": build_cpu, "load": load_s, "dup_share": dup_share}
    for whole in (False, True):
        label = "whole request strings" if whole else "per message"
        best: tuple[float, float, float, float] | None = None
        for _ in range(args.repeats):
            got = run_episode(loaded, requests, subs, whole_requests=whole, threads=args.threads)
            if best is None or sum(got[:3]) < sum(best[:3]):
                best = got
        assert best is not None
        print(
            f"  probe per episode ({label}), best of {args.repeats}: "
            f"total {sum(best[:3]):.3f} s = observe root {best[0]:.3f} + observe sub "
            f"{best[1]:.3f} + result {best[2]:.3f} (result CPU {best[3]:.3f})"
        )
        key = "whole" if whole else "per_message"
        out[f"episode_{key}"], out[f"result_{key}"] = sum(best[:3]), best[2]
        out[f"result_cpu_{key}"] = best[3]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--room", type=Path, help="existing room folder (default: generated)")
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--filler", choices=("both", "synth", "random"), default="both")
    ap.add_argument("--length-scale", type=float, default=0.45, help="synth filler only")
    ap.add_argument("--root-requests", type=int, default=10)
    ap.add_argument("--sub-calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    print(
        f"machine: {platform.platform()} | {platform.processor() or platform.machine()} | "
        f"cpus={os.cpu_count()} (affinity {len(os.sched_getaffinity(0))}) | "
        f"python {platform.python_version()} | numpy {np.__version__}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench_coverage_"))
    try:
        rooms: dict[str, Path] = {}
        if args.room is not None:
            rooms[args.room.name] = args.room
        else:
            for filler in ("synth", "random") if args.filler == "both" else (args.filler,):
                t = time.perf_counter()
                if filler == "synth":
                    make_synth_room(tmp / filler, args.docs, args.seed, args.length_scale)
                else:
                    make_room(tmp / filler, args.docs, args.seed)
                print(f"{filler} room written in {time.perf_counter() - t:.1f} s")
                rooms[filler] = tmp / filler
        results = {}
        for name, path in rooms.items():
            print(f"--- {name} room")
            results[name] = bench_room(path, tmp / f"cache-{name}", args)
        print("--- summary (seconds; CPU = process CPU seconds; target: result <= 1 s/episode)")
        print(
            f"{'room':>8} {'dup':>5} {'build':>7} {'build CPU':>9} {'load':>6} "
            f"{'result':>7} {'result CPU':>10} {'episode':>8}"
        )
        for name, r in results.items():
            worst = max(r["result_per_message"], r["result_whole"])
            worst_cpu = max(r["result_cpu_per_message"], r["result_cpu_whole"])
            episode = max(r["episode_per_message"], r["episode_whole"])
            print(
                f"{name:>8} {r['dup_share']:>5.0%} {r['build']:>7.2f} {r['build_cpu']:>9.2f} "
                f"{r['load']:>6.3f} {worst:>7.3f} {worst_cpu:>10.3f} {episode:>8.3f}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
