"""One rank's collective calls from its trace: what each call performed, how many bytes it
moved, and the process group it went over. Pure: no I/O.

A call's process group comes from the first source that names it:

1. the trace's arguments (``record_param_comms``, or the kernel's own on recent NCCL traces):
   ``Process Group Name``, ``Process Group Description``, ``Process Group Ranks``, with the
   description and ranks completed from ``distributedInfo.pg_config``;
2. the ``ddpprof::group DIM`` span around the op that issued it (a ``c10d::`` op for a gloo
   collective, the launch of an NCCL kernel), which ``ddpprof record`` writes around each mesh
   dimension's collectives: the group is this rank's ``pg_config`` entry described
   ``mesh_DIM``;
3. FSDP's spans (``FSDP::*``: the data-parallel shard group, ``fsdp``) or DTensor's functional
   collectives (``_c10d_functional::*``: ``functional``, tensor parallelism's group) around it;
4. else the default group; for a kernel found to be communication by structure, the group
   ``structural`` (the trace does not say which group it went over).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import numpy as np

from ..metrics.comm import DEFAULT_GROUP, CollectiveCalls, GroupRef, message_bytes
from . import classify, comm_spans
from .comm_spans import ALL_TO_ALL_OP
from .events import CommArgs, ProcessGroup, RankTrace
from .structure import enclosing, innermost, launching_host_event

_T = TypeVar("_T")
SPAN_SOURCE, KIND_SOURCE = "ddpprof::group spans", "FSDP and functional-collective spans"
#: The group of kernels found to be communication by structure whose trace names no group
#: (a ``symm_mem::`` op records its group's name as a string argument, which Kineto drops).
STRUCTURAL_GROUP = GroupRef("structural", "structural", None, None,
                            "communication by structure, no group recorded")


def call_args(trace: RankTrace, index: np.ndarray) -> list[CommArgs | None]:
    """Each event's collective arguments: its own, else (a kernel of an older trace) those of
    the host op with the same External id."""
    own = [trace.comm_args.get(int(i)) for i in index]
    if all(a is not None and a.collective for a in own):
        return own
    by_external = {int(trace.external_id[i]): args for i, args in trace.comm_args.items()
                   if trace.external_id[i] >= 0 and trace.stream[i] < 0}
    return [a if a is not None and a.collective else by_external.get(
        int(trace.external_id[i]), a) for i, a in zip(index, own, strict=True)]


def issued_kinds(trace: RankTrace, spans: np.ndarray) -> dict[int, str]:
    """Each backend span's collective as the c10d op that issued it names it
    (``classify.issuing_ops``)."""
    return {span: classify.issued_collective(trace, op)
            for span, op in classify.issuing_ops(trace, spans).items()}


def collective_calls(trace: RankTrace, index: np.ndarray, start: np.ndarray, end: np.ndarray,
                     kinds_by_event: dict[int, str] | None = None,
                     with_groups: bool = False, by_structure: np.ndarray | None = None
                     ) -> CollectiveCalls:
    """The calls of the events ``index``, ordered by start; ``with_groups``: with each call's
    process group (see the module's docstring; ``by_structure``, a mask over the events: the
    kernels found to be communication by structure)."""
    kinds, sizes, group_sizes, groups, sequences, splits, received = [], [], [], [], [], [], []
    group_of = {g.name: g for g in trace.process_groups}
    all_args = call_args(trace, index)
    # each call's launch (-1: none), found once for the helpers that need it
    launcher = launching_host_event(trace, trace.stream)[index] if with_groups else index
    issued_by = _issuing_ops(trace, index, all_args, launcher) if with_groups else {}
    refs = group_refs(trace, index, all_args, launcher, by_structure) if with_groups else []
    for k, (i, args) in enumerate(zip(index, all_args, strict=True)):
        args = args or CommArgs()
        kind = (kinds_by_event or {}).get(int(i)) or classify.collective_of(
            trace.names[trace.name_id[i]], args.collective)
        kind, args = _from_issuing_ops(trace, issued_by, int(i), kind, args)
        group = group_of.get(args.group) if args.group is not None else None
        ref_ranks = refs[k].ranks if refs else None
        group_size = args.group_size or (group.size if group else None) or (
            len(ref_ranks) if ref_ranks else None) or trace.world_size
        kinds.append(kind)
        group_sizes.append(group_size)
        sizes.append(message_bytes(kind, args.in_bytes, args.out_bytes, group_size))
        groups.append(refs[k].key if refs else args.group or "")
        sequences.append(args.sequence)
        splits.append(args.in_splits)
        received.append(args.out_bytes)
    order = np.argsort(start[index], kind="stable")
    positions = order.tolist()

    def pick(values: list[_T]) -> list[_T]:
        return [values[k] for k in positions]

    stream, ready = _queue_places(trace, index, start, launcher) if with_groups else ([], [])
    return CollectiveCalls(kind=pick(kinds), start_us=start[index][order],
                           end_us=end[index][order], size_bytes=pick(sizes),
                           group_size=pick(group_sizes), group=pick(groups),
                           sequence=pick(sequences), groups=pick(refs) if refs else [],
                           in_splits=pick(splits), out_bytes=pick(received),
                           stream=pick(stream) if stream else [],
                           ready_us=pick(ready) if ready else [])


def _queue_places(trace: RankTrace, index: np.ndarray, start: np.ndarray,
                  launcher: np.ndarray) -> tuple[list[int], list[float]]:
    """Each call's device stream (-1 on the host) and when it was ready: a kernel's launch
    (its host event's start, not after the kernel's own start), else the call's start."""
    stream = trace.stream[index]
    launched = (stream >= 0) & (launcher >= 0)
    # (how long before its start it was launched, on ``start``'s own time base)
    lead = np.zeros(index.size)
    lead[launched] = np.maximum(trace.start_us[index[launched]]
                                - trace.start_us[launcher[launched]], 0.0)
    ready = start[index].astype(np.float64) - lead
    return stream.astype(np.int64).tolist(), ready.tolist()


