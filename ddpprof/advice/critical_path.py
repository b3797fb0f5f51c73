"""The findings, told what the critical path says: each finding of a run names the work on its
median step's critical path that the change it advises would shorten, and how much of the
step that work is (the most the change can save: another path may take over); and, where a
replay of that step can make the change (a faster network for communication, faster GEMMs for
compute, a rank that starts with the others for waiting), what the step would then take."""

from __future__ import annotations

from dataclasses import replace

from ..graph.contended import Tax
from ..graph.model import CycleError, StepGraph
from ..graph.path import COMMUNICATION, COMPUTE, HOST, WAITING, period_us, replay
from ..graph.summary import StepPath
from ..graph.whatif import Edit, edited_step_us
from ..metrics.middle import middle_index
from .model import Evidence, Finding

#: The path category each finding's advice shortens.
SHORTENS = {"no_overlap": COMMUNICATION, "bucket_cap_too_large": COMMUNICATION,
            "bucket_cap_too_small": COMMUNICATION, "exposed_tail": COMMUNICATION,
            "grad_accum_opportunity": COMMUNICATION, "latency_bound": COMMUNICATION,
            "comm_bound": COMMUNICATION, "straggler": WAITING, "slow_rank_compute": WAITING,
            "slow_rank_contended": WAITING, "slow_rank_untraced": WAITING,
            "rotating_straggler": WAITING, "host_bound": HOST, "dataloader": HOST}


def median_step(steps: list[StepPath], run: str) -> StepPath | None:
    mine = sorted((s for s in steps if s.run == run), key=lambda s: s.step_us)
    return mine[middle_index(len(mine))] if mine else None


#: The what-if replay that stands for each category's change, and how it is said.
WHAT_IF = {COMMUNICATION: (Edit("faster-network", "", 50.0), "with a network twice as fast"),
           COMPUTE: (Edit("faster", "gemm", 50.0), "with matrix products twice as fast")}


def predicted(step: StepPath, graph: StepGraph | None, category: str, tax: Tax | None
              ) -> tuple[str, float] | None:
    """The replayed step (µs) and how it was changed, for a finding of ``category``; None
    where no replay stands for its change."""
    if graph is None:
        return None
    if category == WAITING:
        rank = step.waited_for()
        waited = sum(row.us for row in step.split if row.category == WAITING)
        if rank is None or waited <= 0:
            return None
        edit, label = Edit("rank-delay", str(rank), -waited), \
            f"with rank {rank} starting {waited / 1e3:.2f} ms sooner"
    elif category in WHAT_IF:
        edit, label = WHAT_IF[category]
    else:
        return None
    try:
        return label, edited_step_us(graph, [edit], tax)
    except CycleError:
        return None


def with_critical_path(findings: list[Finding], steps: list[StepPath],
                       graphs: dict[str, list[StepGraph]] | None = None,
                       taxes: dict[str, Tax] | None = None) -> list[Finding]:
    """``findings`` with a sentence and evidence from the critical path added to each whose
    change shortens a category of it, and the replayed step where a replay stands for that
    change (``graphs``: each run's step graphs, in ``steps``' order)."""
    told = []
    replayed: dict[tuple[int, str], tuple[str, float] | None] = {}   # a replay per category
    bases: dict[int, float] = {}
    for finding in findings:
        step = median_step(steps, finding.run)
        category = SHORTENS.get(finding.code, COMPUTE)
        if step is None:
            told.append(finding)
            continue
        share = step.total_pct(category)
        if category == WAITING:
            rank = step.waited_for()
            what = (f"waiting for rank {rank}" if rank is not None else "waiting for a rank")
            work = [w for w in step.work if w.rank == rank]
        else:
            what = category
            work = [w for w in step.work if w.category == category]
        sentence = (f" On the critical path of {step.step}, {what} is {share:.1f}% of the "
                    "step" + (f", longest {work[0].name} on rank {work[0].rank} "
                              f"({work[0].pct:.1f}%)" if work else "") + ".")
        evidence = [*finding.evidence, Evidence("critical_path_share_pct", round(share, 2), "%"),
                    Evidence("critical_path_work", work[0].name if work else None)]
        graph = _graph_of(step, steps, (graphs or {}).get(finding.run))
        key = (id(graph), category)
        if key not in replayed:
            replayed[key] = predicted(step, graph, category, (taxes or {}).get(finding.run))
        made = replayed[key]
        if made is not None and graph is not None:
            if id(graph) not in bases:
                bases[id(graph)] = period_us(graph, replay(graph))
            base = bases[id(graph)]
            label, after = made
            sentence += (f" Replayed {label}, {step.step} would take {after / 1e3:.2f} ms "
                         f"({100 * (after - base) / base:+.1f}%).") if base > 0 else ""
            evidence.append(Evidence("predicted_step_ms", round(after / 1e3, 3), "ms"))
        told.append(replace(finding, message=finding.message + sentence, evidence=evidence))
    return told


def _graph_of(step: StepPath, steps: list[StepPath], graphs: list[StepGraph] | None
              ) -> StepGraph | None:
    """The graph of ``step``: each run's graphs come in the order of its paths."""
    if not graphs:
        return None
    mine = [s for s in steps if s.run == step.run]
    return graphs[mine.index(step)] if len(mine) == len(graphs) else None
