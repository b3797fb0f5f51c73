"""The findings, told what the critical path says: each finding of a run names the work on its
median step's critical path that the change it advises would shorten, and how much of the
step that work is (the most the change can save: another path may take over)."""

from __future__ import annotations

from dataclasses import replace

from ..findings import Evidence, Finding
from .path import COMMUNICATION, COMPUTE, HOST, WAITING
from .summary import StepPath

#: The path category each finding's advice shortens.
SHORTENS = {"no_overlap": COMMUNICATION, "bucket_cap_too_large": COMMUNICATION,
            "exposed_tail": COMMUNICATION, "grad_accum_opportunity": COMMUNICATION,
            "latency_bound": COMMUNICATION, "straggler": WAITING, "host_bound": HOST,
            "dataloader": HOST}


def median_step(steps: list[StepPath], run: str) -> StepPath | None:
    mine = sorted((s for s in steps if s.run == run), key=lambda s: s.step_us)
    return mine[len(mine) // 2] if mine else None


def with_critical_path(findings: list[Finding], steps: list[StepPath]) -> list[Finding]:
    """``findings`` with a sentence and evidence from the critical path added to each whose
    change shortens a category of it."""
    told = []
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
        told.append(replace(finding, message=finding.message + sentence, evidence=[
            *finding.evidence, Evidence("critical_path_share_pct", round(share, 2), "%"),
            Evidence("critical_path_work", work[0].name if work else None)]))
    return told
