"""One module per ``ddpprof`` command: what it does between the parsed options and the
``ddpprof.render.output.Output`` that ``ddpprof.cli`` prints and writes. Checks of the outputs
(never onto an input, never inside a run being recorded) happen here, before any work."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from typing import Any, TypeVar

from ..core.errors import UsageError

T = TypeVar("T")

RECORD_EXTRA = "pip install 'ddpprof[record]'"


def require_record_extra(command: str) -> None:
    """``record``, ``bench``, ``sweep`` and ``calibrate`` train or launch with PyTorch, which
    the plain install leaves out: one line naming the extra, exit 2."""
    missing = [name for name in ("torch", "transformers")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"{command} needs {' and '.join(missing)}, which the plain install "
                         f"leaves out: {RECORD_EXTRA}")


def options_from(kind: type[T], parsed: Mapping[str, Any]) -> T:
    """A command's options, ``kind`` (the frozen dataclass declared beside the command), from
    the values click parsed, one field per option under the option's name; a list becomes a
    tuple, so that the object holds nothing mutable. A value no field takes, or a field no
    value gives, is a ``TypeError``: the grammar and the options object disagree."""
    params = vars(kind).get("__dataclass_params__")   # what @dataclass(frozen=...) said
    if not dataclasses.is_dataclass(kind) or params is None or not params.frozen:
        raise TypeError(f"{kind.__name__}: a command's options are a frozen dataclass")
    return kind(**{key: tuple(value) if isinstance(value, list) else value
                   for key, value in parsed.items()})
