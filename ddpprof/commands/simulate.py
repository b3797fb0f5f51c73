"""``ddpprof simulate``: predictions for a recorded run under other bucket caps and world
sizes (``ddpprof.simulate``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import UsageError
from ..report.output import Output, Outputs, Section
from ..report.table import Table, terminal_text


def simulate(run_path: Path, bucket_caps_mib: list[float], world_sizes: list[int],
             faster: Sequence[str], faster_network: Sequence[str], rank_delay: Sequence[str],
             calibration: Path | None, bandwidth_gbps: float | None, latency_us: float | None,
             shared_cores: int | None, ready_order: bool, measured: Path | None,
             keep_last_step: bool, outputs: Outputs) -> Output:
    from ..graph.whatif import parse_edits
    from ..simulate import output as sim_output
    from ..simulate.run import simulate_run

    edits = parse_edits(faster, faster_network, rank_delay)

    if (bandwidth_gbps is None) != (latency_us is None):
        raise UsageError("--bandwidth-gbps and --latency-us go together")
    if calibration is not None and bandwidth_gbps is not None:
        raise UsageError("--calibration, or --bandwidth-gbps with --latency-us: not both")
    outputs.check("simulate", what="an input of simulate", files=[
        *(f for f in (measured, calibration) if f),
        *(run_path.glob("*.json*") if run_path.is_dir() else [run_path])])

    def note(text: str) -> None:
        print(terminal_text(f"simulate: {text}"), file=sys.stderr, flush=True)

    result = simulate_run(run_path, bucket_caps_mib, world_sizes or None, bandwidth_gbps,
                              latency_us, measured, calibration, ready_order, keep_last_step,
                              on_note=note, edits=edits, shared_cores=shared_cores)
    summary = sim_output.summary_lines(result)
    table = Table(sim_output.COLUMNS, result.rows)

    def page() -> str:
        from ..report.pages import simulate_page

        return simulate_page(result, summary, table)

    return Output(sim_output.to_json_document(result), [table],
                  [Section(None, sim_output.verdict_lines(result))],
                  intro=summary, page=page, page_name="simulate", title="ddpprof simulate")
