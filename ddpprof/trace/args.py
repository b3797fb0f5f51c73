"""What a trace's values mean: ranks, process groups, element sizes, message bytes, FLOPs.

The decoder hands over values as the file wrote them, of any JSON type; these functions read
them the way PyTorch writes them and give None for anything else (a rank of ``"x"``, a dtype
no one knows, a shape with a negative dimension), so one odd value never rejects a trace.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

import msgspec

from ..core import storage
from ..core.storage import Location
from .decode_events import NO_ARGS, Args, text
from .events import CommArgs, ProcessGroup
from .names import shorten

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_HOST_IN_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json")

#: Bytes per element of the dtypes PyTorch writes in ``dtype`` and ``Input type``.
DTYPE_BYTES = {
    "float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "double": 8,
    "float64": 8, "int": 4, "int32": 4, "long": 8, "int64": 8, "long int": 8, "short": 2,
    "int16": 2, "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1, "bool": 1,
    "c10::half": 2, "c10::bfloat16": 2, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "byte": 1, "char": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}


def rank_from_name(path: Location) -> int | None:
    """The rank a file name gives (``rank3``, ``worker_3``, ``rank-3``), or None."""
    match = _RANK_IN_NAME.search(storage.name(path))
    return int(match.group(1)) if match else None


def host_from_name(path: Location) -> str | None:
    """The host in the profiler's default trace name, ``HOST_PID.TIMESTAMP.pt.trace.json``;
    None for any other name (one that carries a rank, ``worker3_step_12.<ms>.pt.trace.json``,
    is not the default)."""
    if rank_from_name(path) is not None:
        return None
    match = _HOST_IN_NAME.match(storage.name(path))
    return match.group("host") if match else None


def non_negative_int(value: Any) -> int | None:
    """An int (or its text) in [0, 2**31), else None: booleans and floats are not ranks."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if 0 <= number < 2**31 else None


def positive_int(value: Any) -> int | None:
    number = non_negative_int(value)
    return number if number else None


def process_groups(config: Any) -> list[ProcessGroup]:
    """``distributedInfo.pg_config``: one entry per group with a ``pg_name``."""
    groups = []
    for entry in config if isinstance(config, list) else []:
        if isinstance(entry, dict) and entry.get("pg_name") is not None:
            desc = entry.get("pg_desc")
            groups.append(ProcessGroup(shorten(str(entry["pg_name"])),
                                       positive_int(entry.get("pg_size")),
                                       rank_list(entry.get("ranks")),
                                       shorten(desc) if isinstance(desc, str) else None))
    return groups


def rank_list(value: Any) -> tuple[int, ...] | None:
    """A list of ranks, given as a list or as its text (``"[0, 1, 2]"``)."""
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value.encode())
        except msgspec.DecodeError:
            return None
    if isinstance(value, list) and all(non_negative_int(v) is not None for v in value):
        return tuple(int(v) for v in value)
    return None


def dtype_bytes(name: Any) -> int | None:
    return DTYPE_BYTES.get(name.lower()) if isinstance(name, str) else None


def message_bytes(nelems: Any, dtype: Any) -> int | None:
    """``nelems`` × the dtype's element size, when both are known and the product fits."""
    element = dtype_bytes(dtype)
    if element is None or isinstance(nelems, bool) or not isinstance(nelems, int):
        return None
    size = nelems * element
    return size if 0 <= size < 2**62 else None


_NO_COMM_ARGS = CommArgs()


def comm_args(args: Args) -> CommArgs:
    """What an event's arguments say about its collective (see :class:`CommArgs`)."""
    if (args.input_dims is NO_ARGS.input_dims and args.collective is None
            and args.in_nelems is None and args.out_nelems is None and args.group is None
            and args.group_size is None and args.group_ranks is None
            and args.sequence is None and args.group_desc is None):
        return _NO_COMM_ARGS     # most often: a wait op or a gradient without shapes
    in_bytes = message_bytes(args.in_nelems, args.dtype)
    if in_bytes is None:
        in_bytes = bytes_from_shapes(args)
    ranks = rank_list(args.group_ranks)
    collective = args.collective if isinstance(args.collective, str) else None
    group = None if args.group is None else shorten(text(args.group))
    return CommArgs(collective=collective, in_bytes=in_bytes,
                    out_bytes=message_bytes(args.out_nelems, args.dtype),
                    group_size=positive_int(args.group_size) or (len(ranks) if ranks else None),
                    group=group, group_ranks=ranks, sequence=non_negative_int(args.sequence),
                    group_desc=shorten(args.group_desc) if isinstance(args.group_desc, str)
                    else None,
                    in_splits=split_sizes(args.in_splits), out_splits=split_sizes(args.out_splits),
                    tensor_bytes=_tensor_bytes(bytes(args.input_dims), bytes(args.input_type)))


def split_sizes(value: Any) -> tuple[int, ...] | None:
    """An all-to-all's ``In/Out split size`` (elements per peer, a list or its text): None
    when absent or empty (an even all-to-all records ``[]``)."""
    sizes = rank_list(value)
    return sizes or None


def bytes_from_shapes(args: Args) -> int | None:
    """Sum over tensor inputs of numel × element size, from ``Input Dims`` / ``Input type``
    (a tensor list records no element type, so it is not counted)."""
    return _bytes_from_shapes(bytes(args.input_dims), bytes(args.input_type))


def matmul_flops(args: Args, first: int) -> float | None:
    """2·M·K·N (times the batch of a batched product) from the ``Input Dims`` of the two
    factors, the inputs ``first`` and ``first + 1``; None unless both are 2-D or both 3-D."""
    return _matmul_flops(bytes(args.input_dims), first)


# Both read the arguments' JSON text, and a trace repeats the same few shapes for thousands of
# events (every step, every layer): each distinct text is read once (a tenth of the loading
# time of a trace heavy in matrix products, before).
def _bytes_from_shapes(input_dims: bytes, input_type: bytes) -> int | None:
    total = sum(b for b in _tensor_bytes(input_dims, input_type) if b is not None)
    return total if 0 < total < 2**62 else None


@lru_cache(maxsize=4096)
def _tensor_bytes(input_dims: bytes, input_type: bytes) -> tuple[int | None, ...]:
    """numel × element size of each input, None where it is no tensor of a known type."""
    try:
        dims = msgspec.json.decode(input_dims)
        types = msgspec.json.decode(input_type)
    except msgspec.DecodeError:
        return ()
    if not isinstance(dims, list) or not isinstance(types, list):
        return ()
    found: list[int | None] = []
    for shape, type_name in zip(dims, types, strict=False):
        element = dtype_bytes(type_name) if isinstance(type_name, str) else None
        count = numel(shape)
        found.append(count * element if element is not None and count is not None else None)
    return tuple(found)


@lru_cache(maxsize=4096)
def _matmul_flops(input_dims: bytes, first: int) -> float | None:
    try:
        dims = msgspec.json.decode(input_dims)
    except msgspec.DecodeError:
        return None
    if not isinstance(dims, list) or len(dims) < first + 2:
        return None
    a, b = dims[first], dims[first + 1]
    if numel(a) is None or numel(b) is None or len(a) != len(b) or len(a) not in (2, 3):
        return None
    result: float | None = 2.0 * math.prod(a) * b[-1]
    return result


def numel(shape: Any) -> int | None:
    """Elements of a tensor of this shape (a non-empty list of non-negative ints), or None."""
    if isinstance(shape, list) and shape and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return math.prod(shape)
    return None
