"""One rank's trace as flat columns: what the loader produces and every analysis reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CommArgs:
    """What an event says about the collective it belongs to (any field may be unknown)."""

    collective: str | None = None
    in_bytes: int | None = None        # the input buffer (``In msg nelems`` × dtype, or shapes)
    out_bytes: int | None = None       # the output buffer (``Out msg nelems`` × dtype)
    group_size: int | None = None
    group: str | None = None           # process group: ``Process Group Name``
    group_desc: str | None = None      # ``Process Group Description`` ("mesh_dp")
    group_ranks: tuple[int, ...] | None = None
    sequence: int | None = None        # the process group's collective sequence number
    #: All-to-all(v): elements sent to (``In split size``) and received from (``Out split
    #: size``) each peer, in group rank order; None where not recorded (or recorded empty).
    in_splits: tuple[int, ...] | None = None
    out_splits: tuple[int, ...] | None = None
    #: Bytes of each tensor input, in order, from ``Input Dims`` and ``Input type`` (None for
    #: a non-tensor or unknown one): ``c10d::alltoall_base_`` takes (output, input).
    tensor_bytes: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class ProcessGroup:
    """A process group from ``distributedInfo.pg_config``."""

    name: str
    size: int | None
    ranks: tuple[int, ...] | None
    description: str | None = None     # ``pg_desc``: "mesh_dp", "default_pg", "undefined"


@dataclass
class RankTrace:
    """One rank's complete events (``ph: X``). Times are float microseconds exactly as
    written; integer columns use -1 for "none". The rank may be unknown here: a run decides it
    (see ``ddpprof.analysis.runs``)."""

    path: Path | str                  # a local path, or a URL
    rank: int | None
    rank_source: str | None           # "distributedInfo", "file name" or None
    world_size: int | None
    backend: str | None
    process_groups: list[ProcessGroup]
    names: list[str]                  # name table; ``name_id`` indexes it
    name_id: np.ndarray               # int32
    category: list[str | None]        # category table; ``category_id`` indexes it
    category_id: np.ndarray           # int32
    start_us: np.ndarray              # float64
    end_us: np.ndarray                # float64
    thread_id: np.ndarray             # int32 index into ``threads``
    threads: list[tuple[Any, Any]]    # (pid, tid)
    thread_names: dict[tuple[Any, Any], str]
    #: int64 ``args.stream`` of a device record; -1 for host records (``classify.
    #: is_host_record``) and where absent or not a number.
    stream: np.ndarray
    #: int64 ``args.stream`` that a host record names (Inductor's Triton launch ops, PyTorch
    #: 2.9+): launch metadata, not device work; -1 elsewhere. HTA counts these as device events.
    host_op_stream: np.ndarray
    correlation: np.ndarray           # int64; ids of 2**63 and above wrap around (mod 2**64)
    has_correlation: np.ndarray       # bool: a correlation id ≥ 0 was given
    external_id: np.ndarray           # int64 ``External id`` / ``external id``, -1 when absent
    timestamps_are_integers: bool     # every ``ts`` a JSON integer (µs traces, not Kineto's ns)
    #: Over every event of the file, metadata included: the smallest and largest ``ts`` and
    #: whether any event has none. HTA's column type depends on them (see ``hta_sort_dtype``).
    ts_range: tuple[float, float] = (0.0, 0.0)
    ts_missing: bool = False
    comm_args: dict[int, CommArgs] = field(default_factory=dict)  # by event index
    grad_bytes: dict[int, int] = field(default_factory=dict)  # AccumulateGrad: its gradient
    matmul_flops: dict[int, float] = field(default_factory=dict)  # work_names.MATMUL_OPS: 2·M·K·N
    dropped_events: int = 0           # complete-looking events without a usable start or end
    shortened_names: int = 0          # names longer than ``names.MAX_NAME_CHARS``, shortened
    #: The document declares a ``schemaVersion`` (Kineto's object form does).
    has_schema_version: bool = False

    @property
    def n_events(self) -> int:
        return int(self.start_us.size)


def launch_times(stream: np.ndarray, start: np.ndarray, launcher: np.ndarray) -> np.ndarray:
    """When each event was issued: a host event's own start; a device event's launching host
    event's start (``launcher``: ``structure.launching_host_event``, the host event with its
    correlation id), else its own start."""
    launch = np.where(stream < 0, start, np.nan)
    launched = (stream >= 0) & (launcher >= 0)
    launch[launched] = start[launcher[launched]]
    unmatched_device = (stream >= 0) & np.isnan(launch)
    launch[unmatched_device] = start[unmatched_device]
    return launch
