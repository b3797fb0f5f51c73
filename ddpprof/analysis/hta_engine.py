"""``--engine hta``: HolisticTraceAnalysis itself computes the GPU breakdown and overlap.

HTA is an optional extra (``pip install ddpprof[hta]``). It reads every JSON file of a folder,
so it is pointed at a temporary folder that links to the rank traces alone.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from ..core.errors import UsageError
from ..metrics.breakdown import Breakdown


def hta_breakdowns(traces: list[Path], keep_last_step: bool) -> dict[int, Breakdown]:
    """Per rank: HTA's temporal breakdown (µs) and overlap, as a :class:`Breakdown` whose comm
    fields are left for the caller (HTA gives only the overlap ratio)."""
    try:
        from hta.trace_analysis import TraceAnalysis  # HTA: optional (--engine hta)
    except ImportError:
        raise UsageError("--engine hta needs HolisticTraceAnalysis: "
                         "pip install 'ddpprof[hta]'") from None
    with tempfile.TemporaryDirectory(prefix="ddpprof-hta-") as folder:
        for trace in traces:
            (Path(folder) / trace.name).symlink_to(trace.resolve())
        analysis = TraceAnalysis(trace_dir=folder, include_last_profiler_step=keep_last_step)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    ratios = {rank: pct / 100 for rank, pct in
              zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=True)}
    result = {}
    for row in temporal.to_dict("records"):
        # comm_us = 1 and overlap_us = the ratio make Breakdown.overlap_pct HTA's number
        result[int(row["rank"])] = Breakdown(
            window_us=float(row["kernel_time(us)"]), compute_us=float(row["compute_time(us)"]),
            non_compute_us=float(row["non_compute_time(us)"]),
            idle_us=float(row["idle_time(us)"]), comm_us=1.0,
            overlap_us=float(ratios[row["rank"]]), exposed_comm_us=0.0)
    return result


def with_native_comm(hta: Breakdown, native: Breakdown) -> Breakdown:
    """HTA's shares and overlap ratio, with the communication times ddpprof measured."""
    return replace(hta, comm_us=native.comm_us, overlap_us=hta.overlap_us * native.comm_us,
                   exposed_comm_us=native.exposed_comm_us)
