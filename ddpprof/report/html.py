"""The self-contained HTML comparison report: jinja2 page, plotly figures, plotly.js inlined
once, so the file opens from disk with no network."""

from __future__ import annotations

import statistics
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..analysis import Analysis, RunResult, rank_row, run_row
from ..analysis.rows import COLUMN_KINDS, memory_of, peak_memory_mib
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


def _embed(fig: go.Figure) -> str:
    """A figure as a div and its script; plotly.js itself is inlined once per page."""
    return fig.to_html(full_html=False, include_plotlyjs=False,
                       config={"displaylogo": False, "responsive": True})


def _generated() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _layout(fig: go.Figure, title: str, **kwargs: Any) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=kwargs.pop("height", 380),
                      margin=dict(l=60, r=20, t=50, b=60), legend=dict(orientation="h"),
                      **kwargs)
    return fig


def breakdown_figure(rows: list[dict[str, Any]]) -> go.Figure:
    names = [r["run"] for r in rows]
    fig = go.Figure([
        go.Bar(name=label, x=names, y=[r[key] for r in rows], marker_color=COLORS[color])
        for key, label, color in (("compute_pct", "compute", "compute"),
                                  ("non_compute_pct", "non-compute", "non_compute"),
                                  ("idle_pct", "idle", "idle"))])
    return _layout(fig, "Where the time goes (% of the window, mean over ranks)",
                   barmode="stack", yaxis_title="%")


def overlap_figure(rows: list[dict[str, Any]]) -> go.Figure:
    fig = go.Figure([go.Bar(x=[r["run"] for r in rows],
                            y=[r["overlap_pct"] for r in rows], marker_color=COLORS["comm"],
                            text=[format_cell(r["overlap_pct"]) for r in rows],
                            textposition="outside", name="overlap")])
    return _layout(fig, "Communication overlapped by compute (%)", yaxis_title="%",
                   yaxis_range=[0, 105])


def _kinds_present(rows: list[dict[str, Any]]) -> list[str]:
    return [k for k in COLUMN_KINDS if any(r.get(f"{k}_calls_per_step") for r in rows)]


def collectives_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Calls and time per optimizer step, by collective kind: DDP's all-reduces beside ZeRO's
    and FSDP's reduce-scatters and all-gathers."""
    names = [r["run"] for r in rows]
    fig = go.Figure()
    for kind in _kinds_present(rows):
        color = KIND_COLORS.get(kind, OTHER_KIND_COLOR)
        fig.add_trace(go.Bar(name=f"{kind} calls", x=names, offsetgroup="calls",
                             y=[r[f"{kind}_calls_per_step"] for r in rows], marker_color=color,
                             legendgroup=kind))
        fig.add_trace(go.Bar(name=f"{kind} ms", x=names, offsetgroup="ms", yaxis="y2",
                             y=[r[f"{kind}_ms_per_step"] for r in rows], legendgroup=kind,
                             marker=dict(color=color, pattern_shape="/")))
    return _layout(fig, "Collectives per optimizer step: calls (solid) and ms (hatched)",
                   yaxis_title="calls", yaxis2=dict(title="ms", overlaying="y", side="right"),
                   barmode="stack")


