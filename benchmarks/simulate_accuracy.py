"""How well ``ddpprof simulate`` predicts runs it was not calibrated on (a benchmark, not a
test).

Records every bucketed variant on one model at several bucket caps on 2 gloo ranks, and at one
cap on 3, all configurations interleaved within each repeat (the machine's load changes: each
repeat measures everything once, side by side); measures all-reduce once per world size with
``ddpprof calibrate`` (beside the runs, where ``simulate`` finds it). Then, for every variant
and repeat, ``simulate`` replays that repeat's run at the first cap (the *calibration run*)
and predicts every other cap at its world size and the 3-rank configuration; nothing measured
at a predicted configuration enters its prediction.

A configuration's measurement is the median over repeats of its run's median unprofiled step
(``run.json``), its spread the lowest and highest repeat; overlap % is ``analyze``'s (mean over
ranks), median over repeats. Printed and written (``OUT/accuracy.json``; the tables in
``OUT/accuracy.md``): every prediction against its measurement, and the targets: the calibrated
configuration's own replay (median |error|), other caps and world sizes (median and p90
|error|), overlap (the largest |gap| per cap), and whether the predicted best cap is within the
measured noise of the measured best (its measured median no further from the best's than the
best's own spread). Beside them, what the machine's noise allows: the *noise floor* (each
repeat of a configuration against another repeat of the same; for overlap, the largest and
median |gap| between two repeats of one configuration), what a perfect predictor fed one run
would score (each repeat against the median of its configuration's repeats, step and
overlap), the errors against the run of
the same repeat (recorded minutes apart), the ratio of a cap's step to the calibration run's
own within a repeat, the 3-rank runs predicted with each rank on its own cores
(``--shared-cores 0``; by default a run of CPU ranks on one host shares its cores), the
prediction before the profiler's overhead is divided out against the median *profiled* step
(what the replay itself gets wrong, without the overhead ratio's noise), and the calibration
run re-bucketed at its own cap against its unedited replay (the re-bucketing's own error, free
of noise). The 1-minute load average is logged before each recording and prediction.

    python benchmarks/simulate_accuracy.py [--out bench-acc/] [--model mlp-medium]
        [--variants all] [--caps 1,4,25] [--world3-cap 4] [--repeats 3] [--steps 16]
        [--global-batch 512] [--global-batch3 510] [--reuse] [--record-only]

``--reuse`` skips recordings (and calibrations) already complete under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ddpprof.analysis import analyze_paths  # noqa: E402
from ddpprof.core.storage import location_of  # noqa: E402
from ddpprof.run.manifest import read_manifest  # noqa: E402
from ddpprof.simulate.run import simulate_run  # noqa: E402
from ddpprof.variants import BUCKETED_VARIANT_NAMES  # noqa: E402


def ddpprof(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], check=True,
                   env={**os.environ, "CI": "true"})


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def folder_of(out: Path, world: int, variant: str, cap: float, repeat: int) -> Path:
    return out / f"n{world}" / f"{variant}-cap{cap:g}-r{repeat}"


def complete(folder: Path) -> bool:
    path = folder / "run.json"
    return path.is_file() and read_manifest(path).status == "complete"


def record(out: Path, args, plan: list[tuple[int, str, float]], loads: list[dict]) -> None:
    for repeat in range(1, args.repeats + 1):
        for world, variant, cap in plan:
            folder = folder_of(out, world, variant, cap, repeat)
            if args.reuse and complete(folder):
                continue
            load = load_average()
            loads.append({"what": f"record {folder.name} (n{world})", "load_1min": load,
                          "time": time.strftime("%H:%M:%S")})
            print(f"[load {load:.2f}] recording n{world}/{folder.name}", file=sys.stderr,
                  flush=True)
            batch = args.global_batch if world == 2 else args.global_batch3
            ddpprof("record", "--variant", variant, "--model", args.model, "--nproc",
                    str(world), "--global-batch", str(batch), "--bucket-cap-mib", f"{cap:g}",
                    "--steps", str(args.steps), "--active", str(args.active), "--out",
                    str(out / f"n{world}"), "--name", folder.name, "--quiet")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def measured(out: Path, world: int, variant: str, cap: float, repeats: int) -> dict | None:
    """The configuration's repeats: each one's median unprofiled step and overlap %."""
    folders = [f for r in range(1, repeats + 1)
               if complete(f := folder_of(out, world, variant, cap, r))]
    if not folders:
        return None
    manifests = [read_manifest(f / "run.json") for f in folders]
    steps = [m.throughput.median_step_s * 1e3 for m in manifests]
    profiled = [statistics.median(s.wall_s for s in m.steps if s.phase == "active") * 1e3
                for m in manifests]
    analysis = analyze_paths([location_of(str(f)) for f in folders])
    overlaps = [statistics.fmean(r.breakdown.overlap_pct or 0 for r in run.ranks)
                for run in sorted(analysis.runs, key=lambda run: run.name)]
    return {"step_ms": statistics.median(steps), "repeats_ms": steps,
            "profiled_ms": statistics.median(profiled),
            "low_ms": min(steps), "high_ms": max(steps),
            "overlap_pct": statistics.median(overlaps), "repeats_overlap_pct": overlaps,
            "folders": [str(f) for f in folders]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-acc"))
    parser.add_argument("--model", default="mlp-medium")
    parser.add_argument("--variants", default="all")
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--global-batch3", type=int, default=510)   # divisible by 3
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--active", type=int, default=6)
    parser.add_argument("--caps", default="1,4,25")
    parser.add_argument("--world3-cap", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--record-only", action="store_true")
    args = parser.parse_args()
    variants = list(BUCKETED_VARIANT_NAMES) if args.variants == "all" else \
        args.variants.split(",")
    caps = [float(c) for c in args.caps.split(",")]
    out = args.out
    loads: list[dict] = []
    for world in (2, 3):
        target = out / f"n{world}"
        target.mkdir(parents=True, exist_ok=True)
        if not (args.reuse and (target / "calibration.json").is_file()):
            print(f"[load {load_average():.2f}] calibrating {world} ranks", file=sys.stderr)
            ddpprof("calibrate", "--nproc", str(world), "--backend", "gloo", "--out",
                    str(target), "--iters", "20", "--quiet")
    plan = [(2, v, cap) for v in variants for cap in caps] + \
        [(3, v, args.world3_cap) for v in variants]
    record(out, args, plan, loads)
    if args.record_only:
        return
    report: dict = {"model": args.model, "caps": caps, "repeats": args.repeats,
                    "steps": args.steps, "variants": variants, "cores": os.cpu_count(),
                    "points": [], "loads": loads}
    errors: dict[str, list[float]] = {key: [] for key in (
        "own", "own_against_its_run", "other_caps", "world3", "world3_own_cores", "same_repeat",
        "ratio_within_repeat", "own_cap_rebucketed", "profiled_against_profiled",
        "world3_profiled_against_profiled", "noise_floor", "one_repeat_against_median")}
    overlap_gaps: dict[str, list[float]] = {}
    overlap_noise: list[float] = []     # one repeat's overlap against another's, same config
    overlap_oracle: list[float] = []    # one repeat's overlap against its config's median
    best_ok = []
    own_marker = 1 + 1e-9    # a cap that makes the calibration run's own buckets, re-bucketed
    for variant in variants:
        truth = {(2, cap): measured(out, 2, variant, cap, args.repeats) for cap in caps}
        truth[(3, args.world3_cap)] = measured(out, 3, variant, args.world3_cap, args.repeats)
        for target in truth.values():   # a repeat against another repeat of itself
            if target:
                steps = target["repeats_ms"]
                errors["noise_floor"] += [100 * abs(a - b) / b for i, a in enumerate(steps)
                                          for j, b in enumerate(steps) if i != j]
                spread = target["repeats_overlap_pct"]
                overlap_noise += [abs(a - b) for i, a in enumerate(spread) for b in spread[i + 1:]]
                # what a perfect predictor fed one repeat would score: that repeat against the
                # median of its configuration's repeats
                errors["one_repeat_against_median"] += [
                    abs(100 * (a / target["step_ms"] - 1)) for a in steps]
                overlap_oracle += [abs(a - target["overlap_pct"]) for a in spread]
        for repeat in range(1, args.repeats + 1):
            source = folder_of(out, 2, variant, caps[0], repeat)
            if not complete(source):
                continue
            load = load_average()
            loads.append({"what": f"predict from {source.name}", "load_1min": load,
                          "time": time.strftime("%H:%M:%S")})
            simulation = simulate_run(source, [*caps, caps[0] * own_marker], [2, 3],
                                      allow_sweep=False)
            own_cores = simulate_run(source, [args.world3_cap], [3], allow_sweep=False,
                                     shared_cores=0)
            predicted = {(p.world_size, p.bucket_cap_mib): p for p in simulation.predictions}
            own = predicted[(2, caps[0])]
            rebucketed = predicted[(2, caps[0] * own_marker)]
            errors["own_cap_rebucketed"].append(
                abs(100 * (rebucketed.step_ms - own.step_ms) / own.step_ms))
            own_measured = read_manifest(source / "run.json").throughput.median_step_s * 1e3
            errors["own_against_its_run"].append(abs(100 * (own.step_ms / own_measured - 1)))
            apart = {p.world_size: p for p in own_cores.predictions if p.bucket_cap_mib ==
                      args.world3_cap or p.bucket_cap_mib is None}
            ranking = []
            for (world, cap), target in truth.items():
                point = predicted.get((world, cap))
                if target is None or point is None:
                    continue
                error = 100 * (point.step_ms - target["step_ms"]) / target["step_ms"]
                if not (world == 2 and cap == caps[0]):
                    profiled = point.step_ms * simulation.overhead_ratio
                    errors["profiled_against_profiled" if world == 2 else
                           "world3_profiled_against_profiled"].append(
                        abs(100 * (profiled / target["profiled_ms"] - 1)))
                gap = (point.overlap_pct or 0.0) - target["overlap_pct"]
                same = folder_of(out, world, variant, cap, repeat)
                same_ms = read_manifest(same / "run.json").throughput.median_step_s * 1e3 \
                    if complete(same) else None
                if world == 2 and cap == caps[0]:
                    errors["own"].append(abs(error))
                elif world == 2:
                    errors["other_caps"].append(abs(error))
                    ranking.append((point.step_ms, cap))
                    if same_ms:
                        errors["ratio_within_repeat"].append(abs(100 * (
                            (point.step_ms / own.step_ms) / (same_ms / own_measured) - 1)))
                else:
                    errors["world3"].append(abs(error))
                    if 3 in apart:
                        errors["world3_own_cores"].append(abs(
                            100 * (apart[3].step_ms - target["step_ms"]) / target["step_ms"]))
                if same_ms and not (world == 2 and cap == caps[0]):
                    errors["same_repeat"].append(abs(100 * (point.step_ms - same_ms) / same_ms))
                label = f"{cap:g}" if world == 2 else f"{cap:g} (3 ranks)"
                overlap_gaps.setdefault(label, []).append(abs(gap))
                report["points"].append({
                    "variant": variant, "calibrated_on": source.name, "world_size": world,
                    "cap_mib": cap, "buckets": point.buckets, "predicted_ms": point.step_ms,
                    "predicted_own_cores_ms": apart[3].step_ms if world == 3
                    and 3 in apart else None,
                    "measured_ms": target["step_ms"], "measured_repeats_ms": target["repeats_ms"],
                    "measured_same_repeat_ms": same_ms, "error_pct": error,
                    "predicted_overlap_pct": point.overlap_pct,
                    "measured_overlap_pct": target["overlap_pct"], "load_1min": load})
                print(f"{variant:<17} r{repeat} n{world} cap {cap:<5g} predicted "
                      f"{point.step_ms:8.1f} measured {target['step_ms']:8.1f} "
                      f"[{target['low_ms']:.1f}, {target['high_ms']:.1f}] {error:+6.1f}%  "
                      f"overlap {point.overlap_pct or 0:5.1f} vs {target['overlap_pct']:5.1f}")
            ranking.append((own.step_ms, caps[0]))
            top = min(ranking)[1]
            best = min((truth[(2, c)]["step_ms"], c) for c in caps if truth[(2, c)])[1]
            noise = truth[(2, best)]["high_ms"] - truth[(2, best)]["low_ms"]
            ok = truth[(2, top)]["step_ms"] - truth[(2, best)]["step_ms"] <= noise
            best_ok.append(ok)
            report["points"].append({"variant": variant, "calibrated_on": source.name,
                                     "predicted_best_cap": top, "measured_best_cap": best,
                                     "within_noise": ok})

    def stats(values: list[float]) -> dict | None:
        return {"median": statistics.median(values), "p90": percentile(values, 0.9),
                "n": len(values)} if values else None

    summary = {
        "abs_error_pct": {key: stats(values) for key, values in errors.items()},
        "others_abs_error_pct": stats(errors["other_caps"] + errors["world3"]),
        "others_own_cores_abs_error_pct": stats(errors["other_caps"]
                                                + errors["world3_own_cores"]),
        "overlap_max_abs_gap_pp_by_cap": {c: max(v) for c, v in overlap_gaps.items()},
        "overlap_median_abs_gap_pp": statistics.median(
            g for v in overlap_gaps.values() for g in v) if overlap_gaps else None,
        "overlap_noise_floor_pp": {"median": statistics.median(overlap_noise),
                                   "max": max(overlap_noise)} if overlap_noise else None,
        "overlap_one_repeat_against_median_pp": {
            "median": statistics.median(overlap_oracle), "p90": percentile(overlap_oracle, 0.9),
            "max": max(overlap_oracle)} if overlap_oracle else None,
        "best_cap_within_noise": f"{sum(best_ok)} of {len(best_ok)}",
        "load_1min_range": [min(x["load_1min"] for x in loads), max(x["load_1min"] for x in loads)]
        if loads else None,
    }
    report["summary"] = summary
    (out / "accuracy.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "accuracy.md").write_text(markdown(report))
    print(json.dumps(summary, indent=1))


def markdown(report: dict) -> str:
    """Each variant's configurations, predicted (median over its calibration runs, and their
    range) against measured (median over repeats, and their range), as a Markdown table; then
    the predicted and measured best cap of each calibration run."""
    lines = ["| variant | ranks | cap (MiB) | buckets | predicted (ms) | measured (ms) | error "
             "| 3 ranks, own cores (ms) | overlap % predicted | overlap % measured |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    points = [p for p in report["points"] if "predicted_ms" in p]
    keys = list(dict.fromkeys((p["variant"], p["world_size"], p["cap_mib"]) for p in points))
    for variant, world, cap in keys:
        mine = [p for p in points if (p["variant"], p["world_size"], p["cap_mib"]) ==
                (variant, world, cap)]
        predicted = [p["predicted_ms"] for p in mine]
        apart = [p["predicted_own_cores_ms"] for p in mine if p["predicted_own_cores_ms"]]
        measured = mine[0]["measured_repeats_ms"]
        middle = statistics.median(predicted)
        error = statistics.median(p["error_pct"] for p in mine)
        lines.append(
            f"| {variant} | {world} | {cap:g} | {mine[0]['buckets']} | {middle:,.0f} "
            f"({min(predicted):,.0f}–{max(predicted):,.0f}) | {statistics.median(measured):,.0f}"
            f" ({min(measured):,.0f}–{max(measured):,.0f}) | {error:+.1f} % | "
            + (f"{statistics.median(apart):,.0f}" if apart else "") + " | "
            f"{statistics.median(p['predicted_overlap_pct'] or 0 for p in mine):.1f} | "
            f"{mine[0]['measured_overlap_pct']:.1f} |")
    lines += ["", "| variant | calibrated on | predicted best cap | measured best cap | "
              "within the noise |", "| --- | --- | ---: | ---: | --- |"]
    lines += [f"| {p['variant']} | {p['calibrated_on']} | {p['predicted_best_cap']:g} | "
              f"{p['measured_best_cap']:g} | {'yes' if p['within_noise'] else 'no'} |"
              for p in report["points"] if "predicted_best_cap" in p]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
