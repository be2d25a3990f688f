"""Code says what a thing means, not which issue or failure case asked for it: no issue or
case numbers in ``src/`` (tests keep their names, e.g. ``..._case_t3``; public issue numbers of
other projects, such as ``vllm#16162``, are sources and stay)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "rlmdistill"
OURS = re.compile(
    r"(?<![\w#])(?:[Ii]ssues? #?\d+|[Cc]ases? [A-Z]\d+\b|\(#\d+\)|(?<![A-Za-z0-9_/-])#\d{2,3}\b)"
)
"""An issue number of ours ("issue 21", "issue #20", "(#25)", "#17") or a case code ("case
T3", "cases S2/S3"); a number after a project name (``vllm#16162``, ``trl PR #7039``) is not
matched by the ``#`` rule, which needs no letter, digit, ``/`` or ``-`` right before it."""
OTHER_PROJECT = re.compile(r"(vllm|trl|rlm|streamlit|sglang|transformers|peft|ray|PR)\s*#\d+", re.I)


def offending_lines(root: Path) -> list[str]:
    """``path:line: text`` of every line under ``root`` citing one of our issue or case numbers."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            cleaned = OTHER_PROJECT.sub("", line)
            if OURS.search(cleaned):
                out.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return out


def test_no_issue_or_case_numbers_in_src() -> None:
    assert offending_lines(SRC) == []


def test_the_check_finds_what_it_should(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        '"""Cut at the turn cap (issue 21)."""\n'
        "x = 1  # torn tail, case T3\n"
        "y = 2  # see #17\n"
        '"""vllm#16162 and trl PR #7039 are sources."""\n'
        "z = 3  # issue #20\n",
        encoding="utf-8",
    )
    assert [line.split(":")[1] for line in offending_lines(tmp_path)] == ["1", "2", "3", "5"]
