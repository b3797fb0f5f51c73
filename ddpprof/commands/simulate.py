"""``ddpprof simulate``: predictions for a recorded run under other bucket caps and world
sizes (``ddpprof.simulate``), the replay made by ``Job.simulate``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..core import progress
from ..core.errors import UsageError
from ..core.storage import location_of, report_name
from ..graph.whatif import parse_edits
from ..job import Job
from ..render.output import Output, Outputs, Section
from ..render.table import Column, Table, columns, terminal_text
from ..report.pages import simulate_page
from ..simulate import output as sim_output
from ..simulate.run import replay_inputs

#: The table of the predictions (``SimulateRow``), named as every other command names them.
COLUMNS = [*columns("variant", "world_size", "bucket_cap_mib", "step_ms"),
           Column("exposed_comm_ms_per_step"),
           *columns("overlap_pct", "efficiency", "measured_step_ms", "error_pct",
                    wide=("buckets", "recorded"))]


@dataclass(frozen=True)
class SimulateOptions:
    """``ddpprof simulate``'s options, as parsed (``ddpprof.cli``)."""

    run_path: Path
    bucket_caps_mib: tuple[float, ...]
    world_sizes: tuple[int, ...]
    faster: tuple[str, ...]
    faster_network: tuple[str, ...]
    rank_delay: tuple[str, ...]
    calibration: Path | None
    bandwidth_gbps: float | None
    latency_us: float | None
    shared_cores: int | None
    ready_order: bool
    measured: Path | None
    keep_last_step: bool


def simulate(chosen: SimulateOptions, outputs: Outputs) -> Output:
    run_path, calibration, measured = chosen.run_path, chosen.calibration, chosen.measured
    edits = parse_edits(chosen.faster, chosen.faster_network, chosen.rank_delay)

    if (chosen.bandwidth_gbps is None) != (chosen.latency_us is None):
        raise UsageError("--bandwidth-gbps and --latency-us go together")
    if calibration is not None and chosen.bandwidth_gbps is not None:
        raise UsageError("--calibration, or --bandwidth-gbps with --latency-us: not both")
    page_name = f"{report_name(location_of(str(run_path)))}-simulate"
    outputs.check(page_name, what="an input of simulate", files=[
        *(f for f in (measured, calibration) if f),
        *(run_path.glob("*.json*") if run_path.is_dir() else [run_path])])

    def note(text: str) -> None:
        print(terminal_text(f"simulate: {text}"), file=sys.stderr, flush=True)

    with progress.working(outputs.quiet, f"simulating {run_path}"):
        found = replay_inputs(run_path, chosen.bandwidth_gbps, chosen.latency_us, measured,
                              calibration, chosen.keep_last_step, on_note=note, edits=edits)
        job = Job(found.run, found.options, (run_path,), path=run_path)
        result = job.simulate(edits, chosen.bucket_caps_mib, chosen.world_sizes or None,
                              costs=found.costs, ready_order=chosen.ready_order,
                              measured=found.sweep_points,
                              shared_cores=chosen.shared_cores).simulation
    summary = sim_output.summary_lines(result)
    table = Table(COLUMNS, result.rows)

    def page() -> str:
        return simulate_page(result, summary, table)

    return Output(sim_output.to_json_document(result), [table],
                  [Section(None, sim_output.verdict_lines(result))],
                  intro=summary, page=page, page_name=page_name, title="ddpprof simulate")
