"""The findings on slow ranks: which rank the others wait for, and why (``advice.lateness``
measures both). Pure functions of the typed results.

* ``slow_rank_compute``: the rank does more work (more op calls than the others);
* ``slow_rank_contended``: it runs the same ops slower (a busy core, a slower device);
* ``slow_rank_untraced``: it spends longer where no traced op runs (data loading outside the
  profiler's ops, or a late start of its steps: the trace cannot tell these apart);
* ``straggler``: a rank the others wait for, but what it does beyond them explains less than
  half of it (or the run has no wait split: its compute share stands out);
* ``rotating_straggler``: the others wait, but for a different rank from step to step: no rank
  is to blame, and none is named.

Where two causes each explain a comparable part of the wait, the finding names both (its
``alternatives``) and says that the trace does not tell which. Where the analysis built the
step graphs (a run ddpprof recorded with buckets, or ``analyze --critical-path``), the
critical path of the median step backs the finding: the share of the step that the path
spends on the named rank in what the finding claims (its compute; for untraced time, its
host gaps and idle time), and the confidence falls when that share is small.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from ..analysis.results import RunResult
from .lateness import Excess, Lateness, excess, turn_excess
from .model import CapAdvice, Evidence, Finding, finding

# Thresholds, named as docs/findings.md names them.
SLOW_RANK_SHARE = 0.10   # a rank costs the others at least this share of the step ...
STEP_WAIT_SHARE = 0.05   # ... a step counts as one of waiting from this share of it ...
FIXED_SHARE = 2 / 3      # ... and one rank is waited for in at least this share of those steps
EXPLAINED = 0.5          # causes are named when their time is at least this share of the wait
COMPARABLE = 0.5         # another cause is named too when its time is ≥ this × the first's
SURE_STEPS = 0.9         # confidence high: the rank waited for in ≥ this share of the steps
COMPUTE_SKEW_PP = 10.0   # without the wait split: compute % spread across ranks
ON_PATH = 0.5            # backed by the critical path: the rank's claimed time on it is at
                         # least this share of the others' wait (both % of the step)

#: What each cause is, in words (for a finding that names two).
CAUSES = {
    "slow_rank_compute": "more work on it (more op calls than the others)",
    "slow_rank_contended": "its ops running slower than the others' (CPU contention, a "
                           "slower device)",
    "slow_rank_untraced": "time on it that no traced op covers (data loading outside the "
                          "profiler's ops, or a late start)",
}


def slow_rank(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """The rank the others wait for, and why; or that the rank they wait for moves."""
    if len(run.ranks) < 2:
        return None
    if late is None or late.culprit is None:
        return _compute_skew(run) if run.slowest_rank is None else None
    step = late.step_ms
    waiting = late.waiting_steps(STEP_WAIT_SHARE * step)
    culprit = late.culprit
    if not waiting or late.late_steps(culprit, STEP_WAIT_SHARE * step) < FIXED_SHARE * waiting:
        return _rotating(run, late, waiting)
    found = excess(run.ranks, culprit, late.steps)
    if cost_ms(late, culprit, found) < SLOW_RANK_SHARE * step:
        return None
    return _diagnosed(run, late, culprit, waiting, found)


def _causes(found: Excess | None) -> dict[str, float]:
    """What each cause explains of a rank's lateness, ms per step (none negative)."""
    if found is None:
        return {}
    return {"slow_rank_compute": max(found.extra_work_ms, 0.0),
            "slow_rank_contended": max(found.slower_ms, 0.0),
            "slow_rank_untraced": max(found.untraced_ms, 0.0)}


def cost_ms(late: Lateness, rank: int, found: Excess | None) -> float:
    """What rank ``rank`` costs the others' steps, ms per step: their exposed waiting for it,
    or, where more, what it spends beyond them (its causes' time) up to the time they sat in
    collectives for it. On ranks sharing cores a wait hidden behind compute slows that
    compute: the exposed part alone would miss it."""
    explained = sum(_causes(found).values())
    return max(late.caused_ms[rank], min(explained, late.held_ms[rank]))


def _common_evidence(late: Lateness, rank: int, waiting: int, cost: float) -> list[Evidence]:
    return [Evidence("rank", rank),
            Evidence("cost_ms_per_step", round(cost, 3), "ms"),
            Evidence("share_of_step", round(100 * cost / late.step_ms, 1), "%"),
            Evidence("others_waiting_ms_per_step", round(late.caused_ms[rank], 3), "ms"),
            Evidence("others_in_collectives_ms_per_step", round(late.held_ms[rank], 3), "ms"),
            Evidence("steps_waited_for", late.late_steps(rank, STEP_WAIT_SHARE * late.step_ms)),
            Evidence("steps_with_waiting", waiting),
            Evidence("steps_analyzed", len(late.steps)),
            Evidence("step_ms", round(late.step_ms, 3), "ms")]


