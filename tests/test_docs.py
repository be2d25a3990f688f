"""The docs: generated reference pages are current, every CLI flag and config field has help,
every command the docs name answers ``--help``, the README's shape, the benchmarks table built
from result files, and ``mkdocs build --strict`` failing on a broken anchor."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from rlmdistill.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _load("gen_docs", ROOT / "scripts" / "gen_docs.py")
record = sys.modules["record"]  # benchmarks/record.py, imported by gen_docs


@cache
def _rendered() -> dict[str, str]:
    return gen.render_all()


def _commands() -> list[tuple[list[str], Any]]:
    root = typer.main.get_command(app)
    out: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        out.append((path, cmd))
        if hasattr(cmd, "list_commands"):  # a group (typer vendors click: no isinstance)
            ctx = typer.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name])

    walk(root, [])
    return out


# ------------------------------------------------------------------------- generated pages
def test_generated_reference_pages_are_current():
    stale = gen.stale_pages(DOCS, _rendered())
    assert stale == [], f"stale generated pages {stale}: run `python scripts/gen_docs.py`"


def test_staleness_check_names_the_page_that_would_change(tmp_path):
    rendered = _rendered()
    for rel, text in rendered.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    assert gen.stale_pages(tmp_path, rendered) == []
    cli = tmp_path / "reference" / "cli.md"
    cli.write_text(cli.read_text(encoding="utf-8").replace("--episodes", "--episode"))
    (tmp_path / "benchmarks.md").unlink()
    assert gen.stale_pages(tmp_path, rendered) == ["reference/cli.md", "benchmarks.md"]


def test_reference_pages_hold_what_the_code_says():
    pages = _rendered()
    cli = pages["reference/cli.md"]
    assert "## `rlmdistill collect`" in cli and "## `rlmdistill rooms synth`" in cli
    assert "* `--ray-address <str>`: Ray cluster to join: 'auto'" in cli  # the field's help
    config = pages["reference/config.md"]
    assert "- **`episodes`** (`int`, default `4`): Episodes (samples) per room." in config
    # nested model defaults come from their factories, not the nested class's own defaults
    assert '`{"temperature": 0.7, "top_p": 0.95, "max_tokens": 768' in config
    assert "<rlmdistill package>/rooms/cuad_sample" in config  # no machine path in a page
    files = pages["reference/files.md"]
    for row in ("`runs/<run>/episodes.jsonl`", "`datasets/<name>/export.json`"):
        assert row in files
    assert "### EpisodeSummary" in files and "### SFTManifest" in files


# ------------------------------------------------------------------------------ help text
def test_every_cli_flag_and_argument_has_help():
    missing = [
        f"rlmdistill {' '.join(path)} {p.name}"
        for path, cmd in _commands()
        for p in cmd.params
        if p.name != "help" and not (getattr(p, "help", None) or "").strip()
    ]
    missing += [f"rlmdistill {' '.join(path)}" for path, cmd in _commands() if not cmd.help]
    assert missing == []


def test_every_config_field_has_help():
    missing = [
        f"{cls.__module__}.{cls.__name__}.{name}"
        for cls in gen.config_models()
        for name in cls.model_fields
        if not gen.field_help(cls, name)
    ]
    assert missing == []


def test_field_help_reads_description_attribute_docstring_and_fields_section():
    class Demo(BaseModel):
        """A demo.

        Fields:
            a, b: shared text
                on two lines.
            c / d: sliced.
        """

        a: int = 0
        b: int = 0
        c: int = 0
        d: int = 0
        e: int = Field(0, description="From the description.")
        f: int = 0
        """From the docstring under it (:class:`~x.y.Z`, ``literal``)."""
        g: int = 0

    assert gen.field_help(Demo, "a") == "shared text on two lines."
    assert gen.field_help(Demo, "b") == "shared text on two lines."
    assert gen.field_help(Demo, "d") == "sliced."
    assert gen.field_help(Demo, "e") == "From the description."
    assert gen.field_help(Demo, "f") == "From the docstring under it (`Z`, `literal`)."
    assert gen.field_help(Demo, "g") == ""  # what the help test fails on


# --------------------------------------------------------------- commands the docs name
_FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1", re.S | re.M)
_INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _code(text: str) -> list[str]:
    """Fenced blocks, then inline code spans (a span closes on a run of its own length)."""
    # a block's shell comments are prose ("# same rlmdistill and Ray versions")
    blocks = [re.sub(r"(^|\s)#.*", "", m.group(0), flags=re.M) for m in _FENCED.finditer(text)]
    return blocks + [m.group(2) for m in _INLINE.finditer(_FENCED.sub("", text))]


_CMD = re.compile(r"(?<![\w.<-])rlmdistill((?:[ \t]+[a-z][a-z0-9-]*)+)")


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def named_commands(text: str, known: dict[tuple[str, ...], Any]) -> set[tuple]:
    """Command paths named as ``rlmdistill WORD [WORD]`` inside code spans and blocks: the
    longest prefix that is a command; a first word that is no command is kept whole, so the
    ``--help`` run fails on it."""
    found: set[tuple] = set()
    for code in _code(text):
        for m in _CMD.finditer(code):
            words = m.group(1).split()
            best: tuple[str, ...] = ()
            for n in range(1, min(len(words), 2) + 1):
                if tuple(words[:n]) in known:
                    best = tuple(words[:n])
            found.add(best or (words[0],))
    return found


def test_named_commands_are_found_in_code_only():
    known = {tuple(path): cmd for path, cmd in _commands()}
    text = (
        "Run `rlmdistill rooms synth --docs 20` and\n```bash\nrlmdistill judge runs/a\n"
        ".venv/bin/rlmdistill loop x.yaml  # rlmdistill and comments\n```\nrlmdistill and its friends; `rlmdistill[ray]`;"
        " ```` ```repl ```` then rlmdistill show is prose; `rlmdistill nosuch --x`"
    )
    assert named_commands(text, known) == {
        ("rooms", "synth"),
        ("judge",),
        ("loop",),
        ("nosuch",),
    }


def test_every_command_the_docs_name_answers_help():
    known = {tuple(path): cmd for path, cmd in _commands()}
    named: dict[tuple, str] = {}
    for f in _doc_files():
        for path in named_commands(f.read_text(encoding="utf-8"), known):
            named.setdefault(path, str(f.relative_to(ROOT)))
    assert ("collect",) in named and ("rooms", "build-cuad") in named
    runner = CliRunner()
    failed = []
    for path, where in sorted(named.items()):
        result = runner.invoke(app, [*path, "--help"])
        if result.exit_code != 0 or "Usage" not in result.output:
            failed.append(f"rlmdistill {' '.join(path)} (named in {where}): {result.output[:200]}")
    assert failed == []


# --------------------------------------------------------------------------------- README
STAGE_PAGES = ["rooms", "models", "collect", "judge", "filter", "export", "sft", "rl", "loop"]
STAGE_PAGES += ["analysis", "dashboard"]


def test_readme_is_short_with_commands_and_stage_links_first():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    head = "\n".join(lines[:40])
    assert "bash scripts/quickstart.sh" in head and "bash scripts/test.sh" in head
    for stage in STAGE_PAGES:
        assert f"(docs/{stage}.md)" in head, stage
        assert (DOCS / f"{stage}.md").is_file(), stage


# ------------------------------------------------------------------------------ benchmarks
def test_benchmarks_page_from_result_files(tmp_path):
    bench, results = tmp_path / "benchmarks", tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (bench / "bench_a.py").write_text(
        '"""Speed of a. More.\n\n    python benchmarks/bench_a.py --n 3\n"""\n'
    )
    (bench / "bench_b.py").write_text('"""Memory of b | c."""\n')
    r = record.BenchmarkResult(
        benchmark="bench_a",
        command="python benchmarks/bench_a.py --n 5",
        figure="a 1.5 ms",
        machine="Xeon (x86_64), 2 CPUs",
        date=dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.UTC),
        commit="abc1234",
        wall_s=3.0,
        load=(0.5, 1.3),
        output=["machine: Xeon (x86_64), 2 CPUs", "a 1.5 ms"],
    )
    (results / "bench_a.json").write_text(r.model_dump_json())
    page = gen.benchmarks_page(bench, results)
    assert (
        "| `bench_a` | `python benchmarks/bench_a.py --n 5` | Speed of a. | a 1.5 ms | "
        "Xeon (x86_64), 2 CPUs; load 0.5 -> 1.3 | 2026-12-04 (abc1234) |" in page
    )
    assert (
        "| `bench_b` | `python benchmarks/bench_b.py` | Memory of b \\| c. | "
        "no result file yet | - | - |" in page
    )
    (results / "bench_b.json").write_text('{"benchmark": "bench_b"}')
    with pytest.raises(ValueError, match=r"bench_b\.json: not a benchmark result file"):
        gen.benchmarks_page(bench, results)


def test_record_writes_a_result_file_with_headline_and_machine(tmp_path, monkeypatch):
    script = Path(record.HERE) / "bench_decode.py"
    assert script.is_file()
    monkeypatch.setattr(record, "RESULTS", tmp_path)
    assert record.main(["bench_decode.py", "--kib", "4", "--repeat", "1"]) == 0
    r = record.BenchmarkResult.model_validate_json((tmp_path / "bench_decode.json").read_text())
    assert r.command == "python benchmarks/bench_decode.py --kib 4 --repeat 1"
    assert r.figure.startswith("cp1252") and "KiB -> cp1252" in r.figure
    assert r.machine and not r.machine.startswith("machine:")
    assert r.output[0].startswith("machine: ")
    assert record.headline(["machine: m", "x 1", "result: fast 2 ms", "y"]) == "fast 2 ms"
    assert record.main(["nosuch.py"]) == 2


# ----------------------------------------------------------------------------- mkdocs build
def _mkdocs(cfg: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "mkdocs"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [str(exe), "build", "--strict", "-f", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_mkdocs_strict_with_our_settings_fails_on_a_broken_anchor(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [b](b.md#no-such-heading).\n")
    (docs / "b.md").write_text("# B\n\n## Real heading\n")
    cfg = tmp_path / "mkdocs.yml"
    cfg.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nsite_dir: {tmp_path / 'site'}\n"
        "not_in_nav: ''\nnav: [{Home: index.md}, {B: b.md}]\n"
    )
    broken = _mkdocs(cfg)
    assert broken.returncode != 0
    assert "does not contain an anchor '#no-such-heading'" in broken.stderr
    (docs / "index.md").write_text("# Home\n\nSee [b](b.md#real-heading).\n")
    ok = _mkdocs(cfg)
    assert ok.returncode == 0, ok.stderr
