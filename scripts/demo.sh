#!/usr/bin/env bash
# The main job, end to end on CPU: every variant on mlp-small with 2 gloo ranks, analyzed
# (--variant all: every variant but fsdp_tp, whose data-parallel x tensor-parallel mesh needs 4
# ranks to have both; ddpprof record --variant fsdp_tp --nproc 4 records it).
#
# Killing it at any moment leaves no process behind and no run that looks complete or stays
# running: a signal to this script is passed to the step that runs (ddpprof record then stops
# torchrun and its ranks and marks the run interrupted), and where util-linux's setpriv exists
# each step also gets SIGTERM if the script dies without passing anything on (kill -9).
set -euo pipefail
cd "$(dirname "$0")/.."

dies_with_script=()
if setpriv --pdeathsig TERM true 2>/dev/null; then
    dies_with_script=(setpriv --pdeathsig TERM)
fi
child=""
step() {
    ${dies_with_script[@]+"${dies_with_script[@]}"} "$@" &
    child=$!
    wait "$child"
}
stop() {
    trap - INT TERM HUP
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
    exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP

step bash scripts/setup-venv.sh
step .venv/bin/ddpprof record --variant all --model mlp-small --nproc 2 --backend gloo \
    --global-batch 1024 --steps 8 --out traces/ "$@"
step .venv/bin/ddpprof analyze traces/ --json traces/analysis.json --html
