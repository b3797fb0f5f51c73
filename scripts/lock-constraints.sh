#!/usr/bin/env bash
# Rewrites constraints.txt from a fresh resolution of setup.cfg's requirements plus the
# record, test and docs extras. s3fs and fsspec are named because pip's resolver, left to
# itself, backtracks through their lock-step releases for minutes and then reports a false
# conflict: pick the newest s3fs release and the fsspec release of the same number.
set -euo pipefail
cd "$(dirname "$0")/.."
S3FS="${S3FS:-2026.9.0}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0
"$scratch/venv/bin/pip" install -q --disable-pip-version-check -e ".[record,test,docs]" \
    "s3fs==$S3FS" "fsspec==$S3FS"
{
    echo "# Exact versions that scripts/setup-venv.sh (and so CI) installs, through pip -c."
    echo "# Written by scripts/lock-constraints.sh: regenerate it after changing setup.cfg."
    # --all: wheel too (the test extra builds the wheel); pip and setuptools come with the venv
    "$scratch/venv/bin/pip" freeze --all --exclude-editable \
        | grep -v -i -E '^(ddpprof|pip|setuptools)==' \
        | sed 's/^torch==\(.*\)+cpu$/torch==\1/'
} > constraints.txt.tmp
mv constraints.txt.tmp constraints.txt
