"""A diff told in a few words: its largest contributors, each with the detail that says most
about it (the op that moved in a compute part; the bucket launched later or the bandwidth
that fell in a communication part; the late rank). What ``gate`` prints under a failure."""

from __future__ import annotations

from ..analysis.parts import COMMUNICATION_CALLS
from .compare import BucketDelta, CollectiveDelta, Delta, PairDiff

#: Contributors told: the largest changes of the step's parts.
CONTRIBUTORS = 3


def _ms(value: float, sign: str = "+") -> str:
    """Milliseconds with the digits that matter: 12.34, 0.015, 0.0012."""
    size = abs(value)
    digits = 2 if size >= 1 or size == 0 else 3 if size >= 0.01 else 4
    return f"{value:{sign}.{digits}f} ms"


def _bucket(bucket: BucketDelta) -> str | None:
    if bucket.launch_delta_ms is not None and abs(bucket.launch_delta_ms) >= 0.01:
        when = "later" if bucket.launch_delta_ms > 0 else "earlier"
        return (f"bucket {bucket.index} launched {_ms(abs(bucket.launch_delta_ms), '')} "
                f"{when} in backward")
    if bucket.exposed_delta_ms:
        return f"bucket {bucket.index} exposed {_ms(bucket.exposed_delta_ms)} after backward"
    return None


def _bandwidth(collective: CollectiveDelta) -> str | None:
    a, b = collective.before_busbw_gbps, collective.after_busbw_gbps
    if a is None or b is None or abs(b - a) < 0.05 * max(a, b):
        return None
    return f"{collective.kind} busbw {a:.2f} → {b:.2f} GB/s"


def _communication_details(diff: PairDiff, part: Delta) -> list[str]:
    details = []
    moved = [b for b in diff.buckets if _bucket(b) is not None]
    if moved:
        biggest = max(moved, key=lambda b: abs(b.exposed_delta_ms or 0) + abs(
            b.launch_delta_ms or 0))
        details.append(_bucket(biggest))
    for collective in diff.collectives:
        if collective.kind == part.part.item and (text := _bandwidth(collective)):
            details.append(text)
        if collective.kind == part.part.item and collective.before_calls != \
                collective.after_calls and None not in (collective.before_calls,
                                                        collective.after_calls):
            details.append(f"{collective.kind} calls per step {collective.before_calls:g} → "
                           f"{collective.after_calls:g}")
    return [d for d in details if d]


def contributor(diff: PairDiff, part: Delta) -> str:
    """One part's change, with its telling detail."""
    text = f"{part.label} {_ms(part.delta_ms)} per step"
    if not part.significant:
        text += f" ({part.verdict})"      # within noise, or no verdict
    details: list[str] = []
    if part.part.group == "communication" or part.part == COMMUNICATION_CALLS:
        details = _communication_details(diff, part)
    else:
        items = [i for i in diff.items if i.part == part.label and i.delta_ms]
        if items:
            top = items[0]
            bound = ("≥ " if top.delta_ms > 0 else "≤ ") if top.bound else ""
            details.append(f"{top.name}{f' [{top.shape}]' if top.shape else ''} "
                           f"{bound}{_ms(top.delta_ms)}")
    moved = part.rank_delta_ms
    if part.on_one_rank and moved is not None:
        details.append(f"rank {part.rank} waits {_ms(moved)}" if part.part.group == "waiting"
                       else f"mostly on rank {part.rank} ({_ms(moved)})")
    return f"{text}: {'; '.join(details)}" if details else text


def contributors(diff: PairDiff, limit: int = CONTRIBUTORS) -> list[str]:
    """The largest changes, those beyond the noise first."""
    ranked = sorted(diff.parts, key=lambda p: (not p.significant, -abs(p.delta_ms)))
    return [contributor(diff, part) for part in ranked[:limit] if part.delta_ms]
