#!/usr/bin/env bash
# The native event scanner (ddpprof/trace/_scan.c) built with AddressSanitizer and
# UndefinedBehaviorSanitizer, then its differential fuzz (tests/test_native_scan.py: generated,
# damaged and real runs of events against the Python decoder) and a mutation fuzz of slices of
# every fixture trace run through that build. Any report of either sanitizer fails (exit 1).
#
#   bash scripts/sanitize-scan.sh                  # a small budget (CI's test sets a smaller)
#   FUZZ_EXAMPLES=3000 MUTANTS=200000 bash scripts/sanitize-scan.sh   # a longer local run
#
# gcc builds it (clang works too: CC=clang); a Python extension cannot link ASan's runtime
# itself (the interpreter is not instrumented), so the runtime is preloaded (LD_PRELOAD).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
CC="${CC:-gcc}"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
include="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
suffix="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
"$CC" -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all -I"$include" -Iddpprof/trace ddpprof/trace/_scan.c \
    -o "$build/_scan$suffix"
runtime="$("$CC" -print-file-name=libasan.so)"
log="$build/sanitizer"
# detect_leaks=0: the interpreter itself keeps memory to its exit (not the scan's leaks);
# every report goes to $log.PID as well as stderr, so that one printed by a child is seen too
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:log_path=$log"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$log"
export DDPPROF_SANITIZED_SCAN="$build/_scan$suffix"
export DDPPROF_FUZZ_EXAMPLES="${FUZZ_EXAMPLES:-40}"
export DDPPROF_SCAN_MUTANTS="${MUTANTS:-4000}"
status=0
LD_PRELOAD="$runtime" PYTHONPATH="tests${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m pytest -q \
    -p sanitized_scan -p no:cacheprovider -p no:xdist "$@" tests/test_native_scan.py \
    tests/test_native_scan_mutants.py || status=$?
if compgen -G "$log.*" >/dev/null; then
    cat "$log".* >&2
    echo "sanitize-scan: the sanitizers reported the above" >&2
    exit 1
fi
exit "$status"
