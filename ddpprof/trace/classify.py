"""Which events are GPU work, which are communication, and what each collective moved.

GPU kernel kinds follow HTA 0.5.0 (``hta/utils/utils.py``) so that the breakdown matches it:
communication is ``^nccl.*Kernel`` (NCCL's ``ncclKernel_*``/``ncclDevKernel_*``; RCCL keeps
these names, and ``^rccl.*Kernel`` is accepted too); memory is ``^Memcpy|^Memset|^dma``;
anything else matching ``Memcpy``, a leading ``Memset`` or ``Sync`` is "other"; the rest is
compute.
"""

from __future__ import annotations

import re
from enum import IntEnum

import numpy as np

from .loader import RankTrace


class Kind(IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1
    MEMORY = 2
    OTHER = 3


COMM_KERNEL = re.compile(r"^(?:nccl|rccl).*Kernel")
MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: Host spans that are communication or waiting for it, rather than compute.
HOST_COMM = re.compile(r"^(?:c10d::|gloo:|nccl:|record_param_comms$)|wait", re.IGNORECASE)
#: The backend's own collective spans, on its worker threads (gloo) -> the collective's name.
BACKEND_COLLECTIVE = re.compile(r"^(?:gloo|nccl):(\w+)")
_KERNEL_COLLECTIVE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")
_GPU_SYNC_NAMES = ("Event Sync", "Context Sync")


def kernel_kind(name: str) -> Kind:
    if COMM_KERNEL.match(name):
        return Kind.COMMUNICATION
    if MEMORY_KERNEL.match(name):
        return Kind.MEMORY
    if NOT_COMPUTE.match(name):
        return Kind.OTHER
    return Kind.COMPUTE


def per_name(trace: RankTrace, predicate) -> np.ndarray:
    """Evaluate ``predicate`` once per distinct name and spread it over the events."""
    table = np.array([predicate(name) for name in trace.names] or [0])
    return table[trace.name_id]


def event_kinds(trace: RankTrace) -> np.ndarray:
    return per_name(trace, lambda name: int(kernel_kind(name)))


def normalize_collective(name: str) -> str:
    """``AllReduce``/``allreduce``/``all_reduce`` -> ``all_reduce``."""
    snake = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()
    aliases = {"allreduce": "all_reduce", "allgather": "all_gather",
               "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
               "sendrecv": "send_recv", "all_gather_into_tensor": "all_gather",
               "reduce_scatter_tensor": "reduce_scatter", "_allgather_base": "all_gather",
               "_reduce_scatter_base": "reduce_scatter"}
    return aliases.get(snake, snake)


def collective_of(name: str, declared: str | None) -> str:
    """The collective an event performs: its ``Collective name`` arg when it has one, else what
    its kernel or span name says."""
    if declared:
        return normalize_collective(declared)
    match = _KERNEL_COLLECTIVE.match(name) or BACKEND_COLLECTIVE.match(name)
    return normalize_collective(match.group(1)) if match else "unknown"


def hta_device_events(trace: RankTrace, drop_last_step: bool) -> np.ndarray:
    """Mask of the GPU events HTA 0.5.0 analyzes (``stream != -1`` after its trace filter).

    With ``drop_last_step`` (HTA's default when the run has two or more ProfilerSteps), host
    events are kept when they start before the last ProfilerStep starts, and device events only
    when a kept host event has their correlation id: the last step's kernels go, whenever they
    ran. Without it, host events up to the last step's end are kept the same way.
    """
    is_sync = per_name(trace, lambda n: n in _GPU_SYNC_NAMES).astype(bool)
    device = ((trace.stream >= 0) & (trace.correlation >= 0)) | is_sync
    host = ~device
    steps = host & per_name(trace, lambda n: "ProfilerStep" in n).astype(bool)
    if not steps.any():
        return np.zeros(trace.n_events, dtype=bool)
    if drop_last_step:
        host_kept = host & (trace.start_us < trace.start_us[steps].max())
    else:
        host_kept = host & (trace.start_us <= trace.end_us[steps].max())
    device_kept = device & np.isin(trace.correlation, np.unique(trace.correlation[host_kept]))
    return (device_kept | host_kept) & (trace.stream != -1)


def profiler_steps(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the ``ProfilerStep#N`` spans, ordered by start, and their step numbers."""
    numbers = per_name(trace, lambda n: int(m.group(1)) if (m := PROFILER_STEP.match(n)) else -1)
    on_host = trace.stream == -1
    index = np.flatnonzero((numbers >= 0) & on_host)
    index = index[np.argsort(trace.start_us[index], kind="stable")]
    return index, numbers[index]


def has_device_events(trace: RankTrace) -> bool:
    return bool(np.any(trace.stream >= 0))
