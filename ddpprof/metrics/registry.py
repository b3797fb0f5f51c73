"""Every metric ddpprof prints or writes, named once: its name (the table's header, the CSV's
and the JSON's key, what a gate rule names), a label for the HTML report, its unit and its
definition (the documentation's metric reference is generated from this table).

A name carries its unit (``_pct``, ``_ms``, ``_mib``, ``_gbps``...). ``RENAMED`` holds the
names a metric had before: ``gate`` still reads them, with a deprecation note.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

#: Collective kinds whose figures have names of their own (``all_reduce_calls_per_step``...).
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass(frozen=True)
class Metric:
    name: str
    label: str          # words, for the HTML report
    unit: str           # "%", "ms", "GB/s", "MiB", "B", "x", "calls", ... ("" for none)
    definition: str
    command: str = "analyze"    # which command's output defines it (the reference's section)


def _m(name: str, label: str, unit: str, definition: str, command: str = "analyze") -> Metric:
    return Metric(name, label, unit, definition, command)


_SHARES = [
    _m("compute_pct", "Compute", "%", "|⋃ compute| / window: compute kernels (GPU), or host "
       "ops outside communication and waits, per thread (CPU)."),
    _m("non_compute_pct", "Non-compute", "%", "Busy time that is not compute (communication, "
       "memory copies, waits) / window."),
    _m("idle_pct", "Idle", "%", "window − compute − non-compute, / window."),
    _m("overlap_pct", "Overlap", "%", "|compute ∩ communication| / |communication|: the share "
       "of communication hidden behind compute; n/a without communication."),
    _m("exposed_comm_pct", "Exposed communication", "%", "|communication \\ compute| / window: "
       "communication no compute hides (was comm_overhead_pct)."),
]

_ANALYZE = [
    *_SHARES,
    _m("step_ms", "Step", "ms", "The analyzed window over the steps analyzed (one "
       "ProfilerStep is one optimizer step)."),
    _m("window_ms", "Window", "ms", "The analyzed window: the ProfilerSteps but the last (GPU: "
       "first to last analyzed kernel)."),
    _m("compute_ms", "Compute time", "ms", "|⋃ compute| over the window."),
    _m("comm_ms_per_step", "Communication", "ms", "|⋃ communication| per step."),
    _m("exposed_comm_ms_per_step", "Exposed communication", "ms", "|communication \\ compute| "
       "per step."),
    _m("comm_transfer_ms_per_step", "Transfer", "ms", "Time in collectives after the last rank "
       "arrived, per step: at most comm_ms_per_step."),
    _m("comm_wait_ms_per_step", "Wait", "ms", "Time in collectives before the last rank "
       "arrived (waiting for a peer), per step."),
    _m("caused_wait_ms_per_step", "Others' wait caused", "ms", "The other ranks' wait for this "
       "rank at collectives, per step."),
    _m("other_collective_calls", "Other collective calls", "calls", "Collectives of kinds "
       "without columns of their own (broadcast, send/recv...), over the window."),
    _m("other_collective_calls_per_step", "Other collective calls / step", "calls",
       "other_collective_calls per step."),
    _m("ranks", "Ranks", "", "Ranks with a trace in the run."),
    _m("world_size", "World size", "", "Ranks in the job (distributedInfo, else run.json)."),
    _m("steps", "Steps", "", "ProfilerSteps analyzed."),
    _m("global_batch", "Global batch", "samples", "Samples per optimizer step, all ranks."),
    _m("grad_accum", "Gradient accumulation", "", "Micro-batches per optimizer step."),
    _m("bucket_cap_mib", "Bucket cap", "MiB", "Gradient bucket size (2²⁰ bytes)."),
    _m("slowest_rank", "Slowest rank", "", "The rank that made the others wait the most."),
    _m("straggler_rank", "Straggler", "", "slowest_rank, else the rank with the most compute."),
    _m("samples_per_s", "Samples/s", "samples/s", "Throughput of the unprofiled steps "
       "(run.json)."),
    _m("speedup_vs_single", "Speedup vs single", "x", "samples_per_s over the median of the "
       "one-process runs'; at most the world size."),
    _m("expected_allreduces_per_step", "Expected all-reduces / step", "calls", "What the "
       "variant launches per optimizer step (run.json)."),
    _m("peak_memory_mib", "Peak memory", "MiB", "The highest rank's peak: CUDA's peak "
       "allocated, else the process's peak resident set."),
    _m("state_memory_mib", "Parameters + gradients + optimizer", "MiB", "Mean over ranks of "
       "what each rank holds of them."),
    _m("compute_tax_pct", "Compute tax", "%", "How much longer compute takes beside a "
       "collective than alone (the overlap tax, pooled)."),
    _m("comm_tax_pct", "Communication tax", "%", "How much longer a collective takes beside "
       "compute than alone."),
    _m("collective_calls_per_step", "Collective calls / step", "calls", "Every collective "
       "kind's calls per optimizer step."),
    *(_m(f"{share}_{end}", f"{label} ({end})", "%", f"The {end}imum of {share} over the "
         "run's ranks.") for share, label in (
             (m.name, m.label) for m in _SHARES) for end in ("min", "max")),
    *(metric for kind in KINDS for metric in (
        _m(f"{kind}_calls", f"{kind} calls", "calls", f"{kind} calls over the window."),
        _m(f"{kind}_calls_per_step", f"{kind} calls / step", "calls",
           f"{kind} calls per optimizer step."),
        _m(f"{kind}_ms", f"{kind} time", "ms", f"Time in {kind} calls over the window."),
        _m(f"{kind}_ms_per_step", f"{kind} ms / step", "ms", f"Time in {kind} calls per step."),
        _m(f"{kind}_bytes_per_call", f"{kind} bytes / call", "B", f"Mean {kind} message size."),
        _m(f"{kind}_algbw_gbps", f"{kind} algorithm bandwidth", "GB/s",
           "Σ bytes / Σ call time."),
        _m(f"{kind}_busbw_gbps", f"{kind} bus bandwidth", "GB/s", "Σ bytes × nccl-tests' bus "
           "factor (2(n−1)/n for all-reduce) / Σ call time."),
        _m(f"{kind}_overlap_pct", f"{kind} overlap", "%", f"The share of {kind} time that "
           "compute hides."))),
]

_GROUPS = [
    _m("calls_per_step", "Calls / step", "calls", "A process group's collective calls per "
       "step.", "analyze (per process group)"),
    _m("bytes_per_step", "Bytes / step", "B", "Bytes its calls carry per step.",
       "analyze (per process group)"),
    _m("busbw_gbps", "Bus bandwidth", "GB/s", "At the group's own size.",
       "analyze (per process group)"),
    _m("algbw_gbps", "Algorithm bandwidth", "GB/s", "Σ bytes / Σ call time.",
       "analyze (per process group)"),
    _m("wait_ms_per_step", "Wait", "ms", "Time waiting for the group's slowest member, per "
       "step.", "analyze (per process group)"),
    _m("transfer_ms_per_step", "Transfer", "ms", "Time after the last member arrived, per "
       "step.", "analyze (per process group)"),
    _m("intra_node_ms_per_step", "Intra-node", "ms", "Its calls within a node, per step.",
       "analyze (per process group)"),
    _m("inter_node_ms_per_step", "Inter-node", "ms", "Its calls across nodes, per step.",
       "analyze (per process group)"),
    _m("queued_ms_per_step", "Queued", "ms", "Time its launched calls waited in their "
       "stream's queue behind other calls, per step.", "analyze (per process group)"),
    _m("a2a_imbalance", "All-to-all imbalance", "x", "Σ max / Σ mean of the bytes each rank "
       "sends or receives in matched all-to-alls.", "analyze (per process group)"),
    _m("a2a_split_imbalance", "All-to-all split imbalance", "x", "The same over each call's "
       "split sizes.", "analyze (per process group)"),
    _m("size", "Size", "", "Ranks in the group.", "analyze (per process group)"),
]

_PER_STEP = [
    _m("window_us", "Window", "µs", "One ProfilerStep's window (per-step table: µs, as the "
       "trace's clock).", "analyze --per-step"),
]

_CRITICAL_PATH = [
    *(_m(f"path_{part}_pct", f"{label} on the path", "%", f"The share of the step that the "
         f"critical path spends in {what}.", "critical-path")
      for part, label, what in (
          ("compute", "Compute", "compute on any rank"),
          ("comm", "Communication", "collective transfers (exposed communication)"),
          ("host", "Host", "host work and gaps on host threads"),
          ("idle", "Idle", "gaps on device streams"),
          ("waiting", "Waiting", "waiting for a late rank"),
          ("inherited", "Inherited", "device work launched before the step (the queue it "
           "inherited)"))),
    _m("ends_on_rank", "Ends on rank", "", "The rank whose work ends the step.",
       "critical-path"),
    _m("waiting_for", "Waiting for", "", "The rank the path waited for longest.",
       "critical-path"),
    _m("predicted_ms", "Predicted step", "ms", "The step replayed with the edit.",
       "critical-path"),
    _m("change_pct", "Change", "%", "(predicted − recorded) / recorded.", "critical-path"),
]

_SIMULATE = [
    _m("efficiency", "Scaling efficiency", "", "One rank's step / (N × the step at N ranks).",
       "simulate"),
    _m("measured_step_ms", "Measured step", "ms", "The run's median unprofiled step, or a sweep "
       "point.", "simulate"),
    _m("error_pct", "Error", "%", "(predicted − measured) / measured.", "simulate"),
    _m("buckets", "Buckets", "calls", "Gradient collectives per step.", "simulate"),
]

_OTHERS = [
    _m("allreduces_per_step", "All-reduces / step", "calls", "All-reduces the run launched per "
       "optimizer step (run.json).", "record"),
    _m("speedup", "Speedup", "x", "Against single at the same model; at most the process "
       "count.", "bench"),
    _m("efficiency_pct", "Scaling efficiency", "%", "speedup / processes.", "bench"),
    _m("delta_ms", "Change", "ms", "after − before, per step.", "diff"),
    _m("before_ms", "Before", "ms", "Side A, per step.", "diff"),
    _m("after_ms", "After", "ms", "Side B, per step.", "diff"),
    _m("low_ms", "Low", "ms", "The interval's lower end (simultaneous over the parts).",
       "diff"),
    _m("high_ms", "High", "ms", "The interval's upper end.", "diff"),
    _m("of_step_delta_pct", "Of the change", "%", "The part's change / the step's change.",
       "diff"),
    _m("rank_delta_ms", "On its rank", "ms", "The part's change on the rank it moved most on.",
       "diff"),
    _m("launch_delta_ms", "Launch change", "ms", "A bucket's launch, after − before (ms after "
       "backward's first gradient).", "diff"),
    _m("exposed_delta_ms", "Exposed change", "ms", "A bucket's time past backward's end, after "
       "− before.", "diff"),
    _m("comm_ms", "Communication", "ms", "The blocking variants' gradient sync, median per "
       "step.", "bench"),
    _m("step_ms_median", "Step (median)", "ms", "Median over steps, then over repeats, of the "
       "unprofiled steps.", "bench"),
    _m("gradient_calls_per_step", "Gradient collectives / step", "calls", "The variant's "
       "gradient collectives per step.", "sweep"),
    *(_m(f"{part}_{unit}", f"{label}", unit_label, f"{label} per rank, in {unit_label}.",
         "memory") for part, label in (
             ("params", "Parameters"), ("grads", "Gradients"), ("optimizer", "Optimizer state"),
             ("total", "Total"), ("estimated", "Estimated"), ("measured", "Measured"),
             ("step_peak_rise", "Peak rise in a step"), ("peak_rss", "Peak resident set"))
      for unit, unit_label in (("mib", "MiB"), ("gib", "GiB"))),
    *(_m(f"comm_{unit}_per_step", "Communication", label, f"Sent per rank per optimizer step "
         f"(ring), in {label}.", "memory") for unit, label in (("mib", "MiB"), ("gib", "GiB"))),
]

METRICS: dict[str, Metric] = {m.name: m for m in (
    *_ANALYZE, *_GROUPS, *_PER_STEP, *_CRITICAL_PATH, *_SIMULATE, *_OTHERS)}

#: Names metrics had before; ``gate`` reads them with a note.
RENAMED = {"comm_overhead_pct": "exposed_comm_pct", "bucket_cap_mb": "bucket_cap_mib",
           **{f"comm_overhead_pct_{end}": f"exposed_comm_pct_{end}" for end in ("min", "max")}}


def metric(name: str) -> Metric | None:
    """The registered metric of that name (a selector ``[...]`` is ignored), else None."""
    return METRICS.get(name.partition("[")[0])


def label_of(name: str) -> str:
    """The label of the registered metric ``name`` (what the HTML report's tables and charts
    call it); a name not registered is a ``KeyError``."""
    return METRICS[name].label


def suggestion(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
