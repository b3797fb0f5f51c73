"""Finding Flight Recorder dumps and decoding each into a plain object, bounded.

``ddpprof hang PATH`` takes a run folder that ``ddpprof record`` wrote (its dumps are in
``fr/``), a folder of dumps from anywhere, or the prefix they were written under
(``TORCH_FR_DUMP_TEMP_FILE``: ``/tmp/trace_rank_`` for ``/tmp/trace_rank_0``, ...). A dump's
name ends with its rank (an extension ``.json``, ``.pkl`` or ``.pickle`` may follow); its
format is told from its first byte: a pickle (PyTorch's ``_dump_fr_trace``, and what NCCL's
watchdog writes) or JSON (``_dump_fr_trace_json``). Each file is read through
``ddpprof.core.io`` (regular files only, at most ``DDPPROF_MAX_DUMP_BYTES``, by default
1 GiB, noticed when changed while read), and a pickle is loaded without resolving any name
(``safe_pickle``).
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import TraceError, UsageError
from ..core.io import byte_cap, read_regular_file
from ..record.flight_recorder import FR_DIR
from ..run.manifest import MANIFEST_NAME
from . import safe_pickle

DEFAULT_MAX_DUMP_BYTES = 1024**3
MAX_DUMP_BYTES_ENV = "DDPPROF_MAX_DUMP_BYTES"
#: ``<prefix><rank>[.json|.pkl|.pickle]``
_DUMP_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?:\.json|\.pkl|\.pickle)?$")
#: More digits than any rank has: a name such as a timestamp.
_MAX_RANK_DIGITS = 9


@dataclass(frozen=True)
class Found:
    """Where the dumps are: the files by rank, and a run folder when PATH is one."""

    files: dict[int, Path]
    run_dir: Path | None
    skipped: list[str]          # what was left out, and why


def find(path: Path) -> Found:
    """The dump files at ``path`` (see the module docstring); a ``UsageError`` when there are
    none, or names that give two files one rank."""
    if path.is_dir():
        if path.name == FR_DIR and (path.parent / MANIFEST_NAME).is_file():
            path = path.parent                  # a run's fr/ named: the run, with its run.json
        if (path / MANIFEST_NAME).is_file():
            folder = path / FR_DIR
            if not folder.is_dir():
                raise UsageError(f"{path}: the run left no Flight Recorder dumps (no {FR_DIR}/: "
                                 "it was recorded with --fr-buffer-size 0 or by an older "
                                 "ddpprof, or no rank lived to dump)")
            files, skipped = _listed(folder, None)
            return Found(_by_rank(files, folder), path, skipped)
        files, skipped = _listed(path, None)
        return Found(_by_rank(files, path), None, skipped)
    if path.parent.is_dir() and path.name:
        files, skipped = _listed(path.parent, path.name)
        if files:
            return Found(_by_rank(files, path), None, skipped)
    if path.exists() or path.is_symlink():
        raise UsageError(f"{path}: not a folder of Flight Recorder dumps, nor their prefix")
    raise UsageError(f"{path}: no such folder, and no dump starts with it")


def _listed(folder: Path, prefix: str | None) -> tuple[dict[str, list[tuple[int, Path]]],
                                                       list[str]]:
    """The dump-like names in ``folder`` (those starting with ``prefix``, when given), by the
    prefix before their rank; what else was there, noted."""
    by_prefix: dict[str, list[tuple[int, Path]]] = {}
    skipped: list[str] = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as error:
        raise UsageError(f"{folder}: cannot be read ({error.strerror or error})") from None
    for entry in entries:
        if entry.name.startswith(".") or (prefix is not None
                                          and not entry.name.startswith(prefix)):
            continue
        match = _DUMP_NAME.match(entry.name)
        if match is None or len(match["rank"]) > _MAX_RANK_DIGITS:
            continue
        try:
            mode = os.stat(entry.path).st_mode
        except OSError:
            skipped.append(f"{entry.name}: a link to nothing")
            continue
        if not stat.S_ISREG(mode):
            if not stat.S_ISDIR(mode):
                skipped.append(f"{entry.name}: not a regular file")
            continue
        by_prefix.setdefault(match["prefix"], []).append((int(match["rank"]), Path(entry.path)))
    return by_prefix, skipped


def _by_rank(found: dict[str, list[tuple[int, Path]]], where: Path) -> dict[int, Path]:
    if not found:
        raise UsageError(f"{where}: no Flight Recorder dump (files named <prefix><rank>)")
    if len(found) > 1:
        # the prefix most files share is the dumps'; others are unrelated numbered files
        counts = sorted(((len(files), name) for name, files in found.items()), reverse=True)
        if counts[0][0] == counts[1][0]:
            names = ", ".join(repr(name) for _, name in counts[:3])
            raise UsageError(f"{where}: dumps under several prefixes ({names}): give the "
                             "prefix itself as PATH (FOLDER/PREFIX)")
    files = max(found.values(), key=len)
    by_rank: dict[int, Path] = {}
    for rank, path in files:
        if rank in by_rank:
            raise UsageError(f"{where}: two dumps of rank {rank} ({by_rank[rank].name}, "
                             f"{path.name})")
        by_rank[rank] = path
    return by_rank


def max_dump_bytes() -> int:
    return byte_cap(MAX_DUMP_BYTES_ENV, DEFAULT_MAX_DUMP_BYTES)


def decode(path: Path, limit: int) -> tuple[dict[str, Any], int]:
    """The dump at ``path`` as a dict, and its size in bytes; a ``TraceError`` naming it when
    it cannot be read or is not a dump (a damaged or truncated pickle, JSON that is not an
    object with ``entries``)."""
    data = read_regular_file(path, limit, MAX_DUMP_BYTES_ENV)
    stripped = data.lstrip()
    if data[:1] == b"\x80":
        try:
            document = safe_pickle.loads(data)
        except safe_pickle.UnsafePickle as error:
            raise TraceError(path, f"not a readable Flight Recorder dump: {error}") from None
    elif stripped[:1] == b"{":
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise TraceError(path, f"not a readable Flight Recorder dump: not JSON "
                                   f"({error})") from None
    else:
        raise TraceError(path, "not a Flight Recorder dump (neither a pickle nor JSON)")
    if isinstance(document, dict) and "entries" not in document and "version" in document:
        document["entries"] = []     # a rank that had issued no collective
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        raise TraceError(path, "not a Flight Recorder dump (no list of entries)")
    return document, len(data)
