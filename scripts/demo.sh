#!/usr/bin/env bash
# The main job, end to end on CPU: every variant on mlp-small with 2 gloo ranks, analyzed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/ddpprof record --variant all --model mlp-small --nproc 2 --backend gloo \
    --global-batch 1024 --steps 8 --out traces/ "$@"
.venv/bin/ddpprof analyze traces/ --json traces/analysis.json --html
