"""Faults with a known culprit, injected into a recorded run: ``ddpprof record --fault
KIND[:RANK[:AMOUNT]]`` (repeatable), a testing option.

A fault leaves no marker in the trace: no span, annotation or name of its own, no
``record_function`` around it. What the trace shows is what the fault really does (the extra
matrix products of ``slow_compute``, a rank's ops slowed by the busy process beside it, a gap in
which nothing traced runs), as a real cause would show it. ``run.json`` records each fault
under ``injected_faults`` (the ground truth), which the analysis never reads; the run's
configuration (``config``) holds no fault, only what a fault changes in it, as a user would
have set it (a bucket cap, a batch).

The registry (:data:`FAULT_KINDS`) is the one place that knows a kind: its scope (one culprit
rank, or every rank), its amount (unit, default), the findings that diagnose it (its ground
truth, which ``benchmarks/diagnose.py`` holds the analysis to), how it changes the run's
configuration (in the launcher) and how it is injected (on each rank, through the hooks of
:class:`Injection` that ``workloads/train.py`` calls). A new kind is an entry here and, where it
needs one, a subclass of :class:`Injection`. The registry imports no torch: ``ddpprof record``
validates ``--fault`` with it before anything starts.
"""

from __future__ import annotations

import difflib
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

    from ddpprof.run.config import RunConfig
    from ddpprof.variants.base import DataParallel

#: The fault the launcher hands every rank, as JSON (``[{"kind", "rank", "amount"}]``).
FAULTS_ENV = "DDPPROF_FAULTS"


@dataclass(frozen=True)
class Fault:
    """One fault of a run, resolved: its kind, its culprit rank (None for a kind that has
    none) and its amount in the kind's unit."""

    kind: str
    rank: int | None
    amount: float | None

    @property
    def spec(self) -> str:
        """As ``--fault`` takes it."""
        rank = "" if self.rank is None else str(self.rank)
        amount = "" if self.amount is None else f"{self.amount:g}"
        return ":".join([self.kind, rank, amount]).rstrip(":")


@dataclass(frozen=True)
class RankContext:
    """What an injection needs to know of the rank it runs on."""

    rank: int
    local_rank: int
    world_size: int
    model: DataParallel
    device: torch.device
    seed: int


class Injection:
    """What a fault does on one rank, through the training loop's hooks (each is a no-op
    here; a kind overrides those it needs). ``workloads/train.py`` calls them in this order
    each step: :meth:`step_starts`; per micro-batch, once its batch is made,
    :meth:`before_forward`, then forward and backward (hooks a kind installs on the model run
    inside); :meth:`before_collective` before each gradient collective a hand-written variant
    launches (``ddpprof.variants.base.COLLECTIVE_HOOKS``: not PyTorch DDP's or FSDP's, whose
    collectives are launched inside torch); then the gradient sync (:meth:`sync_gradients`
    in its place when :attr:`replaces_gradient_sync`), the optimizer; :meth:`close` after the
    last step, whatever happened."""

    replaces_gradient_sync = False

    def __init__(self, fault: Fault | None = None, context: RankContext | None = None) -> None:
        """Set up on the rank of ``context`` (install hooks on the model, start processes)."""

    def step_starts(self, step: int) -> None:
        """At the start of each step, before its data is made."""

    def before_forward(self, step: int) -> None:
        """Once a micro-batch's data is made, before its forward."""

    def before_collective(self, kind: str, tensor: torch.Tensor) -> None:
        """Before each gradient collective of a hand-written variant."""

    def sync_gradients(self, model: DataParallel) -> None:
        """The gradient sync, when the kind replaces the variant's."""

    def close(self) -> None:
        """After the last step (and on failure)."""


