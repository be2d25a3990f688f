"""The ``collect`` stage as a function: config from file + overrides, open clients, collect.

Used by ``rlmdistill collect``, ``rlmdistill quickstart`` and the self-distillation loop
(:mod:`rlmdistill.loop`), so none of them re-implements client set-up or resume checks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlmdistill.cliconfig import check_keys, read_config_file
from rlmdistill.collect.config import FINGERPRINT_VERSION, CollectConfig, episode_id, for_run
from rlmdistill.collect.executor import CollectResult, run_limits
from rlmdistill.collect.runner import finished_ids

__all__ = [
    "build_config",
    "check_finished",
    "limit_clients",
    "pending_episodes",
    "root_defaults",
    "run",
    "run_collect",
    "run_folder",
    "run_limits",
]


def root_defaults(root_spec: str) -> dict[str, Any]:
    """Recommended root settings (worked example, prefill) of an embedded model, else none.

    Source of the recommendation: the entry's measured ``notes`` in ``models/registry.py`` (0/20 usable first turns without the
    worked example for Qwen2.5-Coder-0.5B, 14/20 with it and a "```repl" prefill).
    """
    from rlmdistill.models.registry import EMBEDDED_MODELS
    from rlmdistill.models.spec import parse_spec

    spec = parse_spec(root_spec)
    entry = EMBEDDED_MODELS.get(spec.name) if spec.kind == "local" else None
    if entry is None:
        return {"few_shot": False, "prefill": None}
    return {"few_shot": entry.root_few_shot, "prefill": entry.root_prefill}


def build_config(file: Path | None, overrides: dict[str, Any]) -> CollectConfig:
    """CollectConfig from an optional YAML/JSON file, then overrides (``None`` = not given).

    Embedded-model root defaults fill ``few_shot``/``prefill`` when neither sets them; an empty
    prefill means none. Room paths are made absolute. A new run gets the current
    ``fingerprint_version`` (:data:`~rlmdistill.collect.config.FINGERPRINT_VERSION`) unless
    one is given; resuming a run takes the version its ``run.json`` records
    (:func:`~rlmdistill.collect.config.for_run`). Raises ``ValueError`` when the file is
    not a mapping or holds an unknown key (:class:`~rlmdistill.cliconfig.ConfigFileError`, a
    ``ValueError``, naming the file and the key) and ``pydantic.ValidationError`` naming the
    field.
    """
    data: dict[str, Any] = {}
    if file is not None:
        data = read_config_file(file)  # the one config-file reader (cliconfig)
        check_keys(CollectConfig, data, str(file))
    for key, value in overrides.items():
        if value is not None and value != []:
            data[key] = value
    if "root" in data:
        for key, value in root_defaults(str(data["root"])).items():
            data.setdefault(key, value)
    if data.get("prefill") == "":
        data["prefill"] = None
    data["rooms"] = [str(Path(p).resolve()) for p in data.get("rooms", [])]
    data.setdefault("fingerprint_version", FINGERPRINT_VERSION)
    return CollectConfig.model_validate(data)


def _timeout_options(config: CollectConfig, spec: str) -> dict[str, float]:
    """``{"timeout_s": config.request_timeout_s}`` for an ``openai:`` spec when it is set."""
    if config.request_timeout_s is None or not spec.strip().startswith("openai:"):
        return {}
    return {"timeout_s": config.request_timeout_s}


def limit_clients(
    config: CollectConfig, root: Any, sub: Any, limits: Any = None
) -> tuple[Any, Any]:
    """Wrap the run's clients in one shared spend cap / request rate: ``limits`` (a
    ``RunLimits``; default :func:`run_limits` of ``config``)."""
    from rlmdistill.models.limits import LimitedClient

    if limits is None:
        limits = run_limits(config)
    limited_root = LimitedClient(root, limits)
    limited_sub = limited_root if sub is root else LimitedClient(sub, limits)
    return limited_root, limited_sub


def pending_episodes(config: CollectConfig, run_dir: Path | None = None) -> int:
    """Episodes of ``config`` not yet in ``run_dir/episodes.jsonl`` (0 = the run is complete;
    ``run_dir`` defaults to ``config.out``, :func:`run_folder`).

    Loads the rooms (to hash them) but no model, so callers can skip a finished stage cheaply.
    Ids are those of the run as recorded (:func:`~rlmdistill.collect.config.for_run`).
    """
    from rlmdistill.rooms import DataRoom

    run_dir = Path(run_dir) if run_dir is not None else run_folder(config)
    config = for_run(config, run_dir)
    done = finished_ids(run_dir)
    n = 0
    for path in config.rooms:
        room = DataRoom.load(path)
        task_id = room.task.id if room.task is not None else ""
        n += sum(
            episode_id(config, room.room_hash, task_id, k) not in done
            for k in range(config.episodes)
        )
    return n


def run(
    config: CollectConfig,
    out: Path | None = None,
    progress: bool = True,
    open_specs: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
    log: Callable[[str], None] | None = None,
) -> CollectResult:
    """The collect stage: check the servers, open the root/sub clients, collect every pending
    episode of ``config`` into its run folder ``config.out``, close.

    ``out`` is the older call form (the folder beside the config), deprecated: when given it
    replaces ``config.out`` and a ``DeprecationWarning`` says so; new callers set
    ``config.out`` and pass the switches by keyword. The form keeps working.

    ``config.executor`` is resolved once to an :class:`~rlmdistill.collect.executor.Executor`
    (:func:`~rlmdistill.collect.runner.executor_for`), whose ``check`` runs first, before
    the rooms load and before any model request or file write: the local sandbox for ``thread``; for ``ray`` the extra (without Ray
    installed :class:`~rlmdistill.cluster.ray_cluster.RayUnavailable`, a ``ValueError`` naming
    the extra) and the cluster address (:class:`~rlmdistill.cluster.ray_cluster.
    RayClusterUnreachable`, a ``ValueError``: exit 2); the nodes check their own sandboxes.

    ``config.servers`` adds replicas to the root/sub specs whose URL it lists
    (:func:`rlmdistill.models.spec.with_servers`). Every ``openai:`` server (each replica)
    is checked first (:func:`rlmdistill.models.preflight.preflight`),
    so nothing, not even ``run.json``, is written when one is down or lacks the model; then
    one tiny request per role with the run's sampling settings and prefill
    (:func:`rlmdistill.models.preflight.probe_sampling`) stops the run, again before anything
    is written, when a server refuses them (HTTP 400 "Unsupported parameter"). The
    result says which episodes the infrastructure left unfinished (:func:`check_finished`).

    Operational switches, none of them part of the run: ``progress`` shows a bar;
    ``open_specs`` maps a spec as recorded in ``config`` to the spec to open, when the two
    differ (the loop records an adapter's path relative to its workspace and opens it by its
    absolute path); other specs are opened as recorded. ``strict`` makes a document whose
    text cannot be extracted an error instead of a skipped document; ``log`` receives each
    room's :meth:`~rlmdistill.rooms.DataRoom.notes` (documents not UTF-8, decoded with
    replacement characters, or skipped), prefixed with the room.

    Raises ``ValueError`` when ``config.out`` is not set;
    :class:`~rlmdistill.models.preflight.ServerUnavailableError` (a ``ValueError``;
    :class:`~rlmdistill.models.preflight.SamplingRefusedError` for refused settings),
    ``ValueError`` for a room without a task (before any model loads) and whatever
    :func:`rlmdistill.collect.runner.collect` raises (``RunConfigMismatch`` for a run folder
    made with another config).
    """
    from rlmdistill.collect.runner import collect, executor_for
    from rlmdistill.models.preflight import preflight, probe_sampling
    from rlmdistill.models.reasoning import token_id_options
    from rlmdistill.models.spec import close_all, get_client, parse_spec, with_servers
    from rlmdistill.provenance import prefetch
    from rlmdistill.rooms import DataRoom

    if out is not None:
        warnings.warn(
            "collect.main.run(config, out): set config.out instead (the out argument is "
            "deprecated; it still replaces config.out)",
            DeprecationWarning,
            stacklevel=2,
        )
        config = config.model_copy(update={"out": str(out)})
    out = run_folder(config)
    executor = executor_for(config)  # the one place the config's executor name is read
    executor.check(config)  # before any write or model request: sandbox, or Ray and cluster
    prefetch()  # run.json's provenance, found while rooms load and servers are checked
    rooms = [DataRoom.load(p, strict=strict) for p in config.rooms]  # before a model loads
    for r in rooms:
        for line in r.notes():
            if log is not None:
                log(f"room {r.room_id}: {line}")
        if r.task is None:
            raise ValueError(f"room {r.path} has no task.json; episodes need a task")
    parse_spec(config.sub)
    opened = dict(open_specs or {})
    # the servers: list adds replicas to the specs it names (operational, out of episode ids)
    root_spec = with_servers(opened.get(config.root, config.root), config.servers)
    sub_spec = with_servers(opened.get(config.sub, config.sub), config.servers)
    preflight({"--root": root_spec, "--sub": sub_spec})  # every replica of each
    probe_sampling(  # a server refusing the run's sampling settings stops it before run.json
        {
            "--root": (root_spec, config.root_sampling, config.prefill),
            "--sub": (
                sub_spec,
                config.sub_sampling,
                config.subagent_prefill if config.depth == 2 else None,
            ),
        },
        timeout_s=min(10.0, config.request_timeout_s or 10.0),
    )
    root = get_client(
        root_spec,
        **token_id_options(config.root, config.token_ids != "off"),
        **_timeout_options(config, config.root),
    )
    sub = get_client(
        sub_spec,
        **token_id_options(config.sub, config.token_ids == "all"),
        **_timeout_options(config, config.sub),
    )
    if config.max_usd is not None or config.requests_per_minute is not None:
        root, sub = limit_clients(config, root, sub)
    try:
        return collect(
            config,
            out,
            root,
            sub,
            progress=progress,
            rooms=rooms,
            open_specs=opened,
            executor=executor,
        )
    finally:
        close_all()


def check_finished(result: CollectResult) -> None:
    """Raise :class:`~rlmdistill.collect.attempts.UnfinishedEpisodes` when the serving
    infrastructure left episodes of ``result`` unfinished (cut short or not started)."""
    from rlmdistill.collect.attempts import UnfinishedEpisodes

    if result.unfinished or result.not_started:
        raise UnfinishedEpisodes(result.run_dir, result.failed_attempts, result.not_started)


def run_folder(config: CollectConfig) -> Path:
    """``config.out`` as a path. Raises ``ValueError`` naming the field when it is not set."""
    if not config.out:
        raise ValueError(
            "CollectConfig.out is not set: give the run folder (--out runs/NAME, or out: in "
            "the config file)"
        )
    return Path(config.out)


run_collect = run
"""The collect stage under its earlier name."""
