"""Turn the PATHs a user gives into runs: a run folder, a folder of run folders, or files,
on local disk or behind a URL (see ``storage``); runs and ranks are found the same way on a
bucket as in a folder.

One unreadable folder or malformed ``run.json`` never hides the other runs: it becomes that
run's error.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import manifest as manifest_module
from ..errors import TraceError, UsageError
from ..manifest import RunManifest
from . import storage
from .storage import Location

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


def display_name(name: str) -> str:
    """A file name as text that can be printed and written anywhere: bytes that are not
    UTF-8 (kept by Python as surrogate escapes) become U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def is_trace_name(name: str) -> bool:
    return (not name.startswith(".") and name not in (MANIFEST_NAME, CALIBRATION_NAME)
            and name.endswith((".json", ".json.gz")))


def is_trace_file(path: Path) -> bool:
    return is_trace_name(path.name) and path.is_file()


def _trace_files(folder: Location) -> list[Location]:
    return [child for child, folder_like in storage.children(folder)
            if not folder_like and is_trace_name(storage.name(child))]


def read_manifest(folder: Location) -> RunManifest:
    """``run.json`` of ``folder``, typed (empty when there is none); a file that cannot be
    read, is not JSON, or holds a field of the wrong type is a UsageError naming it (and the
    field). A local one is read by ``ddpprof.manifest.read_manifest``."""
    path = storage.join(folder, MANIFEST_NAME)
    if not storage.is_file(path):
        return RunManifest()
    if isinstance(path, Path):
        return manifest_module.read_manifest(path)
    try:
        document = json.loads(storage.read_bytes(path))
    except ValueError as error:
        raise TraceError(path, f"not JSON ({error})") from None
    return manifest_module.manifest_from_json(document, path)


def _run(name: str, folder: Location, traces: list[Location]) -> RunInput:
    run = RunInput(display_name(name), folder, traces)
    try:
        run.manifest = read_manifest(folder)
    except UsageError as error:
        run.error = str(error)
    return run


def _subfolders(path: Location) -> list[tuple[Location, list[Location] | None, str | None]]:
    """(subfolder, its trace files or None, the error reading it) for each visible subfolder."""
    found = []
    for sub, folder_like in storage.children(path):
        if storage.name(sub).startswith(".") or not folder_like:
            continue
        try:
            traces = _trace_files(sub)
        except OSError as error:
            found.append((sub, None, f"{sub}: cannot be read ({error.strerror or error})"))
            continue
        if traces:
            found.append((sub, traces, None))
    return found


def discover(paths: list[Location]) -> list[RunInput]:
    """Runs in the order given. Files named directly form one run per parent folder."""
    runs: list[RunInput] = []
    loose: dict[Location, list[Location]] = {}
    for path in paths:
        try:
            if storage.is_file(path):
                loose.setdefault(storage.parent(path), []).append(path)
                continue
            if not storage.is_dir(path):
                raise TraceError(path, "no such file or folder")
            # Subfolders with traces make this a folder of runs; JSON files beside them (an
            # analysis, a summary, or the trace of a folder that also holds another tool's
            # output) are one more run, dropped if none of them is a trace.
            found = _subfolders(path)
            traces = _trace_files(path)
            if found:
                for sub, sub_traces, error in found:
                    run = _run(storage.name(sub), sub, sub_traces or [])
                    run.error = error or run.error
                    runs.append(run)
                if traces:
                    beside = _run(storage.name(path) or str(path), path, traces)
                    beside.beside_runs = True
                    runs.append(beside)
            elif traces:
                runs.append(_run(storage.name(path) or str(path), path, traces))
            else:
                raise TraceError(path, "no trace files (*.json, *.json.gz) here or in its "
                                       "subfolders")
        except OSError as error:
            raise TraceError(path, f"cannot be read ({error.strerror or error})") from None
    runs += [_run(storage.name(folder), folder, sorted(files, key=str))
             for folder, files in loose.items()]
    return runs
