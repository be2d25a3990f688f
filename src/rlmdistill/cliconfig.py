"""One parser from a pydantic config to CLI flags plus ``--config FILE``.

The idea of TRL's ``HfArgumentParser``/``TrlParser`` (``trl/scripts/utils.py``), on typer:
a stage's config class is the one place its options, types, defaults and help text live, and
:func:`config_command` turns it into a typer command:

- every field whose type a flag can carry (``str``, ``int``, ``float``, ``bool``, ``Path``,
  a ``Literal`` of options, a list of those; each maybe ``| None``) becomes ``--field-name``
  with the field's ``description`` as help and the field's default as default; a ``Literal``
  becomes a choice; a ``bool`` becomes ``--name/--no-name``;
- a nested config model (``sampling``, ``ray``, ``limits``) gives prefixed flags:
  ``ray.address`` is ``--ray-address``; fields no flag can carry (a mapping, a price table, a
  list of models) are set in the config file only, and the ``--config`` help names them;
- ``--config FILE`` (YAML, JSON or TOML) sets any field, nested ones as nested mappings;
- precedence: field defaults < the ``--config`` file < flags typed on the command line
  (a flag left at its default never overrides the file: click's parameter source tells them
  apart);
- an unknown key in a file is an error naming the file and the key; a value that does not
  validate is a usage error naming the flag (exit 2).

A command keeps its own parameters (positional arguments, operational switches such as
``--progress``) in its signature beside one parameter annotated with the config class; the
decorator replaces that parameter with the generated flags and hands the command the
validated config. :func:`load_config` is the same precedence for callers without typer.

The base floor: this module imports nothing of ours.
"""

from __future__ import annotations

import functools
import inspect
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import typer
import yaml
from pydantic import BaseModel, ValidationError

__all__ = [
    "ConfigFileError",
    "Flag",
    "check_keys",
    "config_command",
    "config_data",
    "config_flags",
    "field_help",
    "load_config",
    "merge_overrides",
    "read_config_file",
]

M = TypeVar("M", bound=BaseModel)
_SCALARS = (str, int, float, bool, Path)


class ConfigFileError(ValueError):
    """A config file that cannot be used: unreadable, not a mapping, an unknown suffix, or an
    unknown key. The message names the file and, for a key, its dotted path."""


