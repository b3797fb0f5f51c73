"""``ddpprof gate``: compare a run's metrics with a baseline under rules.

A rule is ``METRIC OP RHS`` with OP one of ``>= <= > < ==`` and RHS a number, ``baseline``,
``baseline + N``, ``baseline - N``, ``baseline * N``, ``baseline + N%``, ``baseline - N%``, or
``+N%``/``-N%`` alone (``baseline`` is the metric's value in the matched baseline run: ``step_ms
<= +5%`` is ``step_ms <= baseline * 1.05``). METRIC is a column of a run (``overlap_pct``), or
of one of its ranks (``overlap_pct[rank=1]``), of one process group (``overlap_pct[dp]``) or both
(``overlap_pct[dp, rank=1]``): :func:`metric_value` is the one lookup.

With a significance level, a broken rule FAILs only when it is broken by more than the noise
of the difference at that level (one-sided); otherwise its verdict is ``within noise``. The
noise of a metric comes from the repeats merged by ``--aggregate median``, and for
``step_ms`` from the run's profile (its steps and the run-to-run prior of ``ddpprof diff``).

Both sides are ``ddpprof analyze --json`` documents (or a trace folder, analyzed on the spot).
From each run the gate reads ``run``, ``variant``, ``status``, the configuration (``model``,
``world_size``, ``global_batch``, ``grad_accum``, ``bucket_cap_mib``) and the metrics its rules
name. A run's *configuration key* is its variant and that configuration: runs match by name
when the name is on both sides, else by key, and a matched pair whose known configurations
differ is an error. ``--aggregate median`` first merges the repeats of each key into one run:
per metric, the median of the repeats where it is a number, and how many those were.

Bad input is a ``UsageError`` (exit 2): a document that is not an analysis, a run that failed
or was interrupted, NaN or an infinity anywhere in a run, a run or metric missing on one side.
"""

from __future__ import annotations

import json
import math
import operator
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.document import analyzed_runs
from ..analysis.profile import profile_of_row
from ..core.errors import UsageError
from ..core.json_input import read_json_bytes
from ..core.numbers import ascii_whole
from ..diff.noise import DEFAULT_NOISE
from ..metrics.registry import RENAMED, suggestion
from ..render.table import Column, ranks_text
from ..run.config_key import ConfigKey
from .noise import margin_of

if TYPE_CHECKING:
    from ..analysis.profile import RunProfile
    from ..diff.noise import RunNoise

DEFAULT_RULE = "overlap_pct >= baseline - 2"
#: Statuses a run may have and still be gated; None: no run.json (a foreign trace).
GATEABLE_STATUSES = ("complete", None)
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_METRIC = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_]+)?(?:\[[^\]]*\])?"
_RULE = re.compile(rf"^\s*(?P<metric>{_METRIC})\s*(?P<op>>=|<=|==|>|<)\s*"
                   rf"(?:(?P<relative>[-+])\s*(?P<pct>{_NUMBER})\s*%"
                   rf"|(?P<absolute>{_NUMBER})|baseline\s*(?:(?P<arith>[-+*])\s*"
                   rf"(?P<operand>{_NUMBER})\s*(?P<percent>%)?)?)\s*$")
#: ``name[selectors]``: a metric of one rank (``[rank=1]``), of one process group (``[dp]``,
#: ``[group=dp]``) or of one rank's share of a group (``[dp, rank=1]``); the one place
#: selectors are read.
_SELECTOR = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\[(?P<selectors>[^\]]*)\])?$")


# --- input ---------------------------------------------------------------------------------

#: The findings of each run as metrics of its row, counted by severity from the document's
#: ``findings``: ``findings_high`` (also written ``findings.high``), ``findings_medium``,
#: ``findings_low``, and ``findings`` (all of them).
SEVERITIES = ("high", "medium", "low")


def _count_findings(row: dict[str, Any], findings: list[dict[str, Any]]) -> None:
    mine = [f for f in findings if isinstance(f, dict) and f.get("run") == row.get("run")]
    row["findings"] = len(mine)
    for severity in SEVERITIES:
        row[f"findings_{severity}"] = sum(f.get("severity") == severity for f in mine)


