"""Decoding a run of events (a JSON array of them) into small typed structs, reading only the
fields ddpprof uses.

msgspec decodes the JSON straight into :class:`Event` and :class:`Args` (unknown fields are
skipped without being built). Where some value has an unexpected type (a ``ts`` of ``"soon"``,
a stream that is a list), each element of the run is decoded alone and only the odd ones
leniently (:func:`lenient_event`): a field of the wrong type reads as absent, names and ids as
text. So one odd event never rejects a trace, and every event reads the same whatever run it
falls in.
"""

from __future__ import annotations

from typing import Any

import msgspec

#: The value of an id or stream argument that the event does not have: one object, so that
#: absence is an identity test, and negative, so that it reads as "no id" in an int64 column.
ABSENT = -(2**63)


class Args(msgspec.Struct, frozen=True, gc=False):
    """The arguments ddpprof reads (``args`` of an event)."""

    # Fields in the order Kineto writes them: msgspec tries the field after the last one it
    # matched first, so decoding is faster in that order (about 5%).
    external_id: int | float | str | None = msgspec.field(name="External id", default=ABSENT)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b"null"))
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b"null"))
    stream: int | float | str | None = ABSENT
    correlation: int | float | str | None = ABSENT
    old_external_id: int | float | str | None = msgspec.field(name="external id",
                                                              default=ABSENT)
    collective: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    dtype: Any = None
    group_size: Any = msgspec.field(name="Group size", default=None)
    in_splits: Any = msgspec.field(name="In split size", default=None)
    out_splits: Any = msgspec.field(name="Out split size", default=None)
    group: Any = msgspec.field(name="Process Group Name", default=None)
    group_desc: Any = msgspec.field(name="Process Group Description", default=None)
    group_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    sequence: Any = msgspec.field(name="Seq", default=None)
    thread_label: Any = msgspec.field(name="name", default=None)


NO_ARGS = Args()
_ARGS_FIELDS = msgspec.structs.fields(Args)


class Event(msgspec.Struct, gc=False):
    """One trace event: the fields ddpprof reads."""

    ph: str | None = None             # in Kineto's order, as ``Args``
    cat: str | None = None
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: int | float | None = None
    dur: int | float | None = None
    args: Args = NO_ARGS              # ``"args": null`` is rare: the lenient decoder reads it


_EVENTS = msgspec.json.Decoder(list[Event])
_EVENT = msgspec.json.Decoder(Event)
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
_ANY = msgspec.json.Decoder(Any)


class NotUTF8(ValueError):
    """An odd event (read leniently) holds text that is not UTF-8."""


def decode_run(data: bytes | bytearray) -> tuple[list[Event], int, int]:
    """The events of a JSON array ``data``, with its number of elements and of objects among
    them (an element that is not an object is no event). Raises msgspec's ``DecodeError`` where
    ``data`` is not a JSON array, :class:`NotUTF8` where an odd event holds text that is not
    UTF-8."""
    try:
        events = _EVENTS.decode(data)
        return events, len(events), len(events)
    except msgspec.ValidationError:
        pass
    items = _ELEMENTS.decode(data)
    events = []
    for item in items:
        try:
            events.append(_EVENT.decode(item))
            continue
        except msgspec.ValidationError:
            pass
        try:
            value = _ANY.decode(item)
        except UnicodeDecodeError as error:
            raise NotUTF8(str(error)) from None
        if isinstance(value, dict):
            events.append(lenient_event(value))
    return events, len(items), len(events)


def lenient_event(item: dict[str, Any]) -> Event:
    """An event from an object with fields of unexpected types: such a field reads as absent
    (names and ids as text); the rest as the strict decoder reads them."""
    name = item.get("name", "")
    args = item.get("args")
    return Event(
        name=name if isinstance(name, str) else text(name),
        ph=item.get("ph") if isinstance(item.get("ph"), str) else None,
        cat=item.get("cat") if isinstance(item.get("cat"), str) else None,
        ts=_number(item.get("ts")), dur=_number(item.get("dur")),
        pid=_hashable(item.get("pid", 0)), tid=_hashable(item.get("tid", 0)),
        args=_lenient_args(args) if isinstance(args, dict) else NO_ARGS)


def _lenient_args(args: dict[str, Any]) -> Args:
    def scalar(key: str) -> int | float | str | None:
        if key not in args:
            return ABSENT
        value = args[key]          # given but not a number or text: None, as msgspec's null
        return value if isinstance(value, int | float | str) and not isinstance(
            value, bool) else None

    # every field the strict decoder reads, by its name in the trace (tests/test_loader.py
    # checks that none is left out: one was, and split a process group in two)
    values: dict[str, Any] = {
        field.name: args.get(field.encode_name, field.default) for field in _ARGS_FIELDS}
    values.update(stream=scalar("stream"), correlation=scalar("correlation"),
                  external_id=scalar("External id"), old_external_id=scalar("external id"),
                  input_dims=msgspec.Raw(msgspec.json.encode(args.get("Input Dims"))),
                  input_type=msgspec.Raw(msgspec.json.encode(args.get("Input type"))))
    return Args(**values)


def text(value: Any) -> str:
    """A value as text: a string as it is, anything else as its JSON."""
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _number(value: Any) -> int | float | None:
    """A number as the strict decoder gives it (an int stays an int); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _hashable(value: Any) -> int | str:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else text(value)
