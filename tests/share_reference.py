"""The shares of one rank's trace, computed from the raw JSON by a second, deliberately plain
implementation of the written definitions (docs/metrics.md): Python lists of intervals, no
numpy, nothing imported from ddpprof. Tests compare ddpprof's numbers on real traces with these,
each share against its own definition: idle is measured as the gaps in the window, not taken as
what the other shares leave.

Only the cases whose rules are short are covered: CPU traces, and GPU traces with at most one
ProfilerStep and without host collectives (every device record with a stream is analyzed; a
host record is never a device event, whatever its arguments say);
:func:`reference_shares` returns None for the rest.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

Spans = list[tuple[float, float]]

HOST_CATEGORIES = {"cpu_op", "user_annotation", None}
STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
BACKEND_SPAN = re.compile(r"^(gloo|nccl|hccl|rccl|mpi|ucc|xccl):\w+")
WAIT_SPAN = re.compile(r"^(c10d::|gloo:|nccl:|hccl:|rccl:|mpi:|ucc:|xccl:|record_param_comms$)"
                       r"|wait|^FSDP::(all_gather(\s*\(|$)|post_backward_reduce)", re.IGNORECASE)
MEMORY_KERNEL = re.compile(r"^(Memcpy|Memset|dma)")
OTHER_KERNEL = re.compile(r"Memcpy|^Memset|Sync")
COMM_KERNEL = re.compile(r"^nccl.*Kernel|^rccl|deep_ep::|nvshmem|cross_device_reduce_(1|2)stage"
                         r"|mscclpp|^hcom_|^hccl")
DEVICE_CATEGORIES = {"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"}
#: What the host records (docs/metrics.md): ops, annotations, runtime and driver calls, Python
#: functions. A ``stream`` in their arguments is launch metadata (torch.compile's Triton
#: launches carry one), not a place on the device.
HOST_RECORDS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function",
                "cpu_instant_event", "overhead", "external_correlation", "Operator", "Runtime",
                "Python", "Trace", "Python function", None}
HOST_BACKEND_SPAN = re.compile(r"^(gloo|mpi):")


def union(spans: Spans) -> Spans:
    merged: Spans = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(spans: Spans) -> float:
    return sum(end - start for start, end in union(spans))


def intersect(a: Spans, b: Spans) -> Spans:
    a, b = union(a), union(b)
    out: Spans = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Spans, b: Spans) -> Spans:
    out: Spans = []
    cuts = union(b)
    for start, end in union(a):
        for cut_start, cut_end in cuts:
            if cut_end <= start or cut_start >= end:
                continue
            if cut_start > start:
                out.append((start, cut_start))
            start = max(start, cut_end)
        if end > start:
            out.append((start, end))
    return out


def _events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    document = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = document["traceEvents"] if isinstance(document, dict) else document
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _stream(event: dict) -> int | None:
    """A device record's stream (None for a host record, whatever its arguments)."""
    if event.get("cat") in HOST_RECORDS:
        return None
    stream = (event.get("args") or {}).get("stream")
    return stream if isinstance(stream, int) and stream >= 0 else None


def reference_shares(path: Path, keep_last_step: bool = False) -> dict[str, float | None] | None:
    """``compute_pct``, ``non_compute_pct``, ``idle_pct`` and ``overlap_pct`` of one trace by
    the written definitions, or None where this reference does not cover the trace."""
    events = _events(path)
    spans = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events]
    device = [i for i, e in enumerate(events) if _stream(e) is not None]
    steps = sorted((int(STEP.match(e["name"]).group(1)), i) for i, e in enumerate(events)
                   if STEP.match(str(e.get("name"))) and e.get("cat") in HOST_CATEGORIES)
    if device or any(e.get("cat") in DEVICE_CATEGORIES for e in events):
        # covered: no step filter (at most one step: HTA filters none), every device event
        # with its stream argument, no collectives on the host (gloo with device tensors)
        unstreamed = sum(e.get("cat") in DEVICE_CATEGORIES for e in events) > len(device)
        host_comm = any(HOST_BACKEND_SPAN.match(str(e.get("name"))) for e in events)
        if len(steps) >= 2 or unstreamed or host_comm:
            return None
        return _device_shares(events, spans, device)
    if len(steps) >= 2 and not keep_last_step:
        steps = [s for s in steps if s[0] != steps[-1][0]]
    host = [i for i, e in enumerate(events) if e.get("cat") in HOST_CATEGORIES]
    if steps:
        window = union([spans[i] for _, i in steps])
    else:
        window = [(min(spans[i][0] for i in host), max(spans[i][1] for i in host))]
    name = {i: str(events[i].get("name")) for i in host}
    waits = [i for i in host if WAIT_SPAN.search(name[i])]
    comm = [i for i in host if BACKEND_SPAN.match(name[i])]
    work = [i for i in host if i not in set(waits) and not STEP.match(name[i])]
    threads = {(events[i].get("pid"), events[i].get("tid")) for i in work}
    compute: Spans = []
    for thread in threads:
        mine = [i for i in work if (events[i].get("pid"), events[i].get("tid")) == thread]
        blocked = [spans[i] for i in waits
                   if (events[i].get("pid"), events[i].get("tid")) == thread]
        compute += subtract([spans[i] for i in mine], blocked)
    compute = intersect(compute, window)
    comm_lane = intersect([spans[i] for i in comm], window)
    busy = union(compute + comm_lane + intersect([spans[i] for i in waits], window))
    window_us = length(window)
    return _shares(window_us, length(compute), length(subtract(busy, compute)),
                   length(subtract(window, busy)), comm_lane, compute)


def _device_shares(events: list[dict], spans: Spans, device: list[int]
                   ) -> dict[str, float | None]:
    """The GPU definitions without a step filter: every device record with a stream."""
    names = {i: str(events[i].get("name")) for i in device}
    comm = [spans[i] for i in device if COMM_KERNEL.search(names[i])]
    compute = [spans[i] for i in device if not COMM_KERNEL.search(names[i])
               and not MEMORY_KERNEL.search(names[i]) and not OTHER_KERNEL.search(names[i])]
    every = [spans[i] for i in device]
    window = [(min(s for s, _ in every), max(e for _, e in every))]
    busy = union(every)
    return _shares(length(window), length(compute), length(busy) - length(compute),
                   length(subtract(window, busy)), union(comm), union(compute))


def _shares(window_us: float, compute_us: float, non_compute_us: float, idle_us: float,
            comm: Spans, compute: Spans) -> dict[str, float | None]:
    comm_us = length(comm)
    return {"compute_pct": 100 * compute_us / window_us,
            "non_compute_pct": 100 * non_compute_us / window_us,
            "idle_pct": 100 * idle_us / window_us,
            "overlap_pct": 100 * length(intersect(compute, comm)) / comm_us if comm_us else None}
