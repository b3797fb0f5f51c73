"""``record --fault KIND[:RANK[:AMOUNT]]``: the option, checked against each run before
anything starts, handed to the ranks, and recorded as the run's ground truth. The kinds and
what each does are ``workloads/faults.py``'s (its registry imports no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..core.errors import UsageError
from ..grammar.options import ParamType
from ..run.config import RunConfig
from ..run.manifest import InjectedFault

if TYPE_CHECKING:
    from workloads.faults import Fault, FaultSpec

    from .launcher import Recording


class FaultOption(ParamType):
    """``KIND[:RANK[:AMOUNT]]``, its syntax, kind and amount checked (the rank against the
    world size later, in :func:`checked_config`)."""

    name = "fault"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> FaultSpec:
        # the workloads: torchrun's side, off the analysis's start
        from workloads.faults import FaultError, FaultSpec, parse

        if isinstance(value, FaultSpec):
            return value
        try:
            return parse(str(value))
        except FaultError as error:
            self.fail(str(error), param, ctx)


FAULT = FaultOption()


def kind_names() -> str:
    # the workloads: torchrun's side, off the analysis's start
    from workloads.faults import FAULT_KINDS

    return ", ".join(FAULT_KINDS)


def checked_config(recording: Recording, variant: str, config: RunConfig) -> RunConfig:
    """The configuration of ``variant``'s run, its faults checked against it (a culprit rank
    outside its world, a fault its variant cannot take): a ``UsageError`` naming the fault."""
    # the workloads: torchrun's side, off the analysis's start
    from workloads.faults import FaultError, problem

    try:
        run = recording.run_config(variant, config.backend, config)
    except FaultError as error:
        raise UsageError(f"--fault {error}") from None
    for spec, fault in zip(recording.faults, recording.run_faults(run), strict=True):
        if reason := problem(fault, run):
            raise UsageError(f"--fault {spec.kind}: {reason}")
    return run


def ground_truth(faults: list[Fault]) -> list[InjectedFault] | None:
    """``run.json``'s ``injected_faults`` (None for a run without faults)."""
    if not faults:
        return None
    # the workloads: torchrun's side, off the analysis's start
    from workloads.faults import FAULT_KINDS

    return [InjectedFault(kind=f.kind, rank=f.rank, amount=f.amount,
                          unit=FAULT_KINDS[f.kind].unit or None) for f in faults]


def environment(faults: list[Fault]) -> dict[str, str]:
    """What hands the faults to the ranks (nothing for a run without)."""
    if not faults:
        return {}
    # the workloads: torchrun's side, off the analysis's start
    from workloads.faults import FAULTS_ENV, to_env

    return {FAULTS_ENV: to_env(faults)}
