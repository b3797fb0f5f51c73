"""Reading a pickle that may have come from anyone: only the builtin containers and scalars.

Flight Recorder dumps are pickles (PyTorch's ``_dump_fr_trace``), and a pickle from elsewhere
can run any code on load: ``pickle.load`` calls whatever ``GLOBAL``/``REDUCE`` names. Here no
name is ever resolved (``find_class`` refuses all of them, persistent ids too), so only what
the opcodes build themselves comes out: dicts, lists, tuples, sets, strings, bytes, numbers,
booleans and None. That is everything a dump holds.

What remains is size: the bytes are read with a cap before this sees them, and a pickle can
share one container many times over (a memo reference costs two bytes), so that a walk over
what it built would take exponential time though it loads at once. :class:`Budget` counts what
a reader visits and stops at a bound proportional to the file's size.
"""

from __future__ import annotations

import io
import pickle
from typing import Any


class UnsafePickle(ValueError):
    """Not a pickle of builtin containers and scalars (or not a pickle at all)."""


class _BuiltinsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}: only builtin containers and "
                                     "scalars are read")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("holds a persistent id: only builtin containers and "
                                     "scalars are read")


def loads(data: bytes) -> Any:
    """The object of the pickle ``data``, built without resolving any name; anything else (a
    class, a function, a truncated or damaged pickle) is an :class:`UnsafePickle`."""
    try:
        return _BuiltinsOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, OverflowError, MemoryError, RecursionError) as error:
        raise UnsafePickle(str(error) or type(error).__name__) from None


class Budget:
    """A bound on the objects a reader visits: ``spend`` raises :class:`UnsafePickle` past
    ``limit`` (a file's own objects are fewer than its bytes; only shared ones go beyond)."""

    def __init__(self, size_bytes: int) -> None:
        self.left = 4 * size_bytes + 10_000

    def spend(self, count: int = 1) -> None:
        self.left -= count
        if self.left < 0:
            raise UnsafePickle("shares its objects beyond what its size holds (a pickle "
                               "bomb?)")