def _diagnosed(run: RunResult, late: Lateness, rank: int, waiting: int,
               found: Excess | None) -> Finding:
    wait, step = cost_ms(late, rank, found), late.step_ms
    share = wait / step
    steps = late.late_steps(rank, STEP_WAIT_SHARE * step)
    evidence = _common_evidence(late, rank, waiting, wait)
    causes = _causes(found)
    ranked = sorted(causes.items(), key=lambda kv: -kv[1])
    when = (f"it costs the others {wait:.3g} ms per step ({100 * share:.0f}% of the step: "
            f"they wait {late.caused_ms[rank]:.3g} ms for it with nothing else to do, and sit "
            f"{late.held_ms[rank]:.3g} ms in collectives for it in all; it arrived last in "
            f"{steps} of the {waiting} steps with waiting)")
    if found is not None:
        evidence += [Evidence("extra_work_ms_per_step", round(found.extra_work_ms, 3), "ms"),
                     Evidence("extra_calls_per_step", round(found.extra_calls_per_step, 1)),
                     Evidence("slower_ms_per_step", round(found.slower_ms, 3), "ms"),
                     Evidence("slowdown", None if found.slowdown is None
                              else round(found.slowdown, 3), "x"),
                     Evidence("untraced_ms_per_step", round(found.untraced_ms, 3), "ms")]
    explained = sum(causes.values())
    if not ranked or explained < EXPLAINED * wait:
        return _not_high_unless_sure(finding(
            run, "straggler", share,
            f"rank {rank} arrives last at collectives: {when}. What it does beyond the others "
            f"({explained:.3g} ms per step) explains less than half of it: look at "
            "what it does before communicating (its data, its load, its device).",
            evidence, 100 * share, rank=rank, confidence="low"))
    assert found is not None
    code, top_ms = ranked[0]
    alternatives = tuple(c for c, ms in ranked[1:] if ms >= COMPARABLE * top_ms)
    sure = steps >= SURE_STEPS * len(late.steps) and not alternatives
    confidence = "high" if sure else "medium" if steps >= FIXED_SHARE * len(late.steps) \
        else "low"
    on_path = critical_path_share(run, rank, code)
    if on_path is not None:
        evidence.append(Evidence("critical_path_pct", round(on_path, 1), "%"))
        if on_path < ON_PATH * 100 * share:
            confidence = "low"
    what = _what(code, rank, found, run.ranks[0].kind == "gpu")
    if alternatives:
        what += (f". Or {' and '.join(CAUSES[c] for c in alternatives)}: the trace shows "
                 f"{_numbers(code, found)} and {_numbers(alternatives[0], found)}, not which "
                 "matters most")
    found_ = finding(run, code, share, f"{what}: {when}. {_remedy(code)}", evidence,
                     100 * share, rank=rank, alternatives=alternatives, confidence=confidence)
    return _not_high_unless_sure(found_)


def _not_high_unless_sure(found: Finding) -> Finding:
    """A finding of low confidence is medium at most, whatever its size."""
    if found.confidence == "low" and found.severity == "high":
        return replace(found, severity="medium")
    return found


#: Where each cause's time lies on the critical path (``graph.path``'s categories).
PATH_CATEGORIES = {"slow_rank_compute": ("compute",), "slow_rank_contended": ("compute",),
                   "slow_rank_untraced": ("host", "idle")}


def critical_path_share(run: RunResult, rank: int, code: str) -> float | None:
    """The share (%) of the median step that its critical path spends on ``rank`` in what
    ``code`` claims; None where the analysis built no step graphs, or the path cannot be
    had (the graph's failure is not the finding's)."""
    graphs = {r.rank: r.graph_steps for r in run.ranks}
    if any(not steps for steps in graphs.values()):
        return None
    try:
        # the replay machinery: off analyze's start (tests/test_no_torch.py)
        from ..graph.summary import run_paths

        paths, _, _ = run_paths(run.name, {r: s or [] for r, s in graphs.items()}, [])
    except Exception:   # a graph that cannot be built backs nothing: no evidence
        return None
    if not paths:
        return None
    median = statistics.median_low(sorted(p.step_us for p in paths))
    path = next(p for p in paths if p.step_us == median)
    wanted = PATH_CATEGORIES.get(code, ("compute", "host", "idle"))
    return sum(row.pct for row in path.split if row.rank == rank and row.category in wanted)


def _numbers(code: str, found: Excess) -> str:
    if code == "slow_rank_compute":
        return (f"{found.extra_calls_per_step:.0f} more op calls per step "
                f"({found.extra_work_ms:.3g} ms at the others' pace)")
    if code == "slow_rank_contended":
        slowdown = "" if found.slowdown is None else f"{found.slowdown:.2f}× "
        return (f"the same ops {slowdown}slower ({found.slower_ms:.3g} ms more per step)")
    return f"{found.untraced_ms:.3g} ms more per step with no traced op"


