"""The self-contained HTML comparison report of ``analyze``: jinja2 page, plotly figures,
plotly.js inlined once, so the file opens from disk with no network. (The smaller pages of the
other commands are in ``pages``.)"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..analysis import Analysis, RunResult, rank_row, run_row
from ..analysis.group_rows import group_rows
from ..analysis.rows import COLUMN_KINDS, CollectiveRow, RunRow, memory_of, peak_memory_mib
from ..findings import Finding
from ..units import MIB
from ..variants import variant_info
from .table import format_cell, template_environment

TABLE_COLUMNS = [
    ("run", "Run"), ("variant", "Variant"), ("model", "Model"), ("world_size", "Ranks"),
    ("backend", "Backend"), ("compute_pct", "Compute %"), ("non_compute_pct", "Non-compute %"),
    ("idle_pct", "Idle %"), ("overlap_pct", "Overlap %"),
    ("comm_overhead_pct", "Comm overhead %"),
    ("all_reduce_calls_per_step", "All-reduce calls / step"),
    ("all_reduce_ms_per_step", "All-reduce ms / step"), ("samples_per_s", "Samples/s"),
    ("speedup_vs_single", "Speedup vs single"),
]

DEFINITIONS = [
    ("Window", "GPU: first to last analyzed kernel. CPU: the analyzed ProfilerSteps. The last "
               "step is dropped by default, as HolisticTraceAnalysis does."),
    ("Compute %", "Time some compute runs (GPU: compute kernels; CPU: ops on the training "
                  "thread, minus communication and waits), as a share of the window."),
    ("Non-compute %", "Time only communication, memory copies or waits run."),
    ("Idle %", "Time nothing runs."),
    ("Overlap %", "Share of communication time during which compute also runs: how much of "
                  "the gradient traffic hides behind backward. n/a without communication."),
    ("Comm overhead %", "Communication no compute hides (exposed), as a share of the window."),
    ("Collective calls and ms / step", "Per optimizer step (one ProfilerStep), averaged over "
                                       "ranks, by kind (all-reduce, reduce-scatter, "
                                       "all-gather); bucketed variants make fewer, larger "
                                       "calls."),
    ("Bus bandwidth", "Bytes moved / time in the calls, times 2(n-1)/n for all-reduce, "
                      "(n-1)/n for reduce-scatter and all-gather "
                      "(the nccl-tests convention)."),
]

COLORS = {"compute": "#2f7ed8", "non_compute": "#f28f43", "idle": "#c9c9c9",
          "comm": "#d64550"}
#: One colour per collective kind on the timelines, so FSDP's all-gathers and
#: reduce-scatters, and DDP's all-reduces, read apart.
KIND_COLORS = {"all_reduce": "#d64550", "all_gather": "#8e44ad", "reduce_scatter": "#e67e22",
               "all_to_all": "#16a085", "broadcast": "#7f8c8d", "send_recv": "#2c3e50"}
OTHER_KIND_COLOR = "#b03060"


def embed(fig: go.Figure) -> str:
    """A figure as a div and its script; plotly.js itself is inlined once per page."""
    return fig.to_html(full_html=False, include_plotlyjs=False,
                       config={"displaylogo": False, "responsive": True})


def generated() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def layout(fig: go.Figure, title: str, **kwargs: Any) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=kwargs.pop("height", 380),
                      margin=dict(l=60, r=20, t=50, b=60), legend=dict(orientation="h"),
                      **kwargs)
    return fig


def breakdown_figure(rows: list[RunRow]) -> go.Figure:
    names = [r.run for r in rows]
    fig = go.Figure([
        go.Bar(name=label, x=names, y=[getattr(r.metrics, key) for r in rows],
               marker_color=COLORS[color])
        for key, label, color in (("compute_pct", "compute", "compute"),
                                  ("non_compute_pct", "non-compute", "non_compute"),
                                  ("idle_pct", "idle", "idle"))])
    return layout(fig, "Where the time goes (% of the window, mean over ranks)",
                   barmode="stack", yaxis_title="%")


def overlap_figure(rows: list[RunRow]) -> go.Figure:
    fig = go.Figure([go.Bar(x=[r.run for r in rows],
                            y=[r.metrics.overlap_pct for r in rows], marker_color=COLORS["comm"],
                            text=[format_cell(r.metrics.overlap_pct) for r in rows],
                            textposition="outside", name="overlap")])
    return layout(fig, "Communication overlapped by compute (%)", yaxis_title="%",
                   yaxis_range=[0, 105])


def _kind(row: RunRow, kind: str) -> CollectiveRow:
    return row.metrics.collectives[kind]


def _kinds_present(rows: list[RunRow]) -> list[str]:
    return [k for k in COLUMN_KINDS if any(_kind(r, k).calls_per_step for r in rows)]


def collectives_figure(rows: list[RunRow]) -> go.Figure:
    """Calls and time per optimizer step, by collective kind: DDP's all-reduces beside ZeRO's
    and FSDP's reduce-scatters and all-gathers."""
    names = [r.run for r in rows]
    fig = go.Figure()
    for kind in _kinds_present(rows):
        color = KIND_COLORS.get(kind, OTHER_KIND_COLOR)
        fig.add_trace(go.Bar(name=f"{kind} calls", x=names, offsetgroup="calls",
                             y=[_kind(r, kind).calls_per_step for r in rows],
                             marker_color=color, legendgroup=kind))
        fig.add_trace(go.Bar(name=f"{kind} ms", x=names, offsetgroup="ms", yaxis="y2",
                             y=[_kind(r, kind).ms_per_step for r in rows], legendgroup=kind,
                             marker=dict(color=color, pattern_shape="/")))
    return layout(fig, "Collectives per optimizer step: calls (solid) and ms (hatched)",
                   yaxis_title="calls", yaxis2=dict(title="ms", overlaying="y", side="right"),
                   barmode="stack")


