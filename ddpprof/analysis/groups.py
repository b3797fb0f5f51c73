"""A run's communication per process group: each rank's figures (``metrics.groups``) gathered
under the group's name, with what only the ranks together tell: waiting versus transferring
within the group, its straggler, whether it crosses nodes, and its all-to-all imbalance.

Groups are gathered by name (``classify.group_label``): a 2 × 2 mesh has two data-parallel
groups, {0, 2} and {1, 3}, both named ``dp``; each rank belongs to one of them, and calls are
matched across ranks within each actual group (``metrics.waits``).

Where the ranks ran: ``run.json`` (``--nnodes`` and ``--nproc``: torchrun gives each node a
contiguous block of ranks), else file names that carry a host (the profiler's default trace
name is ``HOST_PID.TIMESTAMP.pt.trace.json``, with no rank in it); otherwise the split cannot be
told.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..metrics.comm import CollectiveCalls
from ..metrics.groups import (
    GroupFigures,
    Imbalance,
    calls_by_group,
    send_imbalance,
    split_imbalance,
)
from ..metrics.waits import WaitSplit, matched_calls, wait_split
from ..run.manifest import RunManifest
from ..trace.args import host_from_name
from .results import RankResult

INTRA, INTER, MIXED = "intra-node", "inter-node", "mixed"


@dataclass(frozen=True)
class Hosts:
    """Where a run's ranks ran, and where that was read."""

    source: str
    by_rank: dict[int, str] = field(default_factory=dict)   # from file names: traced ranks
    nproc: int | None = None       # from run.json: ranks per node, node = rank // nproc

    def host(self, rank: int) -> str | None:
        return f"node {rank // self.nproc}" if self.nproc else self.by_rank.get(rank)


@dataclass
class RunGroup:
    """One process group name of a run (module docstring)."""

    name: str
    description: str | None
    source: str                              # where the groups came from (``GroupRef.source``)
    members: list[tuple[int, ...]]           # the actual groups under this name, where known
    per_rank: dict[int, GroupFigures]        # ranks with calls in it
    steps: dict[int, int]                    # each such rank's analyzed steps
    wait: dict[int, WaitSplit] = field(default_factory=dict)
    straggler_rank: int | None = None        # made the group's other ranks wait the most
    #: Per rank: whether its group of this name stays on one node; None where unknown.
    locality: dict[int, str | None] = field(default_factory=dict)
    imbalance: Imbalance | None = None       # all-to-all bytes sent, across ranks
    receive_imbalance: Imbalance | None = None   # ... and received
    split_imbalance: float | None = None     # all-to-all(v) over peers, mean over ranks

    @property
    def size(self) -> int | None:
        sizes = {len(m) for m in self.members}
        return sizes.pop() if len(sizes) == 1 else None

    @property
    def locality_of_run(self) -> str | None:
        kinds = set(self.locality.values())
        if not kinds or None in kinds:
            return None
        return kinds.pop() if len(kinds) == 1 else MIXED


def hosts_of(manifest: RunManifest, results: list[RankResult]) -> Hosts | None:
    """Each rank's host, from ``run.json`` or the trace file names (module docstring)."""
    config = manifest.config
    if config is not None and config.nnodes and config.nproc:
        return Hosts("run.json", nproc=config.nproc if config.nnodes > 1 else 1 << 31)
    found = {r.rank: host_from_name(r.path) for r in results}
    if results and all(found.values()):
        return Hosts("trace file names", {rank: h for rank, h in found.items() if h})
    return None


def run_groups(results: list[RankResult], manifest: RunManifest) -> tuple[list[RunGroup],
                                                                          list[str]]:
    """The run's groups by name, and notes on how they were found."""
    groups: dict[str, RunGroup] = {}
    for result in results:
        for figures in result.process_groups:
            ref = _with_mesh(figures.group.ranks, figures.group.name, result.rank, manifest,
                             result.world_size)
            group = groups.setdefault(figures.group.name, RunGroup(
                figures.group.name, figures.group.description, figures.group.source, [], {},
                {}))
            if ref is not None and ref not in group.members:
                group.members.append(ref)
            group.per_rank[result.rank] = figures
            group.steps[result.rank] = max(result.steps, 1)
    hosts = hosts_of(manifest, results)
    # each rank's calls split by group once: a run of many groups costs the calls, not
    # groups × calls
    calls = {r.rank: r.calls for r in results}
    by_group = {r.rank: {name: r.calls.subset(np.array(picked, dtype=np.int64))
                         for name, picked in calls_by_group(r.calls).items()}
                for r in results}
    for group in groups.values():
        _across_ranks(group, calls, by_group, hosts)
    notes = []
    if len(groups) > 1:   # (one group: its source is in the section, and nothing to tell apart)
        sources = {g.source for g in groups.values()} - {"none", "trace arguments"}
        if sources:
            notes.append(f"process groups found by structure ({', '.join(sorted(sources))}): "
                         "the trace's collectives do not name them")
        if hosts is None:
            notes.append("intra- vs inter-node communication cannot be told: no run.json and "
                         "no host in the trace file names")
    return sorted(groups.values(), key=lambda g: (g.name != "default", g.name)), notes


def _with_mesh(ranks: tuple[int, ...] | None, name: str, rank: int, manifest: RunManifest,
               world_size: int | None) -> tuple[int, ...] | None:
    """A group's ranks; where the trace does not list them, this rank's group of the mesh
    dimension of that name in ``run.json``, or every rank for the default group."""
    if ranks is not None:
        return ranks
    mesh = manifest.mesh
    for dim in mesh.dims if mesh else []:
        if dim.name == name:
            return next((tuple(g.ranks) for g in dim.groups if rank in g.ranks), None)
    world = world_size or (manifest.config.world_size if manifest.config else None)
    return tuple(range(world)) if name == "default" and world else None


def _across_ranks(group: RunGroup, calls: dict[int, CollectiveCalls],
                  by_group: dict[int, dict[str, CollectiveCalls]], hosts: Hosts | None) -> None:
    """``by_group``: each rank's ``calls`` by group name."""
    none = np.zeros(0, dtype=np.int64)
    mine = {rank: by_group[rank][group.name] if group.name in by_group[rank]
            else calls[rank].subset(none) for rank in group.per_rank}
    if len(mine) >= 2:
        waits = wait_split(mine)
        group.wait, group.straggler_rank = waits.by_rank, waits.slowest_rank
        rows = [row for row, kind in matched_calls(mine) if kind == "all_to_all"]
        group.imbalance = send_imbalance([{r: mine[r].size_bytes[i] for r, i in row.items()}
                                          for row in rows])
        group.receive_imbalance = send_imbalance([
            {r: mine[r].out_bytes[i] if mine[r].out_bytes else None for r, i in row.items()}
            for row in rows])
    splits = [split_imbalance([c.in_splits[i] for i in range(c.n)
                               if c.kind[i] == "all_to_all" and c.in_splits])
              for c in mine.values()]
    known = [s for s in splits if s is not None]
    group.split_imbalance = sum(known) / len(known) if known else None
    for rank in group.per_rank:
        ranks = next((m for m in group.members if rank in m), None)
        where = {hosts.host(r) for r in ranks} if ranks and hosts else {None}
        group.locality[rank] = None if None in where else INTRA if len(where) == 1 else INTER
