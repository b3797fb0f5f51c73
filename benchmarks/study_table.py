"""The study's table (docs/study.md): ``benchmarks/study.sh``'s analysis beside the GPU
reference's published results, with ddpprof's findings for each variant.

    python benchmarks/study_table.py ANALYSIS.json [RECORD.json]

ANALYSIS.json is ``ddpprof analyze --json``; RECORD.json, ``ddpprof record --json`` (for the
median step time). The GPU reference's numbers (SmolLM2-360M, GPUs with NCCL, HTA's breakdown; its
all-reduce counts and times cover its whole profiling window, two micro-batches) are copied
from its results table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The GPU reference, "Results comparison": Compute%, Non_Compute%, Idle%, Overlap%, Comm_overhead%,
#: all_reduce_calls, all_reduce_ms.
REFERENCE = {
    "simple_ddp": (67.14, 30.54, 2.33, 0.00, 30.78, 582.0, 797.84),
    "simple_ddp_ga": (81.58, 14.64, 3.79, 0.00, 14.73, 291.0, 358.79),
    "simple_ddp_hook": (80.30, 15.93, 3.78, 0.00, 16.05, 291.0, 414.57),
    "simple_ddp_async": (81.89, 14.32, 3.79, 0.07, 14.43, 291.0, 352.03),
    "bucket_ddp_async": (80.59, 15.73, 3.68, 9.63, 16.60, 44.0, 438.03),
    "pytorch_ddp": (71.13, 26.95, 1.92, 57.16, 35.83, 90.5, 1161.42),
}
ORDER = ["single", *REFERENCE]


def cell(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    analysis = json.loads(Path(sys.argv[1]).read_text())
    steps = {}
    if len(sys.argv) > 2:
        steps = {r["variant"]: r["step_ms"] for r in json.loads(Path(sys.argv[2]).read_text())
                 ["runs"]}
    runs = {r["variant"]: r for r in analysis["runs"]}
    findings: dict[str, list[str]] = {}
    for finding in analysis.get("findings", []):
        run = finding["run"]
        gain = finding["estimated_gain_pct"]
        findings.setdefault(run, []).append(
            f"`{finding['code']}`" + (f" ({gain:.0f}%)" if gain is not None else ""))
    print("| variant | compute % | non-compute % | idle % | overlap % | comm overhead % | "
          "all-reduces / step | all-reduce ms / step | step ms | GPU reference: compute / "
          "non-compute / idle / overlap / comm overhead %, all-reduces, ms | findings |")
    print("|" + " --- |" * 11)
    for variant in ORDER:
        run = runs.get(variant)
        if run is None:
            continue
        reference = REFERENCE.get(variant)
        reference_text = (" / ".join(cell(v, 2) for v in reference[:5])
                          + f", {reference[5]:g}, {reference[6]:,.0f}"
                          if reference else "(not in the reference)")
        name = run["run"]
        print(f"| `{variant}` | {cell(run['compute_pct'])} | {cell(run['non_compute_pct'])} | "
              f"{cell(run['idle_pct'])} | {cell(run['overlap_pct'])} | "
              f"{cell(run['exposed_comm_pct'])} | {cell(run['all_reduce_calls_per_step'], 0)} "
              f"| {cell(run['all_reduce_ms_per_step'])} | {cell(steps.get(variant), 0)} | "
              f"{reference_text} | {', '.join(findings.get(name, [])) or 'none'} |")


if __name__ == "__main__":
    main()
