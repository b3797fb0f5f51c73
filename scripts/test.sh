#!/usr/bin/env bash
# The whole test suite, slow tests included, plus the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
