"""A small data room on disk, for harness tests and benchmarks that only need *a* room.

:func:`write_clause_room` writes ``documents/Contracts/c<i>.txt`` (each ``"Contract <i>. "``
followed by ``"Clause text. "`` repeated ``repeats`` times, i.e. ``14 + 13 * repeats``
characters for ``i < 10``) and a ``task.json`` with one rubric criterion, the least a room
needs for ``collect`` (:class:`rlmdistill.rooms.DataRoom` loads it).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_clause_room"]


def write_clause_room(root: Path, n_documents: int = 20, repeats: int = 500) -> Path:
    """Write the room under ``root`` (created; must not hold a room already) and return it.

    Raises ``FileExistsError`` when ``root/documents/Contracts`` exists.
    """
    docs = root / "documents" / "Contracts"
    docs.mkdir(parents=True)
    for i in range(n_documents):
        (docs / f"c{i}.txt").write_text(f"Contract {i}. " + "Clause text. " * repeats)
    task = {
        "title": "Clause review",
        "instructions": "Review the contracts.",
        "criteria": [{"id": "c1", "title": "Clauses", "match_criteria": "PASS if ..."}],
    }
    (root / "task.json").write_text(json.dumps(task), encoding="utf-8")
    return root