def _issuing_ops(trace: RankTrace, index: np.ndarray, all_args: list[CommArgs | None],
                 launchers: np.ndarray) -> dict[int, int]:
    """For device kernels that declare no collective, the innermost ``c10d::`` collective op
    around their launch (``launchers``: each event's)."""
    picked = np.array([k for k, (i, a) in enumerate(zip(index.tolist(), all_args, strict=True))
                       if trace.stream[i] >= 0 and not (a and a.collective)], dtype=np.int64)
    if not picked.size:
        return {}
    ops = classify.per_name(trace, lambda n: bool(comm_spans.C10D_COLLECTIVE.match(n))) & (
        trace.stream < 0)
    if not ops.any():
        return {}
    bare, launcher = index[picked], launchers[picked]
    bare, launcher = bare[launcher >= 0], launcher[launcher >= 0]
    return {event: op for event, op in zip(bare.tolist(), innermost(
        trace, ops, launcher).tolist(), strict=True) if op >= 0}


def _from_issuing_ops(trace: RankTrace, issued_by: dict[int, int], event: int, kind: str,
                      args: CommArgs) -> tuple[str, CommArgs]:
    """A kernel's kind and sizes where its own say too little, from the op that launched it:
    NCCL runs an all-to-all as ``ncclKernel_SendRecv`` (the kind), and an older trace's
    ``record_param_comms`` may not reach the kernel (the sizes of ``c10d::alltoall_base_``)."""
    op = issued_by.get(event)
    if op is None:
        return kind, args
    if kind in ("send_recv", "unknown"):
        said = classify.collective_of(trace.names[trace.name_id[op]], None)
        kind = said if said not in ("unknown", "send_recv", "send", "recv") else kind
    own = trace.comm_args.get(op)
    if (kind == "all_to_all" and args.in_bytes is None and own is not None
            and trace.names[trace.name_id[op]] == ALL_TO_ALL_OP
            and len(own.tensor_bytes) >= 2 and None not in own.tensor_bytes[:2]):
        args = replace(args, out_bytes=own.tensor_bytes[0], in_bytes=own.tensor_bytes[1])
    return kind, args


