"""Ray cluster options shared by every stage that can run its work on Ray: ``collect
--executor ray`` (episodes) and ``judge --executor ray`` (an LLM judge's requests).

Operational: none of these fields enters episode ids.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RayOptions"]


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
