"""The smaller self-contained pages of ``bench``, ``sweep``, ``simulate`` and ``calibrate``: an
introduction, the command's table and its figures, plotly.js inlined once."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from ..render.charts import colour, embed, generated, layout, plotly_js
from ..render.table import Table, counted, format_cell, template_environment
from ..sweep.bucket_caps import series
from ..variants import DEFAULT_BUCKET_CAP_MIB

if TYPE_CHECKING:
    from ..bench.scaling import BenchDocument, BenchRow
    from ..simulate.calibrate import PointRow
    from ..simulate.results import SimulateRow, Simulation
    from ..sweep.bucket_caps import SweepDocument, SweepRow


def render_page(title: str, intro: list[str], table: Table, figures: list[go.Figure]) -> str:
    """Text, one table (every column), figures."""
    result: str = template_environment(html=True).get_template("figures.html.j2").render(
        title=title, generated=generated(), intro=intro,
        headers=[c.title for c in table.columns],
        rows=[[format_cell(table.shown_value(row, c)) for c in table.columns]
              for row in table.rows],
        figures=[embed(fig) for fig in figures], plotly_js=plotly_js())
    return result


def log_range(values: list[float]) -> list[float]:
    """A log axis's range (in log10, as plotly takes it) that holds ``values`` with a little
    room on each side, and no more."""
    low, high = math.log10(min(values)), math.log10(max(values))
    pad = max(0.08 * (high - low), 0.1)
    return [low - pad, high + pad]


def default_cap_marker(fig: go.Figure, caps: list[float], steps: list[float]) -> None:
    """The default bucket cap as a dashed vertical line over the data's step times, when it
    is within the caps drawn (a line of the data: never beyond the axis's range)."""
    if not caps or not steps or not min(caps) <= DEFAULT_BUCKET_CAP_MIB <= max(caps):
        return
    fig.add_trace(go.Scatter(x=[DEFAULT_BUCKET_CAP_MIB] * 2, y=[min(steps), max(steps)],
                             mode="lines", line=dict(dash="dash", color="#888"),
                             name=f"default {DEFAULT_BUCKET_CAP_MIB:g} MiB", hoverinfo="skip"))


def valley_figure(rows: list[SweepRow]) -> go.Figure:
    """Step time against bucket size, one line per variant, the default size marked."""
    fig = go.Figure()
    for index, name in enumerate(dict.fromkeys(series(r, rows) for r in rows)):
        mine = [r for r in rows if series(r, rows) == name and r.step_ms is not None]
        fig.add_trace(go.Scatter(
            x=[r.bucket_cap_mib for r in mine], y=[r.step_ms for r in mine],
            mode="lines+markers", name=name, line=dict(color=colour(index)),
            text=[f"overlap {format_cell(r.overlap_pct)} %, "
                  f"{format_cell(r.gradient_calls_per_step)} "
                  f"{(r.gradient_collective or 'collective').replace('_', '-')}s/step"
                  for r in mine],
            hovertemplate="%{x} MiB: %{y:.1f} ms<br>%{text}<extra></extra>"))
    caps = [r.bucket_cap_mib for r in rows if r.step_ms is not None]
    default_cap_marker(fig, caps, [r.step_ms for r in rows if r.step_ms is not None])
    return layout(fig, "Step time against bucket size", xaxis_type="log",
                  xaxis_range=log_range(caps) if caps else None,
                  xaxis_title="bucket cap (MiB, log scale)", yaxis_title="step time (ms)")


def sweep_page(document: SweepDocument, table: Table) -> str:
    intro = [f"{', '.join(document.models)}; {', '.join(map(str, document.nprocs))} ranks per "
             f"node; global batch "
             f"{document.global_batch}. Step time is the median of each run's unprofiled "
             "steps; overlap and calls come from its profiled steps."]
    return render_page("ddpprof sweep: bucket size", intro, table,
                       [valley_figure(document.rows)])


def calibration_figure(rows: list[PointRow]) -> go.Figure:
    """Bus and algorithm bandwidth against size (log x), and the fitted model's bus
    bandwidth."""
    sizes = [r.size_bytes for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=sizes, y=[r.busbw_gbps for r in rows], mode="lines+markers",
                             name="busbw (measured)"))
    fig.add_trace(go.Scatter(x=sizes, y=[r.algbw_gbps for r in rows], mode="lines+markers",
                             name="algbw (measured)"))
    fig.add_trace(go.Scatter(
        x=sizes, y=[r.busbw_gbps * r.time_us / r.model_time_us for r in rows],
        mode="lines", line=dict(dash="dot"), name="busbw of the fit α + traffic/β"))
    return layout(fig, "All-reduce bandwidth against size", xaxis_type="log",
                  xaxis_title="size (bytes, log scale)", yaxis_title="GB/s")


