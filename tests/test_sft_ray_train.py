"""``rlmdistill sft --workers N`` (Ray Train ``TorchTrainer``, gloo) on a real two-node Ray
cluster on this machine (loopback only; ``ray.cluster_utils.Cluster`` as in
``tests/test_ray_collect.py``), with the tiny random Llama and the real SmolLM2 tokenizer of
``tests/test_sft.py``. Shown here:

- 2 workers (one per node) train: loss logged per step by rank 0 only, adapter and ``sft.json``
  written (world size 2, gloo), both ranks end with the same weights, and the loss curve and the
  held-out eval losses are those of a 1-worker Ray Train run with the same global batch (every
  row different, so a rank whose gradients were not averaged would drift off both);
- a worker killed (SIGKILL) mid-run: Ray Train restarts both workers from the last checkpoint
  and the run finishes; the train log says where it resumed, its steps are 1..N once each, and
  the tokens count continues.

The cluster tests are ``slow`` and need the ``ray`` extra; skipped without it unless
``RLMDISTILL_REQUIRE_RAY=1`` (CI). The config tests at the top need neither.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sft import SYSTEM, fast_config, render_row, write_dataset

from rlmdistill.sft.config import RAY_FIELDS, SFTConfig
from rlmdistill.sft.ray_train import KILL_HOOK_ENV, RESULT_FILE, train_ray
from rlmdistill.sft.train import SFTError, SFTManifest, SFTResult, train
from rlmdistill.traces.artefacts import read_train_log

# read by Ray when it is imported: every Ray address of this process and of the nodes it starts
# is loopback (without it Ray binds the machine's external interface)
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
try:
    import ray
    import ray.train
    from ray.cluster_utils import Cluster
except ImportError:  # pragma: no cover - depends on the extra
    if os.environ.get("RLMDISTILL_REQUIRE_RAY") == "1":
        raise
    ray = None

needs_ray = pytest.mark.skipif(
    ray is None, reason="needs the ray extra: pip install 'rlmdistill[ray]'"
)
REQUIRED = {"dataset": "datasets/d", "base": "smollm2-135m", "out": "adapters/a"}

OBJECT_STORE = 80 * 1024 * 1024  # bytes per node: the machine is shared, keep Ray small
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every Ray address stays on loopback
    "RAY_USAGE_STATS_ENABLED": "0",
    "GLOO_SOCKET_IFNAME": "lo",  # gloo between the workers over loopback
    "OMP_NUM_THREADS": "1",
}
# 2 workers vs 1 at the same global batch: the same maths in another summation order (a
# half-batch forward each, gloo's all-reduce of the gradients). Before any update the losses
# differ by float rounding only: measured 1.8e-7 relative on a 2-core Intel Xeon (AMX), 1.9e-5
# on the CI machine (10.51820 vs 10.51800). Adam's per-coordinate normalisation then amplifies
# those differences step by step: 3.4e-4 on the eval loss after training (10.50035 vs 10.49680,
# the Xeon, 2026-12-06). A rank that trains alone is caught by the test's equal-weights check
# (rank_weights_sha256), a wrong share of the data by the per-epoch token counts; these bounds
# are about the same maths.
LOSS_RTOL = 2e-4
"""Losses before any update (the first step's training loss, the eval loss at step 0)."""
DRIFT_RTOL = 2e-3
"""Losses after updates (Adam's amplified rounding; one step moves the loss ~5e-3 here)."""
"""Loss curves of 2 workers x batch 1 and 1 worker x batch 2 agree to this relative tolerance.

Both compute the same thing: the same LoRA init (seed), the same sampler order (data_seed),
and transformers' ``average_tokens_across_devices`` divides each rank's token-loss sum by the
tokens of the global batch, so the DDP-averaged gradient is the one-process gradient. What
differs is float32 summation order (per-rank sums, then gloo's all-reduce, against one padded
batch), about 1e-7 relative (measured on this machine over the 6 steps: at most 1.8e-7, the
last bits of a float32); 1e-5 leaves room for Adam to grow it over the steps, while any real
difference in the batch (a row seen twice or missed, per-rank rather than global token
averaging) moves the loss by more than 1e-3."""


# ------------------------------------------------------------- config (fast, no Ray)
def test_ray_fields_leave_a_single_process_config_as_it_was() -> None:
    """At their defaults the Ray fields are not in a dump: sft.json's config and the loop's
    adapter fingerprint (a dump of the config) of a single-process run are what they were."""
    cfg = SFTConfig(**REQUIRED)  # type: ignore[arg-type]
    dumped = cfg.model_dump(mode="json")
    assert not set(RAY_FIELDS) & set(dumped)
    assert len(dumped) == len(SFTConfig.model_fields) - len(RAY_FIELDS) == 29
    assert not cfg.uses_ray
    old = SFTConfig.model_validate(dumped)  # an old sft.json's config loads, workers 1
    assert (old.workers, old.ray_address, old.gpus_per_worker, old.max_failures) == (1, None, 0, 2)
    two = SFTConfig(**REQUIRED, workers=2)  # type: ignore[arg-type]
    assert two.uses_ray and two.model_dump(mode="json")["workers"] == 2
    assert "ray_address" not in two.model_dump(mode="json")  # only the fields set
    assert SFTConfig.model_validate(two.model_dump(mode="json")) == two
    one_on_ray = SFTConfig(**REQUIRED, ray_address="127.0.0.1:6379")  # type: ignore[arg-type]
    assert one_on_ray.uses_ray and one_on_ray.workers == 1


def test_occupied_output_folder_is_refused_before_ray_starts(tmp_path: Path) -> None:
    out = tmp_path / "a"
    out.mkdir()
    (out / "sft.json").write_text("{}")
    cfg = SFTConfig(dataset=tmp_path / "d", base="smollm2-135m", out=out, workers=2)
    with pytest.raises(SFTError, match="already holds an SFT run"):
        train_ray(cfg)
    with pytest.raises(SFTError, match="no checkpoint"):
        train_ray(cfg, resume=True)


def test_newest_whole_checkpoint_is_the_one_resumed_when_ray_has_none(tmp_path: Path) -> None:
    """A checkpoint folder without trainer_state.json was cut off mid-save: skipped."""
    from rlmdistill.sft.ray_train import newest_checkpoint

    assert newest_checkpoint(tmp_path / "none") is None
    for step, whole in ((2, True), (10, True), (12, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if whole:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert newest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # 10 > 2 as numbers


@needs_ray
def test_a_workers_own_refusal_comes_back_as_itself() -> None:
    """A worker's SFTError/DatasetError/FileNotFoundError is raised as is (exit 2 in the CLI),
    from inside Ray's task error; a crash is not a user error."""
    from ray.exceptions import RayTaskError

    from rlmdistill.sft.ray_train import _user_error

    refusal = SFTError("target_modules ['nope'] are not linear layers of this model")
    wrapped = RayTaskError("train_fn", "traceback", refusal)
    group = ray.train.WorkerGroupError("Training failed", {0: wrapped, 1: RuntimeError("gloo")})
    assert _user_error(group) is refusal
    crash = ray.train.WorkerGroupError("Training failed", {1: RuntimeError("worker died")})
    assert _user_error(crash) is None


# ----------------------------------------------------- a two-node cluster (slow, Ray)
@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Set environment variables for the processes a node starts now (they inherit them)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and a second node, 1 CPU each (one Ray Train worker per node), loopback only."""
    assert ray is not None
    with _env(**RAY_ENV):
        c = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "object_store_memory": OBJECT_STORE,
                "include_dashboard": False,
            },
        )
        c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        c.wait_for_nodes()
        ray.init(address=c.address)
        try:
            nodes = [n for n in ray.nodes() if n["Alive"]]
            assert len(nodes) == 2
            assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}  # loopback only
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


CLAUSES = ["assignment", "termination", "indemnity", "exclusivity", "governing law", "audit"]


def conversation(i: int) -> list[dict[str, str]]:
    """Episode ``i``'s root turns: a task and one or two REPL turns, each episode different."""
    clause = CLAUSES[i]
    conv = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Find the {clause} clause in the room."},
        {"role": "assistant", "content": f"```repl\nhits = search({clause!r})\nprint(hits)\n```"},
    ]
    if i % 2 == 0:
        conv += [
            {"role": "user", "content": f"['contracts/c{i}.txt:{100 + i}']"},
            {"role": "assistant", "content": f"```repl\nFINAL('{clause}: see c{i}.txt')\n```"},
        ]
    return conv


@pytest.fixture(scope="module")
def dataset6(tmp_path_factory: pytest.TempPathFactory, smollm2_tokenizer: Any) -> Path:
    """6 episodes, each different; ``eval_fraction`` 1/3 holds 2 out (so the eval loss is
    measured before training, which once kept DDP from wrapping the model) and leaves 4
    training rows: a global batch of 2 makes 2 steps per epoch, each rank a different row."""
    rows = [render_row(smollm2_tokenizer, conversation(i), episode_id=f"ep{i}") for i in range(6)]
    return write_dataset(tmp_path_factory.mktemp("ds") / "six", smollm2_tokenizer, rows)


def _config(dataset: Path, base: Path, out: Path, **kw: Any) -> SFTConfig:
    fields: dict[str, Any] = {
        "max_steps": 6, "save_steps": 2, "save_total_limit": 2, "eval_fraction": 1 / 3, **kw,
    }  # fmt: skip
    return fast_config(dataset, base, out, **fields)


def _losses(out: Path) -> list[tuple[int, float]]:
    return [(r.step, r.loss) for r in read_train_log(out).records]


@pytest.fixture(scope="module")
def two_workers(
    cluster: Any, tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path, dataset6: Path
) -> SFTResult:
    """2 workers x batch 1, 6 steps, a checkpoint every 2 steps."""
    out = tmp_path_factory.mktemp("ray") / "two"
    return train_ray(
        _config(dataset6, tiny_llama_dir, out, workers=2, per_device_train_batch_size=1)
    )


@pytest.mark.slow
@needs_ray
def test_two_workers_train_like_one_with_the_same_global_batch(
    cluster: Any, two_workers: SFTResult, tmp_path: Path, tiny_llama_dir: Path, dataset6: Path
) -> None:
    import typer
    from typer.testing import CliRunner

    from rlmdistill.sft.cli import register

    two = two_workers
    # 1 worker x batch 2 under Ray Train, through the command: `sft --config F --ray-address A`
    file = tmp_path / "one.json"
    cfg = _config(dataset6, tiny_llama_dir, tmp_path / "one", per_device_train_batch_size=2)
    file.write_text(cfg.model_dump_json())
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["sft", "--config", str(file), "--ray-address", cluster.address])
    assert res.exit_code == 0, res.output
    assert "sft: 6 steps on 4 examples" in res.output
    manifest = SFTManifest.model_validate_json((tmp_path / "one" / "sft.json").read_text())
    assert manifest.config["ray_address"] == cluster.address  # recorded as given
    one_digests = json.loads((tmp_path / "one" / "checkpoints" / RESULT_FILE).read_text())
    assert len(one_digests["rank_weights_sha256"]) == 1
    assert isinstance(two, SFTResult) and two.global_step == 6
    # both ranks hold the same adapter at the end (DDP)
    assert len(two.rank_weights_sha256) == 2 and len(set(two.rank_weights_sha256)) == 1
    # loss logged at every step, by rank 0 alone (one line per step)
    log2, log1 = _losses(two.out_dir), _losses(tmp_path / "one")
    assert [s for s, _ in log2] == [1, 2, 3, 4, 5, 6] == [s for s, _ in log1]
    for (step, a), (_, b) in zip(log2, log1, strict=True):
        assert a == pytest.approx(b, rel=LOSS_RTOL if step == 1 else DRIFT_RTOL)
    assert log2[-1][1] < log2[0][1] - 0.3  # it learns
    assert two.first_loss == pytest.approx(log2[0][1]) and two.final_loss == pytest.approx(
        log2[-1][1]
    )
    # tokens, summed over both ranks: all 4 rows once per epoch (2 steps)
    assert _epoch_end_tokens(two.out_dir) == _epoch_end_tokens(tmp_path / "one")
    assert _epoch_end_tokens(two.out_dir) == [_per_epoch(two.out_dir) * e for e in (1, 2, 3)]
    # the eval loss before training and at each epoch end (2 held-out episodes, 1 per rank)
    evals2 = SFTManifest.model_validate_json((two.out_dir / "sft.json").read_text()).eval_losses
    evals1 = SFTManifest.model_validate_json((tmp_path / "one" / "sft.json").read_text())
    assert [r.step for r in evals2] == [0, 2, 4, 6] == [r.step for r in evals1.eval_losses]
    for a2, a1 in zip(evals2, evals1.eval_losses, strict=True):
        assert a2.loss == pytest.approx(a1.loss, rel=LOSS_RTOL if a2.step == 0 else DRIFT_RTOL)
    # the adapter and manifest of a single-process run, world size 2 over gloo
    for out, world, backend in ((two.out_dir, 2, "gloo"), (tmp_path / "one", 1, None)):
        assert (out / "adapter_model.safetensors").is_file()
        manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
        assert (manifest.status, manifest.global_step) == ("completed", 6)
        assert (manifest.world_size, manifest.backend, manifest.device) == (world, backend, "cpu")
        assert manifest.resumed_from == []
        assert SFTConfig.model_validate(manifest.config).workers == (2 if world == 2 else 1)
        # checkpoints through Ray Train into OUT/checkpoints; Ray keeps the newest
        # save_total_limit (2) of checkpoint-2, -4, -6, as the Trainer alone does
        names = sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))
        assert names == ["checkpoint-4", "checkpoint-6"]
    # the 1-worker Ray run is the in-process run (same process layout: one batch of 2)
    plain = train(
        _config(dataset6, tiny_llama_dir, tmp_path / "plain", per_device_train_batch_size=2),
        progress=False,
    )
    assert plain.global_step == 6
    assert sorted(p.name for p in (tmp_path / "plain" / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-4",
        "checkpoint-6",
    ]
    for (step, a), (_, b) in zip(_losses(tmp_path / "plain"), log1, strict=True):
        # the Ray worker runs with OMP_NUM_THREADS=1 (RAY_ENV), this process with torch's
        # default threads: another reduction order; 6.7e-6 relative after updates measured
        # on the Xeon (2026-12-06), over the 1e-6 this bound was
        assert a == pytest.approx(b, rel=LOSS_RTOL if step == 1 else DRIFT_RTOL)


def _per_epoch(out: Path) -> int:
    """Input tokens of the 4 training rows of ``dataset6`` (the 2 held-out episodes' rows
    left out), counted from the dataset's rows."""
    import datasets

    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert len(manifest.eval_episodes) == 2
    ds = datasets.load_from_disk(manifest.dataset_path)
    return sum(
        len(r["input_ids"]) for r in ds if r["episode_id"] not in set(manifest.eval_episodes)
    )


def _epoch_end_tokens(out: Path) -> list[int]:
    """``tokens_seen`` at steps 2, 4, 6 (epoch ends: which rows a step takes is shuffled)."""
    return [int(r.tokens_seen or 0) for r in read_train_log(out).records if r.step % 2 == 0]


@pytest.mark.slow
@needs_ray
def test_killed_worker_restarts_from_the_last_checkpoint(
    cluster: Any, two_workers: SFTResult, tmp_path: Path, tiny_llama_dir: Path, dataset6: Path
) -> None:
    out = tmp_path / "killed"
    marker = tmp_path / "killed-once"
    # rank 1 dies (SIGKILL) at the end of step 3; the last checkpoint is step 2
    with _env(**{KILL_HOOK_ENV: f"1:3:{marker}"}):
        result = train_ray(
            _config(dataset6, tiny_llama_dir, out, workers=2, per_device_train_batch_size=1)
        )
    assert marker.is_file()  # the worker was killed
    # resumed from checkpoint-2: Ray Train's latest, or (when rank 0's report of it had not
    # reached Ray Train's controller before the kill, seen at load average 17) the newest on disk
    assert result.global_step == 6
    assert result.resumed_from is not None and Path(result.resumed_from).name == "checkpoint-2"
    assert len(set(result.rank_weights_sha256)) == 1 and len(result.rank_weights_sha256) == 2
    log = read_train_log(out)
    assert [r.step for r in log.records] == [1, 2, 3, 4, 5, 6]  # no step lost or counted twice
    # steps 3-6 redone from checkpoint-2 are the uninterrupted run's steps
    for a, b in zip(log.records, read_train_log(two_workers.out_dir).records, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=DRIFT_RTOL)
    marks = [row.get("resumed_from_step") for row in log.rows]
    assert marks == [None, None, 2, None, None, None]  # the restart, where it happened
    assert _epoch_end_tokens(out) == [_per_epoch(out) * e for e in (1, 2, 3)]
    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert (manifest.status, manifest.global_step, manifest.world_size) == ("completed", 6, 2)
    assert [Path(p).name for p in manifest.resumed_from] == ["checkpoint-2"]
    assert (out / "adapter_model.safetensors").is_file()


@pytest.mark.slow
@needs_ray
def test_resume_continues_a_finished_ray_run(
    cluster: Any, tmp_path: Path, tiny_llama_dir: Path, dataset6: Path
) -> None:
    """`--resume` with more steps: Ray Train finds its run folder (OUT/checkpoints) and hands
    the workers its latest checkpoint; the steps continue from there."""
    out = tmp_path / "resumed"
    cfg = _config(dataset6, tiny_llama_dir, out, workers=2, per_device_train_batch_size=1)
    first = train_ray(cfg.model_copy(update={"max_steps": 2}))
    assert first.global_step == 2
    with pytest.raises(SFTError, match="already holds an SFT run"):
        train_ray(cfg)
    second = train_ray(cfg.model_copy(update={"max_steps": 4}), resume=True)
    assert second.global_step == 4
    assert second.resumed_from is not None and Path(second.resumed_from).name == "checkpoint-2"
    log = read_train_log(out)
    assert [r.step for r in log.records] == [1, 2, 3, 4]
    assert [row.get("resumed_from_step") for row in log.rows] == [None, None, 2, None]
    manifest = SFTManifest.model_validate_json((out / "sft.json").read_text())
    assert (manifest.status, manifest.global_step) == ("completed", 4)
    assert [Path(p).name for p in manifest.resumed_from] == ["checkpoint-2"]
