"""The experiment file of ``rlmdistill loop`` (one validated object; YAML or JSON).

An experiment names the rooms (built from CUAD with disjoint contracts, or given), the base
root and sub models, and the settings of every stage: training collection, grading, the
rejection-sampling rules, the export, SFT, and the held-out evaluation. Stage settings reuse
the stages' own config models (:class:`~rlmdistill.filter.rules.FilterRules`,
:class:`~rlmdistill.export.ExportOptions` fields, :class:`~rlmdistill.sft.config.SFTConfig`
fields), so every field keeps its one documented meaning. Relative paths are resolved against
the experiment file's folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlmdistill import cliconfig
from rlmdistill.filter.rules import FilterRules
from rlmdistill.loop.serving import ServingConfig
from rlmdistill.rooms.roomset import SizeSchedule

__all__ = [
    "DEFAULT_SUB_WHERE",
    "RL_ARMS",
    "CheckpointCheck",
    "CuadRooms",
    "ExperimentConfig",
    "ExperimentError",
    "LineageOptions",
    "LoopRunOptions",
    "TrainedModel",
    "TrainingArm",
    "check_stage_settings",
    "load_experiment",
    "merged",
]


class LoopRunOptions(BaseModel):
    """``rlmdistill loop``: which experiment file to run or resume, and how (the experiment
    itself, with its rooms, models and stages, is the file: :class:`ExperimentConfig`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    experiment: Path
    """Experiment file (YAML/JSON/TOML)."""
    rounds: int | None = Field(default=None, ge=1)
    """Rounds to run (default: the file's `rounds`)."""
    progress: bool = True
    """Show progress bars."""
    strict: bool = False
    """Stop on a room document whose text cannot be extracted (default: skip it and note it)."""
    seed: int = Field(default=0, ge=0)
    """Offset of every training and evaluation seed (collections and SFT), not of the rooms;
    runs in <workspace>-seed<N> (0: the file's seeds and workspace)."""


class LineageOptions(BaseModel):
    """``rlmdistill lineage``: the experiment workspace whose lineage to print."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    workspace: Path
    """Experiment workspace folder."""


class ExperimentError(ValueError):
    """The experiment file is unreadable or inconsistent (message names the file and field)."""


class CuadRooms(BaseModel):
    """Training and held-out rooms cut from one CUAD source with no contract in common.

    Room sizes: every room holds ``contracts_per_room`` contracts unless its side has a size
    list (``holdout_sizes: [1, 2, 3, 5, 8, 12]``: one room per entry, which sets
    ``holdout_rooms``) or a size schedule (``holdout_size_schedule: {min: 1, max: 12,
    spacing: log}`` over ``holdout_rooms`` rooms, sizes rounded half up, duplicates kept as
    replicates: :func:`~rlmdistill.rooms.roomset.scheduled_sizes`); the same for training
    rooms. Without either, the rooms drawn are exactly those drawn before sizes could vary.
    """

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(
        None,
        description="CUAD-format folder; default: ../shared/data/cuad beside the checkout when "
        "present, else the packaged 16-contract sample.",
    )
    contracts_per_room: int = Field(2, ge=1, description="Contracts (documents) per room.")
    train_rooms: int = Field(4, ge=1, description="Rooms whose episodes become training data.")
    holdout_rooms: int = Field(4, ge=1, description="Rooms kept for base-vs-tuned evaluation.")
    seed: int = Field(0, description="Seed of the contract sampling (room k uses seed + k).")
    train_sizes: list[int] | None = Field(
        None,
        min_length=1,
        description="Contracts of each training room (sets train_rooms); default: "
        "contracts_per_room each.",
    )
    holdout_sizes: list[int] | None = Field(
        None,
        min_length=1,
        description="Contracts of each held-out room (sets holdout_rooms), e.g. [1, 2, 3, 5, "
        "8, 12] for delegation against room size; default: contracts_per_room each.",
    )
    train_size_schedule: SizeSchedule | None = Field(
        None, description="Sizes of the train_rooms training rooms from min to max contracts."
    )
    holdout_size_schedule: SizeSchedule | None = Field(
        None,
        description="Sizes of the holdout_rooms held-out rooms from min to max contracts "
        "(spacing log or linear; rounded half up; duplicates kept).",
    )

    @model_validator(mode="after")
    def _one_size_rule_per_side(self) -> CuadRooms:
        for side in ("train", "holdout"):
            sizes = getattr(self, f"{side}_sizes")
            schedule = getattr(self, f"{side}_size_schedule")
            if sizes is not None and schedule is not None:
                raise ValueError(f"give {side}_sizes or {side}_size_schedule, not both")
            if sizes is not None:
                if any(n < 1 for n in sizes):
                    raise ValueError(f"{side}_sizes must all be >= 1 contract; got {sizes}")
                count = f"{side}_rooms"
                if count in self.model_fields_set and getattr(self, count) != len(sizes):
                    raise ValueError(
                        f"{count} = {getattr(self, count)} but {side}_sizes lists "
                        f"{len(sizes)} rooms; give one of them"
                    )
                setattr(self, count, len(sizes))
            if schedule is not None and schedule.min > schedule.max:
                raise ValueError(f"{side}_size_schedule: min {schedule.min} > max {schedule.max}")
        return self

    def sizes(self, side: Literal["train", "holdout"]) -> list[int]:
        """Contracts of each room of one side, in room order (``train-0``, ...)."""
        n = self.train_rooms if side == "train" else self.holdout_rooms
        given = self.train_sizes if side == "train" else self.holdout_sizes
        schedule = self.train_size_schedule if side == "train" else self.holdout_size_schedule
        if given is not None:
            return list(given)
        if schedule is not None:
            return schedule.sizes(n)
        return [self.contracts_per_room] * n

    def room_sizes(self) -> list[int]:
        """Contracts of every room, training rooms first (what the room-set builder draws,
        :func:`~rlmdistill.rooms.roomset.build_cuad_set`)."""
        return [*self.sizes("train"), *self.sizes("holdout")]

    def record(self) -> dict[str, Any]:
        """The section as written in ``rooms/split.json``: the size fields only when set, so
        a section without sizes is recorded as it was before they existed."""
        unset = {f for f in _SIZE_FIELDS if getattr(self, f) is None}
        return self.model_dump(mode="json", exclude=unset)


_SIZE_FIELDS = ("train_sizes", "holdout_sizes", "train_size_schedule", "holdout_size_schedule")


TrainingArm = Literal["sft", "grpo", "sft+grpo"]
"""How a tuned arm is trained from the base (:attr:`ExperimentConfig.arms`)."""

TrainedModel = Literal["root", "sub"]
"""Which model a round fine-tunes (:attr:`ExperimentConfig.train`)."""

DEFAULT_SUB_WHERE = ["not error", "used_in_memo"]
"""The sub-calls a round trains the sub on by default: answered, and the answer reached the
memo (:mod:`rlmdistill.traces.sub_credit`), in the episodes the filter keeps."""

RL_ARMS: tuple[TrainingArm, ...] = ("grpo", "sft+grpo")
"""The arms trained by online RL (``rlmdistill rl``)."""


class CheckpointCheck(BaseModel):
    """Choose each round's SFT checkpoint by behaviour on the training rooms
    (:mod:`rlmdistill.loop.checkpoints`): every checkpoint SFT kept collects ``episodes``
    episodes per training room with the held-out arms' settings (``collect_eval``, the plain
    prompt) and ``collect`` merged over them, graded by the experiment's grader."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(1, ge=1, description="Episodes per training room and checkpoint.")
    collect: dict[str, Any] = Field(
        default_factory=dict,
        description="CollectConfig fields merged over collect_eval's for the check runs "
        "(e.g. concurrency); rooms, root and sub are set by the loop.",
    )


