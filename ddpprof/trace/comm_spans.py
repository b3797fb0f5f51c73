"""The names of host spans that mean communication: a backend's collective (``gloo:*``), the
c10d op that issued it, ddpprof's group label, the spans whose launches are communication by
structure. Data, read by the predicates of :mod:`ddpprof.trace.classify`."""

from __future__ import annotations

import re

#: Host spans of a collective issued through a process-group backend: ``gloo:all_reduce``,
#: ``nccl:broadcast``, ``hccl:allgather`` -> the collective's name.
BACKEND_COLLECTIVE = re.compile(r"^(?P<backend>gloo|nccl|hccl|rccl|mpi|ucc|xccl):(?P<op>\w+)")
#: Backends whose collectives run on the host, with no device kernel: their spans are the
#: communication itself, also in a GPU trace (gloo with CUDA tensors).
HOST_BACKENDS = frozenset({"gloo", "mpi"})
#: Host spans on a training thread that are communication, or waiting for it, not compute.
HOST_COMM = re.compile(
    r"^(?:c10d::|gloo:|nccl:|hccl:|rccl:|mpi:|ucc:|xccl:|record_param_comms$)|wait"
    # FSDP2's own spans around its collectives (torch/distributed/fsdp/_fully_shard/
    # _fsdp_param_group.py): on gloo the thread blocks in them; all_gather_copy_out is a copy
    r"|^FSDP::(?:all_gather(?:\s*\(|$)|post_backward_reduce)",
    re.IGNORECASE)
#: The c10d op by which the training thread issued a collective (``c10d::allreduce_``,
#: ``c10d::_reduce_scatter_base_``): it names the collective, which a gloo span may not (gloo
#: runs a reduce-scatter as an all-reduce, and names its span ``gloo:all_reduce``).
C10D_COLLECTIVE = re.compile(r"^c10d::(?!barrier|monitored_barrier)(\w+)$")
ALL_TO_ALL_OP = "c10d::alltoall_base_"   # (output, input, ...): received and sent tensors
#: ddpprof's own label around the collectives of one mesh dimension (``ddpprof::group dp``,
#: run.json's ``MeshDim.span``): the group a gloo collective went over, which gloo does not name.
GROUP_SPAN = re.compile(r"^ddpprof::group (?P<dim>\w+)$")
#: Spans whose collectives go over one kind of group, where nothing names the group: FSDP's
#: own (its data-parallel shard group) and DTensor's functional collectives (tensor parallel).
GROUP_KIND_SPANS = ((re.compile(r"^FSDP::"), "fsdp"),
                    (re.compile(r"^_?c10d_functional::(?!wait)"), "functional"))
#: Descriptions c10d gives groups it has no name for.
ANONYMOUS_GROUP = frozenset({"", "undefined"})
#: Host spans every kernel launched inside of which is communication, whatever its name
#: (communication by structure): a collective's record, c10d and functional collective ops,
#: symmetric-memory and expert-parallel libraries' ops, and annotations of expert-parallel
#: dispatch and combine. Not the backends' spans (an MTIA trace's ``hccl:*`` spans enclose
#: the model's own kernels); waits and barriers launch no transfer of their own.
COMM_LAUNCH_SPAN = re.compile(
    r"^(?:record_param_comms$|c10d::(?!barrier|monitored_barrier|wait)|"
    r"_?c10d_functional::(?!wait)|symm_mem::|deep_?ep|nvshmem|"
    r"(?:moe_|ep_)?(?:dispatch|combine)\b)", re.IGNORECASE)