def bandwidth_figure(rows: list[RunRow]) -> go.Figure:
    """Mean size per call and bus bandwidth, by collective kind."""
    names = [r.run for r in rows]
    fig = go.Figure()
    for kind in _kinds_present(rows):
        color = KIND_COLORS.get(kind, OTHER_KIND_COLOR)
        sizes = [_kind(r, kind).bytes_per_call for r in rows]
        fig.add_trace(go.Bar(
            name=f"{kind} MiB per call", x=names, offsetgroup=f"{kind} size",
            y=[size / MIB if size else None for size in sizes], marker_color=color,
            legendgroup=kind))
        fig.add_trace(go.Bar(
            name=f"{kind} bus GB/s", x=names, offsetgroup=f"{kind} bw", yaxis="y2",
            y=[_kind(r, kind).busbw_gbps for r in rows], legendgroup=kind,
            marker=dict(color=color, pattern_shape="x")))
    return layout(fig, "Size per call (solid) and bus bandwidth (crossed), by collective",
                   yaxis_title="MiB per call",
                   yaxis2=dict(title="GB/s", overlaying="y", side="right"), barmode="group")


def spread_figure(runs: list[RunResult]) -> go.Figure:
    """Every rank as a point, per run: a straggler stands apart from its run's cloud."""
    fig = go.Figure()
    for metric, label in (("compute_pct", "compute %"), ("overlap_pct", "overlap %")):
        xs, ys, texts = [], [], []
        for run in runs:
            for rank in run.ranks:
                value = getattr(rank_row(rank).metrics, metric)
                if value is not None:
                    xs.append(run.name)
                    ys.append(value)
                    texts.append(f"rank {rank.rank}")
        fig.add_trace(go.Box(x=xs, y=ys, name=label, boxpoints="all", jitter=0.4,
                             pointpos=0, text=texts, hovertemplate="%{text}: %{y:.2f}"))
    return layout(fig, "Per-rank spread", boxmode="group", yaxis_title="%")


