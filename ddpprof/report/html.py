"""The self-contained HTML comparison report of ``analyze``: jinja2 page, plotly figures,
plotly.js (its basic bundle: bar and scatter traces) inlined once, so the file opens from disk
with no network. It opens on the answer: each run's step and where it goes, the top findings;
then the tables, the charts and the timelines. (The smaller pages of the other commands are
in ``pages``.)"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from ..advice import Finding
from ..analysis import Analysis, RunResult, rank_row
from ..analysis.rows import (
    COLUMN_KINDS,
    CollectiveRow,
    RankMetrics,
    RunRow,
    memory_of,
    peak_memory_mib,
)
from ..core.units import MIB
from ..memory.estimate import recorded_estimate
from ..metrics import sanity
from ..metrics.registry import METRICS, label_of, metric
from ..render.charts import colour, embed, generated, layout, plotly_js, rounded
from ..render.table import format_cell, format_value, template_environment
from ..variants import variant_info
from . import console

if TYPE_CHECKING:   # the facade is the report's caller; only its types are read here
    from ..job import JobSet
    from ..job_results import BucketsResult

#: The comparison table: one name per metric (``ddpprof.metrics.registry``); the page shows
#: its label and unit, and its name and definition on hover.
TABLE_COLUMNS = ["run", "variant", "world_size", "step_ms", "compute_pct", "non_compute_pct",
                 "idle_pct", "overlap_pct", "exposed_comm_pct", "collective_calls_per_step",
                 "comm_ms_per_step", "samples_per_s", "speedup_vs_single"]
#: The window, defined before the metrics the page shows (the registry's definitions).
WINDOW = ("Window", "GPU: first to last analyzed kernel. CPU: the analyzed ProfilerSteps. The "
                    "last step is dropped by default, as HolisticTraceAnalysis does.")

COLORS = {"compute": "#2f7ed8", "non_compute": "#f28f43", "idle": "#c9c9c9",
          "comm": "#d64550"}
#: One colour per collective kind on the timelines, so FSDP's all-gathers and
#: reduce-scatters, and DDP's all-reduces, read apart.
KIND_COLORS = {"all_reduce": "#d64550", "all_gather": "#8e44ad", "reduce_scatter": "#e67e22",
               "all_to_all": "#16a085", "broadcast": "#7f8c8d", "send_recv": "#2c3e50"}
OTHER_KIND_COLOR = "#b03060"


def step_figure(rows: list[RunRow]) -> go.Figure:
    """Each run's step (ms, mean over ranks) and where it goes: compute, exposed
    communication, the rest of non-compute (copies, waits, communication compute hides),
    idle. The parts add up to the step."""
    names = [r.run for r in rows]
    parts: tuple[tuple[str, Callable[[RankMetrics], float], str], ...] = (
             (label_of("compute_pct"), lambda m: m.compute_pct, COLORS["compute"]),
             (label_of("exposed_comm_pct"), lambda m: m.exposed_comm_pct, COLORS["comm"]),
             ("Other non-compute", lambda m: max(m.non_compute_pct - m.exposed_comm_pct, 0.0),
              COLORS["non_compute"]),
             (label_of("idle_pct"), lambda m: m.idle_pct, COLORS["idle"]))
    fig = go.Figure([go.Bar(
        name=label, y=names, orientation="h", marker_color=color,
        x=rounded([r.metrics.step_ms * share(r.metrics) / 100 for r in rows]),
        hovertemplate=f"{label}: %{{x:.2f}} ms<extra></extra>") for label, share, color in parts])
    return layout(fig, "Step time and where it goes (ms per step, mean over ranks)",
                  barmode="stack", xaxis_title="ms per step", height=150 + 34 * len(rows),
                  yaxis=dict(autorange="reversed"))


def breakdown_figure(rows: list[RunRow]) -> go.Figure:
    names = [r.run for r in rows]
    fig = go.Figure([
        go.Bar(name=label_of(key), x=names, y=[getattr(r.metrics, key) for r in rows],
               marker_color=COLORS[color])
        for key, color in (("compute_pct", "compute"), ("non_compute_pct", "non_compute"),
                           ("idle_pct", "idle"))])
    return layout(fig, "Where the time goes (% of the window, mean over ranks)",
                   barmode="stack", yaxis_title="%")


def overlap_figure(rows: list[RunRow]) -> go.Figure:
    fig = go.Figure([go.Bar(x=[r.run for r in rows],
                            y=[r.metrics.overlap_pct for r in rows], marker_color=COLORS["comm"],
                            text=[format_cell(r.metrics.overlap_pct) for r in rows],
                            textposition="outside", name=label_of("overlap_pct"))])
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
    for share in ("compute_pct", "overlap_pct"):
        label = label_of(share)
        xs, ys, texts = [], [], []
        for run in runs:
            for rank in run.ranks:
                value = getattr(rank_row(rank).metrics, share)
                if value is not None:
                    xs.append(run.name)
                    ys.append(value)
                    texts.append(f"rank {rank.rank}")
        fig.add_trace(go.Scatter(x=xs, y=rounded(ys, 2), name=label, mode="markers",
                                 marker=dict(size=9, color=colour(len(fig.data))), text=texts,
                                 hovertemplate="%{text}: %{y:.2f}<extra></extra>"))
    return layout(fig, "Per-rank spread (every rank a point)", yaxis_title="%",
                  yaxis_range=[0, 105], scattermode="group")


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
        compute = decimated(lanes.compute)
        fig.add_trace(go.Bar(
            y=[compute_label] * len(compute), x=rounded([(b - a) / 1e3 for a, b in compute]),
            base=rounded([a / 1e3 for a, _ in compute]), orientation="h", name="compute",
            marker_color=COLORS["compute"], showlegend=rank is run.ranks[0],
            hovertemplate="compute %{base:.3f}–%{x:.3f} ms<extra></extra>"))
        kinds = dict.fromkeys(b.collective for b in lanes.comm)
        for kind in kinds:
            bars = [b for b in lanes.comm if b.collective == kind]
            # no text on the bars: dozens of labels in one lane overlap; hover says it all
            fig.add_trace(go.Bar(
                y=[comm_label] * len(bars),
                x=rounded([(b.end_us - b.start_us) / 1e3 for b in bars]),
                base=rounded([b.start_us / 1e3 for b in bars]), orientation="h", name=kind,
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


#: A timeline is drawn about this many pixels wide: gaps narrower than a pixel are not seen.
TIMELINE_PIXELS = 2000


def decimated(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals as a chart can show them: those whose gap is less than a pixel of the
    whole (:data:`TIMELINE_PIXELS`) merged into one bar."""
    if len(intervals) < 2:
        return list(intervals)
    pixel = (intervals[-1][1] - intervals[0][0]) / TIMELINE_PIXELS
    merged = [intervals[0]]
    for start, end in intervals[1:]:
        if start - merged[-1][1] < pixel:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


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