def read_config_file(
    path: Path | str, *, section: str | None = None, other_suffix_as_yaml: bool = False
) -> dict[str, Any]:
    """The mapping of fields in a ``.yaml``/``.yml``/``.json``/``.toml`` file. A TOML file
    may hold the fields under a ``[section]`` table (read when ``section`` names one).
    ``other_suffix_as_yaml``: a file with any other suffix is read as YAML (JSON is YAML),
    for readers that accepted any name before (filter rules files).

    Raises:
        FileNotFoundError: no such file.
        ConfigFileError: unknown suffix, bad syntax, or not a mapping (names the file).
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    suffix = p.suffix.lower()
    try:
        if suffix in (".yaml", ".yml", ".json") or (other_suffix_as_yaml and suffix != ".toml"):
            data = yaml.safe_load(text) or {}
        elif suffix == ".toml":
            data = tomllib.loads(text)
            if section is not None and isinstance(data.get(section), dict):
                data = data[section]
        else:
            raise ConfigFileError(f"{p}: config must be .yaml, .yml, .toml or .json")
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"{p}: cannot parse config file: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"{p}: expected a mapping of config fields")
    return data


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(annotation, False)``."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(get_args(annotation)):
            return args[0], True
    return annotation, False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _strip_optional(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner
    return None


def _allows_extra(model: type[BaseModel]) -> bool:
    return model.model_config.get("extra") == "allow"


def check_keys(model: type[BaseModel], data: Mapping[str, Any], source: str) -> None:
    """Raise :class:`ConfigFileError` (``SOURCE: unknown key 'a.b' (known: ...)``) for a key
    of ``data`` that is not a field of ``model``, nested models checked too (aliases count
    as known; a model that allows extra keys accepts any)."""

    def walk(m: type[BaseModel], d: Mapping[str, Any], prefix: str) -> None:
        if _allows_extra(m):
            return
        known = {}
        for name, f in m.model_fields.items():
            known[name] = f
            if f.alias:
                known[f.alias] = f
        for key, value in d.items():
            if key not in known:
                raise ConfigFileError(
                    f"{source}: unknown key {prefix + str(key)!r} "
                    f"(known: {', '.join(sorted(m.model_fields))})"
                )
            sub = _model_of(known[key].annotation)
            if sub is not None and isinstance(value, Mapping):
                walk(sub, value, f"{prefix}{key}.")

    walk(model, data, "")


def merge_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each ``overrides`` item set; a dotted key (``ray.address``) sets a
    nested mapping, made when missing. ``data`` is not changed."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            child = node.get(p)
            node[p] = dict(child) if isinstance(child, Mapping) else {}
            node = node[p]
        node[leaf] = value
    return out


def _has_path(data: Mapping[str, Any], path: str) -> bool:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def config_data(
    model: type[BaseModel],
    file: Path | str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    section: str | None = None,
) -> dict[str, Any]:
    """The field mapping for ``model``: the file's fields (checked for unknown keys), then
    ``overrides`` (dotted keys for nested fields; every item counts, ``None`` included). Not
    validated: a caller that fills stage defaults validates after. Raises the errors of
    :func:`read_config_file` and :func:`check_keys`."""
    data: dict[str, Any] = {}
    if file is not None:
        data = read_config_file(file, section=section)
        check_keys(model, data, str(file))
    return merge_overrides(data, overrides or {})


def load_config(
    model: type[M],
    file: Path | str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    section: str | None = None,
) -> M:
    """``model`` from field defaults < ``file`` < ``overrides`` (see :func:`config_data`).
    Raises the errors of :func:`config_data` and ``pydantic.ValidationError`` naming the
    field."""
    return model.model_validate(config_data(model, file, overrides, section=section))


def field_help(model: type[BaseModel], path: str, prefix: str = "") -> str:
    """The description of the field at dotted ``path`` of ``model``, for a hand-written flag
    that sets it (a command whose flags feed two stages, such as ``filter``); ``prefix`` goes
    before it (``"Export: "``). Raises ``KeyError`` naming a missing field and ``TypeError``
    for a field without description."""
    node: type[BaseModel] = model
    *parents, leaf = path.split(".")
    for p in parents:
        sub = _model_of(node.model_fields[p].annotation)
        if sub is None:
            raise KeyError(f"{model.__name__}.{path}: {p} is not a nested config")
        node = sub
    if leaf not in node.model_fields:
        raise KeyError(f"{model.__name__} has no field {path!r}")
    text = node.model_fields[leaf].description
    if not text:
        raise TypeError(f"{model.__name__}.{path}: a CLI flag needs a field description")
    return prefix + text


@dataclass(frozen=True)
class Flag:
    """One CLI parameter made from one config field.

    Attributes:
        path: the field's dotted path in the config (``ray.address``).
        param: the Python name of the typer parameter (``ray_address``).
        decls: the option strings (``("--ray-address",)``); empty for an argument.
        annotation: the type typer parses the value as.
        default: the field's default (what the flag shows and gives when not typed).
        help: the field's description.
        argument: a positional argument instead of an option.
        required: the field has no default.
    """

    path: str
    param: str
    decls: tuple[str, ...]
    annotation: Any
    default: Any
    help: str
    argument: bool = False
    required: bool = False


def _flaggable(annotation: Any) -> bool:
    inner, _ = _strip_optional(annotation)
    if get_origin(inner) is Literal:
        return all(isinstance(v, (str, int)) for v in get_args(inner))
    if get_origin(inner) in (list, Sequence, tuple):
        args = get_args(inner)
        return len(args) >= 1 and all(a in _SCALARS or a is Ellipsis for a in args)
    return inner in _SCALARS


def config_flags(
    model: type[BaseModel],
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    names: Mapping[str, Sequence[str]] | None = None,
    arguments: Iterable[str] = (),
    helps: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    flatten: Iterable[str] = (),
) -> tuple[list[Flag], list[str]]:
    """The flags of ``model`` and the dotted paths of the fields set in a file only.

    ``include`` (dotted paths; a nested model's path includes its fields) limits the flags
    to those fields, ``exclude`` drops some; ``names`` gives a field other option strings
    (``{"cache_path": ["--cache"]}``); ``arguments`` makes fields positional; ``helps``
    replaces a field's description as help (for a flag whose meaning the command narrows);
    ``defaults`` gives a flag the command's own default (shown; the command sets it when
    neither the file nor a typed flag does; ``None``: shown as none and left to the stage,
    e.g. filled from another field); ``flatten`` names nested models whose fields' flags
    take no prefix (``options.mode`` is ``--mode``).

    Raises ``TypeError`` naming the model and field when a flag would have no help text (a
    field without ``description``), or when ``names``/``arguments`` name no flaggable field.
    """
    include_set = set(include) if include is not None else None
    exclude_set = set(exclude)
    names = dict(names or {})
    helps = dict(helps or {})
    shown_defaults = dict(defaults or {})
    flat = set(flatten)
    args = set(arguments)
    flags: list[Flag] = []
    file_only: list[str] = []

    def wanted(path: str) -> bool:
        if any(path == e or path.startswith(e + ".") for e in exclude_set):
            return False
        if include_set is None:
            return True
        return any(path == i or path.startswith(i + ".") for i in include_set)

    def walk(m: type[BaseModel], prefix: str, parent_default: Any) -> None:
        for name, field in m.model_fields.items():
            path = prefix + name
            sub = _model_of(field.annotation)
            if sub is not None and (
                include_set is None
                or any(
                    i == path or i.startswith(path + ".") or path.startswith(i + ".")
                    for i in include_set
                )
            ):
                if path not in exclude_set:
                    own = (
                        None
                        if field.is_required()
                        else field.get_default(call_default_factory=True)
                    )
                    if parent_default is not None:
                        own = getattr(parent_default, name, own)
                    walk(sub, path + ".", own)
                continue
            if not wanted(path):
                continue
            if not _flaggable(field.annotation):
                file_only.append(path)
                continue
            help_text = helps.get(path) or field.description
            if not help_text:
                raise TypeError(f"{model.__name__}.{path}: a CLI flag needs a field description")
            parent = path.rpartition(".")[0]
            param = (name if parent in flat else path).replace(".", "_")
            inner, optional = _strip_optional(field.annotation)
            is_arg = path in args
            if is_arg:
                decls: tuple[str, ...] = ()
            elif path in names:
                decls = tuple(names[path])
            else:
                decls = ("--" + param.replace("_", "-"),)
            if inner is bool and not is_arg and not any("/" in d for d in decls):
                decls = tuple(f"{d}/--no-{d[2:]}" for d in decls[:1]) + decls[1:]
            required = field.is_required()
            default = None if required else field.get_default(call_default_factory=True)
            if parent_default is not None:  # a nested model's default may set its fields
                default = getattr(parent_default, name, default)
            if path in shown_defaults:
                default = shown_defaults[path]
            annotation = inner | None if optional or default is None else inner
            flags.append(Flag(path, param, decls, annotation, default, help_text, is_arg, required))

    walk(model, "", None)
    seen: dict[str, str] = {}
    for f in flags:
        for key in (f.param, *(d.split("/")[0] for d in f.decls)):
            if seen.setdefault(key, f.path) != f.path:
                raise TypeError(f"{model.__name__}: {seen[key]} and {f.path} both give {key}")
    unknown = (set(names) | args | set(shown_defaults)) - {f.path for f in flags}
    if unknown:
        raise TypeError(f"{model.__name__}: no flaggable field {sorted(unknown)}")
    return flags, file_only


def _typer_parameter(flag: Flag) -> inspect.Parameter:
    info: Any
    if flag.argument:
        info = typer.Argument(help=flag.help, show_default=not flag.required)
    else:
        info = typer.Option(*flag.decls, help=flag.help)
    # a required field given as an option may come from the config file: validated later
    default = inspect.Parameter.empty if flag.required and flag.argument else flag.default
    if isinstance(default, list):
        default = list(default) or None
    return inspect.Parameter(
        flag.param,
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[flag.annotation, info],
        default=default,
    )


def _is_argument(p: inspect.Parameter) -> bool:
    """Whether a command's own parameter is a typer positional argument."""
    infos = (
        [*get_args(p.annotation)[1:], p.default]
        if get_origin(p.annotation) is Annotated
        else [p.default]
    )
    return any(isinstance(i, typer.models.ArgumentInfo) for i in infos)