def timeline_figure(run: RunResult) -> go.Figure:
    """One representative step per rank: a compute lane and a communication lane, each
    collective (each bucket's all-reduce) its own bar, times in ms from the step's start."""
    fig = go.Figure()
    shown: set[str] = set()
    for rank in run.ranks:
        lanes = rank.timeline
        if not lanes:
            continue
        compute_label, comm_label = f"rank {rank.rank} compute", f"rank {rank.rank} comm"
        compute = lanes.compute
        fig.add_trace(go.Bar(
            y=[compute_label] * len(compute), x=[(b - a) / 1e3 for a, b in compute],
            base=[a / 1e3 for a, _ in compute], orientation="h", name="compute",
            marker_color=COLORS["compute"], showlegend=rank is run.ranks[0],
            hovertemplate="compute %{base:.3f}–%{x:.3f} ms<extra></extra>"))
        kinds = dict.fromkeys(b.collective for b in lanes.comm)
        for kind in kinds:
            bars = [b for b in lanes.comm if b.collective == kind]
            # no text on the bars: dozens of labels in one lane overlap; hover says it all
            fig.add_trace(go.Bar(
                y=[comm_label] * len(bars), x=[(b.end_us - b.start_us) / 1e3 for b in bars],
                base=[b.start_us / 1e3 for b in bars], orientation="h", name=kind,
                legendgroup=kind, showlegend=kind not in shown,
                marker_color=KIND_COLORS.get(kind, OTHER_KIND_COLOR),
                marker_line=dict(color="white", width=1), textposition="none",
                text=[f"{kind} {_size(b.size_bytes)}" for b in bars],
                hovertemplate="%{text}<br>%{base:.3f} ms, %{x:.3f} ms long<extra></extra>"))
            shown.add(kind)
    step = next((r.timeline.step for r in run.ranks if r.timeline), "")
    return layout(fig, f"{run.name}: {step}, one step per rank (ms from the step's start)",
                   barmode="overlay", xaxis_title="ms",
                   height=160 + 60 * 2 * len(run.ranks),
                   yaxis=dict(autorange="reversed"))


def _size(size: float | None) -> str:
    return "" if size is None else f"{size / MIB:.2f} MiB"


def _environment_summary(runs: list[RunResult]) -> list[tuple[str, str]]:
    def values(key: str) -> str:
        found: dict[str, None] = {}     # distinct values, in order
        for run in runs:
            # a configuration's field, or a measurement's (getattr of None: not recorded)
            value = getattr(run.manifest.config, key, None)
            if value is None:
                value = getattr(run.manifest.measured, key, None)
            found.update((str(v), None) for v in (value if isinstance(value, list) else [value])
                         if v is not None)
        return ", ".join(found) or "not recorded"

    backends = ", ".join(dict.fromkeys(str(r.ranks[0].backend) for r in runs
                                       if r.ranks[0].backend)) or "none (single process)"
    return [("torch", values("torch_version")), ("backend", backends),
            ("devices", values("devices")), ("world size", values("world_size")),
            ("model", values("model")), ("global batch", values("global_batch")),
            ("grad accumulation", values("grad_accum")), ("parameters", values("parameters"))]


def comparison_rows(run_rows: list[RunRow]) -> list[dict[str, Any]]:
    """The comparison table's cells by column (the template's view of the rows), with each
    run's throughput against the median of the one-process runs (``single``: the registry's
    variant that is not distributed)."""
    rows = [row.to_dict() for row in run_rows]
    single = [r["samples_per_s"] for r in rows if r["samples_per_s"]
              and (info := variant_info(r["variant"])) and not info.distributed]
    baseline = statistics.median(single) if single else None
    for row in rows:
        row["speedup_vs_single"] = (row["samples_per_s"] / baseline
                                    if baseline and row["samples_per_s"] else None)
    return rows


RANK_COLUMNS = [
    ("rank", "Rank"), ("compute_pct", "Compute %"), ("non_compute_pct", "Non-compute %"),
    ("idle_pct", "Idle %"), ("overlap_pct", "Overlap %"), ("comm_ms_per_step", "Comm ms / step"),
    ("comm_transfer_ms_per_step", "Transfer ms / step"),
    ("comm_wait_ms_per_step", "Wait ms / step"),
    ("caused_wait_ms_per_step", "Others' wait caused, ms / step"),
    ("state_memory_mib", "Params+grads+optimizer MiB"), ("peak_memory_mib", "Peak memory MiB"),
]


def rank_tables(analysis: Analysis) -> list[dict[str, Any]]:
    """Per run, one row per rank, and which rank made the others wait the most."""
    return [{"run": run.name, "slowest_rank": run.slowest_rank,
             "rows": [{**rank_row(rank).to_dict(), **_rank_memory(run, rank.rank)}
                      for rank in run.ranks]}
            for run in analysis.runs]


