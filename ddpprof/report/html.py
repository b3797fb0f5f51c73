"""The self-contained HTML comparison report: jinja2 page, plotly figures, plotly.js inlined
once, so the file opens from disk with no network."""

from __future__ import annotations

import statistics
from datetime import datetime, timezone
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..analysis import Analysis, RunResult, rank_row, run_row
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
    ("All-reduce calls and ms / step", "Per optimizer step (one ProfilerStep), averaged over "
                                       "ranks; bucketed variants make fewer, larger calls."),
    ("Bus bandwidth", "Bytes moved / time in the calls, times 2(n-1)/n for all-reduce "
                      "(the nccl-tests convention)."),
]

COLORS = {"compute": "#2f7ed8", "non_compute": "#f28f43", "idle": "#c9c9c9",
          "comm": "#d64550"}


def _embed(fig: go.Figure) -> str:
    """A figure as a div and its script; plotly.js itself is inlined once per page."""
    return fig.to_html(full_html=False, include_plotlyjs=False,
                       config={"displaylogo": False, "responsive": True})


def _generated() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


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


def allreduce_figure(rows: list[dict[str, Any]]) -> go.Figure:
    names = [r["run"] for r in rows]
    fig = go.Figure([
        go.Bar(name="calls / step", x=names, y=[r["all_reduce_calls_per_step"] for r in rows],
               offsetgroup=0, marker_color="#5a5a9e"),
        go.Bar(name="ms / step", x=names, y=[r["all_reduce_ms_per_step"] for r in rows],
               offsetgroup=1, yaxis="y2", marker_color=COLORS["comm"]),
    ])
    return _layout(fig, "All-reduce per optimizer step", yaxis_title="calls",
                   yaxis2=dict(title="ms", overlaying="y", side="right"), barmode="group")


def bandwidth_figure(rows: list[dict[str, Any]]) -> go.Figure:
    names = [r["run"] for r in rows]
    megabytes = [r["all_reduce_bytes_per_call"] / 1e6 if r["all_reduce_bytes_per_call"]
                 else None for r in rows]
    fig = go.Figure([
        go.Bar(name="MB per call", x=names, y=megabytes, offsetgroup=0, marker_color="#8085e9"),
        go.Bar(name="bus bandwidth GB/s", x=names, y=[r["all_reduce_busbw_gbps"] for r in rows],
               offsetgroup=1, yaxis="y2", marker_color="#90ed7d"),
    ])
    return _layout(fig, "All-reduce size and bus bandwidth", yaxis_title="MB per call",
                   yaxis2=dict(title="GB/s", overlaying="y", side="right"), barmode="group")


def spread_figure(runs: list[RunResult]) -> go.Figure:
    """Every rank as a point, per run: a straggler stands apart from its run's cloud."""
    fig = go.Figure()
    for metric, label in (("compute_pct", "compute %"), ("overlap_pct", "overlap %")):
        xs, ys, texts = [], [], []
        for run in runs:
            for rank in run.ranks:
                value = rank_row(rank)[metric]
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
    for rank in run.ranks:
        lanes = rank.timeline
        if not lanes:
            continue
        compute_label, comm_label = f"rank {rank.rank} compute", f"rank {rank.rank} comm"
        compute = lanes["compute"]
        fig.add_trace(go.Bar(
            y=[compute_label] * len(compute), x=[(b - a) / 1e3 for a, b in compute],
            base=[a / 1e3 for a, _ in compute], orientation="h", name="compute",
            marker_color=COLORS["compute"], showlegend=rank is run.ranks[0],
            hovertemplate="compute %{base:.3f}–%{x:.3f} ms<extra></extra>"))
        bars = lanes["comm"]
        fig.add_trace(go.Bar(
            y=[comm_label] * len(bars), x=[(b["end"] - b["start"]) / 1e3 for b in bars],
            base=[b["start"] / 1e3 for b in bars], orientation="h", name="communication",
            marker_color=COLORS["comm"], marker_line=dict(color="white", width=1),
            showlegend=rank is run.ranks[0],
            text=[f"{b['name']} {_size(b['bytes'])}" for b in bars],
            hovertemplate="%{text}<br>%{base:.3f} ms, %{x:.3f} ms long<extra></extra>"))
    step = next((r.timeline["step"] for r in run.ranks if r.timeline), "")
    return _layout(fig, f"{run.name}: {step}, one step per rank (ms from the step's start)",
                   barmode="overlay", xaxis_title="ms",
                   height=160 + 60 * 2 * len(run.ranks),
                   yaxis=dict(autorange="reversed"))


def _size(size: float | None) -> str:
    return "" if size is None else f"{size / 1e6:.2f} MB"


def _environment_summary(runs: list[RunResult]) -> list[tuple[str, str]]:
    def values(key: str) -> str:
        found = []
        for run in runs:
            value = run.manifest.get("config", {}).get(key)
            items = value if isinstance(value, list) else [value]
            found += [str(v) for v in items if v is not None and str(v) not in found]
        return ", ".join(dict.fromkeys(found)) or "not recorded"

    backends = ", ".join(dict.fromkeys(str(r.ranks[0].backend) for r in runs)) or "-"
    return [("torch", values("torch_version")), ("backend", backends),
            ("devices", values("devices")), ("world size", values("world_size")),
            ("model", values("model")), ("global batch", values("global_batch")),
            ("grad accumulation", values("grad_accum")), ("parameters", values("parameters"))]


def comparison_rows(analysis: Analysis) -> list[dict[str, Any]]:
    rows = [run_row(run) for run in analysis.runs]
    single = [r["samples_per_s"] for r in rows if r["variant"] == "single" and r["samples_per_s"]]
    baseline = statistics.median(single) if single else None
    for row in rows:
        row["speedup_vs_single"] = (row["samples_per_s"] / baseline
                                    if baseline and row["samples_per_s"] else None)
    return rows


def render_report(analysis: Analysis, title: str) -> str:
    """The whole page as one string (the caller writes it)."""
    rows = comparison_rows(analysis)
    figures = [breakdown_figure(rows), overlap_figure(rows), allreduce_figure(rows),
               bandwidth_figure(rows), spread_figure(analysis.runs)]
    html_figures = [_embed(fig) for fig in figures]
    html_timelines = [_embed(timeline_figure(run)) for run in analysis.runs]
    return template_environment(html=True).get_template("report.html.j2").render(
        title=title, generated=_generated(),
        environment=_environment_summary(analysis.runs), definitions=DEFINITIONS,
        columns=TABLE_COLUMNS, rows=rows, cell=format_cell, figures=html_figures,
        timelines=html_timelines, figure_count=len(html_figures) + len(html_timelines),
        errors=analysis.errors, last_steps={r.name: r.last_step for r in analysis.runs},
        plotly_js=get_plotlyjs())


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
            hovertemplate="%{x} MB: %{y:.1f} ms<br>%{text}<extra></extra>"))
    fig.add_vline(x=default_mb, line_dash="dash", line_color="#888",
                  annotation_text=f"default {default_mb:g} MB")
    return _layout(fig, "Step time against bucket size", xaxis_type="log",
                   xaxis_title="bucket cap (MB, log scale)", yaxis_title="step time (ms)")


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
                  annotation_text=f"default {default_mb:g} MB")
    return _layout(fig, "Predicted step time against bucket size", xaxis_type="log",
                   xaxis_title="bucket cap (MB, log scale)", yaxis_title="step time (ms)")
