"""What each recorded step gives the simulator: its graph, the tax and cost level it replays
with, its gradients in registration order, and its replays. Pure.

* **Cost level**: the step's recorded transfers (each collective's transfer nodes, their work
  alone: ``graph.contended.recorded_work``) over the cost model's time for them, ``Σ work /
  Σ model``: how much slower than the model the run's machine moved data in that step. Each
  step is replayed with its own (the load of a shared machine changes from step to step; a
  step with no sized collective takes the run's).
* **Registration order**: which gradient is which parameter, from ``run.json``'s ``buckets``
  (:func:`registration_positions`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, replace

import numpy as np

from ..core.units import MIB
from ..graph.contended import Roles, Tax, recorded_work
from ..graph.edit import CollectiveCost, RankGradients, Rebucket, WorldSize
from ..graph.model import CycleError, NodeKind, StepGraph
from ..graph.path import period_us, replay
from ..graph.whatif import Edit, Outcome, replay_edited
from ..metrics.cost import CostModel
from ..run.manifest import BucketRecord
from ..variants.bucketing import assign_buckets
from .sources import Transfer


def _dtypes(bucket: BucketRecord) -> list[str | None]:
    """A recorded bucket's parameter dtypes, None for each where run.json names none."""
    return list(bucket.param_dtypes) if bucket.param_dtypes else [None] * len(bucket.param_index)


def registration_positions(grads: list[int], recorded: list[BucketRecord] | None
                           ) -> tuple[list[int], list[str | None] | None, str | None]:
    """Each gradient's (ready order) position in the model's registration order, and its
    dtype, from run.json's ``buckets``: gradients of one size are matched in ready order to
    that size's parameters in reverse registration order. Without them (or when the sizes
    disagree), the registration order is taken as the reverse of the ready order and the
    dtypes as unknown (one), and a note says so."""
    fallback = list(range(len(grads)))[::-1]
    if not recorded:
        return fallback, None, ("registration order: run.json names no buckets, so it is "
                                "taken as the reverse of the order gradients became ready")
    params = sorted(((index, size, dtype) for b in recorded for index, size, dtype in zip(
        b.param_index, b.param_bytes, _dtypes(b),
        strict=True)), reverse=True, key=lambda p: p[0])
    if sorted(size for _, size, _ in params) != sorted(grads):
        return fallback, None, ("registration order: the trace's gradients do not match "
                                "run.json's parameters by size, so it is taken as the reverse "
                                "of the ready order")
    by_size: dict[int, list[tuple[int, str | None]]] = {}
    for index, size, dtype in params:
        by_size.setdefault(size, []).append((index, dtype))
    matched = [by_size[size].pop(0) for size in grads]
    dtypes = [dtype for _, dtype in matched]
    return [index for index, _ in matched], dtypes if any(dtypes) else None, None


def transfers_of(graph: StepGraph, work: np.ndarray) -> list[Transfer]:
    """Each sized collective's transfer in ``graph``: its transfer nodes' work alone."""
    return [Transfer(c.kind, c.size_bytes, float(sum(
        work[k] for k in c.nodes if graph.nodes[k].kind == NodeKind.COMMUNICATION)))
        for c in graph.collectives if c.size_bytes]


@dataclass(frozen=True)
class CapEdit:
    """A bucket cap to replay the variant's gradient sync at (``graph.edit.Rebucket`` for
    every rank of a step)."""

    cap_mib: float
    gradient_kind: str
    gathers: bool
    ready_order: bool = False


