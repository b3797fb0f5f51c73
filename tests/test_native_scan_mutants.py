"""A mutation fuzz of the native scan on real events: runs of events cut from every fixture
trace, then damaged (bytes flipped, cut, inserted, deleted, spans repeated), each scanned and,
where the scan takes it, compared with the Python decoder's columns
(``test_native_scan._check``). Its point is the C: ``scripts/sanitize-scan.sh`` runs it on a
build with AddressSanitizer and UndefinedBehaviorSanitizer, where a read out of bounds or an
overflow is a report, not luck. ``DDPPROF_SCAN_MUTANTS`` is its budget (mutants in all;
docs/guarantees.md)."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import pytest
from test_native_scan import _TRACES, _check

from ddpprof.trace import scanned

MUTANTS = int(os.environ.get("DDPPROF_SCAN_MUTANTS") or 300)
#: Events in a run cut from a trace.
RUN_EVENTS = 24
_BYTES = b'{}[]",:\\ 0123456789-+.eE\x00\x01\x7f\x80\xc3\xff\ntfnulr'


def _events(path: Path) -> list[object]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    document = json.loads(data)
    return document.get("traceEvents") or [] if isinstance(document, dict) else []


def _mutant(rng: random.Random, run: bytes) -> bytes:
    data = bytearray(run)
    for _ in range(rng.randint(1, 3)):
        if not data:
            break
        at = rng.randrange(len(data))
        how = rng.randrange(5)
        if how == 0:
            data[at] = rng.choice(_BYTES)
        elif how == 1:
            del data[at:at + rng.randint(1, 8)]
        elif how == 2:
            data[at:at] = bytes(rng.choice(_BYTES) for _ in range(rng.randint(1, 4)))
        elif how == 3:
            data = data[:at]
        else:
            end = min(len(data), at + rng.randint(1, 64))
            data[at:at] = data[at:end]
    return bytes(data)


@pytest.mark.skipif(not scanned.AVAILABLE, reason="the native scan is not built")
def test_damaged_runs_of_real_events_read_as_the_python_decoder_reads_them():
    rng = random.Random(20261202)
    traces = [events for events in map(_events, _TRACES) if events]
    per_trace = max(1, MUTANTS // len(traces))
    for events in traces:
        for _ in range(per_trace):
            start = rng.randrange(max(1, len(events) - RUN_EVENTS))
            run = json.dumps(events[start:start + RUN_EVENTS],
                             separators=(",", ":")).encode()
            _check(_mutant(rng, run))
