"""Every predicate on trace events lives here: which events ran on a device, what kind of
kernel each is, which spans are communication, which are profiler steps, which threads train
and which only communicate, and what each collective moved.

Kernel kinds follow HolisticTraceAnalysis 0.5.0 (``hta/utils/utils.py``) so that breakdowns
match it: memory is ``^Memcpy|^Memset|^dma``; a name containing ``Memcpy``, a leading
``Memset`` or ``Sync`` is "other"; communication is ``^nccl.*Kernel`` there, and here also the
libraries of :data:`COMM_KERNEL_PATTERNS` (the one table of names that mean communication);
everything else is compute.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from ..core.user_regex import compile_user
from .comm_kernels import COMM_KERNEL_PATTERNS, SUSPECTED_COMM_KERNELS
from .comm_spans import (
    ANONYMOUS_GROUP,
    BACKEND_COLLECTIVE,
    C10D_COLLECTIVE,
    COMM_LAUNCH_SPAN,
    GROUP_KIND_SPANS,
    GROUP_SPAN,
    HOST_BACKENDS,
    HOST_COMM,
)
from .events import RankTrace
from .work_names import GEMM, OTHER_CATEGORY, WORK_CATEGORIES


class Kind(IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1
    MEMORY = 2
    OTHER = 3


HTA_COMM_KERNEL = re.compile(COMM_KERNEL_PATTERNS[0].regex)
MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

#: Device events of traces that carry no ``args.stream`` (older Kineto, tb_plugin's samples):
#: recognised by category, their stream read from a ``"stream 7"`` thread id.
DEVICE_CATEGORIES = frozenset({"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy",
                               "Memset"})
#: Categories of host records: what a CPU thread did (ops, annotations, runtime and driver
#: calls, Python frames, the profiler's own overhead), in Kineto's names and the legacy
#: profiler's. An event of these categories is never device work, whatever its arguments say:
#: PyTorch 2.9+ writes ``"stream"`` into the arguments of Inductor's host-side Triton launch
#: ops (``cpu_op`` ``triton_poi_fused_...``), as launch metadata. A device record is an event
#: with a stream whose category is not one of these (``kernel``, ``gpu_memcpy``,
#: ``gpu_memset``, ``cuda_sync``, ``mtia_ccp_events``, ...).
HOST_RECORD_CATEGORIES = frozenset({
    "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function",
    "cpu_instant_event", "overhead", "external_correlation", "mtia_runtime", "glow_runtime",
    "xpu_runtime", "xpu_driver", "privateuse1_runtime", "privateuse1_driver", "hpu_runtime",
    "Operator", "Runtime", "Python", "Trace", "Python function", "cuda_profiler_range"})
_STREAM_IN_TID = re.compile(r"^stream\s*(\d+)", re.IGNORECASE)
#: GPU synchronisation events that HTA counts as device work although they carry no stream.
GPU_SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})

#: HTA's step filter takes any name containing "ProfilerStep"; its iteration numbers come from
#: this pattern (``hta/common/trace.py add_iteration``). One definition, used everywhere.
PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
#: Annotations that mirror host spans on the device timeline: not a second copy of a step.
DEVICE_ANNOTATION_CATEGORIES = frozenset({"gpu_user_annotation"})

#: Host categories whose spans are work on a thread (legacy traces have no category at all).
HOST_WORK_CATEGORIES = frozenset({"cpu_op", "user_annotation", None})
#: The data loader's own span inside a step (``enumerate(DataLoader)#..._Iter.__next__``).
DATALOADER = re.compile(r"DataLoader", re.IGNORECASE)
#: Host spans during which the CPU is busy issuing work to a device.
HOST_ISSUE_CATEGORIES = frozenset({"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation",
                                   None})
#: The autograd op that finishes a parameter's gradient: where its post-accumulate hook fires.
GRAD_READY = "torch::autograd::AccumulateGrad"
#: DDP's Reducer copying one reduced gradient out of its bucket (after that bucket's collective).
BUCKET_TO_GRADIENT = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"


def work_class(name: str) -> str:
    """The overlap tax's class of a compute op or kernel (``metrics.tax.WORK_CLASSES``):
    ``gemm`` (``work_names.WORK_CLASSES``' matrix products), else ``other``."""
    return "gemm" if GEMM.search(name) else "other"


#: Spans in which the training thread waits for communication and computes nothing: ddpprof's
#: ``ddpprof::wait``, any other ``*wait*`` span, and FSDP2's collectives, which block the
#: thread on gloo.
BLOCKING_WAIT = re.compile(r"wait|^FSDP::(?:all_gather(?:\s*\(|$)|post_backward_reduce)",
                           re.IGNORECASE)
OPTIMIZER_PREFIX = "Optimizer."
#: Host calls that block the calling thread until device work ends: device, stream and event
#: synchronisation (CUDA runtime and driver, HIP), and a synchronous copy. Not
#: ``cudaStreamWaitEvent``: it makes a *stream* wait for an event, and returns at once.
DEVICE_SYNC = re.compile(r"^(?:cuda|hip)(?:Device|Stream|Event)Synchronize$|"
                         r"^cu(?:Ctx|Stream|Event)Synchronize$|^(?:cuda|hip)Memcpy$|"
                         r"^cuMemcpy(?:DtoH|HtoD|DtoD)?(?:_v2)?$")
#: Host ops that create tensors or views without computing anything: named ``other``.
_NO_COMPUTE_OPS = re.compile(r"^aten::(?:empty|empty_like|empty_strided|view|reshape|t|"
                             r"transpose|permute|expand|as_strided|select|slice|unsqueeze|"
                             r"squeeze|detach|alias|resize_|set_|lift_fresh|result_type)$")


class KernelClassifier:
    """Kind of a device event from its name: HTA's rules, with communication widened to
    :data:`COMM_KERNEL_PATTERNS` and any ``extra`` regular expressions (``--comm-kernel``),
    or exactly HTA's with ``hta_compat``."""

    def __init__(self, extra: Iterable[str] = (), hta_compat: bool = False) -> None:
        patterns = [COMM_KERNEL_PATTERNS[0].regex] if hta_compat else [
            p.regex for p in COMM_KERNEL_PATTERNS]
        self.comm = re.compile("|".join(f"(?:{p})" for p in patterns))
        # a user's expressions in linear time (``ddpprof.core.user_regex``): they cannot hang
        self.extra = [compile_user(p, "--comm-kernel") for p in extra]
        self.hta_compat = hta_compat

    def kind(self, name: str) -> Kind:
        if self.comm.search(name) or any(e.search(name) for e in self.extra):
            return Kind.COMMUNICATION
        if MEMORY_KERNEL.match(name):
            return Kind.MEMORY
        if NOT_COMPUTE.match(name):
            return Kind.OTHER
        return Kind.COMPUTE


def validate_comm_patterns(patterns: Iterable[str]) -> list[str]:
    """The ``--comm-kernel`` expressions, compiled once to report a bad one by itself."""
    checked = []
    for pattern in patterns:
        compile_user(pattern, "--comm-kernel")
        checked.append(pattern)
    return checked


def per_name(trace: RankTrace, predicate: Callable[[str], Any], dtype: npt.DTypeLike = bool
             ) -> np.ndarray:
    """Evaluate ``predicate`` once per distinct name and spread it over the events."""
    table: np.ndarray = np.array([predicate(name) for name in trace.names] or [0], dtype=dtype)
    return np.asarray(table[trace.name_id])


def per_category(trace: RankTrace, predicate: Callable[[str | None], bool]) -> np.ndarray:
    table = np.array([predicate(c) for c in trace.category] or [False], dtype=bool)
    return np.asarray(table[trace.category_id])


def kernel_kinds(trace: RankTrace, classifier: KernelClassifier) -> np.ndarray:
    return per_name(trace, lambda n: int(classifier.kind(n)), dtype=np.int8)


def suspected_comm(names: Iterable[str]) -> dict[str, str]:
    """Kernel names that look like communication but are outside the table -> library."""
    found = {}
    for name in names:
        for pattern in SUSPECTED_COMM_KERNELS:
            if re.search(pattern.regex, name):
                found[name] = pattern.library
    return found


# ---- which events ran on a device -----------------------------------------------------------

#: Categories only PyTorch's profiler writes (Kineto's, and the legacy profiler's names).
PROFILER_CATEGORIES = frozenset({"cpu_op", "user_annotation", "gpu_user_annotation", "kernel",
                                 "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver",
                                 "cuda_sync", "python_function", "ac2g", "fwdbwd", "Operator",
                                 "Runtime", "Kernel", "Memcpy", "Memset", "mtia_ccp_events",
                                 "mtia_runtime"})
#: Host calls that launch device work (their correlation id names the device record).
LAUNCH_CALL = re.compile(r"^(?:cuda|hip)(?:Ext)?Launch|^cuLaunch|^(?:cuda|hip)Memcpy|"
                         r"^(?:cuda|hip)Memset|^cuMemcpy|^cuMemset")


def launches_device_work(name: str) -> bool:
    return bool(LAUNCH_CALL.match(name))


def is_host_record(category: str | None) -> bool:
    """A category of host records (:data:`HOST_RECORD_CATEGORIES`; legacy events have none)."""
    return category is None or category in HOST_RECORD_CATEGORIES


def streams(trace: RankTrace, hta_compat: bool = False) -> np.ndarray:
    """Each event's device stream: a device record's ``args.stream`` (``int(value)``, as HTA
    reads it), else, for a device category with no stream argument, the number in a
    ``"stream 7"`` thread id; -1 for host records. With ``hta_compat``, HTA 0.5.0's rule:
    any event whose arguments name a stream, host ops included (``RankTrace.host_op_stream``).
    """
    stream = trace.stream.copy()
    if hta_compat:
        stream = np.where(trace.host_op_stream >= 0, trace.host_op_stream, stream)
    missing = (stream < 0) & per_category(trace, lambda c: c in DEVICE_CATEGORIES)
    if missing.any():
        from_tid = np.array([_stream_in_tid(tid) for _, tid in trace.threads] or [-1],
                            dtype=np.int64)
        stream[missing] = from_tid[trace.thread_id[missing]]
    return stream


def _stream_in_tid(tid: Any) -> int:
    match = _STREAM_IN_TID.match(str(tid))
    return int(match.group(1)) if match else -1


def device_kernels(trace: RankTrace, stream: np.ndarray) -> np.ndarray:
    """HTA's device events: a stream and a correlation id, or a GPU synchronisation event."""
    return np.asarray(((stream >= 0) & trace.has_correlation) | per_name(
        trace, lambda n: n in GPU_SYNC_NAMES))


def on_device(stream: np.ndarray) -> np.ndarray:
    """Events in HTA's breakdowns: everything with a stream (``stream != -1``)."""
    return np.asarray(stream != -1)


def is_gpu_trace(stream: np.ndarray) -> bool:
    return bool(np.any(stream >= 0))


# ---- steps ----------------------------------------------------------------------------------

def step_number(name: str) -> int:
    """N of ``ProfilerStep#N``; -1 for another name, or for an N beyond int64 (no profiler
    counts that far: such a name is not a step)."""
    match = PROFILER_STEP.match(name)
    number = int(match.group(1)) if match and len(match.group(1)) <= 18 else -1
    return number


def profiler_steps(trace: RankTrace, stream: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the host ``ProfilerStep#N`` spans ordered by start, and their numbers (a
    device-side mirror of a step, ``gpu_user_annotation``, is not a step of its own)."""
    numbers = per_name(trace, step_number, dtype=np.int64)
    host = ~per_category(trace, lambda c: c in DEVICE_ANNOTATION_CATEGORIES)
    if stream is not None:
        host &= stream < 0
    index = np.flatnonzero((numbers >= 0) & host)
    index = index[np.argsort(trace.start_us[index], kind="stable")]
    return index, numbers[index]


def device_step_copies(trace: RankTrace) -> np.ndarray:
    """Indices of the device-side copies of ProfilerSteps (``gpu_user_annotation``), which
    start when the device runs the first kernel launched directly in the step."""
    numbers = per_name(trace, step_number, dtype=np.int64)
    return np.flatnonzero((numbers >= 0) & per_category(
        trace, lambda c: c in DEVICE_ANNOTATION_CATEGORIES))


def step_names(trace: RankTrace) -> set[str]:
    """Distinct ProfilerStep names anywhere in the trace: HTA drops the last step only when a
    run names two or more."""
    return {name for name in trace.names if PROFILER_STEP.match(name)}


def is_step_span(trace: RankTrace) -> np.ndarray:
    return per_name(trace, lambda n: bool(PROFILER_STEP.match(n)))


# ---- host lanes -----------------------------------------------------------------------------

@dataclass(frozen=True)
class HostLanes:
    """Masks over a trace's events (see :func:`host_lanes`)."""

    work: np.ndarray          # compute candidates: host spans that are neither steps nor comm
    waits: np.ndarray         # spans that are communication or waiting for it
    comm: np.ndarray          # the backends' collective spans

    @property
    def any(self) -> np.ndarray:
        return np.asarray(self.work | self.waits | self.comm)


def host_lanes(trace: RankTrace, stream: np.ndarray) -> HostLanes:
    """Host spans by what they are. Host spans are ``cpu_op`` and ``user_annotation`` events
    (or legacy events with no category) off the device. ``comm``: backend collective spans
    (``gloo:*``, ``nccl:*``, ``hccl:*``, ..., on whatever thread: gloo runs them on its own
    worker threads); ``waits``: spans named like communication or waiting for it (``c10d::*``,
    the backend spans, ``record_param_comms``, ``*wait*``); ``work``: every other host span
    except ProfilerSteps."""
    host_span = per_category(trace, lambda c: c in HOST_WORK_CATEGORIES) & (stream < 0)
    comm = per_name(trace, lambda n: bool(BACKEND_COLLECTIVE.match(n))) & host_span
    waits = per_name(trace, lambda n: bool(HOST_COMM.search(n))) & host_span
    work = host_span & ~waits & ~is_step_span(trace)
    return HostLanes(work, waits, comm)


def host_backend(name: str) -> str | None:
    match = BACKEND_COLLECTIVE.match(name)
    return match.group("backend") if match else None


def host_backend_moves_device_data(backend: str | None) -> bool:
    """Whether a GPU trace's host-backend collectives (gloo) carry its device tensors: true
    when ``distributedInfo.backend`` names gloo for a device (``gloo``, ``cuda:gloo``) or is
    unknown; false when the device has a backend of its own (``nccl``,
    ``mtia:hccl,cpu:gloo``), whose gloo traffic is CPU-side bookkeeping."""
    if not backend:
        return True
    entries = [part.strip() for part in backend.split(",") if part.strip()]
    device = [entry.split(":", 1)[-1] for entry in entries
              if not entry.startswith("cpu:")]
    return not device or any(name in HOST_BACKENDS for name in device)


def runs_on_host(name: str) -> bool:
    """A backend collective span that is the communication itself (gloo), not the host side of
    a device kernel (nccl)."""
    return host_backend(name) in HOST_BACKENDS


# ---- collectives ----------------------------------------------------------------------------

_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather",
            "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
            "sendrecv": "send_recv", "all_gather_into_tensor": "all_gather",
            "reduce_scatter_tensor": "reduce_scatter", "_allgather_base": "all_gather",
            "_all_gather_base": "all_gather", "_reduce_scatter_base": "reduce_scatter",
            "allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
            "reduce_scatter_tensor_coalesced": "reduce_scatter", "alltoall_base": "all_to_all",
            "all_to_all_single": "all_to_all", "allreduce_coalesced": "all_reduce",
            "all_reduce_coalesced": "all_reduce", "allgather_coalesced": "all_gather",
            "all_gather_coalesced": "all_gather", "reduce_scatter_coalesced": "reduce_scatter"}
