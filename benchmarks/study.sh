#!/usr/bin/env bash
# The study (docs/study.md), reproduced on this machine: the seven data-parallel
# variants on smollm2-135m (random weights, synthetic tokens), 2 gloo ranks, profiled and
# analyzed with ddpprof's findings; then the study's table, the GPU reference's numbers beside
# ours.
#
#   bash benchmarks/study.sh [OUT]      (default OUT: study/; about 15 minutes on 2 cores)
#
# A benchmark, not a test. Environment: PYTHON (default .venv/bin/python), BATCH (global batch,
# default 8), SEQ_LEN (default 64), STEPS (default 7: 1 skipped, 1 warm-up, 3 profiled, 2 after).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-study}
PY=${PYTHON:-.venv/bin/python}
BATCH=${BATCH:-8}
SEQ_LEN=${SEQ_LEN:-64}
STEPS=${STEPS:-7}
VARIANTS=single,simple_ddp,simple_ddp_ga,simple_ddp_hook,simple_ddp_async,bucket_ddp_async,pytorch_ddp

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
mkdir -p "$OUT"
# what an all-reduce costs here, beside the runs: simulate (and so the findings) read it
"$PY" -m ddpprof.cli calibrate --nproc 2 --backend gloo --iters 10 --out "$OUT/runs" --quiet \
    | tee "$OUT/calibration.txt"
"$PY" -m ddpprof.cli record --variant "$VARIANTS" --model smollm2-135m --nproc 2 \
    --backend gloo --global-batch "$BATCH" --seq-len "$SEQ_LEN" --steps "$STEPS" \
    --wait 1 --warmup 1 --active 3 --out "$OUT" --name runs --json "$OUT/record.json"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$PY" -m ddpprof.cli analyze "$OUT/runs" --json "$OUT/analysis.json" \
    --markdown "$OUT/analysis.md" --html-out "$OUT/study.html"
"$PY" benchmarks/study_table.py "$OUT/analysis.json" "$OUT/record.json" | tee "$OUT/table.md"