def comparison_rows(run_rows: list[RunRow]) -> tuple[list[dict[str, Any]], list[str]]:
    """The comparison table's cells by column (the template's view of the rows), with each
    run's collective calls per step (every kind) and its throughput against the median of the
    one-process runs (``single``: the registry's variant that is not distributed); and the
    notes of the figures that break a bound (``ddpprof.metrics.sanity``), shown as
    ``console.FLAGGED``."""
    rows = [row.to_dict() for row in run_rows]
    single = [r["samples_per_s"] for r in rows if r["samples_per_s"]
              and (info := variant_info(r["variant"])) and not info.distributed]
    baseline = statistics.median(single) if single else None
    notes = []
    for row in rows:
        row["collective_calls_per_step"] = sum(
            row[f"{kind}_calls_per_step"] or 0 for kind in COLUMN_KINDS) + (
            row["other_collective_calls_per_step"] or 0)
        speedup = (row["samples_per_s"] / baseline if baseline and row["samples_per_s"]
                   else None)
        flag = sanity.speedup("speedup_vs_single", speedup, row["world_size"])
        row["speedup_vs_single"] = console.FLAGGED if flag else speedup
        notes += [flag.note(row["run"])] if flag else []
    shown, flagged = console.checked(rows)
    return shown, notes + flagged