_KERNEL_COLLECTIVE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")
_LIBRARY_COLLECTIVE = (
    (re.compile(r"cross_device_reduce|all_?reduce", re.IGNORECASE), "all_reduce"),
    (re.compile(r"deep_ep::.*dispatch", re.IGNORECASE), "ep_dispatch"),
    (re.compile(r"deep_ep::.*combine", re.IGNORECASE), "ep_combine"),
    (re.compile(r"deep_ep::", re.IGNORECASE), "ep_other"),
    (re.compile(r"all_?gather", re.IGNORECASE), "all_gather"),
    (re.compile(r"reduce_?scatter", re.IGNORECASE), "reduce_scatter"),
    (re.compile(r"all_?to_?all", re.IGNORECASE), "all_to_all"),
    (re.compile(r"dispatch", re.IGNORECASE), "ep_dispatch"),
    (re.compile(r"combine", re.IGNORECASE), "ep_combine"),
)


def normalize_collective(name: str) -> str:
    """``AllReduce``/``allreduce``/``all_reduce``/``_allgather_base`` -> ``all_reduce``/…"""
    snake = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()
    if snake.endswith("_") and snake != "_":
        snake = snake[:-1]                  # c10d::allreduce_, c10d::_allgather_base_
    return _ALIASES.get(snake, _ALIASES.get(snake.replace("_", ""), snake))