def calibration_page(summary: str, table: Table, rows: list[PointRow]) -> str:
    return render_page("ddpprof calibrate: all-reduce", [summary], table,
                       [calibration_figure(rows)])


def speedup_figure(rows: list[BenchRow]) -> go.Figure:
    """Speedup against ``single`` by process count: one line per model and variant."""
    fig = go.Figure()
    for index, (model, variant) in enumerate(dict.fromkeys((r.model, r.variant) for r in rows)):
        mine = sorted((r for r in rows if (r.model, r.variant) == (model, variant)
                       and r.speedup is not None), key=lambda r: r.nproc)
        if mine:
            fig.add_trace(go.Scatter(x=[r.nproc for r in mine], y=[r.speedup for r in mine],
                                     mode="lines+markers", name=f"{model} {variant}",
                                     line=dict(color=colour(index))))
    counts = sorted({r.nproc for r in rows})
    fig.add_trace(go.Scatter(x=counts, y=counts, mode="lines", name="linear",
                             line=dict(dash="dot", color="#999")))
    return layout(fig, "Speedup against single, by number of processes",
                  xaxis_title="processes", yaxis_title="speedup")


def throughput_figure(rows: list[BenchRow]) -> go.Figure:
    fig = go.Figure()
    for variant in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == variant]
        fig.add_trace(go.Bar(x=[f"{r.model} x{r.nproc}" for r in mine],
                             y=[r.samples_per_s for r in mine], name=variant))
    return layout(fig, "Throughput (samples/s, median of repeats)", barmode="group",
                  yaxis_title="samples/s")


def bench_page(document: BenchDocument, table: Table) -> str:
    intro = [f"{document.repeats} interleaved repeats, unprofiled, the first "
             f"{document.warmup_steps} steps of each run left out; global batch "
             f"{document.global_batch}. Step time is the median over steps, then the min and "
             "median over repeats."]
    return render_page("ddpprof bench", intro, table,
                       [speedup_figure(document.rows), throughput_figure(document.rows)])


def prediction_figure(rows: list[SimulateRow]) -> go.Figure:
    """Predicted step time against bucket size per world size, measured points on top."""
    fig = go.Figure()
    for index, n in enumerate(dict.fromkeys(r.world_size for r in rows)):
        mine = [r for r in rows if r.world_size == n]
        fig.add_trace(go.Scatter(x=[r.bucket_cap_mib for r in mine],
                                 y=[r.step_ms for r in mine], mode="lines+markers",
                                 line=dict(color=colour(index)),
                                 name=f"predicted, {counted(n, 'rank')}"))
    measured = [r for r in rows if r.measured_step_ms]
    if measured:
        fig.add_trace(go.Scatter(x=[r.bucket_cap_mib for r in measured],
                                 y=[r.measured_step_ms for r in measured], mode="markers",
                                 marker=dict(size=11, symbol="x", color="black"),
                                 name=f"measured, {counted(measured[0].world_size, 'rank')}"))
    caps = [r.bucket_cap_mib for r in rows if r.bucket_cap_mib is not None]
    steps = [r.step_ms for r in rows] + [r.measured_step_ms for r in measured
                                         if r.measured_step_ms]
    default_cap_marker(fig, caps, steps)
    return layout(fig, "Predicted step time against bucket size", xaxis_type="log",
                  xaxis_range=log_range(caps) if caps else None,
                  xaxis_title="bucket cap (MiB, log scale)", yaxis_title="step time (ms)")


def simulate_page(simulation: Simulation, summary: list[str], table: Table) -> str:
    capped = [r for r in simulation.rows if r.bucket_cap_mib is not None]
    return render_page("ddpprof simulate", summary, table,
                       [prediction_figure(capped)] if capped else [])
