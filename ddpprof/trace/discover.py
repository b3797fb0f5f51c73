"""Turn the PATHs a user gives into runs: a run folder, a folder of run folders, or files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .loader import TraceError

MANIFEST_NAME = "run.json"


@dataclass
class RunInput:
    name: str
    folder: Path
    traces: list[Path]
    manifest: dict[str, Any] = field(default_factory=dict)


def is_trace_file(path: Path) -> bool:
    name = path.name
    return (path.is_file() and not name.startswith(".") and name != MANIFEST_NAME
            and name.endswith((".json", ".json.gz")))


def _trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if is_trace_file(p))


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise TraceError(path, f"unreadable run manifest ({error})") from None
    return manifest if isinstance(manifest, dict) else {}


def discover(paths: list[Path]) -> list[RunInput]:
    """Runs in the order given. Files named directly form one run per parent folder."""
    runs: list[RunInput] = []
    loose: dict[Path, list[Path]] = {}
    for path in paths:
        if path.is_file():
            loose.setdefault(path.parent, []).append(path)
        elif path.is_dir():
            # Subfolders with traces make this a folder of runs (files beside them, such as a
            # record summary, are not traces); otherwise its own trace files make one run.
            found = [sub for sub in sorted(path.iterdir())
                     if sub.is_dir() and not sub.name.startswith(".") and _trace_files(sub)]
            if found:
                runs += [RunInput(sub.name, sub, _trace_files(sub)) for sub in found]
            elif traces := _trace_files(path):
                runs.append(RunInput(path.name, path, traces))
            else:
                raise TraceError(path, "no trace files (*.json, *.json.gz) here or in its "
                                       "subfolders")
        else:
            raise TraceError(path, "no such file or folder")
    runs += [RunInput(folder.name, folder, sorted(files)) for folder, files in loose.items()]
    return runs
