"""The packaged worked example must be runnable code: small roots copy it verbatim."""

import json
import re

from rlmdistill.harness.prompts import PROMPT_VERSION, SYSTEM_PROMPT, task_message, worked_example
from rlmdistill.harness.repl import ReplLimits, ReplProcess


def test_worked_example_runs_in_the_real_repl_and_hands_back_a_memo(tmp_path):
    snap = tmp_path / "snap.json"
    docs = [
        {
            "id": "Supply/a.txt",
            "folder": "Supply",
            "text": "x " * 500 + "Either party may terminate on change of control.",
        },
        {"id": "Leases/b.txt", "folder": "Leases", "text": "Tenant shall not assign this lease."},
    ]
    snap.write_text(json.dumps({"room_id": "r", "room_hash": "h", "documents": docs}))
    turns = [m.content for m in worked_example() if m.role == "assistant"]
    assert len(turns) == 2
    seen: list[str] = []

    def sub(prompts, sources):
        seen.extend(prompts)
        return [f"answer {i}" for i in range(len(prompts))]

    with ReplProcess(snap, tmp_path / "scratch", ReplLimits()) as repl:
        # the second turn alone must work too (0.5B roots often copy only the last turn)
        for turn in (turns[1], turns[0], turns[1]):
            code = re.search(r"```repl\n(.*?)```", turn, re.S).group(1)
            out = repl.execute(code, sub)
            assert out.error is None, out.error
        assert out.final is not None and out.final["source"] == "final_var"
    memo = out.final["value"]
    assert "\n- change of control (Supply/a.txt): answer 0\n" in memo
    assert "\n- anti-assignment (Leases/b.txt): answer 1\n" in memo
    assert seen[-2].startswith("Excerpt of contract Supply/a.txt:\n")
    assert seen[-2].endswith("Copy word for word the sentence above about change of control.")


def test_task_message_is_bounded_for_large_rooms():
    docs = [(f"F/doc{i}.txt", 1000) for i in range(5000)]
    msg = task_message("Review.", "T", 5000, 5_000_000, {"F": 5000}, docs)
    assert "- ... and 4960 more (use list_documents())" in msg
    assert len(msg) < 3000
    assert PROMPT_VERSION.startswith("rlm-dd-v") and "FINAL_VAR(memo)" in SYSTEM_PROMPT