Scope = Literal["rank", "all"]


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault (see the module's docstring)."""

    name: str
    summary: str                        # one line, for --help and the docs
    #: ``rank``: one culprit rank (``KIND:RANK:AMOUNT``, the last rank when not given);
    #: ``all``: every rank alike, or no rank in particular (``KIND::AMOUNT``; no rank)
    scope: Scope
    unit: str = ""                      # of the amount ("" for a kind without one)
    default_amount: float | None = None
    integer_amount: bool = False
    #: The finding codes that diagnose it (any one of them, as the top finding); empty: no
    #: finding of high severity should appear (the clean run)
    expected_codes: tuple[str, ...] = ()
    #: Whether the diagnosis must name the culprit rank; False for a kind with no culprit,
    #: whose top finding must then name no rank (``jitter``)
    names_rank: bool = False
    #: Why this run cannot take the fault (a variant without buckets...), or None
    problem: Callable[[RunConfig, Fault], str | None] = lambda config, fault: None
    #: The run's configuration with the fault's change (before the launch)
    configure: Callable[[RunConfig, Fault], RunConfig] = lambda config, fault: config
    #: What it does on a rank (None: nothing beyond ``configure``)
    inject: Callable[[Fault, RankContext], Injection] | None = field(default=None, repr=False)

    def culprit(self, fault: Fault) -> int | None:
        return fault.rank if self.scope == "rank" else None


# --- injections ---------------------------------------------------------------------------

class _Sleep(Injection):
    """``late_join``: the rank sleeps ``ms`` at the start of every step, untraced."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        self.seconds = (fault.amount or 0) / 1e3 if context.rank == fault.rank else 0.0

    def step_starts(self, step: int) -> None:
        if self.seconds:
            time.sleep(self.seconds)


class _Jitter(Injection):
    """``jitter``: each step one rank sleeps ``ms`` at its start, a different rank from the
    step before, drawn from a generator every rank seeds alike (so that they agree)."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        self.rank, self.seconds = context.rank, (fault.amount or 0) / 1e3
        self.random = random.Random(context.seed * 7919 + 17)
        self.world_size, self.previous = context.world_size, -1

    def step_starts(self, step: int) -> None:
        slow = self.random.choice([r for r in range(self.world_size) if r != self.previous])
        self.previous = slow
        if slow == self.rank:
            time.sleep(self.seconds)


class _SlowData(Injection):
    """``slow_data``: once its batch is made, the rank spends ``ms`` more on the CPU (as a
    decoding step written in Python would), outside any op."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        self.seconds = (fault.amount or 0) / 1e3 if context.rank == fault.rank else 0.0

    def before_forward(self, step: int) -> None:
        if self.seconds:
            until, spin = time.perf_counter() + self.seconds, 0
            while time.perf_counter() < until:
                spin += 1


class _SlowCompute(Injection):
    """``slow_compute``: in the rank's backward, each linear layer computes the product of its
    output gradient with its weight (the input gradient's product) AMOUNT more times, from a
    hook on the layer's output (it runs inside the autograd node's own span: aten::mm calls,
    as a heavier layer would make)."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        import torch

        self.handles: list[Any] = []
        if context.rank != fault.rank:
            return
        repeats = int(fault.amount or 0)

        def extra_work(layer: torch.nn.Linear) -> Callable[[torch.Tensor], None]:
            def hook(grad: torch.Tensor) -> None:
                with torch.no_grad():
                    for _ in range(repeats):
                        torch.matmul(grad, layer.weight)
            return hook

        def on_forward(layer: torch.nn.Module, inputs: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(extra_work(layer))   # type: ignore[arg-type]

        for module in context.model.modules():
            if isinstance(module, torch.nn.Linear):
                self.handles.append(module.register_forward_hook(on_forward))

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


class _Contention(Injection):
    """``cpu_contention``: the rank is pinned to one core (its local rank's, among the cores
    it may use) and AMOUNT busy processes are pinned beside it, for the whole run. They die
    with the rank (and the launcher reaps what is left)."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        self.hogs: list[subprocess.Popen[bytes]] = []
        if context.rank != fault.rank or not hasattr(os, "sched_setaffinity"):
            return
        from ddpprof.core.processes import preexec_die_with_parent

        cores = sorted(os.sched_getaffinity(0))
        core = cores[context.local_rank % len(cores)]
        os.sched_setaffinity(0, {core})
        die = preexec_die_with_parent()

        def pinned() -> None:
            die()
            os.sched_setaffinity(0, {core})

        for _ in range(int(fault.amount or 1)):
            self.hogs.append(subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pinned))

    def close(self) -> None:
        for hog in self.hogs:
            hog.kill()
            hog.wait()
        self.hogs = []


class _BlockingSync(Injection):
    """``blocking_sync``: the variant's gradient sync does not run in backward (backward runs
    under its ``no_sync``); after backward each gradient is all-reduced in turn, each call
    waited on before the next: nothing overlaps."""

    replaces_gradient_sync = True

    def sync_gradients(self, model: DataParallel) -> None:
        import torch.distributed as dist

        for param in model.trainable_parameters():
            if param.grad is not None:
                dist.all_reduce(param.grad)
                param.grad.div_(model.world_size)


class _TinyOps(Injection):
    """``host_bound``: before each forward, AMOUNT element-wise ops on a 16-element tensor (as
    a model written op by op in Python makes): the step is spent dispatching them."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        import torch

        self.ops = int(fault.amount or 0)
        self.tensor = torch.zeros(16, device=context.device)

    def before_forward(self, step: int) -> None:
        value = self.tensor
        for _ in range(self.ops):
            value = value.add(1.0)


# --- validation and configuration ------------------------------------------------------------

def _bucketed(config: RunConfig, fault: Fault) -> str | None:
    from ddpprof.variants import VARIANTS

    if not VARIANTS[config.variant].bucketed:
        return f"variant {config.variant!r} has no gradient buckets"
    return None


def _data_parallel(config: RunConfig, fault: Fault) -> str | None:
    from ddpprof.variants import VARIANTS

    info = VARIANTS[config.variant]
    if info.sharded or info.tensor_parallel or not info.distributed:
        return (f"variant {config.variant!r} does not all-reduce whole gradients (a "
                "data-parallel variant without sharding does)")
    return None


def _with_cap(config: RunConfig, fault: Fault) -> RunConfig:
    return config.replace(bucket_cap_mib=fault.amount)


def _with_small_batch(config: RunConfig, fault: Fault) -> RunConfig:
    accumulation = config.grad_accum or 1
    return config.replace(global_batch=int(fault.amount or 1) * config.data_parallel_size
                          * accumulation)


def _ranks(config: RunConfig, fault: Fault) -> str | None:
    if config.world_size < 2:
        return "it needs at least 2 ranks"
    return None


def _hang_kinds() -> tuple[FaultKind, ...]:
    """The kinds that hang a run at step AMOUNT (``ddpprof hang``'s tests, in
    workloads/hang_faults.py): ``analyze`` finds each from the ranks' Flight Recorder dumps."""
    from .hang_faults import KINDS, inject, problem

    return tuple(FaultKind(name, summary, "rank", "step", 4, True, ("hang",), True,
                           problem=problem, inject=inject) for name, summary in KINDS)


#: Every kind, by name. ``expected_codes`` are ``ddpprof.advice`` codes (docs/findings.md
#: has the table).
FAULT_KINDS: dict[str, FaultKind] = {kind.name: kind for kind in (
    FaultKind("none", "nothing: the negative control", "all"),
    FaultKind("slow_compute", "the rank's backward repeats each linear layer's input-gradient "
              "product AMOUNT more times", "rank", "x", 2, True,
              ("slow_rank_compute",), True, inject=_SlowCompute),
    FaultKind("slow_data", "the rank spends AMOUNT ms more on the CPU making each batch, "
              "before forward, outside any op", "rank", "ms", 20,
              expected_codes=("slow_rank_untraced",), names_rank=True, inject=_SlowData),
    FaultKind("cpu_contention", "the rank is pinned to a core and AMOUNT busy processes are "
              "pinned beside it", "rank", "processes", 1, True,
              ("slow_rank_contended",), True, inject=_Contention),
    FaultKind("late_join", "the rank sleeps AMOUNT ms at the start of every step, untraced",
              "rank", "ms", 20, expected_codes=("slow_rank_untraced",), names_rank=True,
              inject=_Sleep),
    FaultKind("jitter", "each step a different rank sleeps AMOUNT ms at its start", "all",
              "ms", 20, expected_codes=("rotating_straggler",), problem=_ranks,
              inject=_Jitter),
    FaultKind("bucket_too_large", "the bucket cap set to AMOUNT MiB (one bucket for the "
              "models here)", "all", "MiB", 1024, expected_codes=("bucket_cap_too_large",),
              problem=_bucketed, configure=_with_cap),
    FaultKind("bucket_too_small", "the bucket cap set to AMOUNT MiB (a bucket per parameter)",
              "all", "MiB", 0.01, expected_codes=("bucket_cap_too_small",),
              problem=_bucketed, configure=_with_cap),
    FaultKind("blocking_sync", "backward without the variant's sync, then a blocking "
              "all-reduce of each gradient in turn", "all",
              expected_codes=("no_overlap",), problem=_data_parallel, inject=_BlockingSync),
    FaultKind("comm_bound", "AMOUNT samples per rank per step: far too little work for the "
              "gradients each step communicates", "all", "samples", 1, True,
              ("comm_bound",), configure=_with_small_batch),
    FaultKind("host_bound", "AMOUNT tiny element-wise ops before each forward on every rank",
              "all", "ops", 3000, True, ("host_bound",), inject=_TinyOps),
    *_hang_kinds(),
)}


# --- parsing and resolving ------------------------------------------------------------------

class FaultError(ValueError):
    """A ``--fault`` that cannot be taken; its message is one line."""


@dataclass(frozen=True)
class FaultSpec:
    """``KIND[:RANK[:AMOUNT]]`` as given: the rank and amount None where not given."""

    kind: str
    rank: int | None = None
    amount: float | None = None

    def resolve(self, world_size: int) -> Fault:
        """The fault in a run of ``world_size`` ranks: a culprit kind's rank defaults to the
        last rank; a rank outside the world is a ``FaultError``."""
        kind = FAULT_KINDS[self.kind]
        rank = None
        if kind.scope == "rank":
            rank = world_size - 1 if self.rank is None else self.rank
            if rank >= world_size:
                raise FaultError(f"{self.kind}: rank {rank} is outside the world of "
                                 f"{world_size} rank(s) (0 to {world_size - 1})")
        amount = self.amount if self.amount is not None else kind.default_amount
        return Fault(self.kind, rank, amount)


def parse(text: str) -> FaultSpec:
    """``KIND[:RANK[:AMOUNT]]``; ``KIND[::AMOUNT]`` for a kind of every rank."""
    parts = text.strip().split(":")
    name = parts[0]
    if name not in FAULT_KINDS:
        close = difflib.get_close_matches(name, list(FAULT_KINDS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise FaultError(f"unknown fault kind {name!r} ({hint}choose from "
                         f"{', '.join(FAULT_KINDS)})")
    if len(parts) > 3:
        raise FaultError(f"{text!r}: expected KIND[:RANK[:AMOUNT]]")
    kind = FAULT_KINDS[name]
    rank_text = parts[1].strip() if len(parts) > 1 else ""
    amount_text = parts[2].strip() if len(parts) > 2 else ""
    rank = None
    if rank_text:
        if kind.scope == "all":
            raise FaultError(f"{name} takes no rank (it concerns every rank): write "
                             f"{name}::AMOUNT")
        if not rank_text.isdigit():
            raise FaultError(f"{name}: rank {rank_text!r} is not a rank number (0, 1, ...)")
        rank = int(rank_text)
    amount = None
    if amount_text:
        if kind.default_amount is None:
            raise FaultError(f"{name} takes no amount")
        amount = _amount(kind, amount_text)
    return FaultSpec(name, rank, amount)


def _amount(kind: FaultKind, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FaultError(f"{kind.name}: amount {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise FaultError(f"{kind.name}: amount {text!r} must be a positive number "
                         f"({kind.unit})")
    if kind.integer_amount and value != int(value):
        raise FaultError(f"{kind.name}: amount {text!r} must be a whole number of "
                         f"{kind.unit}")
    return value


def problem(fault: Fault, config: RunConfig) -> str | None:
    """Why ``config``'s run cannot take ``fault`` (beyond its rank and amount), or None."""
    from ddpprof.variants import VARIANTS

    if fault.kind != "none" and not VARIANTS[config.variant].distributed:
        return f"variant {config.variant!r} runs one process"
    return FAULT_KINDS[fault.kind].problem(config, fault)


def configure(config: RunConfig, faults: list[Fault]) -> RunConfig:
    """``config`` with each fault's change to it (a bucket cap, a batch)."""
    for fault in faults:
        config = FAULT_KINDS[fault.kind].configure(config, fault)
    return config


# --- on a rank --------------------------------------------------------------------------------

def to_env(faults: list[Fault]) -> str:
    import json

    return json.dumps([{"kind": f.kind, "rank": f.rank, "amount": f.amount} for f in faults])


def from_env() -> list[Fault]:
    """The faults the launcher handed this rank (``FAULTS_ENV``), none when it handed none."""
    import json

    text = os.environ.get(FAULTS_ENV)
    if not text:
        return []
    return [Fault(str(f["kind"]), f["rank"], f["amount"]) for f in json.loads(text)]


class RankFaults(Injection):
    """Every fault's injection on one rank, each hook called on each in turn."""

    def __init__(self, faults: list[Fault], context: RankContext) -> None:
        self.injections = [kind.inject(fault, context) for fault in faults
                           if (kind := FAULT_KINDS[fault.kind]).inject is not None]
        self.replaces_gradient_sync = any(i.replaces_gradient_sync for i in self.injections)

    @property
    def hooks_collectives(self) -> bool:
        """Whether some injection overrides :meth:`Injection.before_collective`."""
        return any(type(i).before_collective is not Injection.before_collective
                   for i in self.injections)

    def step_starts(self, step: int) -> None:
        for injection in self.injections:
            injection.step_starts(step)

    def before_forward(self, step: int) -> None:
        for injection in self.injections:
            injection.before_forward(step)

    def before_collective(self, kind: str, tensor: torch.Tensor) -> None:
        for injection in self.injections:
            injection.before_collective(kind, tensor)

    def sync_gradients(self, model: DataParallel) -> None:
        for injection in self.injections:
            if injection.replaces_gradient_sync:
                injection.sync_gradients(model)

    def close(self) -> None:
        for injection in self.injections:
            injection.close()