def metric_value(row: dict[str, Any], metric: str, run: str, side: str) -> Any:
    """The value of ``metric`` in the analyze row of ``run``: a column of the run; with
    ``[rank=N]`` of its rank N (``per_rank``); with ``[NAME]`` or ``[group=NAME]`` of its
    process group NAME (``process_groups``, by name or description: ``dp``, ``mesh_dp``);
    with both, of rank N's share of that group. Every metric a rule names is read here."""
    match = _SELECTOR.match(metric)
    if match is None:
        raise UsageError(f"{metric!r} is not a metric name")
    name, rank, group = match["name"], *_selectors(metric, match["selectors"])
    where = f"run {run!r}"
    if rank is not None:
        rows = [r for r in row.get("per_rank") or [] if isinstance(r, dict)]
        ranks = [r for r in rows if r.get("rank") == rank]
        if not ranks:
            there = [r["rank"] for r in rows if isinstance(r.get("rank"), int)]
            raise UsageError(f"{where}: no rank {rank} in the {side} results (" + (
                f"its ranks: {ranks_text(there)}" if there else "no rank has a row of its own")
                + ")")
        row, where = ranks[0], f"{where}, rank {rank},"
    if group is not None:
        groups = [g for g in row.get("process_groups") or [] if isinstance(g, dict)
                  and group in (g.get("name"), g.get("description"))]
        if not groups:
            raise UsageError(f"{where}: no process group {group!r} in the {side} results "
                             "(analyze --json of version 4 lists them under process_groups)")
        row, where = groups[0], f"{where}, group {group},"
    if name not in row:
        name = next((alias for alias in _aliases(name) if alias in row), name)
    if name not in row:
        numbers = [k for k, v in row.items() if _is_number(v)]
        raise UsageError(f"{where}: no metric {name!r} in the {side} results"
                         f"{suggestion(name, numbers)}")
    found = row[name]
    if found is not None and not _is_number(found):
        raise UsageError(f"{where}: {name} is not a number in the {side} results")
    return found


def _aliases(name: str) -> list[str]:
    """The other names of a renamed metric: its old one, or its new one."""
    return [old for old, new in RENAMED.items() if new == name] + (
        [RENAMED[name]] if name in RENAMED else [])


def deprecated_names(rules: list[Rule]) -> list[str]:
    """A note for each rule that names a metric by its old name."""
    notes = []
    for rule in rules:
        name = rule.metric.partition("[")[0]
        if name in RENAMED:
            notes.append(f"rule {rule.text!r}: {name} is now called {RENAMED[name]}; the old "
                         "name is deprecated and will stop working")
    return notes


def _selectors(metric: str, text: str | None) -> tuple[int | None, str | None]:
    """The rank and the process group a metric's selectors name (``rank=N``, ``group=NAME``,
    or a bare NAME for a group), each at most once."""
    rank = group = None
    for part in (text.split(",") if text is not None else []):
        key, _, value = part.strip().rpartition("=")
        key, value = key.strip(), value.strip()
        if key == "rank" and (number := ascii_whole(value)) is not None and number >= 0 \
                and rank is None:
            rank = number
        elif key in ("group", "") and re.fullmatch(r"[\w.:-]+", value) and group is None:
            group = value
        else:
            raise UsageError(f"{metric!r}: a selector is rank=N, group=NAME or NAME, each at "
                             "most once ([dp], [rank=1], [dp, rank=1])")
    return rank, group


@dataclass(frozen=True)
class GateRun:
    name: str
    key: ConfigKey
    row: dict[str, Any]                     # the analyze row (a median of repeats: merged)
    #: For a median of repeats: how many repeats there were, and their own rows.
    repeats: int | None = None
    members: list[dict[str, Any]] = field(default_factory=list)

    def values(self, metric: str, side: str) -> list[float | None]:
        """The metric in each repeat (one value without repeats)."""
        return [metric_value(row, metric, self.name, side) for row in self.members or [self.row]]

    def metric(self, metric: str, side: str) -> float | None:
        numbers = [v for v in self.values(metric, side) if v is not None]
        if not self.members:
            return numbers[0] if numbers else None
        return statistics.median(numbers) if numbers else None

    def repeats_used(self, metric: str) -> str | None:
        if self.repeats is None:
            return None
        used = sum(v is not None for v in self.values(metric, "current"))
        return f"{used}/{self.repeats}"

    def profiles(self) -> list[RunProfile]:
        """The profiles (``ddpprof diff``'s parts) of its repeats, where the rows hold one."""
        found = [profile_of_row(row, self.name) for row in self.members or [self.row]]
        return [p for p in found if p is not None]


def load_runs(path: Path) -> list[GateRun]:
    """The runs of an analyze --json file (a trace folder is analyzed through
    ``ddpprof.JobSet``: ``JobSet.gate_runs``); every problem with them is a ``UsageError``
    naming the file, the run and the field."""
    data = read_json_bytes(path)
    try:
        document = json.loads(data)  # json, not msgspec: NaN must be named
    except (ValueError, RecursionError) as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    return runs_of(document, str(path))