RANK_COLUMNS = ["rank", "compute_pct", "non_compute_pct", "idle_pct", "overlap_pct",
                "comm_ms_per_step", "comm_transfer_ms_per_step", "comm_wait_ms_per_step",
                "caused_wait_ms_per_step", "state_memory_mib", "peak_memory_mib"]


def rank_tables(analysis: Analysis) -> list[dict[str, Any]]:
    """Per run, one row per rank (figures that break a bound flagged, with their notes), and
    which rank made the others wait the most."""
    tables = []
    for run in analysis.runs:
        rows, notes = console.checked([{**rank_row(rank).to_dict(),
                                        **_rank_memory(run, rank.rank)} for rank in run.ranks],
                                      "rank")
        tables.append({"run": run.name, "slowest_rank": run.slowest_rank, "rows": rows,
                       "notes": [f"rank {note}" for note in notes]})
    return tables


GROUP_COLUMNS = ["name", "description", "groups", "calls_per_step", "bytes_per_step",
                 "comm_ms_per_step", "exposed_comm_ms_per_step", "overlap_pct", "busbw_gbps",
                 "wait_ms_per_step", "straggler_rank", "locality", "a2a_imbalance",
                 "queued_ms_per_step", "queued_behind", "source"]


def group_tables(jobs: JobSet) -> list[dict[str, Any]]:
    """Per run with named process groups, one row per group (``Job.process_groups``)."""
    return [{"run": job.name, "rows": [{**row.to_dict(), "groups": " | ".join(
                 ",".join(map(str, ranks)) for ranks in row.groups) or None}
                 for row in job.process_groups().groups]}
            for job in jobs
            if len(job.run.process_groups) > 1 or any(g.name != "default"
                                                      for g in job.run.process_groups)]


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


def bucket_figure(timeline: BucketsResult) -> go.Figure | None:
    """One row per bucket: from ready to launched (waiting to start) and from launched to
    done (the all-reduce), with the end of backward marked."""
    if not timeline.buckets:
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
    return layout(fig, f"{timeline.run}: buckets of {timeline.step}, rank {timeline.rank} "
                        "(ms from the step's start)", barmode="overlay", xaxis_title="ms",
                   height=140 + 40 * len(rows), yaxis=dict(autorange="reversed"))


