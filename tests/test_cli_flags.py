"""Every command's flags, recorded: none disappears or changes meaning unannounced.

``tests/data/cli_flags.json`` holds, under ``"flags"``, every parameter of every command and
sub-command of ``rlmdistill`` as the command tree showed it when recorded (walked through
typer's click tree, ``typer.main.get_command(app)``): the command path, the parameter's
name, kind (option or argument), flag strings, type, default and help. Under ``"changes"``
it lists, each with its reason, the recorded facts that were changed on purpose.

The checks:

- every recorded flag string still exists, on one parameter of the same command, with the
  same type and default, unless ``changes`` lists the difference (``command``, ``flag`` (the
  option's first recorded flag string or the argument's name; ``*`` for every flag of the
  command), ``what`` (``type``, ``default`` or ``removed``), ``old``, ``new``, ``reason``);
- every flag and argument of every command, the ones added since the recording included, has
  non-empty help text.

Help text itself may change (it now comes from the config field's description); it is
recorded so a reader can see what it said before.

Re-record (only when a change is meant, and list it): ``python tests/test_cli_flags.py``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from rlmdistill.cli import app

DATA = Path(__file__).parent / "data" / "cli_flags.json"


def type_name(annotation: Any) -> str:
    """A stable text form of a parameter's annotation: ``int``, ``Path | None``,
    ``list[Path] | None``, ``Literal['a', 'b']`` (module prefixes dropped)."""
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    text = repr(annotation)
    text = re.sub(r"\b(?:typing|pathlib|builtins)\.", "", text)
    return re.sub(r"Optional\[(.*)\]$", r"\1 | None", text)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _commands(cmd: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
    """Every command and group with its path; a group's own parameters (``sft``'s training
    flags, given before or without a sub-command) count as the group's."""
    subs = getattr(cmd, "commands", None)
    if path and (not subs or cmd.params):
        yield " ".join(path), cmd
    for name, sub in sorted((subs or {}).items()):
        yield from _commands(sub, [*path, name])


def current_flags() -> list[dict[str, Any]]:
    """Every parameter of every command (and group) of ``rlmdistill``, as in the data file."""
    out: list[dict[str, Any]] = []
    for path, cmd in _commands(typer.main.get_command(app), []):
        for p in cmd.params:
            kind = "option" if p.opts and p.opts[0].startswith("-") else "argument"
            out.append(
                {
                    "command": path,
                    "name": p.name,
                    "kind": kind,
                    "opts": list(p.opts) + list(p.secondary_opts) if kind == "option" else [],
                    "type": type_name(p.type_descriptor.annotation),
                    "multiple": bool(p.multiple),
                    "default": _jsonable(p.default),
                    "required": bool(p.required),
                    "help": p.help or "",
                }
            )
    return out


def _key(flag: dict[str, Any]) -> str:
    return flag["opts"][0] if flag["kind"] == "option" else flag["name"]


def _change(changes: list[dict[str, Any]], flag: dict[str, Any], what: str) -> dict | None:
    for c in changes:
        same = c["command"] == flag["command"] and c["what"] == what
        if same and (c["flag"] == _key(flag) or (c["flag"] == "*" and c.get("old") == flag[what])):
            return c
    return None


def flag_problems(
    recorded: list[dict[str, Any]], changes: list[dict[str, Any]], now: list[dict[str, Any]]
) -> list[str]:
    """One message per recorded flag that is gone, or whose type or default changed, without
    a matching entry in ``changes``."""
    problems: list[str] = []
    for old in recorded:
        same_cmd = [f for f in now if f["command"] == old["command"]]
        if old["kind"] == "option":
            hits = [
                f for f in same_cmd if f["kind"] == "option" and set(old["opts"]) & set(f["opts"])
            ]
            covered = set().union(*(set(f["opts"]) for f in hits)) if hits else set()
            missing = [o for o in old["opts"] if o not in covered]
        else:
            hits = [f for f in same_cmd if f["kind"] == "argument" and f["name"] == old["name"]]
            missing = [] if hits else [old["name"]]
        where = f"{old['command'] or '(top)'} {_key(old)}"
        if len(hits) > 1:
            problems.append(f"{where}: its flag strings now belong to {len(hits)} parameters")
            continue
        if missing:
            if _change(changes, old, "removed") is None:
                problems.append(f"{where}: {', '.join(missing)} no longer exists")
            continue
        new = hits[0]
        for what in ("type", "default"):
            if new[what] == old[what]:
                continue
            c = _change(changes, old, what)
            if c is None or c.get("new", new[what]) != new[what]:
                problems.append(
                    f"{where}: {what} {old[what]!r} -> {new[what]!r} is not listed in changes"
                )
    return problems