def runs_of(document: Any, source: str) -> list[GateRun]:
    decoded, analyzed = analyzed_runs(document, source)
    for unfinished in decoded.unfinished:
        _refuse_unfinished(source, unfinished.run, unfinished.status, unfinished.error)
    runs: list[GateRun] = []
    seen: dict[str, int] = {}
    for index, (row, fields) in enumerate(zip(decoded.runs, analyzed, strict=True)):
        if fields.run in seen:
            before = seen[fields.run]
            raise UsageError(
                f"{source}: two runs are named {fields.run!r}: runs[{before}] "
                f"({decoded.runs[before].get('folder') or 'no folder'}) and runs[{index}] "
                f"({row.get('folder') or 'no folder'}); a gate needs unique names")
        seen[fields.run] = index
        if fields.status not in GATEABLE_STATUSES:
            _refuse_unfinished(source, fields.run, fields.status, fields.error)
        key = ConfigKey(fields.variant or fields.run, fields.model, fields.world_size,
                        fields.global_batch, fields.grad_accum,
                        fields.bucket_cap_mib if fields.bucket_cap_mib is not None
                        else fields.bucket_cap_mb)
        if decoded.findings is not None:
            row = dict(row)
            _count_findings(row, decoded.findings)
        runs.append(GateRun(fields.run, key, row))
    return runs


def _refuse_unfinished(source: str, run: str, status: str | None, error: str | None) -> None:
    detail = f" ({error})" if error else ""
    raise UsageError(f"{source}: run {run!r} is {status or 'unfinished'}{detail}; only complete "
                     "runs can be gated")


# --- rules ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    text: str
    metric: str
    op: str
    absolute: float | None      # set for "METRIC OP NUMBER"
    arith: str | None           # "+", "-", "*" (a percentage too) or None for "baseline"
    operand: float

    @property
    def needs_baseline(self) -> bool:
        return self.absolute is None

    @property
    def slope(self) -> float:
        """How much the threshold moves when the baseline moves by one."""
        if self.absolute is not None:
            return 0.0
        return self.operand if self.arith == "*" else 1.0

    def threshold(self, baseline: float | None) -> float:
        if self.absolute is not None:
            return self.absolute
        assert baseline is not None
        if self.arith == "+":
            return baseline + self.operand
        if self.arith == "-":
            return baseline - self.operand
        if self.arith == "*":
            return baseline * self.operand
        return baseline

    def holds(self, current: float, threshold: float, tolerance: float) -> bool:
        """The comparison, loosened by ``tolerance`` in the metric's own units."""
        if self.op in (">=", ">"):
            return _OPERATORS[self.op](current + tolerance, threshold)
        if self.op in ("<=", "<"):
            return _OPERATORS[self.op](current - tolerance, threshold)
        return abs(current - threshold) <= tolerance


def parse_rule(text: str) -> Rule:
    """``METRIC OP RHS`` (see the module's docstring); a percentage of the baseline becomes
    its factor (``+5%``: ``baseline * 1.05``)."""
    match = _RULE.match(text)
    if not match:
        raise UsageError(f"malformed rule {text!r}: expected METRIC OP RHS, OP one of "
                         ">= <= > < ==, RHS a number, baseline [+|-|* NUMBER], "
                         "baseline +|- NUMBER%, or +|-NUMBER%")
    absolute = float(match["absolute"]) if match["absolute"] is not None else None
    arith, operand = match["arith"], float(match["operand"] or 0)
    if match["pct"] is not None or match["percent"]:
        sign = match["relative"] or arith
        if sign == "*":
            raise UsageError(f"malformed rule {text!r}: a percentage is added or taken away")
        pct = float(match["pct"] or operand)
        arith, operand = "*", 1 + (pct if sign == "+" else -pct) / 100
    if not all(math.isfinite(n) for n in (absolute or 0.0, operand)):
        raise UsageError(f"malformed rule {text!r}: its number is not finite")
    metric = match["metric"]
    if "." in metric.split("[")[0]:
        name, _, severity = metric.split("[")[0].partition(".")
        if name != "findings" or severity not in SEVERITIES:
            raise UsageError(f"malformed rule {text!r}: a dotted metric is findings.high, "
                             "findings.medium or findings.low")
        metric = f"findings_{severity}" + metric[len(name) + 1 + len(severity):]
    return Rule(text=text.strip(), metric=metric, op=match["op"], absolute=absolute,
                arith=arith, operand=operand)


# --- evaluation ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    rule: str
    run: str
    baseline: float | None
    current: float | None
    threshold: float | None
    #: "pass", "FAIL", "within noise" (broken, by less than the noise at the significance
    #: level) or "n/a" (the metric is n/a on both sides)
    verdict: str
    baseline_repeats: str | None = None     # "2/3": repeats whose metric was a number
    current_repeats: str | None = None
    margin: float | None = None             # the noise allowed at the significance level
    noise: str | None = None                # where it came from; "none" when unknown


