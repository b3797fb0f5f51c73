"""``run.json``'s ``mesh``: the device mesh of a run over several process groups, as a
variant builds it (``fsdp_tp``) and the manifest records it. No torch."""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..core.limits import MAX_RANKS, Rank


class MeshGroup(msgspec.Struct, kw_only=True):
    """One process group of a mesh dimension: the ranks whose collectives along that dimension
    run together."""

    name: str                           # the dimension and the group's index: "dp0", "tp1"
    ranks: list[Rank]                   # global ranks, in the group's own rank order
    #: c10d's name of the group: a trace's ``distributedInfo.pg_config[].pg_name``, and the
    #: "Process Group Name" of an NCCL trace's ``record_param_comms``.
    pg_name: str | None = None
    #: c10d's description of the group ("mesh_dp"): ``pg_config[].pg_desc``, NCCL's
    #: "Process Group Description".
    pg_desc: str | None = None


class MeshDim(msgspec.Struct, kw_only=True):
    """One dimension of a device mesh: its name, size, process groups and collectives."""

    name: str                           # "dp", "tp"
    size: Annotated[int, msgspec.Meta(ge=1, le=MAX_RANKS)]  # ranks in each of its groups
    groups: list[MeshGroup]             # ordered by index: "dp0", "dp1", ...
    #: The ``record_function`` span that encloses every collective the training thread issues
    #: along this dimension in a ddpprof trace ("ddpprof::group tp"); None where there is none.
    span: str | None = None
    #: Collectives each rank issues along this dimension per optimizer step, by kind (the last
    #: step's, all micro-steps); the run's ``measured.collectives_per_sync`` is their sum.
    collectives_per_step: dict[str, int | None] | None = None


class MeshRecord(msgspec.Struct, kw_only=True):
    """``run.json``'s ``mesh``: the device mesh of a run over several process groups
    (``fsdp_tp``'s data-parallel × tensor-parallel mesh); absent for one group."""

    dims: list[MeshDim]                 # outermost first, as the mesh is shaped
    #: The mesh's ranks, row-major: the rank at coordinate (i, j) is
    #: ``ranks[i * dims[1].size + j]``.
    ranks: list[Rank]
    #: Elements of the parameters that tensor parallelism splits (each rank of a tensor-parallel
    #: group holds 1/size of them before FSDP shards); the others are whole on every such rank.
    tp_split_parameters: int | None = None