@dataclass(frozen=True)
class Step:
    """One recorded step, ready to replay: whole once made (:meth:`of`, then :meth:`ready`,
    which makes another), so a replay remembered (``_cache``) can never outlive what it was
    replayed from."""

    graph: StepGraph
    tax: Tax
    work: np.ndarray
    transfers: list[Transfer]
    gradients: dict[int, RankGradients] = field(default_factory=dict)
    level: float | None = None
    _cache: dict[Hashable, Outcome | None] = field(default_factory=dict, init=False,
                                                   repr=False, compare=False)

    @classmethod
    def of(cls, graph: StepGraph, tax: Tax) -> Step:
        work = recorded_work(graph, Roles.of(graph), tax)
        return cls(graph, tax, work, transfers_of(graph, work))

    @property
    def recorded_us(self) -> float:
        """Its step as recorded (``graph.path.period_us``)."""
        return period_us(self.graph, replay(self.graph))

    def ready(self, model: CostModel, world: int, backend: str | None, run_level: float,
              recorded: list[BucketRecord] | None, grad_accum: int, notes: list[str]) -> Step:
        """This step with its cost level under ``model`` (the run's, ``run_level``, when it
        has no sized transfer) and its gradients (:meth:`gradients_of`)."""
        modelled = sum(model.time_us(t.size_bytes, world, t.kind, backend)
                       for t in self.transfers)
        measured = sum(t.time_us for t in self.transfers)
        level = measured / modelled if modelled > 0 and measured > 0 else run_level
        return replace(self, level=level,
                       gradients=self.gradients_of(recorded, grad_accum, notes))

    def gradients_of(self, recorded: list[BucketRecord] | None, grad_accum: int,
                     notes: list[str]) -> dict[int, RankGradients]:
        """Each rank's gradients of the last backward pass, in ready order, matched to the
        model's parameters (:func:`registration_positions`)."""
        graph = self.graph
        parameters = sum(len(b.param_index) for b in recorded or [])
        gradients = {}
        for rank in sorted({g.rank for g in graph.gradients}):
            ready = sorted((g for g in graph.gradients if g.rank == rank),
                           key=lambda g: graph.nodes[g.node].end_us)
            count = parameters or (len(ready) // grad_accum if len(ready) % grad_accum == 0
                                   else len(ready))
            ready = ready[len(ready) - count:] if count <= len(ready) else ready
            positions, dtypes, note = registration_positions(
                [g.size_bytes for g in ready], recorded)
            if note and note not in notes:
                notes.append(note)
            gradients[rank] = RankGradients(ready, positions, dtypes)
        return gradients

    def partition(self, cap_mib: float, ready_order: bool) -> tuple[tuple[int, ...], ...]:
        """The buckets a cap makes of the first rank's gradients (caps that make the same ones
        replay alike)."""
        if not self.gradients:
            return ()
        grads = next(iter(self.gradients.values()))
        order = sorted(range(len(grads.gradients)), key=lambda i: grads.registration[i])
        position = {i: k for k, i in enumerate(order)}
        return tuple(tuple(b) for b in assign_buckets(
            [grads.gradients[i].size_bytes for i in order], cap_mib * MIB,
            [grads.dtypes[i] for i in order] if grads.dtypes else None,
            [position[i] for i in range(len(order))] if ready_order else None))

    def replay(self, edits: tuple[Edit, ...] = (), cap: CapEdit | None = None,
               world: WorldSize | None = None, model: CostModel | None = None,
               backend: str | None = None) -> Outcome | None:
        """This step replayed with those edits (remembered: a cap that makes the same buckets
        as another is not replayed twice); None when the edited graph has a cycle."""
        # everything the replay depends on that is not the step's own (its level and
        # gradients are: it is never changed)
        key = (edits, world, model, backend, None if cap is None else (
            self.partition(cap.cap_mib, cap.ready_order), cap.gradient_kind, cap.gathers))
        if key not in self._cache:
            cost = CollectiveCost(model, self.level or 1.0, backend) if model else None
            rebucket = None if cap is None else Rebucket(
                cap.cap_mib, cap.gradient_kind, cap.gathers, self.gradients, cap.ready_order)
            try:
                self._cache[key] = replay_edited(self.graph, self.tax, list(edits), rebucket,
                                                 world, cost, self.work)
            except CycleError:    # the edit made the step's dependencies contradict
                self._cache[key] = None
        return self._cache[key]
