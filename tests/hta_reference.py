"""Run HolisticTraceAnalysis 0.5.0 on trace folders and print its numbers as JSON.

Run as a script, in its own process, because HTA reads ``HTA_DISABLE_NS_ROUNDING`` from the
environment: ``python hta_reference.py FOLDER... [--keep-last-step]``. For each folder it prints
per rank the temporal breakdown in µs and the overlap ratio, unrounded, or the error HTA
raised (it fails an assertion on some ns traces with its default rounding).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path


def hta_numbers(folder: Path, keep_last_step: bool) -> dict:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory(prefix="hta-") as tmp:
        # HTA reads every JSON file of a folder, hidden ones too (a run's .config.json):
        # give it the traces alone
        for path in folder.iterdir():
            if (path.name.endswith((".json", ".json.gz")) and path.name != "run.json"
                    and not path.name.startswith(".")):
                (Path(tmp) / path.name).symlink_to(path.resolve())
        analysis = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=keep_last_step)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    ranks = {}
    for row in temporal.to_dict("records"):
        window = float(row["kernel_time(us)"])
        ranks[int(row["rank"])] = {
            "window_us": window,
            "compute_pct": 100 * float(row["compute_time(us)"]) / window,
            "non_compute_pct": 100 * float(row["non_compute_time(us)"]) / window,
            "idle_pct": 100 * float(row["idle_time(us)"]) / window}
    for row in overlap.to_dict("records"):
        value = row["comp_comm_overlap_pctg"]
        ranks[int(row["rank"])]["overlap_pct"] = None if value != value else float(value)
    return ranks


def main(argv: list[str]) -> None:
    logging.disable(logging.CRITICAL)
    keep = "--keep-last-step" in argv
    results = {}
    for folder in (a for a in argv if not a.startswith("--")):
        try:
            results[folder] = {"ranks": hta_numbers(Path(folder), keep)}
        except Exception as error:  # HTA's own failures are part of what is compared
            results[folder] = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(results))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    main(sys.argv[1:])
