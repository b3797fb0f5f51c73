"""What one rank holds in memory during a run: counted from the tensors, and read from the
allocator.

* **Steady state** (:func:`state_bytes`): after the run's last ``optimizer.step()``, the bytes of
  the parameters, the gradients the step read, and the optimizer state, each counted from the
  tensors themselves: a storage shared by several views (a flat bucket and the parameters
  viewing it, ZeRO's shard pieces) counts once, with its full size (padding included), and a
  sharded (DTensor) parameter counts its local shard. This is what the ``ddpprof memory``
  estimate predicts.
* **Peaks** (:class:`MemoryProbe`): on GPU, ``torch.cuda.max_memory_allocated`` over the whole
  run and the largest "Total Allocated" of the device's ``[memory]`` profiler events in the
  profiled steps. The CPU allocator keeps no running total outside the profiler, and the
  profiler's CPU counter starts at zero when its window opens, so on CPU both are ``None``; the
  whole-run CPU figure is the process's peak resident set size (``getrusage``), which also holds
  the interpreter, libraries and the data. On both, ``step_peak_rise_bytes`` is the largest rise
  of allocated bytes within a profiled step above the level at the step's start: activations,
  gradients as backward builds them, temporaries and communication buffers.
"""

from __future__ import annotations

import gzip
import json
import resource
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddpprof.variants.base import DataParallel


@dataclass(frozen=True)
class StateBytes:
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # a DTensor holds its shard locally
    return to_local() if to_local is not None else tensor


def _optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    # ZeroRedundancyOptimizer keeps this rank's state in the optimizer it wraps.
    inner = getattr(optimizer, "optim", optimizer)
    return [value for state in inner.state.values() for value in state.values()
            if isinstance(value, torch.Tensor)]


def state_bytes(model: DataParallel, optimizer: torch.optim.Optimizer) -> StateBytes:
    """Bytes held by parameters, gradients and optimizer state, each storage counted once (in
    the first of those three that reaches it)."""
    seen: set[tuple[str, int]] = set()

    def distinct_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
        total = 0
        for tensor in tensors:
            if tensor is None:
                continue
            storage = _local(tensor).untyped_storage()
            key = (str(storage.device), storage.data_ptr())
            if storage.nbytes() and key not in seen:
                seen.add(key)
                total += storage.nbytes()
        return total

    params = list(model.parameters())
    stepped = [p for group in optimizer.param_groups for p in group["params"]]
    return StateBytes(
        params_bytes=distinct_bytes([*params, *stepped]),
        grads_bytes=distinct_bytes(p.grad for p in [*params, *stepped]),
        optimizer_bytes=distinct_bytes(_optimizer_state_tensors(optimizer)))


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass(frozen=True)
class ProfiledPeaks:
    peak_allocated_bytes: int | None   # absolute (GPU); None on CPU
    step_peak_rise_bytes: int | None   # None when the window saw no allocation


def profiled_peaks(trace_path: Path, device: torch.device) -> ProfiledPeaks:
    """Peaks of the ``[memory]`` events of ``device`` in an exported Chrome trace (written with
    ``profile_memory=True``): see the module's docstring."""
    with gzip.open(trace_path, "rt") if trace_path.suffix == ".gz" else open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    cuda = device.type == "cuda"
    memory = sorted(
        (e for e in events if e.get("name") == "[memory]"
         and e["args"].get("Device Type") == (1 if cuda else 0)
         and (not cuda or e["args"].get("Device Id") == device.index)),
        key=lambda e: e["ts"])
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    rises = []
    for start, end in steps:
        inside = [e["args"] for e in memory if start <= e["ts"] <= end]
        if inside:
            before = inside[0]["Total Allocated"] - inside[0]["Bytes"]
            rises.append(max(a["Total Allocated"] for a in inside) - before)
    return ProfiledPeaks(
        peak_allocated_bytes=max((e["args"]["Total Allocated"] for e in memory), default=None)
        if cuda else None,
        step_peak_rise_bytes=max(rises, default=None))


class MemoryProbe:
    """Counts the steady state (:func:`state_bytes`) right after optimizer step
    ``sample_at_step`` (0-based; the run's last), through the optimizer's step post-hook, so
    the gradients the step read are still there."""

    def __init__(self, model: DataParallel, optimizer: torch.optim.Optimizer,
                 device: torch.device, sample_at_step: int) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.sample_at_step = sample_at_step
        self.steps_seen = 0
        self.state: StateBytes | None = None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        optimizer.register_step_post_hook(self._after_step)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.steps_seen == self.sample_at_step:
            self.state = state_bytes(self.model, self.optimizer)
        self.steps_seen += 1

    def figures(self, rank: int, peaks: ProfiledPeaks) -> dict[str, Any]:
        """This rank's row of ``run.json``'s ``memory`` (``peaks``: from its trace, when
        profiled)."""
        if self.state is None:
            raise RuntimeError(f"optimizer step {self.sample_at_step} never ran")
        cuda = self.device.type == "cuda"
        return {
            "rank": rank,
            "device": self.device.type,
            **asdict(self.state),
            "state_bytes": self.state.total_bytes,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(self.device) if cuda
            else None,
            "peak_allocated_profiled_bytes": peaks.peak_allocated_bytes,
            "step_peak_rise_bytes": peaks.step_peak_rise_bytes,
            "peak_rss_bytes": peak_rss_bytes(),
        }


def gather_figures(figures: dict[str, Any], distributed: bool) -> list[dict[str, Any]]:
    """Every rank's :meth:`MemoryProbe.figures`, in rank order (a collective when
    ``distributed``: call it on every rank)."""
    if not distributed:
        return [figures]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, figures)
    return everyone
