"""Turn the PATHs a user gives into runs: a run folder, a folder of run folders, or files,
on local disk or behind a URL (see ``storage``); runs and ranks are found the same way on a
bucket as in a folder.

One unreadable folder or malformed ``run.json`` never hides the other runs: it becomes that
run's error. A FIFO, a device or a socket with a trace's name is never read (reading could
block forever, or never end): in a folder it is skipped with a note, named directly it is
refused.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..core import io, storage
from ..core.atomic import remember_input
from ..core.errors import TraceError, UsageError
from ..core.storage import Location
from . import manifest as manifest_module
from .manifest import INCOMPLETE, MAX_MANIFEST_BYTES, RunManifest, effective_status

MANIFEST_NAME = "run.json"
#: ``ddpprof calibrate``'s output, which may sit in a run folder or beside run folders.
CALIBRATION_NAME = "calibration.json"


@dataclass
class RunInput:
    name: str
    folder: Location
    traces: list[Location]
    manifest: RunManifest = field(default_factory=RunManifest)   # empty without a run.json
    error: str | None = None        # why this run cannot be analyzed, found while looking
    #: The JSON files found beside run folders (an analysis, a summary, or a stray trace):
    #: a run only if one of them is a trace.
    beside_runs: bool = False
    notes: list[str] = field(default_factory=list)    # what was found but left out


def display_name(name: str) -> str:
    """A file name as text that can be printed and written anywhere: bytes that are not
    UTF-8 (kept by Python as surrogate escapes) become U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def is_trace_name(name: str) -> bool:
    return (not name.startswith(".") and name not in (MANIFEST_NAME, CALIBRATION_NAME)
            and name.endswith((".json", ".json.gz")))


def is_trace_file(path: Path) -> bool:
    return is_trace_name(path.name) and path.is_file()


def _trace_files(folder: Location) -> tuple[list[Location], list[str]]:
    """The trace files of ``folder``, and a note naming those that are not regular files."""
    traces: list[Location] = []
    special: list[str] = []
    for child, kind in storage.children(folder):
        if kind == "folder" or not is_trace_name(storage.name(child)):
            continue
        if kind == "file":
            traces.append(child)
        else:
            special.append(display_name(storage.name(child)))
    if not special:
        return traces, []
    more = f" and {len(special) - 3} more" if len(special) > 3 else ""
    return traces, [f"skipped {', '.join(special[:3])}{more}: not a regular file (a FIFO, a "
                    "device or a socket is never read)"]


def run_files(folder: Path) -> list[Path]:
    """The files of the run folder ``folder`` a command must never write over: its trace
    files and ``run.json`` (each remembered as an input, ``ddpprof.core.atomic.remember_input``)."""
    try:
        traces, _ = _trace_files(folder)
    except OSError:
        traces = []
    files = [*traces, folder / MANIFEST_NAME]
    for path in files:
        remember_input(path)
    return files  # type: ignore[return-value]


def read_manifest(folder: Location) -> RunManifest:
    """``run.json`` of ``folder``, typed (empty when there is none); a file that cannot be
    read, is not JSON, or holds a field of the wrong type is a UsageError naming it (and the
    field). A local one is read by ``ddpprof.run.manifest.read_manifest``."""
    path = storage.join(folder, MANIFEST_NAME)
    if not storage.is_file(path):
        return RunManifest()
    if isinstance(path, Path):
        return manifest_module.read_manifest(path)
    try:
        document = json.loads(io.read_url(path, MAX_MANIFEST_BYTES, None))
    except ValueError as error:
        raise TraceError(path, f"not JSON ({error})") from None
    return manifest_module.manifest_from_json(document, path)


def _run(name: str, folder: Location, traces: list[Location], notes: list[str]) -> RunInput:
    run = RunInput(display_name(name), folder, traces, notes=notes)
    for path in (*traces, storage.join(folder, MANIFEST_NAME)):
        if isinstance(path, Path):    # read by this process or its workers: never an output
            remember_input(path)
    try:
        run.manifest = read_manifest(folder)
    except UsageError as error:
        run.error = str(error)
        return run
    # A recording that failed before any rank wrote a trace is still a run: listed as failed
    if not traces and effective_status(run.manifest) not in INCOMPLETE:
        run.error = f"{folder}: no trace files (*.json, *.json.gz) to read" + (
            f" ({'; '.join(notes)})" if notes else "")
    return run


def _subfolders(path: Location) -> list[RunInput]:
    """A run for each visible subfolder that holds trace files (or files named so), or that
    cannot be read."""
    found = []
    for sub, kind in storage.children(path):
        if storage.name(sub).startswith(".") or kind != "folder":
            continue
        try:
            traces, notes = _trace_files(sub)
        except OSError as error:
            found.append(RunInput(display_name(storage.name(sub)), sub, [], error=(
                f"{sub}: cannot be read ({error.strerror or error})")))
            continue
        if traces or notes or storage.is_file(storage.join(sub, MANIFEST_NAME)):
            found.append(_run(storage.name(sub), sub, traces, notes))
    return found


def _check_named_file(path: Location) -> bool:
    """Whether ``path`` is a file to read (else a folder); a TraceError where it is neither,
    or something that is not a regular file (see ``io.open_regular``)."""
    if not isinstance(path, Path):
        if storage.is_file(path):
            return True
        if not storage.is_dir(path):
            raise TraceError(path, "no such file or folder")
        return False
    try:
        status = os.stat(path)                # a link is what it points to
    except FileNotFoundError:
        raise TraceError(path, "no such file or folder" + (
            " (a link to nothing)" if os.path.islink(path) else "")) from None
    if stat.S_ISDIR(status.st_mode):
        return False
    io.check_regular(path, status)
    return True


def discover(paths: list[Location]) -> list[RunInput]:
    """Runs in the order given. Files named directly form one run per parent folder."""
    runs: list[RunInput] = []
    loose: dict[Location, list[Location]] = {}
    for path in paths:
        try:
            if _check_named_file(path):
                loose.setdefault(storage.parent(path), []).append(path)
                continue
            # Subfolders with traces make this a folder of runs; JSON files beside them (an
            # analysis, a summary, or the trace of a folder that also holds another tool's
            # output) are one more run, dropped if none of them is a trace.
            found = _subfolders(path)
            traces, notes = _trace_files(path)
            if found:
                runs += found
                if traces:
                    beside = _run(storage.name(path) or str(path), path, traces, notes)
                    beside.beside_runs = True
                    runs.append(beside)
            elif traces or storage.is_file(storage.join(path, MANIFEST_NAME)):
                runs.append(_run(storage.name(path) or str(path), path, traces, notes))
            else:
                raise TraceError(path, "no trace files (*.json, *.json.gz) here or in its "
                                       "subfolders" + "".join(f"; {note}" for note in notes))
        except OSError as error:
            raise TraceError(path, f"cannot be read ({error.strerror or error})") from None
    # a file in the working folder: its run is named after the folder, never "" (".")
    runs += [_run(storage.name(folder) or storage.report_name(folder), folder,
                  sorted(files, key=str), [])
             for folder, files in loose.items()]
    return runs
