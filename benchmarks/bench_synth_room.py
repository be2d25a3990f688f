"""Build time and peak memory of synthetic rooms, and whether the collector can load them.

For each size in ``--sizes`` (default 300 and 5,000 documents) this builds a room with
:func:`rlmdistill.rooms.synth.build_synth_room` in a fresh temporary folder and prints:

1. build wall and CPU time and the process's peak RSS (``resource.getrusage``, which includes
   the interpreter and imported libraries), then the peak Python heap of a second build under
   ``tracemalloc`` (slower; skip with ``--no-heap``);
2. the room's size: documents, characters, approximate tokens (chars / 4), leaf folders,
   categories and rubric criteria (by type), planted issues (by class);
3. what the collector does with it: :meth:`DataRoom.load` time and :meth:`DataRoom.snapshot`
   time and size (the memory-mappable blob every REPL maps);
4. with ``--tokenizer DIR`` (e.g. the SmolLM2-135M checkpoint), the measured characters per
   token on a sample of 200 documents, so the approximate token count can be checked.

Target (issue 4): the 5,000-document room builds in <= 5 minutes on 2 cores.

    python benchmarks/bench_synth_room.py [--sizes 300,5000] [--seed 0] [--length-scale 1.0]
        [--tokenizer ~/.cache/rlmdistill/models/smollm2-135m]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from rlmdistill.rooms import DataRoom
from rlmdistill.rooms.synth import CHARS_PER_TOKEN, build_synth_room


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def bench_one(n_docs: int, seed: int, scale: float, tokenizer: str | None, heap: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_synth_"))
    try:
        out = tmp / "room"
        rss0 = _rss_mib()
        t, cpu = time.perf_counter(), time.process_time()
        report = build_synth_room(out, n_docs, seed, length_scale=scale)
        build_s, build_cpu = time.perf_counter() - t, time.process_time() - cpu
        rss1 = _rss_mib()
        print(f"\n== {n_docs:,} documents (seed {seed}, length scale {scale:g}) ==")
        print(
            f"build: {build_s:.1f} s wall, {build_cpu:.1f} s CPU | peak RSS {rss1:.0f} MiB "
            f"(was {rss0:.0f} MiB before the build)"
        )
        if heap:
            tracemalloc.start()
            build_synth_room(out, n_docs, seed, length_scale=scale, overwrite=True)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"peak Python heap during a second build (tracemalloc): {peak / 2**20:.1f} MiB")
        print(
            f"size: {report.n_docs:,} docs ({report.n_cuad_docs} CUAD) | "
            f"{report.n_chars:,} chars | {report.n_bytes / 2**20:.0f} MiB | "
            f"~{report.approx_tokens:,} tokens (chars/{CHARS_PER_TOKEN:g})"
        )
        print(
            f"folders: {report.n_folders} leaf in {report.n_categories} categories | "
            f"criteria: {report.n_criteria} {report.criteria_by_type} | "
            f"issues: {report.issues_by_class}"
        )
        t = time.perf_counter()
        room = DataRoom.load(out)
        load_s = time.perf_counter() - t
        assert room.room_hash == report.room_hash and len(room) == n_docs
        t = time.perf_counter()
        index = room.snapshot(tmp / "snap" / "room")
        snap_s = time.perf_counter() - t
        blob = index.with_suffix(".bin").stat().st_size
        print(
            f"collector: DataRoom.load {load_s:.1f} s | snapshot {snap_s:.1f} s "
            f"({blob / 2**20:.0f} MiB blob) | peak RSS {_rss_mib():.0f} MiB"
        )
        if tokenizer:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tokenizer)
            sample = random.Random(0).sample(room.documents, min(200, len(room)))
            chars = sum(d.n_chars for d in sample)
            tokens = sum(len(tok.encode(d.text, add_special_tokens=False)) for d in sample)
            print(
                f"tokenizer {Path(tokenizer).name}: {chars / tokens:.2f} chars/token on "
                f"{len(sample)} documents -> room ~{round(report.n_chars * tokens / chars):,} "
                "tokens"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--sizes", default="300,5000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--length-scale", type=float, default=1.0)
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder for chars/token")
    ap.add_argument("--no-heap", action="store_true", help="skip the tracemalloc rebuild")
    args = ap.parse_args(argv)
    print(
        f"machine: {platform.platform()} | {platform.processor() or platform.machine()} | "
        f"cpus={os.cpu_count()} (affinity {len(os.sched_getaffinity(0))}) | "
        f"python {platform.python_version()}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        bench_one(size, args.seed, args.length_scale, args.tokenizer, not args.no_heap)


if __name__ == "__main__":
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    main()