def bandwidth_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Mean size per call and bus bandwidth, by collective kind."""
    names = [r["run"] for r in rows]
    fig = go.Figure()
    for kind in _kinds_present(rows):
        color = KIND_COLORS.get(kind, OTHER_KIND_COLOR)
        fig.add_trace(go.Bar(
            name=f"{kind} MiB per call", x=names, offsetgroup=f"{kind} size",
            y=[r[f"{kind}_bytes_per_call"] / 2**20 if r[f"{kind}_bytes_per_call"] else None
               for r in rows], marker_color=color, legendgroup=kind))
        fig.add_trace(go.Bar(
            name=f"{kind} bus GB/s", x=names, offsetgroup=f"{kind} bw", yaxis="y2",
            y=[r[f"{kind}_busbw_gbps"] for r in rows], legendgroup=kind,
            marker=dict(color=color, pattern_shape="x")))
    return _layout(fig, "Size per call (solid) and bus bandwidth (crossed), by collective",
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
    return _layout(fig, "Per-rank spread", boxmode="group", yaxis_title="%")


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
    return _layout(fig, f"{run.name}: {step}, one step per rank (ms from the step's start)",
                   barmode="overlay", xaxis_title="ms",
                   height=160 + 60 * 2 * len(run.ranks),
                   yaxis=dict(autorange="reversed"))


def _size(size: float | None) -> str:
    return "" if size is None else f"{size / 2**20:.2f} MiB"


def _environment_summary(runs: list[RunResult]) -> list[tuple[str, str]]:
    def values(key: str) -> str:
        found = []
        for run in runs:
            value = getattr(run.manifest.config, key, None)
            items = value if isinstance(value, list) else [value]
            found += [str(v) for v in items if v is not None and str(v) not in found]
        return ", ".join(dict.fromkeys(found)) or "not recorded"

    backends = ", ".join(dict.fromkeys(str(r.ranks[0].backend) for r in runs
                                       if r.ranks[0].backend)) or "none (single process)"
    return [("torch", values("torch_version")), ("backend", backends),
            ("devices", values("devices")), ("world size", values("world_size")),
            ("model", values("model")), ("global batch", values("global_batch")),
            ("grad accumulation", values("grad_accum")), ("parameters", values("parameters"))]


def comparison_rows(analysis: Analysis) -> list[dict[str, Any]]:
    rows = [run_row(run).to_dict() for run in analysis.runs]
    single = [r["samples_per_s"] for r in rows if r["variant"] == "single" and r["samples_per_s"]]
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


def _rank_memory(run: RunResult, rank: int) -> dict[str, float | None]:
    row = memory_of(run, rank)
    if row is None:
        return {"state_memory_mib": None, "peak_memory_mib": None}
    return {"state_memory_mib": None if row.state_bytes is None else row.state_bytes / 2**20,
            "peak_memory_mib": peak_memory_mib(row)}


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
    return _layout(fig, f"{run.name}: buckets of {timeline.step}, rank {run.ranks[0].rank} "
                        "(ms from the step's start)", barmode="overlay", xaxis_title="ms",
                   height=140 + 40 * len(rows), yaxis=dict(autorange="reversed"))


def bucket_tables(analysis: Analysis) -> list[dict[str, Any]]:
    tables = []
    for run in analysis.runs:
        timeline = run.ranks[0].buckets
        if timeline is None or not timeline.buckets:
            continue
        figure = bucket_figure(run)
        tables.append({"run": run.name, "step": timeline.step,
                       "backward_end_ms": timeline.backward_end_ms,
                       "rows": [asdict(b) for b in timeline.buckets],
                       "figure": _embed(figure) if figure else None})
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
            y=[statistics.fmean(getattr(r, key) or 0 for r in rows) / 2**20
               for _, rows in measured], marker_color=color,
            hovertemplate=f"{label}, measured: %{{y:.2f}} MiB<extra></extra>"))
    estimates = [recorded_estimate(run.manifest) for run, _ in measured]
    for key, label, color in MEMORY_PARTS[:3]:
        fig.add_trace(go.Bar(
            name=f"{label} (estimate)", x=names, offsetgroup="estimate", legendgroup=label,
            showlegend=False, marker=dict(color=color, pattern_shape="/", opacity=0.55),
            y=[getattr(e, key) / 2**20 if e else None for e in estimates],
            hovertemplate=f"{label}, estimated: %{{y:.2f}} MiB<extra></extra>"))
    return _layout(fig, "Memory per rank, measured (solid) and estimated (hatched), MiB",
                   barmode="stack", yaxis_title="MiB")


def _last_step_note(analysis: Analysis) -> str:
    """Which steps were analyzed: once when every run agrees, else per run."""
    notes = {r.name: r.last_step.value for r in analysis.runs}
    if len(set(notes.values())) == 1:
        return f"last ProfilerStep: {next(iter(notes.values()))} (every run)"
    return "; ".join(f"{run}: last ProfilerStep {value}" for run, value in notes.items())


def render_report(analysis: Analysis, title: str, findings: list | None = None) -> str:
    """The whole page as one string (the caller writes it); ``findings`` open the page."""
    rows = comparison_rows(analysis)
    figures = [breakdown_figure(rows), overlap_figure(rows), collectives_figure(rows),
               bandwidth_figure(rows), spread_figure(analysis.runs)]
    memory = memory_figure(analysis.runs)
    if memory is not None:
        figures.append(memory)
    html_figures = [_embed(fig) for fig in figures]
    html_timelines = [_embed(timeline_figure(run)) for run in analysis.runs]
    buckets = bucket_tables(analysis)
    return template_environment(html=True).get_template("report.html.j2").render(
        title=title, generated=_generated(),
        environment=_environment_summary(analysis.runs), definitions=DEFINITIONS,
        columns=TABLE_COLUMNS, rows=rows, cell=format_cell, figures=html_figures,
        rank_columns=RANK_COLUMNS, rank_tables=rank_tables(analysis),
        timelines=html_timelines, bucket_columns=BUCKET_COLUMNS, bucket_tables=buckets,
        figure_count=len(html_figures) + len(html_timelines) + sum(
            1 for b in buckets if b["figure"]),
        errors=analysis.errors, unfinished=analysis.unfinished,
        last_step_note=_last_step_note(analysis),
        findings=[f.to_dict() for f in findings or []], plotly_js=get_plotlyjs())


def render_page(title: str, intro: list[str], columns: list[tuple[str, str]],
                rows: list[dict[str, Any]], figures: list[go.Figure]) -> str:
    """A smaller self-contained page (sweep, bench): text, one table, figures."""
    return template_environment(html=True).get_template("figures.html.j2").render(
        title=title, generated=_generated(), intro=intro, columns=columns, rows=rows,
        cell=format_cell, figures=[_embed(fig) for fig in figures], plotly_js=get_plotlyjs())


def valley_figure(rows: list[dict[str, Any]], default_mb: float) -> go.Figure:
    """Step time against bucket size, one line per variant, the default size marked."""
    fig = go.Figure()
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant and r.get("step_ms") is not None]
        fig.add_trace(go.Scatter(
            x=[r["bucket_cap_mb"] for r in mine], y=[r["step_ms"] for r in mine],
            mode="lines+markers", name=variant,
            text=[f"overlap {format_cell(r['overlap_pct'])} %, "
                  f"{format_cell(r['all_reduce_calls_per_step'])} all-reduces/step" for r in mine],
            hovertemplate="%{x} MiB: %{y:.1f} ms<br>%{text}<extra></extra>"))
    fig.add_vline(x=default_mb, line_dash="dash", line_color="#888",
                  annotation_text=f"default {default_mb:g} MiB")
    return _layout(fig, "Step time against bucket size", xaxis_type="log",
                   xaxis_title="bucket cap (MiB, log scale)", yaxis_title="step time (ms)")


def calibration_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """``ddpprof calibrate``'s curve: bus and algorithm bandwidth against size (log x), and the
    fitted model's bus bandwidth."""
    sizes = [r["size_bytes"] for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=sizes, y=[r["busbw_gbps"] for r in rows], mode="lines+markers",
                             name="busbw (measured)"))
    fig.add_trace(go.Scatter(x=sizes, y=[r["algbw_gbps"] for r in rows], mode="lines+markers",
                             name="algbw (measured)"))
    fig.add_trace(go.Scatter(
        x=sizes, y=[r["busbw_gbps"] * r["time_us"] / r["model_time_us"] for r in rows],
        mode="lines", line=dict(dash="dot"), name="busbw of the fit α + traffic/β"))
    return _layout(fig, "All-reduce bandwidth against size", xaxis_type="log",
                   xaxis_title="size (bytes, log scale)", yaxis_title="GB/s")