def bucket_tables(jobs: JobSet) -> list[dict[str, Any]]:
    """Each run's bucket table (``Job.buckets``); a figure of it for the first
    :data:`MAX_DRAWN_RUNS` runs."""
    tables = []
    for index, job in enumerate(jobs):
        timeline = job.buckets()
        if not timeline.buckets:
            continue
        figure = bucket_figure(timeline) if index < MAX_DRAWN_RUNS else None
        tables.append({"run": job.name, "step": timeline.step,
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


def evidence_text(name: str, value: Any, unit: str) -> str:
    """One piece of a finding's evidence in words and units (``gradient bytes per step:
    5.58 MiB``); a launch point past backward's end said so (``sanity.launch_point``)."""
    shown = (sanity.launch_point(value) if name == "first_launch_into_backward"
             and isinstance(value, int | float) else format_value(value, unit))
    return f"{name.replace('_', ' ')}: {shown}"


def finding_view(finding: Finding) -> dict[str, Any]:
    """A finding as the page shows it: one line (its headline and first sentence), then its
    whole message and evidence, folded."""
    first = finding.message.split(". ")[0].rstrip(".") + "."
    return {"severity": finding.severity, "headline": console.headline(finding),
            "line": first, "message": finding.message,
            "evidence": [evidence_text(e.name, e.value, e.unit) for e in finding.evidence]}


#: Findings the page opens on; the others are folded below them.
TOP_FINDINGS = 3


def header(name: str) -> dict[str, str]:
    """A column's header: the registry's label and unit, its name and definition on hover."""
    found = metric(name)
    if found is None:
        return {"key": name, "label": name.replace("_", " ").capitalize(), "title": name}
    unit = f" ({found.unit})" if found.unit and found.unit not in ("calls",) else ""
    return {"key": name, "label": found.label + unit,
            "title": f"{name}: {found.definition}"}


def render_report(jobs: JobSet, title: str, findings: list[Finding] | None = None,
                  extra_figures: Sequence[go.Figure] = ()) -> str:
    """The whole page as one string (the caller writes it), read from ``jobs`` (the runs
    ``analyze`` saw, ``ddpprof.JobSet``). It opens on the answer: each run's step and where
    it goes, and the top findings (``findings``, those worth listing); then the comparison,
    per-rank and per-group tables, the charts (``extra_figures``, ``analyze
    --critical-path``'s, after the others), the timelines and the buckets."""
    analysis = jobs.analysis
    run_rows = [job.summary() for job in jobs]
    communicates = bool(_kinds_present(run_rows))   # charts of communication need some
    figures = [breakdown_figure(run_rows),
               *([overlap_figure(run_rows), collectives_figure(run_rows),
                  bandwidth_figure(run_rows)] if communicates else []),
               spread_figure(analysis.runs)]
    memory = memory_figure(analysis.runs)
    if memory is not None:
        figures.append(memory)
    summary = embed(step_figure(run_rows))
    html_figures = [embed(fig) for fig in [*figures, *extra_figures]]
    drawn = analysis.runs[:MAX_DRAWN_RUNS]
    html_timelines = [embed(timeline_figure(run)) for run in drawn]
    buckets = bucket_tables(jobs)
    shown = [finding_view(f) for f in console.listed(findings or [])]
    rows, notes = comparison_rows(run_rows)
    used = [*TABLE_COLUMNS, *RANK_COLUMNS, *GROUP_COLUMNS]
    result: str = template_environment(html=True).get_template("report.html.j2").render(
        title=title, generated=generated(), summary_figure=summary,
        environment=_environment_summary(analysis.runs),
        definitions=[WINDOW, *((METRICS[k].label, f"{k}: {METRICS[k].definition}")
                               for k in dict.fromkeys(used) if k in METRICS)],
        columns=[header(key) for key in TABLE_COLUMNS], rows=rows, table_notes=notes,
        cell=format_cell, figures=html_figures,
        rank_columns=[header(k) for k in RANK_COLUMNS], rank_tables=rank_tables(analysis),
        group_columns=[header(k) for k in GROUP_COLUMNS], group_tables=group_tables(jobs),
        timelines=html_timelines, bucket_columns=BUCKET_COLUMNS, bucket_tables=buckets,
        figure_count=1 + len(html_figures) + len(html_timelines) + sum(
            1 for b in buckets if b["figure"]),
        errors=analysis.errors, unfinished=analysis.unfinished,
        last_step_note=_last_step_note(analysis),
        tax_lines=[f"{run.name}: {console.describe_tax(run.overlap_tax)}"
                   for run in analysis.runs if run.overlap_tax is not None],
        drawn_note=f"The first {len(drawn)} of {len(analysis.runs)} runs are drawn." if len(
            drawn) < len(analysis.runs) else "",
        top_findings=shown[:TOP_FINDINGS], more_findings=shown[TOP_FINDINGS:],
        left_out=len(findings or []) - len(shown), plotly_js=plotly_js())
    return result
