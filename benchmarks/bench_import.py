"""Speed of ``rlmdistill import rlm``: ``rlms`` logs of two-turn episodes in, a run out.

Writes one ``rlms`` 0.1.3 log (the shape ``RLMLogger`` writes: a metadata line, then per
episode two iterations, the first with one code block holding one ``llm_query`` sub-call over
a 300-character slice of the room, the second setting the answer; the prompts carry the
growing message history as rlms sends it) of ``--episodes`` episodes (default 2,000) over the
clause room's layout (20 documents of seeded random words, ~130 k characters: every
sub-call prompt differs, as in real logs), then times :func:`import_rlm` end to end:
parse, room check of every sub-call prompt, coverage probe per episode, and writing
``episodes.jsonl``, one trajectory file per episode and ``run.json``. Also with
``--no-coverage``'s setting, to show what the probe costs. ``--jobs``: the coverage probe's
worker processes (0, the command's default: one per core up to 4 from 500 episodes on).

Target (traces-in issue): at least 1,000 two-turn episodes per second. Best of ``--repeat``
runs, wall and CPU (this process).

    python benchmarks/bench_import.py [--episodes 2000] [--repeat 3] [--jobs 0] [--dir DIR]

``--dir``: where the log and the runs are written (e.g. ``/dev/shm``, to take the disk out of
the figure); the first line says what creating one file costs there.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from rlmdistill.importers.common import resolve_jobs
from rlmdistill.importers.rlm import import_rlm
from rlmdistill.testing.rooms import write_clause_room

WORDS = [
    "agreement",
    "party",
    "licence",
    "term",
    "termination",
    "notice",
    "assignment",
    "control",
    "change",
    "fee",
    "royalty",
    "territory",
    "exclusive",
    "warranty",
    "liability",
    "indemnity",
    "audit",
    "renewal",
    "confidential",
    "governing",
    "law",
]

SYSTEM = "You are a Recursive Language Model (RLM). " * 40


def _room(root: Path) -> Path:
    """The clause room's task and folders, its documents 20 texts of ~6,500 characters of
    seeded random words (no two sub-call prompts alike, as in real logs)."""
    room = write_clause_room(root, n_documents=20, repeats=1)
    rng = random.Random(0)
    for doc in sorted((room / "documents" / "Contracts").glob("*.txt")):
        doc.write_text(" ".join(rng.choice(WORDS) for _ in range(800)), encoding="utf-8")
    return room


def _log(path: Path, room_text: str, n: int) -> None:
    lines = [
        {
            "type": "metadata",
            "timestamp": "2026-01-01T00:00:00",
            "root_model": "root",
            "max_depth": 1,
            "max_iterations": 6,
            "backend": "openai",
            "backend_kwargs": {"model_name": "root", "base_url": "http://127.0.0.1:8000/v1"},
            "environment_type": "local",
            "environment_kwargs": {},
            "other_backends": ["openai"],
        }
    ]
    for e in range(n):
        start = (e * 997) % max(1, len(room_text) - 300)
        prompt = "Summarise: " + room_text[start : start + 300]
        answer = f"ANSWER {e}: the clause text repeats."
        first = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Answer the following: Review #{e}.\n\nYour context"},
            {"role": "user", "content": "You have not seen your context yet.\n\nTurn 1/6:"},
        ]
        reply0 = "```repl\nans = llm_query('Summarise: ' + context[:300])\nprint(ans)\n```"
        stdout = answer + "\n"
        second = [
            *first,
            {"role": "assistant", "content": reply0},
            {"role": "user", "content": f"REPL output:\n\n{stdout}\n\nREPL variables: ['ans']\n"},
            {"role": "user", "content": "Turn 2/6:"},
        ]
        reply1 = "```repl\nanswer['content'] = 'MEMO: ' + ans\nanswer['ready'] = True\n```"
        call = {
            "root_model": "sub",
            "prompt": prompt,
            "response": answer,
            "usage_summary": {
                "model_usage_summaries": {
                    "sub": {"total_calls": 1, "total_input_tokens": 80, "total_output_tokens": 9}
                }
            },
            "execution_time": 0.01,
        }
        block = {
            "code": reply0,
            "result": {
                "stdout": stdout,
                "stderr": "",
                "locals": {"ans": answer},
                "execution_time": 0.01,
                "rlm_calls": [call],
                "final_answer": None,
            },
        }
        end = {
            "code": reply1,
            "result": {
                "stdout": "",
                "stderr": "",
                "locals": {"ans": answer},
                "execution_time": 0.001,
                "rlm_calls": [],
                "final_answer": "MEMO: " + answer,
            },
        }
        for k, (msgs, reply, blocks, final) in enumerate(
            [(first, reply0, [block], None), (second, reply1, [end], "MEMO: " + answer)]
        ):
            lines.append(
                {
                    "type": "iteration",
                    "iteration": k + 1,
                    "timestamp": "2026-01-01T00:00:01",
                    "prompt": msgs,
                    "response": reply,
                    "code_blocks": blocks,
                    "final_answer": final,
                    "iteration_time": 0.05,
                }
            )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=0, help="coverage worker processes (0: auto)")
    ap.add_argument(
        "--dir", type=Path, default=None, help="folder for the log and runs (default: the temp dir)"
    )
    args = ap.parse_args()
    from rlmdistill.hardware import machine_line

    print(machine_line(), flush=True)  # the machine every figure below was measured on
    tmp = Path(tempfile.mkdtemp(prefix="bench-import-", dir=args.dir))
    try:
        print(f"disk: {_create_us(tmp):.0f} us of wall to create one empty file in {tmp.parent}")
        room = _room(tmp / "room")
        text = "\n\n".join(p.read_text() for p in sorted(room.rglob("c*.txt")))
        log = tmp / "rlm.jsonl"
        _log(log, text, args.episodes)
        mb = log.stat().st_size / 1e6
        jobs = resolve_jobs(args.jobs, args.episodes)
        print(f"log: {args.episodes} two-turn episodes, {mb:.1f} MB; coverage jobs {jobs}")
        import_rlm([log], room, tmp / "warm", command=["bench"])  # room index, imports
        figures = {}
        for coverage in (True, False):
            best = (float("inf"), float("inf"))
            for r in range(args.repeat):
                out = tmp / f"run-{coverage}-{r}"
                w0, c0 = time.perf_counter(), time.process_time()
                res = import_rlm(
                    [log], room, out, coverage=coverage, jobs=args.jobs, command=["bench"]
                )
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                assert res.n_episodes == args.episodes and res.warnings == []
                best = min(best, (wall, cpu))
                shutil.rmtree(out)
            rate = args.episodes / best[0]
            figures[coverage] = rate
            label = "with coverage" if coverage else "without coverage"
            print(
                f"import rlm {label}: {best[0]:.2f} s wall, {best[1]:.2f} s CPU "
                f"-> {rate:,.0f} episodes/s (wall)",
                flush=True,
            )
        print(
            f"result: {figures[True]:,.0f} two-turn episodes/s imported with coverage "
            f"({figures[False]:,.0f}/s without); target >= 1,000/s",
            flush=True,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _create_us(folder: Path, n: int = 1000) -> float:
    """Wall microseconds to create (and close) one empty file in ``folder``, mean of ``n``:
    the import writes one trajectory file per episode, so this bounds its rate on a disk."""
    d = folder / "create-test"
    d.mkdir()
    t0 = time.perf_counter()
    for i in range(n):
        (d / f"{i:06d}.jsonl").touch()
    us = (time.perf_counter() - t0) / n * 1e6
    shutil.rmtree(d)
    return us


if __name__ == "__main__":
    main()