def speedup_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Speedup against ``single`` by process count: one line per model and variant."""
    fig = go.Figure()
    for model, variant in dict.fromkeys((r["model"], r["variant"]) for r in rows):
        mine = sorted((r for r in rows if (r["model"], r["variant"]) == (model, variant)
                       and r.get("speedup") is not None), key=lambda r: r["nproc"])
        if mine:
            fig.add_trace(go.Scatter(x=[r["nproc"] for r in mine], y=[r["speedup"] for r in mine],
                                     mode="lines+markers", name=f"{model} {variant}"))
    counts = sorted({r["nproc"] for r in rows})
    fig.add_trace(go.Scatter(x=counts, y=counts, mode="lines", name="linear",
                             line=dict(dash="dot", color="#999")))
    return _layout(fig, "Speedup against single, by number of processes",
                   xaxis_title="processes", yaxis_title="speedup")


def throughput_figure(rows: list[dict[str, Any]]) -> go.Figure:
    fig = go.Figure()
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        fig.add_trace(go.Bar(x=[f"{r['model']} x{r['nproc']}" for r in mine],
                             y=[r["samples_per_s"] for r in mine], name=variant))
    return _layout(fig, "Throughput (samples/s, median of repeats)", barmode="group",
                   yaxis_title="samples/s")


def prediction_figure(rows: list[dict[str, Any]], default_mb: float) -> go.Figure:
    """Predicted step time against bucket size per world size, measured points on top."""
    fig = go.Figure()
    for n in dict.fromkeys(r["world_size"] for r in rows):
        mine = [r for r in rows if r["world_size"] == n]
        fig.add_trace(go.Scatter(x=[r["bucket_cap_mb"] for r in mine],
                                 y=[r["step_ms"] for r in mine], mode="lines+markers",
                                 name=f"predicted, {n} ranks"))
    measured = [r for r in rows if r.get("measured_step_ms")]
    if measured:
        fig.add_trace(go.Scatter(x=[r["bucket_cap_mb"] for r in measured],
                                 y=[r["measured_step_ms"] for r in measured], mode="markers",
                                 marker=dict(size=11, symbol="x", color="black"),
                                 name=f"measured, {measured[0]['world_size']} ranks"))
    fig.add_vline(x=default_mb, line_dash="dash", line_color="#888",
                  annotation_text=f"default {default_mb:g} MiB")
    return _layout(fig, "Predicted step time against bucket size", xaxis_type="log",
                   xaxis_title="bucket cap (MiB, log scale)", yaxis_title="step time (ms)")