def collective_of(name: str, declared: str | None) -> str:
    """The collective an event performs: its ``Collective name`` argument when it has one,
    else what its kernel or span name says, else ``unknown``."""
    if declared:
        return normalize_collective(declared)
    match = _KERNEL_COLLECTIVE.match(name)
    if match:
        return normalize_collective(match.group(1))
    match = BACKEND_COLLECTIVE.match(name)
    if match:
        return normalize_collective(match.group("op"))
    for pattern, collective in _LIBRARY_COLLECTIVE:
        if pattern.search(name):
            return collective
    return "unknown"


def issuing_ops(trace: RankTrace, spans: np.ndarray) -> dict[int, int]:
    """For each backend collective event of ``spans`` (indices), the ``c10d::`` op that issued
    it: the k-th host c10d collective op, on whatever thread (DDP issues from autograd's
    threads), pairs with the k-th event by start; where the counts differ nothing is paired.
    The op names the collective, where a gloo span may not (:func:`issued_collective`)."""
    ops = np.flatnonzero(per_name(trace, lambda n: bool(C10D_COLLECTIVE.match(n)))
                         & (trace.stream < 0))
    if ops.size != spans.size or not ops.size:
        return {}
    ops = ops[np.argsort(trace.start_us[ops], kind="stable")]
    ordered = spans[np.argsort(trace.start_us[spans], kind="stable")]
    return dict(zip(ordered.tolist(), ops.tolist(), strict=True))