def _what(code: str, rank: int, found: Excess, gpu: bool) -> str:
    if code == "slow_rank_compute":
        top = (f", {found.top_extra_op} most ({found.top_extra_op_ms:.3g} ms per step)"
               if found.top_extra_op else "")
        return (f"rank {rank} does more work than the others: "
                f"{found.extra_calls_per_step:.0f} more op calls per step, "
                f"{found.extra_work_ms:.3g} ms at the others' pace{top}; its ops take "
                f"{found.compute_ms:.3g} ms per step against {found.others_compute_ms:.3g} ms")
    if code == "slow_rank_contended":
        slowdown = "" if found.slowdown is None else f" {found.slowdown:.2f}×"
        return (f"rank {rank} runs the same ops{slowdown} slower than the others "
                f"({found.slower_ms:.3g} ms more per step on ops every rank calls alike, "
                f"{found.extra_calls_per_step:.0f} extra calls): something else takes its CPU "
                "or its device (another process on its cores, a throttled or slower device)")
    where = ("its device runs nothing" if gpu else "no traced op covers")
    return (f"rank {rank} spends {found.untraced_ms:.3g} ms more per step than the others in "
            f"time {where} ({found.untraced_rank_ms:.3g} ms against "
            f"{found.others_untraced_ms:.3g} ms): slow data loading outside the profiler's "
            "ops, or a late start of its steps (work between steps: logging, checkpoints, "
            "garbage collection, a sleep)" + (", or a host too slow to feed its device"
                                               if gpu else "")
            + "; the trace shows the gap, not which")


def _remedy(code: str) -> str:
    if code == "slow_rank_compute":
        return ("Balance the work across ranks: uneven batches or sequence lengths, or work "
                "done on one rank only (logging, metrics, evaluation), make the others wait.")
    if code == "slow_rank_contended":
        return ("Check what else runs on its host and cores (its CPU affinity, other "
                "processes) or its device's clocks and health.")
    return ("Profile its data loading (more workers, prefetching) and what it does between "
            "steps, or trace them (record_function) to tell which.")


def _rotating(run: RunResult, late: Lateness, waiting: int) -> Finding | None:
    """The others wait, for a different rank from step to step: no rank named."""
    step, wait = late.step_ms, late.mean_wait_ms
    if wait < SLOW_RANK_SHARE * step:
        return None
    threshold = STEP_WAIT_SHARE * step
    counts = {r: late.late_steps(r, threshold) for r in late.ranks}
    listed = ", ".join(f"rank {r} in {k}" for r, k in counts.items() if k)
    share = wait / step
    # what the late rank of each step did beyond the others in it: a pause (untraced time)
    # is a cause to look for; its ops merely taking longer in turn is the noise of shared
    # cores, which no one change removes: never high
    untraced_ms, work_ms = turn_excess(run.ranks, late, threshold)
    paused = waiting >= 3 and untraced_ms >= EXPLAINED * wait
    what = (f"each step's late rank spends {untraced_ms:.3g} ms more than the others with no "
            "op running (a pause outside traced work: garbage collection, data made outside "
            "the profiler's ops, a sleep, logging)" if paused else
            f"each step's late rank is late mostly because its own ops take longer "
            f"({work_ms:.3g} ms more than the others' in that step, {untraced_ms:.3g} ms with "
            "no op running): the noise of shared cores or devices, or uneven batches")
    return _not_high_unless_sure(finding(
        run, "rotating_straggler", share,
        f"the rank the others wait for changes from step to step ({listed} of the "
        f"{waiting} steps with waiting): they wait {wait:.3g} ms per step "
        f"({100 * share:.0f}% of the step), but no one rank is to blame; {what}.",
        [Evidence("ranks_waited_for", len([k for k in counts.values() if k])),
         Evidence("most_steps_one_rank", max(counts.values())),
         Evidence("steps_with_waiting", waiting),
         Evidence("steps_analyzed", len(late.steps)),
         Evidence("others_waiting_ms_per_step", round(wait, 3), "ms"),
         Evidence("late_rank_untraced_ms_per_step", round(untraced_ms, 3), "ms"),
         Evidence("late_rank_extra_op_ms_per_step", round(work_ms, 3), "ms"),
         Evidence("share_of_step", round(100 * share, 1), "%")], 100 * share,
        confidence="medium" if paused else "low"))


def _compute_skew(run: RunResult) -> Finding | None:
    """No wait split (the collectives could not be matched across ranks): the rank whose
    compute share stands out."""
    compute = {r.rank: r.breakdown.compute_pct for r in run.ranks}
    spread = max(compute.values()) - min(compute.values())
    if spread < COMPUTE_SKEW_PP:
        return None
    top = max(compute, key=compute.__getitem__)
    return _not_high_unless_sure(finding(
        run, "straggler", spread / 100,
        f"rank {top} computes {spread:.1f} points more of the window than the least busy "
        "rank: the others wait for it at every collective (the collectives could not be "
        "matched across ranks to measure it).",
        [Evidence("rank", top), Evidence("compute_pct_spread", round(spread, 2), "pp")],
        rank=top, confidence="low"))