GROUP_COLUMNS = [
    ("name", "Group"), ("description", "Description"), ("groups", "Ranks"),
    ("calls_per_step", "Calls / step"), ("bytes_per_step", "Bytes / step"),
    ("comm_ms_per_step", "Comm ms / step"), ("exposed_comm_ms_per_step", "Exposed ms / step"),
    ("overlap_pct", "Overlap %"), ("busbw_gbps", "Bus GB/s"),
    ("wait_ms_per_step", "Wait ms / step"), ("straggler_rank", "Straggler"),
    ("locality", "Node"), ("a2a_imbalance", "All-to-all imbalance"),
    ("queued_ms_per_step", "Queued ms / step"), ("queued_behind", "Queued behind"),
    ("source", "Found by"),
]


def group_tables(analysis: Analysis) -> list[dict[str, Any]]:
    """Per run with named process groups, one row per group (``GroupRow``)."""
    return [{"run": run.name, "rows": [{**row.to_dict(), "groups": " | ".join(
                 ",".join(map(str, ranks)) for ranks in row.groups) or None}
                 for row in group_rows(run)]}
            for run in analysis.runs
            if len(run.process_groups) > 1 or any(g.name != "default"
                                                  for g in run.process_groups)]


def _rank_memory(run: RunResult, rank: int) -> dict[str, float | None]:
    row = memory_of(run, rank)
    if row is None:
        return {"state_memory_mib": None, "peak_memory_mib": None}
    return {"state_memory_mib": None if row.state_bytes is None else row.state_bytes / MIB,
            "peak_memory_mib": peak_memory_mib(row)}


#: Runs whose step and buckets are drawn (a figure each): a page of thousands of runs stays
#: one a browser opens, in time linear in the runs; their tables are all there.
MAX_DRAWN_RUNS = 24


BUCKET_COLUMNS = [("index", "Bucket"), ("size_bytes", "Bytes"), ("gradients", "Gradients"),
                  ("ready_ms", "Ready (ms)"), ("launched_ms", "Launched (ms)"),
                  ("done_ms", "Done (ms)"), ("exposed_ms", "Exposed (ms)")]


def bucket_figure(run: RunResult) -> go.Figure | None:
    """One row per bucket: from ready to launched (waiting to start) and from launched to
    done (the all-reduce), with the end of backward marked."""
    timeline = run.ranks[0].buckets
    if timeline is None or not timeline.buckets:
        return None
    rows = timeline.buckets
    labels = [f"bucket {b.index}" for b in rows]
    fig = go.Figure([
        go.Bar(y=labels, x=[b.launched_ms - b.ready_ms if b.ready_ms is not None else 0
                            for b in rows],
               base=[b.ready_ms if b.ready_ms is not None else b.launched_ms for b in rows],
               orientation="h", name="ready, not started", marker_color="#f5c26b",
               hovertemplate="ready at %{base:.3f} ms, waited %{x:.3f} ms<extra></extra>"),
        go.Bar(y=labels, x=[b.done_ms - b.launched_ms for b in rows],
               base=[b.launched_ms for b in rows], orientation="h", name="all-reduce",
               marker_color=KIND_COLORS["all_reduce"], textposition="none",
               text=[_size(b.size_bytes) for b in rows],
               hovertemplate="%{text}: %{base:.3f} ms, %{x:.3f} ms long<extra></extra>")])
    if timeline.backward_end_ms is not None:
        fig.add_vline(x=timeline.backward_end_ms, line_dash="dash", line_color="#555",
                      annotation_text="backward ends")
    return layout(fig, f"{run.name}: buckets of {timeline.step}, rank {run.ranks[0].rank} "
                        "(ms from the step's start)", barmode="overlay", xaxis_title="ms",
                   height=140 + 40 * len(rows), yaxis=dict(autorange="reversed"))


def bucket_tables(analysis: Analysis) -> list[dict[str, Any]]:
    """Each run's bucket table; a figure of it for the first :data:`MAX_DRAWN_RUNS` runs."""
    tables = []
    for index, run in enumerate(analysis.runs):
        timeline = run.ranks[0].buckets
        if timeline is None or not timeline.buckets:
            continue
        figure = bucket_figure(run) if index < MAX_DRAWN_RUNS else None
        tables.append({"run": run.name, "step": timeline.step,
                       "backward_end_ms": timeline.backward_end_ms,
                       "rows": [asdict(b) for b in timeline.buckets],
                       "figure": embed(figure) if figure else None})
    return tables


