#!/usr/bin/env bash
# The whole test suite, slow tests included, plus the linter and the documentation build.
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
# The type checker, configured in pyproject.toml ([tool.mypy]): a misspelt attribute, a dict
# passed where a typed row is expected or an unchecked None fails here.
.venv/bin/mypy
# The documentation site: a broken link, a missing page or an option the CLI reference cannot
# render fails here (the site goes to a temporary folder, removed on exit; not --quiet, which
# hides the warnings that --strict counts).
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site"
# Two workers: much of the suite waits on processes (torchrun, pip, a browser), not the CPU;
# tests sharing a recording run on one worker (tests/conftest.py).
.venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