class ExperimentConfig(BaseModel):
    """One self-distillation experiment (``examples/quickstart.yaml`` is a full example)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Experiment name (used in run ids).")
    workspace: Path = Field(
        description="Folder for everything the loop writes: rooms/, runs/, datasets/, "
        "adapters/, reports/, lineage.jsonl, experiment.json."
    )
    rooms: CuadRooms | None = Field(
        None,
        description="Build CUAD rooms (train / held-out); or give train_rooms and "
        "holdout_rooms as folders.",
    )
    train_rooms: list[Path] = Field(default_factory=list, description="Training room folders.")
    holdout_rooms: list[Path] = Field(default_factory=list, description="Held-out room folders.")
    base: str = Field(
        description="Base root model as a local spec (local:NAME or local:DIR): collected, "
        "fine-tuned and evaluated."
    )
    sub: str = Field(description="Sub-call model spec (fixed through the experiment).")
    train_root: str | None = Field(
        None,
        description="Root that collects round 1's training data (default: base). Set it to "
        "bootstrap from another model; later rounds always collect with the last tuned root.",
    )
    collect_train: dict[str, Any] = Field(
        default_factory=dict,
        description="CollectConfig fields for training collection (episodes, few_shot, prefill, "
        "sampling, limits, concurrency, seed, ...).",
    )
    collect_eval: dict[str, Any] = Field(
        default_factory=dict,
        description="CollectConfig fields for the held-out runs of both arms (same seeds for "
        "base and tuned).",
    )
    executor: Literal["thread", "ray"] | None = Field(
        None,
        description="Where every collect stage runs its episodes (CollectConfig.executor; a "
        "value in collect_train / collect_eval wins). Operational: episode ids do not change.",
    )
    ray: dict[str, Any] = Field(
        default_factory=dict,
        description="RayOptions fields (address, episodes_per_node, ...) for every collect "
        "stage with executor ray; a collect section's own ray fields win.",
    )
    grader: str = Field("reference", description="Grader for every run (reference).")
    filter: FilterRules = Field(
        default_factory=FilterRules, description="Rejection-sampling rules (FilterRules)."
    )
    export: dict[str, Any] = Field(
        default_factory=lambda: {"system_prompt": "plain"},
        description="ExportOptions fields; tokenizer defaults to the base model's.",
    )
    sft: dict[str, Any] = Field(
        default_factory=dict, description="SFTConfig fields (dataset, base and out are set)."
    )
    serving: ServingConfig | None = Field(
        None,
        description="Collect and evaluate through a vLLM server with LoRA instead of in "
        "process (GLM-class roots); base stays the local weights SFT trains on.",
    )
    depth_arms: list[Literal[2]] = Field(
        default_factory=list,
        description="Extra held-out arms at these depths ([2]): the base root "
        "(runs/eval-base-d2) and the last round's tuned root (runs/r<N>-eval-tuned-d2) on the "
        "same held-out rooms and seeds, with collect_eval's settings, collect_eval_d2's over "
        "them, and depth 2; the last round's report compares them too. The last round is "
        "`rounds` (or `loop --rounds N` when N is larger): a shorter --rounds runs none.",
    )
    collect_eval_d2: dict[str, Any] = Field(
        default_factory=dict,
        description="CollectConfig fields for the depth-2 arms, merged over collect_eval's "
        "(nested sections such as limits key by key), e.g. subagent_max_turns, "
        "subagent_prefill, limits: {max_sub_calls: ...}; depth is set by the loop.",
    )
    rounds: int = Field(1, ge=1, description="Rounds of collect -> filter -> SFT -> evaluate.")
    checkpoint_check: CheckpointCheck | None = Field(
        None,
        description="Choose the SFT checkpoint the tuned arm evaluates by a behaviour check on "
        "the training rooms (save one per epoch: sft.save_strategy epoch); None: the final "
        "adapter.",
    )
    arms: list[TrainingArm] = Field(
        default=["sft"],
        description="Training arms, each from the same base, each evaluated on the same "
        "held-out rooms and seeds: sft (rejection-sampling SFT, every round), grpo (online "
        "GRPO on the training rooms, rl's settings; trained in round 1), sft+grpo (GRPO "
        "starting from round 1's SFT root). sft is always one of them: its rounds drive the "
        "loop.",
    )
    rl: dict[str, Any] = Field(
        default_factory=dict,
        description="RLConfig fields of the grpo and sft+grpo arms (num_generations, "
        "rooms_per_step, max_steps, learning_rate, reward, collect, ...); rooms, out, base and "
        "sub are set by the loop.",
    )
    train: list[TrainedModel] = Field(
        default=["root"],
        description="Models each round fine-tunes from its training run: root (the root's "
        "kept episodes), and sub (the kept episodes' sub-calls, filter --target sub, SFT of "
        "the sub model). With sub, every round also evaluates base root + tuned sub "
        "(sub-r<r>) and tuned root + tuned sub (both-r<r>), at depth 2 too with depth_arms; "
        "later rounds collect with both tuned models. root is always one of them.",
    )
    sub_where: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SUB_WHERE),
        description="With train: [root, sub]: filter expressions over sub-call fields (error, "
        "used_in_memo, supports_pass, call_depth, ...) that choose the sub's training "
        "sub-calls among the episodes the filter rules keep.",
    )
    sft_sub: dict[str, Any] | None = Field(
        None,
        description="SFTConfig fields for the sub's adapter (None: the sft section's); "
        "dataset, base and out are set by the loop.",
    )
    check_greedy_change: bool = Field(
        True,
        description="After SFT, check that the adapter changes the root's greedy output on a "
        "held-out prompt (recorded in the report).",
    )

    @model_validator(mode="after")
    def _rooms_given_once(self) -> ExperimentConfig:
        if self.rooms is None and not (self.train_rooms and self.holdout_rooms):
            raise ValueError("give either rooms (CUAD builder) or train_rooms and holdout_rooms")
        if self.rooms is not None and (self.train_rooms or self.holdout_rooms):
            raise ValueError("give rooms (CUAD builder) or room folders, not both")
        if not self.base.startswith("local:"):
            raise ValueError(
                f"base must be a local spec (local:NAME or local:DIR) to be fine-tuned, "
                f"got {self.base!r}"
            )
        for key in ("rooms", "root", "sub"):
            for name, section in (
                ("collect_train", self.collect_train),
                ("collect_eval", self.collect_eval),
            ):
                if key in section:
                    raise ValueError(f"{name}.{key} is set by the loop; remove it")
        for key in ("rooms", "root", "sub", "depth"):
            if key in self.collect_eval_d2:
                raise ValueError(f"collect_eval_d2.{key} is set by the loop; remove it")
        if len(set(self.depth_arms)) != len(self.depth_arms):
            raise ValueError(f"depth_arms lists a depth twice: {self.depth_arms}")
        main_depth = self.collect_eval.get("depth", 1)
        if main_depth in self.depth_arms:
            raise ValueError(
                f"depth_arms {self.depth_arms} repeats collect_eval.depth = {main_depth} (the "
                "held-out arms' own depth); a depth arm adds another depth"
            )
        if self.checkpoint_check is not None:
            for key in ("rooms", "root", "sub", "episodes"):
                if key in self.checkpoint_check.collect:
                    raise ValueError(
                        f"checkpoint_check.collect.{key} is set by the loop; remove it"
                    )
        if "sft" not in self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(
                f"arms {self.arms}: list each arm once, sft among them (its rounds drive the loop)"
            )
        if "root" not in self.train or len(set(self.train)) != len(self.train):
            raise ValueError(
                f"train {self.train}: list each model once, root among them (its rounds drive "
                "the loop; for the sub alone read the sub-r<r> arm: base root, tuned sub)"
            )
        if "sub" in self.train and not self.sub.startswith("local:"):
            raise ValueError(
                f"train: [root, sub] fine-tunes the sub, so sub must be a local spec "
                f"(local:NAME or local:DIR), got {self.sub!r}"
            )
        if "sub" in self.train and self.serving is not None:
            raise ValueError("train: [root, sub] with serving: the tuned sub runs in process only")
        if self.sft_sub is not None and "sub" not in self.train:
            raise ValueError("sft_sub is set but train has no sub; add it: train: [root, sub]")
        for key in ("dataset", "base", "out"):
            if key in (self.sft_sub or {}):
                raise ValueError(f"sft_sub.{key} is set by the loop; remove it")
        rl_arms = [a for a in self.arms if a in RL_ARMS]
        if self.rl and not rl_arms:
            raise ValueError("rl is set but arms has no grpo or sft+grpo arm; add one")
        for key in ("rooms", "out", "base", "sub"):
            if key in self.rl:
                raise ValueError(f"rl.{key} is set by the loop; remove it")
        if rl_arms and self.serving is not None:
            raise ValueError(
                f"arms {rl_arms} with serving: the RL arms train and roll out in process only; "
                "remove serving or the RL arms"
            )
        if self.collect_eval_d2 and not self.depth_arms:
            raise ValueError("collect_eval_d2 is set but depth_arms is empty; add depth_arms: [2]")
        for key in ("dataset", "base", "out"):
            if key in self.sft:
                raise ValueError(f"sft.{key} is set by the loop; remove it")
        for name in ("collect_train", "collect_eval"):  # executor passthrough (operational)
            section = dict(getattr(self, name))
            if self.executor is not None:
                section.setdefault("executor", self.executor)
            if self.ray:
                section["ray"] = {**self.ray, **section.get("ray", {})}
            setattr(self, name, section)
        return self

    def eval_settings(self, depth: int | None = None) -> dict[str, Any]:
        """CollectConfig fields of a held-out arm: ``collect_eval``'s; for a depth arm
        (``depth`` in :attr:`depth_arms`) with :attr:`collect_eval_d2` merged over them
        (:func:`merged`) and ``depth`` set."""
        if depth is None or depth not in self.depth_arms:
            return dict(self.collect_eval)
        return {**merged(self.collect_eval, self.collect_eval_d2), "depth": depth}

    def sub_sft(self) -> dict[str, Any]:
        """SFTConfig fields of the sub's adapter: :attr:`sft_sub`, else :attr:`sft`'s."""
        return dict(self.sft if self.sft_sub is None else self.sft_sub)

    def sub_rules(self) -> FilterRules:
        """The filter rules of the sub's dataset: the experiment's episode rules, with
        :attr:`sub_where` judging each sub-call of the kept episodes."""
        return self.filter.model_copy(update={"where": list(self.sub_where)})

    def check_settings(self) -> dict[str, Any]:
        """CollectConfig fields of a checkpoint-check run: ``collect_eval``'s with
        :attr:`CheckpointCheck.collect` merged over them and its ``episodes``."""
        check = self.checkpoint_check or CheckpointCheck()
        return {**merged(self.collect_eval, check.collect), "episodes": check.episodes}

    def with_seed(self, seed: int) -> ExperimentConfig:
        """This experiment with every training and evaluation seed offset by ``seed``: the
        collections' (``collect_train``, ``collect_eval``, ``collect_eval_d2``, the checkpoint
        check's) and SFT's; the rooms' seed is not changed, so the rooms are the same. The
        workspace becomes ``<workspace>-seed<seed>`` (``seed`` 0: unchanged). Both arms keep
        the same evaluation seeds."""
        if seed == 0:
            return self

        def shifted(section: dict[str, Any]) -> dict[str, Any]:
            return {**section, "seed": int(section.get("seed", 0)) + seed}

        update: dict[str, Any] = {
            "collect_train": shifted(self.collect_train),
            "collect_eval": shifted(self.collect_eval),
            "sft": shifted(self.sft),
            **({"sft_sub": shifted(self.sft_sub)} if self.sft_sub is not None else {}),
            "workspace": self.workspace.with_name(f"{self.workspace.name}-seed{seed}"),
        }
        if self.collect_eval_d2 and "seed" in self.collect_eval_d2:
            update["collect_eval_d2"] = shifted(self.collect_eval_d2)
        if self.checkpoint_check is not None and "seed" in self.checkpoint_check.collect:
            collect = shifted(self.checkpoint_check.collect)
            update["checkpoint_check"] = self.checkpoint_check.model_copy(
                update={"collect": collect}
            )
        return self.model_copy(update=update)

    def base_root(self) -> str:
        """Root spec of the base model: the served base, or the local weights."""
        return self.serving.spec(self.serving.model) if self.serving else self.base

    def fingerprint(self, *parts: Any) -> str:
        """sha256 (16 hex) of JSON ``parts`` (stage settings), for up-to-date checks."""
        blob = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: a key whose values are mappings on both sides is merged
    the same way (``limits: {max_turns: 3}`` + ``limits: {max_sub_calls: 64}`` keeps both);
    any other value of ``over`` replaces ``base``'s. Neither input is changed."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def check_stage_settings(cfg: ExperimentConfig, source: Path | str = "experiment") -> None:
    """Validate every stage section with its stage's own config model now, so a typo in
    ``sft:`` fails before hours of collection. Raises :class:`ExperimentError` naming the
    file, the section and the field."""
    from pydantic import ValidationError

    from rlmdistill.collect.config import CollectConfig
    from rlmdistill.export import ExportOptions
    from rlmdistill.rl.config import RLConfig
    from rlmdistill.sft.config import SFTConfig

    n_train = cfg.rooms.train_rooms if cfg.rooms is not None else len(cfg.train_rooms)
    checks: list[tuple[str, Any]] = [
        ("collect_train", lambda: CollectConfig.model_validate(
            {**cfg.collect_train, "rooms": [], "root": cfg.base, "sub": cfg.sub})),
        ("collect_eval", lambda: CollectConfig.model_validate(
            {**cfg.collect_eval, "rooms": [], "root": cfg.base, "sub": cfg.sub})),
        *[(f"collect_eval_d{d}", lambda d=d: CollectConfig.model_validate(
            {**cfg.eval_settings(d), "rooms": [], "root": cfg.base, "sub": cfg.sub}))
          for d in cfg.depth_arms],
        *[("checkpoint_check.collect", lambda: CollectConfig.model_validate(
            {**cfg.check_settings(), "rooms": [], "root": cfg.base, "sub": cfg.sub}))
          for _ in ([cfg.checkpoint_check] if cfg.checkpoint_check is not None else [])],
        ("export", lambda: ExportOptions.model_validate({"tokenizer": "base", **cfg.export})),
        ("sft", lambda: SFTConfig.model_validate(
            {**cfg.sft, "dataset": "datasets/x", "base": cfg.base, "out": "adapters/x"})),
        *[("sft_sub", lambda: SFTConfig.model_validate(
            {**cfg.sub_sft(), "dataset": "datasets/x", "base": cfg.sub, "out": "adapters/x"}))
          for _ in ([1] if "sub" in cfg.train else [])],
        *[("rl", lambda: RLConfig.model_validate(
            {**cfg.rl, "rooms": [f"rooms/{i}" for i in range(n_train)], "out": "adapters/x",
             "base": cfg.base,
             "sub": cfg.sub}))
          for _ in ([1] if any(a in RL_ARMS for a in cfg.arms) else [])],
    ]  # fmt: skip
    for section, check in checks:
        try:
            check()
        except ValidationError as exc:
            problems = "; ".join(
                f"{section}.{'.'.join(str(p) for p in e['loc']) or '(section)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ExperimentError(f"{source}: invalid experiment: {problems}") from exc


def load_experiment(path: Path) -> ExperimentConfig:
    """Read and validate an experiment file; relative paths resolve against its folder.

    Read by :func:`rlmdistill.cliconfig.read_config_file` (YAML, JSON or TOML). Raises
    :class:`ExperimentError` naming the file (unreadable, not a mapping, an unknown key, or
    invalid fields with their locations).
    """
    path = Path(path)
    try:  # the one config-file reader; an unknown key is named with the file
        data = cliconfig.read_config_file(path)
        cliconfig.check_keys(ExperimentConfig, data, str(path))
    except cliconfig.ConfigFileError as exc:
        raise ExperimentError(str(exc)) from exc
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot read experiment file: {exc}") from exc
    base_dir = path.resolve().parent
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValueError as exc:
        raise ExperimentError(f"{path}: invalid experiment: {exc}") from exc

    def resolve(p: Path) -> Path:
        return p if p.is_absolute() else (base_dir / p).resolve()

    check_stage_settings(cfg, path)
    cfg.workspace = resolve(cfg.workspace)
    cfg.train_rooms = [resolve(p) for p in cfg.train_rooms]
    cfg.holdout_rooms = [resolve(p) for p in cfg.holdout_rooms]
    if cfg.rooms is not None and cfg.rooms.source is not None:
        cfg.rooms.source = str(resolve(Path(cfg.rooms.source)))
    return cfg