MEMORY_PARTS = (("params_bytes", "parameters", "#2f7ed8"), ("grads_bytes", "gradients", "#f28f43"),
                ("optimizer_bytes", "optimizer state", "#8e44ad"),
                ("step_peak_rise_bytes", "other (activations, transient buffers)", "#c9c9c9"))


def memory_figure(runs: list[RunResult]) -> go.Figure | None:
    """Per run, the mean over ranks of what each rank holds (measured, stacked) beside the
    ``ddpprof memory`` estimate for its variant (params, grads and optimizer state)."""
    from ..memory import recorded_estimate

    measured = [(run, run.manifest.memory) for run in runs if run.manifest.memory]
    if not measured:
        return None
    names = [run.name for run, _ in measured]
    fig = go.Figure()
    for key, label, color in MEMORY_PARTS:
        fig.add_trace(go.Bar(
            name=label, x=names, offsetgroup="measured", legendgroup=label,
            y=[statistics.fmean(getattr(r, key) or 0 for r in rows) / MIB
               for _, rows in measured], marker_color=color,
            hovertemplate=f"{label}, measured: %{{y:.2f}} MiB<extra></extra>"))
    estimates = [recorded_estimate(run.manifest) for run, _ in measured]
    for key, label, color in MEMORY_PARTS[:3]:
        fig.add_trace(go.Bar(
            name=f"{label} (estimate)", x=names, offsetgroup="estimate", legendgroup=label,
            showlegend=False, marker=dict(color=color, pattern_shape="/", opacity=0.55),
            y=[getattr(e, key) / MIB if e else None for e in estimates],
            hovertemplate=f"{label}, estimated: %{{y:.2f}} MiB<extra></extra>"))
    return layout(fig, "Memory per rank, measured (solid) and estimated (hatched), MiB",
                   barmode="stack", yaxis_title="MiB")


def _last_step_note(analysis: Analysis) -> str:
    """Which steps were analyzed: once when every run agrees, else per run."""
    notes = {r.name: r.last_step.value for r in analysis.runs}
    if len(set(notes.values())) == 1:
        return f"last ProfilerStep: {next(iter(notes.values()))} (every run)"
    return "; ".join(f"{run}: last ProfilerStep {value}" for run, value in notes.items())


def render_report(analysis: Analysis, title: str, findings: list[Finding] | None = None,
                  extra_figures: Sequence[go.Figure] = ()) -> str:
    """The whole page as one string (the caller writes it); ``findings`` open the page;
    ``extra_figures`` (``analyze --critical-path``'s) follow the others."""
    run_rows = [run_row(run) for run in analysis.runs]
    figures = [breakdown_figure(run_rows), overlap_figure(run_rows),
               collectives_figure(run_rows), bandwidth_figure(run_rows),
               spread_figure(analysis.runs)]
    memory = memory_figure(analysis.runs)
    if memory is not None:
        figures.append(memory)
    html_figures = [embed(fig) for fig in [*figures, *extra_figures]]
    drawn = analysis.runs[:MAX_DRAWN_RUNS]
    html_timelines = [embed(timeline_figure(run)) for run in drawn]
    buckets = bucket_tables(analysis)
    return template_environment(html=True).get_template("report.html.j2").render(
        title=title, generated=generated(),
        environment=_environment_summary(analysis.runs), definitions=DEFINITIONS,
        columns=TABLE_COLUMNS, rows=comparison_rows(run_rows), cell=format_cell,
        figures=html_figures,
        rank_columns=RANK_COLUMNS, rank_tables=rank_tables(analysis),
        group_columns=GROUP_COLUMNS, group_tables=group_tables(analysis),
        timelines=html_timelines, bucket_columns=BUCKET_COLUMNS, bucket_tables=buckets,
        figure_count=len(html_figures) + len(html_timelines) + sum(
            1 for b in buckets if b["figure"]),
        errors=analysis.errors, unfinished=analysis.unfinished,
        last_step_note=_last_step_note(analysis),
        tax_lines=[f"{run.name}: {run.overlap_tax.describe()}" for run in analysis.runs
                   if run.overlap_tax is not None],
        drawn_note=f"The first {len(drawn)} of {len(analysis.runs)} runs are drawn." if len(
            drawn) < len(analysis.runs) else "",
        findings=[f.to_dict() for f in findings or []], plotly_js=get_plotlyjs())
