#!/usr/bin/env bash
# The whole test suite, slow tests included, plus the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
# The HTML report is tested in a real browser: Debian's chromium. Without it that one test is
# skipped, and says so.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null 2>&1 \
        || echo "chromium could not be installed: the browser test will be skipped"
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