def _flag_hint(flags: Sequence[Flag], loc: Sequence[Any]) -> str | None:
    path = ".".join(str(p) for p in loc)
    for f in flags:
        if f.path == path or path.startswith(f.path + "."):
            return f.decls[0].split("/")[0] if f.decls else f.param.upper()
    return None


def _usage_error(
    exc: ValidationError, flags: Sequence[Flag], source: str | None
) -> typer.BadParameter:
    problems = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(config)"
        hint = _flag_hint(flags, e["loc"])
        where = f"{hint} ({loc})" if hint else loc
        problems.append(f"{where}: {e['msg']}")
    prefix = f"{source}: " if source else ""
    return typer.BadParameter(prefix + "; ".join(problems))


def config_command(
    app: typer.Typer,
    name: str,
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    names: Mapping[str, Sequence[str]] | None = None,
    arguments: Iterable[str] = (),
    helps: Mapping[str, str] | None = None,
    config_flag: str | None = "--config",
    section: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
    prepare: Callable[[dict[str, Any]], Any] | None = None,
    flatten: Iterable[str] = (),
    group_callback: bool = False,
    config_argument: str | None = None,
    **command_kwargs: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the typer command ``name`` of ``app``, its config
    parameter replaced by the config's flags (see the module docstring).

    The function has exactly one parameter annotated with a pydantic model class (the
    config); it receives the validated config there. Its other parameters stay typer
    parameters as written. ``include``/``exclude``/``names``/``arguments``/``helps``/
    ``defaults``/``flatten`` are those of :func:`config_flags`; ``convert`` maps a field's
    path to a function applied to the value of its flag when typed (not to the file's
    value). ``config_flag`` names the file option (``None``: no file). ``prepare``, when given, turns the merged field mapping into the config instead
    of ``model_validate`` (a stage that fills defaults from other fields); it may raise
    ``ValidationError``. The function's docstring is the command's help. With
    ``group_callback``, ``app`` is a command group and the function its callback, run when
    no sub-command is given (``rlmdistill sft`` trains, ``rlmdistill sft merge`` merges);
    ``name`` is then only used in messages. ``config_argument`` (a help text) makes the
    file a required positional argument ``CONFIG`` instead of ``config_flag``
    (``rlmdistill rl rl.yaml``).

    Errors at run time: a bad file is a usage error on the file option, a field that does
    not validate a usage error naming its flag (both exit 2).
    """

    convert = dict(convert or {})

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        config_params = [
            p
            for p in sig.parameters.values()
            if isinstance(p.annotation, type) and issubclass(p.annotation, BaseModel)
        ]
        if len(config_params) != 1:
            raise TypeError(f"{fn.__name__}: needs exactly one config-class parameter")
        config_param = config_params[0]
        model: type[BaseModel] = config_param.annotation
        flags, file_only = config_flags(
            model,
            include=include,
            exclude=exclude,
            names=names,
            arguments=arguments,
            helps=helps,
            defaults=defaults,
            flatten=flatten,
        )
        command_defaults = {k: v for k, v in (defaults or {}).items() if v is not None}
        own = [p for p in sig.parameters.values() if p is not config_param]
        taken = {p.name for p in own}
        clash = [f.param for f in flags if f.param in taken]
        if clash:
            raise TypeError(f"{fn.__name__}: parameters {clash} clash with config flags")
        file_help = f"YAML/JSON/TOML file of {model.__name__} fields; flags typed override it."
        if file_only:
            file_help += f" Set in the file only: {', '.join(file_only)}."
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        positional = [p for p in own if _is_argument(p)]
        keyword = [p for p in own if not _is_argument(p)]
        extra: list[inspect.Parameter] = []
        file_param = "config_file_"
        if config_argument is not None:
            file_param = "config"
            if file_param in taken:
                raise TypeError(f"{fn.__name__}: 'config' is the file argument's name")
            positional.append(
                inspect.Parameter(
                    file_param,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=Annotated[
                        Path, typer.Argument(help=f"{config_argument} {file_help}")
                    ],
                )
            )
        elif config_flag is not None:
            extra.append(
                inspect.Parameter(
                    file_param,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=Annotated[Path | None, typer.Option(config_flag, help=file_help)],
                    default=None,
                )
            )
        ctx_param = inspect.Parameter(
            "ctx_", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context
        )
        arg_flags = [f for f in flags if f.argument]
        opt_flags = [f for f in flags if not f.argument]
        params = [
            *positional,
            *[_typer_parameter(f) for f in arg_flags],
            *[_typer_parameter(f) for f in opt_flags],
            *keyword,  # the command's own options after the config's, then --config
            *extra,
            ctx_param,
        ]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop("ctx_")
            if group_callback and ctx.invoked_subcommand is not None:
                return None  # a sub-command runs; the group's flags are not used
            file = kwargs.pop(file_param, None)
            overrides: dict[str, Any] = {}
            for f in flags:
                value = kwargs.pop(f.param)
                source = ctx.get_parameter_source(f.param)  # DEFAULT: not typed
                if (f.required and f.argument) or (source is not None and source.name != "DEFAULT"):
                    value = list(value) if isinstance(value, tuple) else value
                    overrides[f.path] = convert[f.path](value) if f.path in convert else value
            try:
                data = config_data(model, file, overrides, section=section)
                data = merge_overrides(
                    data,
                    {k: v for k, v in command_defaults.items() if not _has_path(data, k)},
                )
            except ConfigFileError as exc:
                raise typer.BadParameter(str(exc), param_hint=config_flag) from exc
            try:
                config = prepare(data) if prepare is not None else model.model_validate(data)
            except ValidationError as exc:
                raise _usage_error(exc, flags, str(file) if file else None) from exc
            return fn(**kwargs, **{config_param.name: config})

        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.config_model = model  # type: ignore[attr-defined]
        command.config_flags = flags  # type: ignore[attr-defined]
        del command.__wrapped__  # typer must read the new signature, not the function's
        if group_callback:
            app.callback(invoke_without_command=True, **command_kwargs)(command)
        else:
            app.command(name, **command_kwargs)(command)
        return command

    return decorate
