"""What one rank holds in memory during a run: counted from the tensors, and read from the
allocator.

* **Steady state** (:func:`state_bytes`): after the run's last ``optimizer.step()``, the bytes of
  the parameters, the gradients the step read, and the optimizer state, each counted from the
  tensors themselves: a storage shared by several views (a flat bucket and the parameters
  viewing it, ZeRO's shard pieces) counts once, with its full size (padding included), and a
  sharded (DTensor) parameter counts its local shard. This is what the ``ddpprof memory``
  estimate predicts.
* **Peaks** (:class:`MemoryProbe`): on GPU, ``torch.cuda.max_memory_allocated`` over the whole
  run, and the largest level the device's allocator reached in the analyzed profiled steps.
  The CPU allocator keeps no running total outside the profiler, so on CPU both are ``None``;
  the whole-run CPU figure is the process's peak resident set size (``getrusage``), which also
  holds the interpreter, libraries and the data. On both, ``step_peak_rise_bytes`` is the
  largest rise of allocated bytes within an analyzed profiled step above the level at the
  step's start: activations, gradients as backward builds them, temporaries and communication
  buffers.

Both step figures come from the profiler's allocator events (``profile_memory=True``) as the
profiler holds them in this process (:func:`profiled_peaks`), over the steps ``ddpprof
analyze`` analyzes (``ddpprof.trace.last_step.LastStep``: the last ProfilerStep dropped when
there are two or more), not from the exported trace.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ddpprof.trace.classify import PROFILER_STEP, step_number
from ddpprof.trace.last_step import LastStep
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


#: The profiler's name for an allocator event (an allocation, or a free with negative bytes).
MEMORY_EVENT = "[memory]"


def step_peaks(steps: list[tuple[int, int, str]], memory: list[tuple[int, int]],
               levels: dict[int, int] | None = None) -> ProfiledPeaks:
    """The peaks of the analyzed ones of ``steps`` ((start, end, name) of each ProfilerStep):
    in each, the largest rise above the level before its first allocator event of the events
    ``memory`` ((time, bytes), a free's negative) within it, ends included; and with
    ``levels`` (the allocated bytes at each step's start, by step number: GPU) the largest
    level reached, that level plus the rise."""
    steps = sorted(steps)
    window = LastStep.decide({name for *_, name in steps}, keep_last_step=False).analyzed(steps)
    memory = sorted(memory)
    times = np.array([t for t, _ in memory], dtype=np.int64)
    sizes = np.array([size for _, size in memory], dtype=np.int64)
    rises, peaks = [], []
    for start, end, name in window:
        inside = sizes[np.searchsorted(times, start, "left"):np.searchsorted(times, end, "right")]
        if not inside.size:
            continue
        rise = int(np.cumsum(inside).max())
        rises.append(rise)
        if levels is not None and (level := levels.get(step_number(name))) is not None:
            peaks.append(level + rise)
    return ProfiledPeaks(max(peaks, default=None), max(rises, default=None))


def profiled_peaks(prof: torch.profiler.profile, device: torch.device,
                   levels: dict[int, int]) -> ProfiledPeaks:
    """:func:`step_peaks` of ``device``'s allocator events and the ProfilerSteps that ``prof``
    (``profile_memory=True``) recorded, read from the profiler in this process."""
    cuda = device.type == "cuda"
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    events = prof.profiler.kineto_results.events()
    memory = [(e.start_ns(), e.nbytes()) for e in events if e.name() == MEMORY_EVENT
              and e.device_type() == kind and (not cuda or e.device_index() == device.index)]
    steps = [(e.start_ns(), e.end_ns(), e.name()) for e in events
             if PROFILER_STEP.match(e.name()) and e.device_type() != torch.autograd.DeviceType.CUDA]
    return step_peaks(steps, memory, levels if cuda else None)


class MemoryProbe:
    """Counts the steady state (:func:`state_bytes`) right after optimizer step
    ``sample_at_step`` (0-based; the run's last), through the optimizer's step post-hook, so
    the gradients the step read are still there; and, on GPU, the allocated bytes at each
    step's start (:meth:`step_starts`), the level the profiler's events rise from."""

    def __init__(self, model: DataParallel, optimizer: torch.optim.Optimizer,
                 device: torch.device, sample_at_step: int) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.sample_at_step = sample_at_step
        self.steps_seen = 0
        self.state: StateBytes | None = None
        self.levels: dict[int, int] = {}
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        optimizer.register_step_post_hook(self._after_step)

    def step_starts(self, step: int) -> None:
        """Step ``step`` (0-based, ProfilerStep#``step``) starts now."""
        if self.device.type == "cuda":
            self.levels[step] = torch.cuda.memory_allocated(self.device)

    def profiled(self, prof: torch.profiler.profile) -> ProfiledPeaks:
        return profiled_peaks(prof, self.device, self.levels)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.steps_seen == self.sample_at_step:
            self.state = state_bytes(self.model, self.optimizer)
        self.steps_seen += 1

    def figures(self, rank: int, peaks: ProfiledPeaks) -> dict[str, Any]:
        """This rank's row of ``run.json``'s ``memory`` (``peaks``: :meth:`profiled`, when
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
