"""The ``analyze --json`` document as read back (by ``gate`` and ``diff``), checked against
its schema before use: the fields of each run decoded by type (its ranks' and process groups'
rows, its ``profile``: ``ddpprof.analysis.profile``), and every number in a run finite and within
``MAX_METRIC`` either way; a violation is a ``UsageError`` naming the file, the run and the
field. The one place this document's schema is read (it grows into the whole document's
type)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ..core.errors import UsageError
from ..core.limits import MAX_RANKS
from ..run.config import decode_hook
from ..run.manifest import validation_problem
from .profile import RunProfile

__all__ = ["ANALYZE_SCHEMA", "ANALYZE_VERSIONS", "AnalyzeDocument", "AnalyzedRun",
           "analyzed_runs"]
#: Versions of ``analyze --json`` read: 2, 3 (with ``step_ms`` and each run's profile), 4
#: (with ``process_groups``), 5 (metrics renamed: ``registry.RENAMED``, read either way) and 6
#: (``profile.config.bucket_cap_mib``, ``bucket_cap_mb`` before, read either way).
ANALYZE_SCHEMA, ANALYZE_VERSIONS = "ddpprof.analyze", (2, 3, 4, 5, 6)
#: The largest number a document read back may hold either way: beyond any metric's value
#: (bytes per step included), and small enough that the noise's squares stay finite.
MAX_METRIC = 1e18


class RankFields(msgspec.Struct):
    """What a row of ``per_rank`` must hold to be looked up (its metrics are read by name)."""

    rank: Annotated[int, Meta(ge=0, lt=MAX_RANKS)]


class GroupFields(msgspec.Struct):
    """What a row of ``process_groups`` must hold to be looked up."""

    name: str
    description: str | None = None


class AnalyzedRun(msgspec.Struct, kw_only=True):
    """The fields of one analyze run row decoded by schema (what the gate and ``diff`` use
    besides the metrics, which are read by name from the row itself, each a finite number
    of at most ``MAX_METRIC`` either way, or null)."""

    run: str
    variant: str | None = None
    status: str | None = None
    error: str | None = None
    model: str | None = None
    world_size: Annotated[int, Meta(ge=1, le=MAX_RANKS)] | None = None
    global_batch: Annotated[int, Meta(ge=1)] | None = None
    grad_accum: Annotated[int, Meta(ge=1)] | None = None
    bucket_cap_mib: Annotated[float, Meta(gt=0)] | None = None
    bucket_cap_mb: Annotated[float, Meta(gt=0)] | None = None  # MiB: its name before version 5
    per_rank: list[RankFields] | None = None
    process_groups: list[GroupFields] | None = None
    profile: RunProfile | None = None           # (version 3 on: ``ddpprof diff``'s parts)


class UnfinishedRun(msgspec.Struct, kw_only=True):
    """A recording analyze listed but did not analyze: it failed or was interrupted."""

    run: str
    status: str | None = None
    error: str | None = None


class AnalyzeDocument(msgspec.Struct, kw_only=True):
    schema: str
    version: int
    runs: list[dict[str, Any]]
    unfinished: list[UnfinishedRun] = []
    findings: list[dict[str, Any]] | None = None


def analyzed_runs(document: Any, source: str) -> tuple[AnalyzeDocument, list[AnalyzedRun]]:
    """An ``analyze --json`` document (decoded JSON) checked against its schema: its runs'
    fields decoded and every metric finite and bounded; a ``UsageError`` naming ``source``,
    the run and the field otherwise. Both ``gate`` and ``diff`` read documents through
    here."""
    if not isinstance(document, dict) or document.get("schema") != ANALYZE_SCHEMA:
        raise UsageError(f"{source}: not a `ddpprof analyze --json` file")
    try:
        decoded = msgspec.convert(document, AnalyzeDocument)
    except msgspec.ValidationError as error:
        raise UsageError(f"{source}: {validation_problem(error)}") from None
    if decoded.version not in ANALYZE_VERSIONS:
        raise UsageError(f"{source}: analyze schema version {decoded.version!r}, this ddpprof "
                         f"reads versions {', '.join(map(str, ANALYZE_VERSIONS))}")

    runs = []
    for index, row in enumerate(decoded.runs):
        if (where := _non_finite(row)) is not None:
            name = row.get("run")
            run = f"run {name!r}" if isinstance(name, str) else f"runs[{index}]"
            raise UsageError(f"{source}: {run}: {where}")
        try:
            runs.append(msgspec.convert(row, AnalyzedRun, dec_hook=decode_hook))
        except msgspec.ValidationError as error:
            raise UsageError(f"{source}: runs[{index}]: {validation_problem(error)}") from None
    return decoded, runs


def _non_finite(value: Any, where: str = "") -> str | None:
    """What is wrong with the first number in ``value`` that is NaN or infinite, or beyond
    ``MAX_METRIC`` either way (JSON has no bound; the arithmetic of the rules and of the noise,
    which squares differences, does), with its path (``per_rank[1].overlap_pct: nan is not a
    finite number``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'value'} ({value}) is not a finite number"
    if isinstance(value, int | float) and not isinstance(value, bool) and \
            abs(value) > MAX_METRIC:
        shown = f"an integer of {len(str(abs(value)))} digits" if isinstance(value, int) and \
            abs(value) > 10**30 else f"{value:g}"
        return f"{where or 'value'} ({shown}) is beyond any measurement (at most {MAX_METRIC:g})"
    if isinstance(value, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for path, item in items:
        if (found := _non_finite(item, path)) is not None:
            return found
    return None