def issued_collective(trace: RankTrace, op: int) -> str:
    """The collective a ``c10d::`` op issues (gloo runs a reduce-scatter as an all-reduce, and
    names its span so, but the op says ``_reduce_scatter_base_``)."""
    match = C10D_COLLECTIVE.match(trace.names[trace.name_id[op]])
    assert match is not None, "not a c10d collective op"
    return normalize_collective(match.group(1))


def launches_communication(name: str) -> bool:
    """A host span whose launched kernels are communication (:data:`COMM_LAUNCH_SPAN`)."""
    return bool(COMM_LAUNCH_SPAN.match(name))


def group_span_dim(name: str) -> str | None:
    """The mesh dimension a ``ddpprof::group`` span labels, else None."""
    match = GROUP_SPAN.match(name)
    return match.group("dim") if match else None


def group_kind_of_span(name: str) -> str | None:
    return next((kind for pattern, kind in GROUP_KIND_SPANS if pattern.match(name)), None)


def group_label(name: str | None, description: str | None) -> str:
    """The name a process group is reported under: its DeviceMesh dimension when c10d
    describes it so (``mesh_dp`` -> ``dp``), ``default`` for the default group (description
    ``default_pg``, or c10d's name ``0`` with no description), else its description, else its
    c10d name; ``default`` when the trace names no group."""
    if description and description not in ANONYMOUS_GROUP:
        if description == "default_pg":
            return "default"
        return description.removeprefix("mesh_") or description
    if name in (None, "", "0", "default_pg"):
        return "default"
    return name