def group_refs(trace: RankTrace, index: np.ndarray, all_args: list[CommArgs | None],
               launchers: np.ndarray, by_structure: np.ndarray | None = None
               ) -> list[GroupRef]:
    """Each call's process group (module docstring); of the events ``by_structure`` (kernels
    found to be communication by structure) that nothing names, :data:`STRUCTURAL_GROUP`,
    not the default group: the trace does not say which group they went over."""
    refs: list[GroupRef | None] = [_named(trace, a) for a in all_args]
    unnamed = np.array([k for k, ref in enumerate(refs) if ref is None], dtype=np.int64)
    if unnamed.size:
        issuers = _issuers(trace, index[unnamed], launchers[unnamed])
        for k, ref in zip(unnamed.tolist(), _from_spans(trace, issuers), strict=True):
            refs[k] = ref
    default = _default_group(trace)
    structural = by_structure[index] if by_structure is not None else np.zeros(index.size, bool)
    return [ref or (STRUCTURAL_GROUP if found else default)
            for found, ref in zip(structural.tolist(), refs, strict=True)]


def _named(trace: RankTrace, args: CommArgs | None) -> GroupRef | None:
    """The group the trace's arguments name, completed from ``pg_config``."""
    if args is None or args.group is None:
        return None
    listed = next((g for g in trace.process_groups if g.name == args.group), None)
    description = args.group_desc or (listed.description if listed else None)
    ranks = args.group_ranks or (listed.ranks if listed else None)
    return GroupRef(args.group, classify.group_label(args.group, description), description,
                    ranks, "trace arguments")


def _issuers(trace: RankTrace, events: np.ndarray, launchers: np.ndarray) -> np.ndarray:
    """The host op that issued each event: for a backend span run on the host (gloo), the
    ``c10d::`` op paired with it; for a device kernel, its launch (``launchers``: each
    event's); else the event itself."""
    stream = trace.stream
    issuer = events.copy()
    device = stream[events] >= 0
    if device.any():
        launcher = launchers[device]
        issuer[device] = np.where(launcher >= 0, launcher, events[device])
    spans = events[~device]
    if spans.size:
        backend = np.flatnonzero(classify.per_name(trace, lambda n: bool(
            comm_spans.BACKEND_COLLECTIVE.match(n))) & (stream < 0) & classify.per_category(
            trace, lambda c: c in classify.HOST_WORK_CATEGORIES))
        ops = classify.issuing_ops(trace, backend)
        issuer[~device] = [ops.get(int(i), int(i)) for i in spans.tolist()]
    return issuer


def _from_spans(trace: RankTrace, issuers: np.ndarray) -> list[GroupRef | None]:
    """The group of each issuing op from the spans around it: ``ddpprof::group DIM``, else
    FSDP's or a functional collective's."""
    found: list[GroupRef | None] = [None] * issuers.size
    host = trace.stream < 0
    for read, make in ((classify.group_span_dim, _mesh_group),
                       (classify.group_kind_of_span, _kind_group)):
        by_label: dict[str, list[int]] = {}
        for code, name in enumerate(trace.names):
            if (label := read(name)) is not None:
                by_label.setdefault(label, []).append(code)
        for label, codes in sorted(by_label.items()):
            spans = host & np.isin(trace.name_id, codes)
            for k in np.flatnonzero(enclosing(trace, spans, issuers) >= 0).tolist():
                if found[k] is None:
                    found[k] = make(trace, label)
    return found


def _mesh_group(trace: RankTrace, dim: str) -> GroupRef:
    """This rank's group along mesh dimension ``dim``: its ``pg_config`` entry described
    ``mesh_DIM`` where there is one (DeviceMesh's naming), else the dimension alone."""
    description = f"mesh_{dim}"
    listed = [g for g in trace.process_groups if g.description == description]
    if len(listed) == 1:
        return GroupRef(listed[0].name, dim, description, listed[0].ranks, SPAN_SOURCE)
    return GroupRef(dim, dim, description, None, SPAN_SOURCE)


def _kind_group(trace: RankTrace, kind: str) -> GroupRef:
    return GroupRef(kind, kind, None, None, KIND_SOURCE)


def _default_group(trace: RankTrace) -> GroupRef:
    """The default group, with its ranks where ``pg_config`` lists it."""
    listed: ProcessGroup | None = next(
        (g for g in trace.process_groups if g.description == "default_pg"
         or (g.description is None and g.name == "0")), None)
    if listed is None:
        return DEFAULT_GROUP
    return GroupRef("", "default", listed.description, listed.ranks, DEFAULT_GROUP.source)
