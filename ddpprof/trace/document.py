"""The whole document of a Chrome trace: where its events array is, and ``distributedInfo``.

PyTorch has written two forms: Kineto's object (``traceEvents`` plus ``distributedInfo``,
``deviceProperties``...) and the legacy bare array of events. :func:`decode_document`
validates the whole document and finds the events array in either; the events themselves are
decoded later, in slices (``ddpprof.trace.sliced``). A bare non-finite number (``inf``,
``NaN``), which some writers put in an argument, is read as null rather than refusing the
trace.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..core.errors import NotATrace, TraceError
from ..core.io import NOT_BLANK, TraceBytes
from ..core.storage import Location

_CHUNK_BYTES = 1024 * 1024


class DistributedInfo(msgspec.Struct, gc=False):
    """``distributedInfo``, each field as written (``ddpprof.trace.args`` reads them), and the
    document's own ``schemaVersion`` (Kineto writes it; other tools' Chrome traces do not)."""

    rank: Any = None
    world_size: Any = None
    backend: Any = None
    pg_config: Any = None
    schema_version: Any = None


class TraceObject(msgspec.Struct, gc=False):
    """Kineto's object form, the events kept as raw bytes (decoded in slices later)."""

    traceEvents: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    distributedInfo: Any = None
    schemaVersion: Any = None


OBJECT_DECODER = msgspec.json.Decoder(TraceObject)
_ARRAY_DECODER = msgspec.json.Decoder(msgspec.Raw)


def distributed_info(document: TraceObject) -> DistributedInfo | None:
    info = document.distributedInfo
    found = msgspec.convert(info, DistributedInfo) if isinstance(info, dict) else None
    if document.schemaVersion is not None:
        found = found or DistributedInfo()
        found.schema_version = document.schemaVersion
    return found


def first_byte(data: TraceBytes) -> tuple[bytes, int]:
    """The document's first byte that ``bytes.lstrip()`` keeps, and its offset (empty and the
    size where there is none)."""
    for offset in range(0, data.size, _CHUNK_BYTES):
        found = NOT_BLANK.search(data.read(offset, _CHUNK_BYTES))
        if found is not None:
            return bytes(found.group()), offset + found.start()
    return b"", data.size


def decode_document(raw: bytes | bytearray | memoryview, path: Location
                    ) -> tuple[memoryview, DistributedInfo | None]:
    """The bytes of the ``traceEvents`` array (validated JSON) and ``distributedInfo``, for the
    object form and the bare-array form of a Chrome trace; a TraceError naming any problem."""
    head = bytes(raw[:64]).lstrip()[:1] or bytes(raw).lstrip()[:1]
    try:
        if head == b"[":
            return memoryview(_ARRAY_DECODER.decode(raw)), None
        if head != b"{":
            raise TraceError(path, "not a trace (not a JSON object or array)")
        document = OBJECT_DECODER.decode(raw)
    except msgspec.ValidationError as error:
        raise TraceError(path, f"not a trace ({error})") from None
    except msgspec.DecodeError as error:
        repaired = non_finite_as_null(raw) if "invalid character" in str(error) else None
        if repaired is not None:
            return decode_document(repaired, path)
        problem = "truncated JSON" if "truncated" in str(error).lower() else "invalid JSON"
        raise TraceError(path, f"{problem} ({error})") from None
    events = document.traceEvents
    if bytes(memoryview(events)[:1]) != b"[":
        raise NotATrace(path, "not a trace (no traceEvents array)")
    return memoryview(events), distributed_info(document)


#: A bare non-finite number as a JSON value: Kineto wrote ``"memory bandwidth (GB/s)": inf``
#: for a zero-length memcpy (pytorch/kineto issue 105), Python's json writes ``NaN`` and
#: ``Infinity``. Neither is JSON, and one such argument would otherwise refuse the whole trace.
#: Strings are matched too, and kept as they are, so that text such as a name ``"a,inf]"``
#: is never changed.
_NON_FINITE = re.compile(rb'("(?:[^"\\]++|\\.)*+")|([:,\[]\s*)-?(?:inf|nan|infinity)'
                         rb"(?=\s*[,}\]])", re.IGNORECASE)


def non_finite_as_null(raw: bytes | bytearray | memoryview) -> bytes | None:
    """``raw`` with every bare non-finite number replaced by ``null`` (read as absent, as any
    value that makes no sense is), or None where it has none."""
    count = 0

    def repair(match: re.Match[bytes]) -> bytes:
        nonlocal count
        if match.group(1) is not None:
            return match.group(1)
        count += 1
        return match.group(2) + b"null"

    repaired = _NON_FINITE.sub(repair, raw)
    return repaired if count else None