def names_device_backend_span(name: str) -> bool:
    """The host side of a collective whose work is a device kernel (``nccl:*``)."""
    backend = host_backend(name)
    return backend is not None and backend not in HOST_BACKENDS


def evaluates_gradient(name: str) -> bool:
    """The autograd engine's span around a parameter's ``AccumulateGrad`` and the hooks it
    fires (DDP's Reducer copying the gradient into its bucket, a post-accumulate hook):
    ``autograd::engine::evaluate_function: torch::autograd::AccumulateGrad``."""
    return name.startswith(BACKWARD_OP_PREFIX) and name.endswith(GRAD_READY)


def copies_bucket_to_gradient(name: str) -> bool:
    """DDP's Reducer copying a reduced gradient out of its bucket: it waited for the bucket's
    collective first (``finalize_backward``, bucket by bucket in launch order)."""
    return name == BUCKET_TO_GRADIENT


def keeps_call_arguments(name: str) -> bool:
    """Events whose arguments the loader keeps (sizes, groups, sequence numbers): collective
    spans and the gradient-ready op. Device kernels that declare a ``Collective name`` are
    kept whatever their name."""
    return bool(HOST_COMM.search(name)) or name == GRAD_READY


# ---- compute categories (``ddpprof diff``) ----------------------------------------------------