def test_every_recorded_flag_is_still_there_with_its_meaning() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    problems = flag_problems(data["flags"], data["changes"], current_flags())
    assert not problems, "\n".join(problems)


def test_every_flag_of_every_command_has_help() -> None:
    missing = [f"{f['command']} {_key(f)}" for f in current_flags() if not f["help"].strip()]
    assert not missing, f"parameters without help text: {missing}"


def test_every_change_names_a_recorded_flag_and_a_reason() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    keys = {(f["command"], _key(f)) for f in data["flags"]}
    commands = {f["command"] for f in data["flags"]}
    for c in data["changes"]:
        assert c["what"] in {"type", "default", "removed"}, c
        assert c["reason"].strip(), c
        if c["flag"] == "*":
            assert c["command"] in commands, c
        else:
            assert (c["command"], c["flag"]) in keys, c


@pytest.mark.parametrize(
    ("now_opts", "now_type", "now_default", "changes", "expected"),
    [
        (["--episodes"], "int | None", None, [], []),
        (["--n"], "int | None", None, [], ["collect --episodes: --episodes no longer exists"]),
        (
            ["--episodes"],
            "int",
            1,
            [],
            [
                "collect --episodes: type 'int | None' -> 'int' is not listed in changes",
                "collect --episodes: default None -> 1 is not listed in changes",
            ],
        ),
        (
            ["--episodes"],
            "int | None",
            1,
            [{"command": "collect", "flag": "*", "what": "default", "old": None, "reason": "r"}],
            [],
        ),
        (
            ["--episodes"],
            "int | None",
            1,
            [
                {
                    "command": "collect",
                    "flag": "--episodes",
                    "what": "default",
                    "new": 2,
                    "reason": "r",
                }
            ],
            ["collect --episodes: default None -> 1 is not listed in changes"],
        ),
    ],
)
def test_the_checker_catches_a_lost_or_changed_flag(
    now_opts: list[str],
    now_type: str,
    now_default: Any,
    changes: list[dict[str, Any]],
    expected: list[str],
) -> None:
    old = {
        "command": "collect",
        "name": "episodes",
        "kind": "option",
        "opts": ["--episodes"],
        "type": "int | None",
        "default": None,
    }
    now = [{**old, "opts": now_opts, "type": now_type, "default": now_default}]
    assert flag_problems([old], changes, now) == expected


if __name__ == "__main__":
    previous = json.loads(DATA.read_text(encoding="utf-8")) if DATA.exists() else {}
    record = {"flags": current_flags(), "changes": previous.get("changes", [])}
    DATA.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"recorded {len(record['flags'])} parameters -> {DATA}", file=sys.stderr)


OWN_SWITCHES: dict[str, str] = {
    "--config": "the parser's own file option (cliconfig.config_command): any field, from a file",
    "--spec": "rooms set's spec file (RoomSetSpec's fields); not a field itself",
    "--progress": "operational: a progress bar, nothing the stage computes",
    "--strict": "operational: a room document that cannot be extracted stops the command",
    "--resume": "operational: continue a training run from its newest checkpoint",
    "--prices": "a file whose content is the config's `prices` table (set in a file only)",
    "--rules": "filter: the rules file (FilterRules' fields, from a file)",
    "--report-only": "filter: run the filter stage and not the export stage after it",
    "--json": "judge-eval: print the result as JSON instead of a table",
    "config": "rl: the config file itself, as a positional argument",
}
"""The parameters whose help is not a config field's description, each with why: the
config-file options, and operational switches that change how a command runs or prints,
never what a stage computes (cliconfig's module docstring: a command keeps its own
parameters beside its config). Any other parameter takes its help from a field."""


def _field_descriptions() -> set[str]:
    """Every field description of every pydantic model in ``rlmdistill`` (imported)."""
    import importlib
    import pkgutil

    import pydantic

    import rlmdistill

    out: set[str] = set()
    for info in pkgutil.walk_packages(rlmdistill.__path__, "rlmdistill."):
        if ".dashboard.app" in info.name or ".dashboard.pages_" in info.name:
            continue  # Streamlit page scripts run on import
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
                out |= {f.description for f in value.model_fields.values() if f.description}
    return out


def test_every_flag_takes_its_help_from_a_config_field_or_is_an_own_switch() -> None:
    """The help of every parameter of every command is a config field's description (help
    lives once, on the field; a prefix such as "Export: " or an appended usage note allowed),
    or the parameter is one of :data:`OWN_SWITCHES`."""
    descriptions = _field_descriptions()
    stray = [
        f"{f['command']} {_key(f)}: {f['help']!r}"
        for f in current_flags()
        if _key(f) not in OWN_SWITCHES and not any(d in f["help"] for d in descriptions)
    ]
    assert not stray, "help not from a field:\n" + "\n".join(stray)