COLUMNS = [Column("rule"), Column("run"), Column("baseline"), Column("current"),
           Column("threshold"), Column("verdict")]
REPEAT_COLUMNS = [Column("baseline_repeats"), Column("current_repeats")]
NOISE_COLUMNS = [Column("margin"), Column("noise", wide=True)]


def aggregate(runs: list[GateRun]) -> list[GateRun]:
    """The repeats of each configuration key become one run: per numeric metric the median of
    the repeats where it is a number (null when it is a number in none), with the count used.
    The run is named after its variant, with its configuration when a variant has several."""
    groups: dict[ConfigKey, list[GateRun]] = {}
    for run in runs:
        groups.setdefault(run.key, []).append(run)
    variants = [key.variant for key in groups]
    merged = []
    for key, members in groups.items():
        name = key.variant if variants.count(key.variant) == 1 \
            else f"{key.variant} [{key.describe()}]"
        row: dict[str, Any] = {"run": name}
        for metric in dict.fromkeys(k for m in members for k in m.row):
            values = [m.row.get(metric) for m in members]
            if all(v is None or _is_number(v) for v in values):
                numbers = [v for v in values if v is not None]
                row[metric] = statistics.median(numbers) if numbers else None
        merged.append(GateRun(name, key, row, repeats=len(members),
                              members=[m.row for m in members]))
    return merged


def match_runs(current: list[GateRun], baseline: list[GateRun]
               ) -> list[tuple[GateRun, GateRun]]:
    """Pair every current run with its baseline run: the same name, else the only baseline run
    with the same configuration key. A run without a partner, or a pair whose configurations
    differ, is an error."""
    by_name = {run.name: run for run in baseline}
    by_key: dict[ConfigKey, list[GateRun]] = {}
    for run in baseline:
        by_key.setdefault(run.key, []).append(run)
    pairs, used = [], set()
    for run in current:
        partner = by_name.get(run.name)
        if partner is None and len(by_key.get(run.key, [])) == 1:
            partner = by_key[run.key][0]
        if partner is None:
            raise UsageError(f"run {run.name!r} is not in the baseline")
        if differences := run.key.differences(partner.key):
            raise UsageError(f"run {run.name!r} and baseline run {partner.name!r} differ: "
                             + ", ".join(differences))
        pairs.append((run, partner))
        used.add(partner.name)
    missing = [run.name for run in baseline if run.name not in used]
    if missing:
        raise UsageError(f"baseline run {missing[0]!r} is missing from the current results")
    return pairs


def evaluate(rules: list[Rule], current: list[GateRun], baseline: list[GateRun],
             tolerance: float = 0.0, significance: float | None = None,
             noise: RunNoise | None = None) -> list[Verdict]:
    """Every rule on every matched pair. A metric that is n/a (null) on both sides is n/a; one
    that is n/a now but was a number in the baseline FAILs (it vanished); a rule that needs
    the baseline's value where the baseline has none is an error. With ``significance``, a
    broken rule FAILs only beyond the noise (``gate.noise``; ``noise``: the prior of
    ``ddpprof diff`` for ``step_ms``, its default when None)."""
    pairs = match_runs(current, baseline)
    if not pairs:
        raise UsageError("no run to compare: both sides hold no complete run")
    verdicts = []
    for now, before in pairs:
        for rule in rules:
            value = now.metric(rule.metric, "current")
            reference = before.metric(rule.metric, "baseline")
            repeats = before.repeats_used(rule.metric), now.repeats_used(rule.metric)
            if value is None:
                verdict = "n/a" if reference is None else "FAIL"
                verdicts.append(Verdict(rule.text, now.name, reference, None, None, verdict,
                                        *repeats))
                continue
            if rule.needs_baseline and reference is None:
                raise UsageError(f"run {now.name!r}: {rule.metric} is n/a in the baseline "
                                 f"results only, so '{rule.text}' has no threshold")
            threshold = rule.threshold(reference)
            margin, source = (None, None) if significance is None else margin_of(
                rule, now, before, significance, noise or DEFAULT_NOISE)
            verdict = "pass" if rule.holds(value, threshold, tolerance) else (
                "within noise" if margin and rule.holds(value, threshold, tolerance + margin)
                else "FAIL")
            verdicts.append(Verdict(rule.text, now.name, reference, value, threshold, verdict,
                                    *repeats, margin=margin, noise=source))
    return verdicts


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
