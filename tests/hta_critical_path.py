"""Run HolisticTraceAnalysis 0.5.0's single-rank critical path (``critical_path_analysis``) on
traces and print the paths as JSON.

Run as a script, in its own process (HTA is slow, its logging noisy, and it reads its options,
``HTA_DISABLE_NS_ROUNDING`` among them, from the environment): ``python hta_critical_path.py
JOBS``, ``JOBS`` a JSON list. Each job names a ``trace`` and either a ``step``, a host
``ProfilerStep#N`` span of it (HTA's annotation is then ``ProfilerStep``, and its instance id
the position of that span among the events whose name holds ``ProfilerStep``: HTA counts the
GPU-side copies of the steps too), ``null`` for the whole trace, or HTA's own ``annotation``
and ``instance``; ``zero_weight_launch_edges`` (default false, as HTA's) sets HTA's option of
that name (``CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE``).

It prints one result per job: ``{"error": ...}`` where HTA fails, else the window HTA analyzed
(``window_us``: the annotation it selected, absolute µs; null for the whole trace), the number
of ``nodes`` and ``events`` on its path, and the path's ``edges`` in order, each with its
``type`` (HTA's edge type), ``weight`` (µs: the time it adds to HTA's path), its ends
``from_us`` and ``to_us`` (absolute, the trace's clock) and, where HTA attributes it to an
event, that ``event`` (``name``, ``cat``, ``ts``, ``dur``, ``tid``, ``stream``: -1 on the
host), and ``seconds``, the wall time HTA took.

HTA 0.5.0 was written for pandas 2; this project has pandas 3, under which it fails or, worse,
silently computes something else. The script runs HTA's code with the smallest changes that
say the same in pandas 3 (:data:`PANDAS3`, :func:`_ported`), each checked to apply.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

#: HTA's critical-path module under pandas 3: pandas 3 refuses ``drop(axis=1, columns=...)``,
#: and under its copy-on-write a chained ``df.column.fillna(value, inplace=True)`` changes
#: nothing, which would silently leave HTA's cross-stream event waits unmatched. Each rewrite
#: (pattern, replacement, how many times it applies in HTA 0.5.0) says the same in pandas 3;
#: another HTA version fails here, not silently.
PANDAS3 = [(re.compile(r"\.drop\(\s*axis=1,\s*columns="), ".drop(columns=", 7),
           (re.compile(r"(\w+)\.(\w+)\.fillna\(([^,()]+), inplace=True\)"),
            r'\1["\2"] = \1.\2.fillna(\3)', 4)]


@functools.cache
def _ported() -> ModuleType:
    """HTA's ``critical_path_analysis`` module with :data:`PANDAS3`'s rewrites, and HTA's
    trace parser made to widen the correlation ids: it downcasts the ``correlation`` column
    (to int16 where the ids are small), then stores event indices in a column of that dtype,
    which pandas 2 widened and pandas 3 refuses (a trace of more than 32,767 events fails to
    load)."""
    import hta.analyzers.critical_path_analysis as original
    import hta.common.trace as parser

    to_index = parser.transform_correlation_to_index

    def widened(df, symbol_table):
        if "correlation" in df.columns:
            df["correlation"] = df["correlation"].astype("int64")
        return to_index(df, symbol_table)

    parser.transform_correlation_to_index = widened
    source = Path(original.__file__).read_text()
    for pattern, replacement, count in PANDAS3:
        source, made = pattern.subn(replacement, source)
        if made != count:
            raise RuntimeError(f"HTA's source differs from 0.5.0's: {pattern.pattern}")
    spec = importlib.util.spec_from_loader(original.__name__ + "_pandas3", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = original.__file__
    sys.modules[spec.name] = module    # (its dataclasses look their module up there)
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


def _annotations(trace_df, symbols: list[str], annotation: str):
    """The spans HTA selects instances from, in its order: every event whose name holds
    ``annotation`` (for ``ProfilerStep``, the GPU-side copies of the steps too)."""
    ids = [i for i, name in enumerate(symbols) if annotation in name]
    return trace_df[trace_df.name.isin(ids)]


def _instance(annotations, symbols: list[str], step: str) -> int:
    """The instance id that selects the host span named ``step``."""
    for position, (name, stream) in enumerate(zip(annotations.name, annotations.stream,
                                                  strict=True)):
        if symbols[name] == step and stream == -1:
            return position
    raise LookupError(f"no host span {step}")


def critical_path(job: dict) -> dict:
    """HTA's critical path of one job: ``{"trace": PATH, "step": NAME or null}``, or HTA's
    own selection, ``{"trace": PATH, "annotation": A, "instance": K}``."""
    from hta.trace_analysis import TraceAnalysis

    ported = _ported()
    os.environ["CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE"] = \
        "1" if job.get("zero_weight_launch_edges") else "0"
    trace = Path(job["trace"])
    with tempfile.TemporaryDirectory(prefix="hta-cp-") as tmp:
        (Path(tmp) / trace.name).symlink_to(trace.resolve())
        began = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=tmp)
        [rank] = analysis.t.traces
        trace_df = analysis.t.get_trace(rank)
        symbols = analysis.t.symbol_table.sym_table
        window = None
        if "annotation" in job or job.get("step"):
            annotation = job.get("annotation", "ProfilerStep")
            annotations = _annotations(trace_df, symbols, annotation)
            instance = job["instance"] if "annotation" in job else _instance(
                annotations, symbols, job["step"])
            picked = annotations.iloc[instance]
            window = [float(picked.ts), float(picked.ts + picked.dur)]
        else:
            annotation, instance = "", None
        result = ported.CriticalPathAnalysis.critical_path_analysis(
            analysis.t, rank, annotation, instance)
        seconds = time.perf_counter() - began
    if result is None:
        raise LookupError(f"HTA found no annotation {annotation!r}")
    graph, ok = result
    if not ok:
        raise RuntimeError("HTA's critical path failed (its graph is not valid)")
    offset = float(analysis.t.min_ts)
    if window is not None:
        window = [t + offset for t in window]
    nodes = graph.critical_path_nodes
    edges = []
    for u, v in itertools.pairwise(nodes):
        edge = graph.edges[u, v]["object"]
        row = {"type": edge.type.value, "weight": float(graph.edges[u, v]["weight"]),
               "from_us": float(graph.node_list[u].ts) + offset,
               "to_us": float(graph.node_list[v].ts) + offset, "event": None}
        event = graph.get_event_attribution_for_edge(edge)
        if event is not None:
            e = trace_df.loc[event]
            row["event"] = {"name": symbols[int(e["name"])], "ts": float(e["ts"]) + offset,
                            "dur": float(e["dur"]), "tid": int(e["tid"]),
                            "stream": int(e["stream"]), "cat": symbols[int(e["cat"])]}
        edges.append(row)
    return {"window_us": window, "nodes": len(nodes),
            "events": len(graph.critical_path_events_set), "edges": edges, "seconds": seconds}


def main(argv: list[str]) -> None:
    logging.disable(logging.CRITICAL)
    results = []
    for job in json.loads(argv[0]):
        try:
            results.append(critical_path(job))
        except Exception as error:  # HTA's own failures are part of what is compared
            results.append({"error": f"{type(error).__name__}: {error}"})
    print(json.dumps(results))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    main(sys.argv[1:])
