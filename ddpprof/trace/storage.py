"""Where traces live: local paths, or URLs read through fsspec (``s3://``, ``gs://``,
``az://``, ``http(s)://``, ``file://``).

A location is a :class:`pathlib.Path` for a local file and a ``str`` for a URL. Each store's
standard credentials and endpoint settings apply as fsspec's back-ends read them
(``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_CONNECTION_STRING``, ...). Local paths never touch fsspec, so the lean install
(without the ``cluster`` extra) reads them as before.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import TraceError, UsageError

Location = Path | str
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(location: Location | str) -> bool:
    return isinstance(location, str) and bool(_URL.match(location))


def location_of(text: str) -> Location:
    """A command-line PATH as a location: URLs stay text (``Path`` would fold ``//``)."""
    return text if is_url(text) else Path(text)


def name(location: Location) -> str:
    return location.name if isinstance(location, Path) else location.rstrip("/").rsplit(
        "/", 1)[-1]


def report_name(location: Location) -> str:
    """What a report about ``location`` is called: the folder's own name (``.`` resolved)."""
    return location.resolve().name if isinstance(location, Path) else name(location)


def join(location: Location, child: str) -> Location:
    return location / child if isinstance(location, Path) else f"{location.rstrip('/')}/{child}"


def parent(location: Location) -> Location:
    return location.parent if isinstance(location, Path) else location.rstrip("/").rsplit(
        "/", 1)[0]


@lru_cache(maxsize=32)
def _filesystem(protocol: str, pid: int) -> Any:
    """One filesystem per protocol and process: async back-ends (s3fs) cannot cross a fork."""
    try:
        import fsspec
    except ImportError:
        raise UsageError("reading URLs needs fsspec: pip install 'ddpprof[cluster]'") from None
    try:
        return fsspec.filesystem(protocol, skip_instance_cache=True)
    except (ImportError, ValueError) as error:
        raise UsageError(f"{protocol}:// is not available here ({error}); pip install "
                         "'ddpprof[cluster]' brings s3fs, gcsfs and adlfs") from None


def _fs(url: str) -> tuple[Any, str]:
    protocol = url.split("://", 1)[0].lower()
    fs = _filesystem(protocol, os.getpid())
    return fs, fs._strip_protocol(url)


def _url(fs: Any, path: str) -> str:
    return fs.unstrip_protocol(path)


def read_bytes(location: Location) -> bytes:
    """The file's bytes; a missing or unreadable file is a TraceError naming it."""
    try:
        if isinstance(location, Path):
            return location.read_bytes()
        fs, path = _fs(location)
        return fs.cat_file(path)
    except FileNotFoundError:
        raise TraceError(location, "no such file") from None
    except OSError as error:
        raise TraceError(location, f"cannot be read ({error.strerror or error})") from None


def is_file(location: Location) -> bool:
    if isinstance(location, Path):
        return location.is_file()
    fs, path = _fs(location)
    return fs.isfile(path)


def is_dir(location: Location) -> bool:
    if isinstance(location, Path):
        return location.is_dir()
    fs, path = _fs(location)
    return fs.isdir(path)


def children(location: Location) -> list[tuple[Location, bool]]:
    """(child, is a folder) for each entry of a folder, sorted by name; OSError if it cannot
    be listed."""
    if isinstance(location, Path):
        return [(child, child.is_dir()) for child in sorted(location.iterdir())]
    fs, path = _fs(location)
    entries = fs.ls(path, detail=True, refresh=True)
    found = [(_url(fs, entry["name"]), entry.get("type") == "directory") for entry in entries
             if entry["name"].rstrip("/") != path.rstrip("/")]
    return sorted(found, key=lambda item: item[0])