def work_category(name: str) -> str:
    """The category of a compute kernel or host op from its name (:data:`WORK_CATEGORIES`);
    ``other`` when none matches, or for an op that only makes a tensor or a view."""
    if _NO_COMPUTE_OPS.match(name):
        return OTHER_CATEGORY
    return next((category for category, pattern in WORK_CATEGORIES if pattern.search(name)),
                OTHER_CATEGORY)


#: A host call that makes a stream wait for an event (``cudaStreamWaitEvent``): the next kernel
#: its thread launches waits, on the device, for the work recorded before the event.
STREAM_WAIT_EVENT = re.compile(r"^(?:cuda|hip|cu)StreamWaitEvent(?:_v2)?$")
#: A host call that records an event on a stream (after the work it marks).
EVENT_RECORD = re.compile(r"^(?:cuda|hip|cu)EventRecord(?:WithFlags)?(?:_v2)?$")


def waits_on_event(name: str) -> bool:
    return bool(STREAM_WAIT_EVENT.match(name))


def records_event(name: str) -> bool:
    return bool(EVENT_RECORD.match(name))


def synchronizes_device(name: str) -> bool:
    """A host call that returns only when device work it waits for has ended
    (:data:`DEVICE_SYNC`)."""
    return bool(DEVICE_SYNC.match(name))


def waits_for_host_collective(name: str, category: str | None) -> bool:
    """A host span in which the thread waits for a collective that runs on the host (gloo):
    :data:`BLOCKING_WAIT` on host work (ops and annotations), never a runtime call such as
    ``cudaStreamWaitEvent``, which orders streams and returns at once."""
    return category in HOST_WORK_CATEGORIES and bool(BLOCKING_WAIT.search(name))


def is_optimizer_span(name: str) -> bool:
    """The span of an optimizer's step (``Optimizer.step#AdamW.step``, and its
    ``zero_grad``)."""
    return name.startswith(OPTIMIZER_PREFIX)


def is_dataloader_span(name: str) -> bool:
    return bool(DATALOADER.search(name))
