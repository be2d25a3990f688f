"""Ray cluster options shared by every stage that can run its work on Ray: ``collect
--executor ray`` (episodes) and ``judge --executor ray`` (an LLM judge's requests); and the
fields of training in Ray Train workers (``sft``/``rl --workers N``, :func:`workers_fields`).

Operational: none of these fields enters episode ids.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RAY_FIELDS", "RayOptions", "workers_fields"]

RAY_FIELDS = ("workers", "ray_address", "gpus_per_worker", "max_failures")
"""The config fields that decide training under Ray Train; a config leaves them out of its
dump while at their defaults (so a single-process config dumps as before they existed)."""


class RayOptions(BaseModel):
    """Where and how episodes run with ``executor: ray`` (:mod:`rlmdistill.collect.ray_executor`;
    ``judge --executor ray`` uses the address and node selection, :mod:`rlmdistill.judge.spread`).

    Operational: none of these fields enters episode ids.
    """

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None,
        description="Ray cluster to join: 'auto', 'HOST:6379' or 'ray://HOST:10001'; None: "
        "$RAY_ADDRESS if set, else a Ray started on this machine for the run.",
    )
    episodes_per_node: int = Field(
        4, ge=1, description="Episodes one node runs at once (its cap), unless slots_resource."
    )
    slots_resource: str | None = Field(
        None,
        description="Custom Ray resource whose amount on a node is that node's cap, e.g. "
        "'rlm_episodes' with `ray start --resources '{\"rlm_episodes\": 16}'`; nodes "
        "without it run no episodes.",
    )
    node_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom resources a node must have to run episodes (e.g. {'collector': 1}).",
    )
    rooms: Literal["object_store", "shared_fs"] = Field(
        "object_store",
        description="How a node gets a room: 'object_store' ships its texts once per node "
        "through Ray's object store; 'shared_fs' loads the room folder at its recorded path "
        "(a filesystem all nodes mount). Either way the node checks the room hash.",
    )
    max_reschedules: int = Field(
        3,
        ge=0,
        description="Times one episode is rerun on another node after the node running it "
        "died; beyond that it is left unfinished for the next run.",
    )


def workers_fields(batch: str) -> dict[str, Any]:
    """The pydantic ``Field`` of each of :data:`RAY_FIELDS` (name -> field), for a stage
    config to declare as ``workers: int = fields["workers"]``. ``batch``: what one worker's
    batch is, in the stage's terms (it ends the ``workers`` description)."""
    return {
        "workers": Field(
            1,
            ge=1,
            description="Training processes. 1 = train in this process (or per process under "
            "accelerate launch); N > 1 = N Ray Train workers (TorchTrainer, DDP over gloo on "
            f"CPU, nccl on GPUs), {batch} out must be a folder every node sees (shared "
            "filesystem).",
        ),
        "ray_address": Field(
            None,
            description="Ray cluster for the workers: 'auto', 'HOST:6379' or 'ray://HOST:10001'. "
            "None: $RAY_ADDRESS if set, else a Ray started on this machine for the run. Given "
            "with workers 1, the one worker runs under Ray Train too.",
        ),
        "gpus_per_worker": Field(
            0.0,
            ge=0.0,
            description="GPUs each Ray Train worker claims; > 0 trains on GPUs with nccl, 0 on "
            "CPUs with gloo. Used only when training under Ray (workers > 1 or ray_address).",
        ),
        "max_failures": Field(
            2,
            ge=0,
            description="Times Ray Train restarts the workers from the last checkpoint after a "
            "worker or node died (FailureConfig.max_failures); 0 = fail at once. Used only when "
            "training under Ray.",
        ),
    }
