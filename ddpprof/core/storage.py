"""Where traces live: local paths, or URLs read through fsspec (``s3://``, ``gs://``,
``az://``, ``http(s)://``, ``file://``).

A location is a :class:`pathlib.Path` for a local file and a ``str`` for a URL. Each store's
standard credentials and endpoint settings apply as fsspec's back-ends read them
(``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_CONNECTION_STRING``, ...). Local paths never touch fsspec, so the lean install
(without the ``cluster`` extra) reads them as before.

A URL is checked before fsspec sees it (its scheme must be one of :data:`SCHEMES`, and it must
parse), and every call to the store is given ``DDPPROF_URL_TIMEOUT_S`` seconds to answer
(:func:`within_deadline`, 30 s by default): no network, a credential lookup that retries, a
server that never answers, or any error the store's library raises is one line naming the
URL, in bounded time.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import urllib.parse
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from .errors import TraceError, UsageError

Location = Path | str
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: The schemes read through fsspec: object stores, HTTP and local files.
SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "file")
URL_TIMEOUT_ENV = "DDPPROF_URL_TIMEOUT_S"
DEFAULT_URL_TIMEOUT_S = 30.0
#: What a folder's entry is: a folder, a file (a regular one, a link to one, or a link to
#: nothing, which fails when it is read), or something else (a FIFO, a device, a socket).
Kind = Literal["folder", "file", "special"]
_T = TypeVar("_T")


def is_url(location: Location | str) -> bool:
    return isinstance(location, str) and bool(_URL.match(location))


def location_of(text: str) -> Location:
    """A command-line PATH as a location: URLs stay text (``Path`` would fold ``//``), but a
    ``file://`` URL is the local path it names (read as local files are, see ``io``)."""
    if not is_url(text):
        return Path(text)
    if text[:7].lower() == "file://":
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(text).path))
    return text


def name(location: Location) -> str:
    """The last component of a path or of a URL's path; of a URL with none, its host (with
    its port, never its user or password: a name reaches tables and files)."""
    if isinstance(location, Path):
        return location.name
    last = location.rstrip("/").rsplit("/", 1)[-1]
    try:
        parts = urllib.parse.urlsplit(location)
    except ValueError:         # (a malformed host): the text after the last "/", less a login
        return last.rpartition("@")[2]
    return parts.path.rstrip("/").rsplit("/", 1)[-1] or parts.netloc.rpartition("@")[2]


def report_name(location: Location) -> str:
    """What a report about ``location`` is called: the folder's own name (``.`` resolved)."""
    if not isinstance(location, Path):
        return name(location)
    try:
        return location.resolve().name
    except (OSError, RuntimeError):          # a loop of links: named as given
        return Path(os.path.abspath(location)).name


def join(location: Location, child: str) -> Location:
    return location / child if isinstance(location, Path) else f"{location.rstrip('/')}/{child}"


def parent(location: Location) -> Location:
    return location.parent if isinstance(location, Path) else location.rstrip("/").rsplit(
        "/", 1)[0]


def url_timeout_s() -> float:
    """How long a store may take to answer one call: ``DDPPROF_URL_TIMEOUT_S``, else 30 s."""
    text = os.environ.get(URL_TIMEOUT_ENV)
    if not text:
        return DEFAULT_URL_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise UsageError(f"{URL_TIMEOUT_ENV}={text!r}: not a number of seconds above 0")
    return value


@lru_cache(maxsize=32)
def _filesystem(protocol: str, pid: int) -> Any:
    """One filesystem per protocol and process: async back-ends (s3fs) cannot cross a fork."""
    try:
        import fsspec  # fsspec: optional, for URLs
    except ImportError:
        raise UsageError("reading URLs needs fsspec: pip install 'ddpprof[cluster]'") from None
    try:
        return fsspec.filesystem(protocol, skip_instance_cache=True)
    except (ImportError, ValueError) as error:
        raise UsageError(f"{protocol}:// is not available here ({error}); pip install "
                         "'ddpprof[cluster]' brings s3fs, gcsfs and adlfs") from None


def check_url(url: str) -> str:
    """The URL's scheme, lower-cased, once the URL is one ddpprof reads and it parses; a
    TraceError naming it otherwise."""
    protocol = url.split("://", 1)[0].lower()
    if protocol not in SCHEMES:
        raise TraceError(url, f"{protocol}:// is not a scheme ddpprof reads (it reads "
                              f"{', '.join(SCHEMES)})")
    try:
        if urllib.parse.urlsplit(url).port == 0:     # reading the port checks it
            raise ValueError("port 0")
    except ValueError as error:
        raise TraceError(url, f"not a valid URL ({error})") from None
    return protocol


def within_deadline(url: str, call: Callable[[Any, str], _T]) -> _T:
    """``call(filesystem, path)`` for ``url``, given :func:`url_timeout_s` to answer; any error
    it raises is a TraceError naming the URL (``no such file`` for a missing one). The call
    runs on a daemon thread, left behind if it never answers: the process can still exit."""
    protocol = check_url(url)
    timeout_s = url_timeout_s()
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            fs = _filesystem(protocol, os.getpid())
            outcome.append((True, call(fs, fs._strip_protocol(url))))
        except BaseException as error:  # handed to the caller's thread
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name=f"ddpprof {url}", daemon=True).start()
    if not done.wait(timeout_s):
        raise TraceError(url, f"no answer within {timeout_s:g} s ({URL_TIMEOUT_ENV}): no "
                              "network, or a store that does not answer?")
    succeeded, value = outcome[0]
    if succeeded:
        result: _T = value
        return result
    if isinstance(value, UsageError | KeyboardInterrupt | SystemExit):
        raise value
    if isinstance(value, FileNotFoundError):
        raise TraceError(url, "no such file") from None
    if isinstance(value, OSError) and value.strerror:
        raise TraceError(url, f"cannot be read ({value.strerror})") from None
    raise TraceError(url, f"cannot be read ({type(value).__name__}: {value})") from None


def is_file(location: Location) -> bool:
    if isinstance(location, Path):
        return location.is_file()
    result: bool = within_deadline(location, lambda fs, path: fs.isfile(path))
    return result


def is_dir(location: Location) -> bool:
    if isinstance(location, Path):
        return location.is_dir()
    result: bool = within_deadline(location, lambda fs, path: fs.isdir(path))
    return result


def children(location: Location) -> list[tuple[Location, Kind]]:
    """(child, what it is) for each entry of a folder, sorted by name; OSError (a TraceError
    for a URL) if it cannot be listed."""
    if isinstance(location, Path):
        return [(child, _kind(child)) for child in sorted(location.iterdir())]

    def listing(fs: Any, path: str) -> list[tuple[Location, Kind]]:
        entries = fs.ls(path, detail=True, refresh=True)
        return [(fs.unstrip_protocol(entry["name"]),
                 "folder" if entry.get("type") == "directory" else "file")
                for entry in entries if entry["name"].rstrip("/") != path.rstrip("/")]

    return sorted(within_deadline(location, listing), key=lambda item: item[0])


def _kind(path: Path) -> Kind:
    try:
        mode = os.stat(path).st_mode          # a link is what it points to
    except OSError:
        return "file"                         # a link to nothing: an error when it is read
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "special"
