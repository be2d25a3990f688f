"""Layering of ``src/rlmdistill`` (issue 18): which packages may import which, and no cycles.

The allowed edges are the ``layering`` block of ``docs/architecture.md`` (section Layering),
read here, so the document and the check cannot drift apart. Every import of ours counts,
also one inside a function (an import on use is still a dependency); only imports under
``if TYPE_CHECKING:`` do not. A package's command adapters (its ``cli`` and ``*_cli``
modules, and ``__main__``) stand on the ``cli`` floor, not on their package's: a command may
run several stages in turn (``rlmdistill filter`` runs filter, then export). The checks:

- every package of ``src/rlmdistill`` has a line in the block;
- no module imports a package its floor may not import;
- no module outside a package (and the top-level ``rlmdistill.cli``) imports its ``cli`` or
  ``*_cli`` module: the loop and the dashboard call stage functions;
- the module import graph has no cycle;
- the block's ``stages:`` line names the stages, and no stage may import another: stages
  stand side by side and talk through files (issue 38);
- the block itself has no cycle between packages.

The checker itself is tested on a small tree and small blocks with one violation of each
kind.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rlmdistill"
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BASE = "base"
"""Name of the ground floor in the block: the top-level modules below."""
BASE_MODULES = {
    "__init__",
    "cliconfig",
    "compat",
    "hardware",
    "heap",
    "mdtable",
    "paths",
    "provenance",
    "stats",
}
CLI = "cli"
"""Name of the floor of command adapters: ``rlmdistill.cli`` and every package's ``cli``,
``*_cli`` and ``__main__`` modules."""
STAGES_LINE = "stages:"


def _block_lines(doc: Path) -> list[str]:
    m = re.search(r"```layering\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    if m is None:
        raise ValueError(f"{doc}: no ```layering block")
    return [line for line in m.group(1).strip().splitlines() if line.strip()]


def read_layering(doc: Path) -> dict[str, set[str]]:
    """``{package: packages it may import}`` from the ```` ```layering ```` block of ``doc``
    (lines ``pkg -> a, b``; the ``stages:`` line is read by :func:`read_stages`). Raises
    ``ValueError`` when the block is missing or malformed."""
    out: dict[str, set[str]] = {}
    for line in _block_lines(doc):
        if line.startswith(STAGES_LINE):
            continue
        left, sep, right = line.partition("->")
        if not sep:
            raise ValueError(f"{doc}: layering line without '->': {line!r}")
        out[left.strip()] = {p.strip() for p in right.split(",") if p.strip()}
    return out


def read_stages(doc: Path) -> set[str]:
    """The packages named on the block's ``stages: a, b, ...`` line. Raises ``ValueError``
    when the block or the line is missing, or the line appears twice."""
    lines = [line for line in _block_lines(doc) if line.startswith(STAGES_LINE)]
    if len(lines) != 1:
        raise ValueError(f"{doc}: the layering block needs one '{STAGES_LINE}' line")
    return {p.strip() for p in lines[0][len(STAGES_LINE) :].split(",") if p.strip()}


def stage_violations(allowed: Mapping[str, set[str]], stages: set[str]) -> list[str]:
    """One message per stage of ``stages`` that has no line in ``allowed`` or may import
    another stage."""
    out = [f"stage {s!r} has no line in the layering block" for s in sorted(stages - set(allowed))]
    for s in sorted(stages & set(allowed)):
        for other in sorted(allowed[s] & stages - {s}):
            out.append(f"stage {s!r} may import stage {other!r}: stages stand side by side")
    return out


def layer_of(module: str) -> str:
    """Floor of a module in the block: :data:`CLI` for a command adapter (``rlmdistill.cli``,
    a package's ``cli``, ``*_cli`` or ``__main__`` module), else its package
    (:func:`package_of`)."""
    last = module.rsplit(".", 1)[-1]
    if module.count(".") >= 2 and (last in (CLI, "__main__") or last.endswith("_cli")):
        return CLI
    return package_of(module)


def package_of(module: str) -> str:
    """Layer name of a module: its package below ``rlmdistill``, :data:`BASE` for a ground
    floor module, ``cli`` for ``rlmdistill.cli``."""
    parts = module.split(".")
    if len(parts) == 1:  # rlmdistill itself
        return BASE
    if parts[1] in BASE_MODULES:
        return BASE
    return parts[1]


def modules(src: Path) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under ``src`` (a package named ``src.name``)."""
    out = {}
    for p in sorted(src.rglob("*.py")):
        rel = p.relative_to(src).with_suffix("").parts
        name = ".".join((src.name, *rel))
        out[name.removesuffix(".__init__")] = p
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(sub) for sub in ast.walk(node))
    return skip


def imports(src: Path) -> Iterator[tuple[str, str, int]]:
    """``(importer, imported module, line)`` for every import of a module of ``src``'s
    package (``TYPE_CHECKING`` blocks left out). ``from pkg import name`` names the submodule
    ``pkg.name`` when there is one, else ``pkg``."""
    mods = modules(src)
    root = src.name
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == root or node.module.startswith(root + "."):
                    for alias in node.names:
                        full = f"{node.module}.{alias.name}"
                        targets.append(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == root]
            seen: set[str] = set()
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name and t not in seen:
                    seen.add(t)
                    yield name, t, node.lineno


def violations(src: Path, allowed: Mapping[str, set[str]]) -> list[str]:
    """Every import of ``src`` that breaks the layering ``allowed`` or imports another
    package's ``cli``, one message each naming the file, line and rule."""
    out = []
    layers = {layer_of(m) for m in modules(src)}
    out += [
        f"package {p!r} has no line in the layering block" for p in sorted(layers - set(allowed))
    ]
    for importer, imported, line in imports(src):
        a, b = layer_of(importer), layer_of(imported)
        where = f"{modules(src)[importer].relative_to(src.parent)}:{line}"
        if a != b and b not in allowed.get(a, set()):
            out.append(f"{where}: {importer} imports {imported} ({a} may not import {b})")
        if (
            b == CLI
            and package_of(importer) != package_of(imported)
            and package_of(importer) != CLI
        ):
            out.append(f"{where}: {importer} imports {imported} (a stage's cli module)")
    return out


def cycles(src: Path) -> list[list[str]]:
    """Strongly connected components of more than one module in the import graph of ``src``
    (Tarjan's algorithm, iterative), each sorted; empty when the graph is acyclic."""
    graph: dict[str, set[str]] = {m: set() for m in modules(src)}
    for a, b, _ in imports(src):
        graph[a].add(b)
    return strongly_connected(graph)


def block_cycles(allowed: Mapping[str, set[str]]) -> list[list[str]]:
    """Cycles between packages in the layering block itself (an edge to itself, such as
    ``base -> base``, is no cycle): each strongly connected set of more than one package,
    sorted; empty when the floors stack."""
    graph = {p: {q for q in deps if q != p} for p, deps in allowed.items()}
    for deps in list(graph.values()):
        for q in deps:
            graph.setdefault(q, set())
    return strongly_connected(graph)


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node of ``graph`` (node -> nodes it
    points to; every target is a key), Tarjan's algorithm, iterative; each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_source_follows_the_documented_layering() -> None:
    allowed = read_layering(DOC)
    assert violations(SRC, allowed) == []


def test_source_has_no_import_cycle() -> None:
    assert cycles(SRC) == []


def test_no_stage_imports_another_stage() -> None:
    """The stages named on the block's ``stages:`` line stand on one floor: none may import
    another (the test above holds the source to the block)."""
    stages = read_stages(DOC)
    assert {"collect", "judge", "filter", "export", "sft", "analysis"} <= stages
    assert stage_violations(read_layering(DOC), stages) == []


def test_layering_block_has_no_cycle() -> None:
    assert block_cycles(read_layering(DOC)) == []


def test_checker_finds_stage_to_stage_edges_and_block_cycles() -> None:
    allowed = {
        "base": {"base"},
        "traces": {"base"},
        "judge": {"base", "traces", "analysis"},
        "analysis": {"base", "traces"},
        "loop": {"judge", "analysis"},
        "x": {"y"},
        "y": {"z"},
        "z": {"x", "base"},
    }
    assert stage_violations(allowed, {"judge", "analysis", "filter"}) == [
        "stage 'filter' has no line in the layering block",
        "stage 'judge' may import stage 'analysis': stages stand side by side",
    ]
    assert stage_violations(allowed, {"judge", "loop"}) == [
        "stage 'loop' may import stage 'judge': stages stand side by side"
    ]
    assert block_cycles(allowed) == [["x", "y", "z"]]
    assert block_cycles({k: v for k, v in allowed.items() if k != "z"}) == []


def test_command_adapters_stand_on_the_cli_floor() -> None:
    assert layer_of("rlmdistill.filter.cli") == CLI
    assert layer_of("rlmdistill.judge.eval_cli") == CLI
    assert layer_of("rlmdistill.sft.__main__") == CLI
    assert layer_of("rlmdistill.cli") == CLI
    assert layer_of("rlmdistill.filter.main") == "filter"
    assert layer_of("rlmdistill.stats") == BASE


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "rlmdistill" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root / "rlmdistill"


def test_checker_finds_a_layering_violation_a_cli_import_and_a_cycle(tmp_path: Path) -> None:
    """A tree where traces imports filter (not allowed), the dashboard imports filter.cli
    (a command adapter, on the cli floor), and rooms.a <-> rooms.b import each other (b only inside a function, which still counts);
    a TYPE_CHECKING import of filter by traces is no violation."""
    src = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "traces/__init__.py": "",
            "traces/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from rlmdistill.filter import y\n",
            "traces/bad.py": "from rlmdistill.filter.y import f\n",
            "filter/__init__.py": "",
            "filter/y.py": "from rlmdistill.traces import x\n",
            "filter/cli.py": "from rlmdistill.filter.y import f\n",
            "dashboard/__init__.py": "",
            "dashboard/page.py": "def go():\n    from rlmdistill.filter.cli import f\n",
            "rooms/__init__.py": "",
            "rooms/a.py": "from rlmdistill.rooms import b\n",
            "rooms/b.py": "def f():\n    from rlmdistill.rooms.a import g\n",
        },
    )
    allowed = {
        "base": {"base"},
        "traces": {"base"},
        "filter": {"traces"},
        "rooms": set(),
        "dashboard": {"filter"},
        "cli": {"filter"},
    }
    expected = [
        "rlmdistill/dashboard/page.py:2: rlmdistill.dashboard.page imports rlmdistill.filter.cli "
        "(a stage's cli module)",
        "rlmdistill/dashboard/page.py:2: rlmdistill.dashboard.page imports rlmdistill.filter.cli "
        "(dashboard may not import cli)",
        "rlmdistill/traces/bad.py:1: rlmdistill.traces.bad imports rlmdistill.filter.y "
        "(traces may not import filter)",
    ]
    assert sorted(violations(src, allowed)) == expected
    assert cycles(src) == [["rlmdistill.rooms.a", "rlmdistill.rooms.b"]]
    no_rooms = {k: v for k, v in allowed.items() if k != "rooms"}
    assert sorted(violations(src, no_rooms)) == sorted(
        ["package 'rooms' has no line in the layering block", *expected]
    )


def test_layering_block_is_read_as_written(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("x\n```layering\nbase -> base\ntraces -> base, rooms\n```\n", "utf-8")
    assert read_layering(doc) == {"base": {"base"}, "traces": {"base", "rooms"}}
    with pytest.raises(ValueError, match="needs one 'stages:' line"):
        read_stages(doc)
    doc.write_text(
        "```layering\nbase -> base\nstages: judge, filter\njudge -> base\n```\n", "utf-8"
    )
    assert read_layering(doc) == {"base": {"base"}, "judge": {"base"}}
    assert read_stages(doc) == {"judge", "filter"}
    doc.write_text("no block\n", "utf-8")
    with pytest.raises(ValueError, match="no ```layering block"):
        read_layering(doc)
