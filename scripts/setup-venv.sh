#!/usr/bin/env bash
# Creates .venv with the pinned CPU torch and ddpprof (editable, with the record, test and
# docs extras: docs builds the documentation site).
# torch is installed first and pinned: an unpinned requirement would pull GBs of CUDA wheels.
# Every other package is held to constraints.txt, so CI installs what was tested and pip
# never backtracks (see scripts/lock-constraints.sh).
# --no-compile: pip would byte-compile all 20,000 files it installs (1.5 min of CPU on CI's two
# cores); Python compiles the few the tests import, once, when they are first imported.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check --no-compile torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check --no-compile -c constraints.txt \
    -e ".[record,test,docs]"
