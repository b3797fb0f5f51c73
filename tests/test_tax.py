"""The overlap tax (``ddpprof.metrics.tax``): synthetic samples and a synthetic trace with a
known tax worked out by hand, what ``analyze`` reports of it, and the estimator's invariants
as fuzz tests."""

from __future__ import annotations

import json

import numpy as np
import pytest
import trace_builders as tb
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ddpprof.analysis.tax import own_share
from ddpprof.metrics import intervals as iv
from ddpprof.metrics.comm import CollectiveCalls
from ddpprof.metrics.tax import OpSamples, RankTaxSamples, overlap_tax, shared_time

MIB = 1 << 20


def calls_of(spans: list[tuple[float, float]], size: int = MIB) -> CollectiveCalls:
    n = len(spans)
    return CollectiveCalls(["all_reduce"] * n, np.array([a for a, _ in spans], dtype=float),
                           np.array([b for _, b in spans], dtype=float), [size] * n, [2] * n,
                           [""] * n, [None] * n)


def rank(ops: list[tuple[int, int, float, float]], spans: list[tuple[float, float]],
         compute: list[tuple[float, float]] | None = None) -> tuple:
    """One rank: ops (key, step, start, end), all GEMMs; its collectives' transfers (each in
    the step its start falls in, steps 1000 µs apart); its compute lane (by default its
    ops)."""
    key, step, start, end = (np.array(column) for column in zip(*ops, strict=True))
    lane = compute if compute is not None else list(zip(start, end, strict=True))
    calls = calls_of(spans)
    samples = RankTaxSamples(
        OpSamples(key.astype(np.int64), np.zeros(len(ops), dtype=np.int64),
                  step.astype(np.int64), start.astype(float), end.astype(float)),
        iv.union(np.array([a for a, _ in lane]), np.array([b for _, b in lane])),
        (calls.start_us // 1000).astype(np.int64))
    return samples, calls, calls.start_us


def test_compute_tax_by_hand():
    """Four steps, the machine 10% slower in steps 1 and 3: op A takes 100 µs alone (steps 0
    and 1: 100, 110) and 125 with a collective transferring beside it from start to end
    (steps 2, 3: 125, 137.5); op B, 200 µs, is always alone (200, 220, 200, 220). B gives each
    step's load, and A's ratio beside to alone is 1.25: a compute tax of 25%, in every
    bootstrap refit that can tell."""
    load = [1.0, 1.1, 1.0, 1.1]
    ops, spans = [], []
    for k, factor in enumerate(load):
        a = 100 * factor * (1.25 if k >= 2 else 1)
        ops += [(0, k, 1000 * k, 1000 * k + a), (1, k, 1000 * k + 300,
                                                 1000 * k + 300 + 200 * factor)]
        if k >= 2:
            spans.append((1000 * k, 1000 * k + a))
    tax = overlap_tax([rank(ops, spans, compute=[])])
    for work_class in ("all", "gemm"):
        row = tax.row("compute", work_class)
        assert (row.keys, row.alone, row.overlapped) == (1, 2, 2)
        assert (row.tax_pct, row.low_pct, row.high_pct) == pytest.approx((25, 25, 25))
    assert tax.row("compute", "other").tax_pct is None
    # the collective's size class gets the same
    assert tax.row("compute", "gemm", "1 - 16 MiB").tax_pct == pytest.approx(25)


def test_communication_tax_by_hand():
    """Each of four steps has two 1 MiB collectives: one alone (100 µs, 110 in the slower
    steps 1 and 3) and one with compute beside it from start to end (150, 165): against the
    one size's time alone, 50% longer beside compute, whatever the step's load."""
    ops, spans, lane = [], [], []
    for k, factor in enumerate([1.0, 1.1, 1.0, 1.1]):
        spans += [(1000 * k, 1000 * k + 100 * factor), (1000 * k + 300,
                                                        1000 * k + 300 + 150 * factor)]
        lane.append((1000 * k + 250, 1000 * k + 700))
        ops.append((0, k, 1000 * k + 250, 1000 * k + 700))
    row = overlap_tax([rank(ops, spans, compute=lane)]).row("communication")
    assert (row.alone, row.overlapped) == (4, 4)
    assert (row.tax_pct, row.low_pct, row.high_pct) == pytest.approx((50, 50, 50))


def test_collectives_at_once_share_the_time():
    # [0, 100) and [50, 150) overlap for 50 µs: each alone would have taken 50 + 25
    assert shared_time(np.array([0.0, 50.0]), np.array([100.0, 150.0])).tolist() == [75, 75]
    # a span within another: [0, 100) holds [20, 40): 80 + 10, and 10
    assert shared_time(np.array([0.0, 20.0]), np.array([100.0, 40.0])).tolist() == [90, 10]


def test_an_op_is_a_span_of_its_own_time():
    # [0, 100) holds [10, 12) (2%) and [50, 80) (30%); [200, 300) holds [200, 300) of
    # another thread only
    thread = np.array([1, 1, 1, 1, 2])
    start = np.array([0.0, 10.0, 50.0, 200.0, 200.0])
    end = np.array([100.0, 12.0, 80.0, 300.0, 300.0])
    assert own_share(thread, start, end).tolist() == pytest.approx([0.68, 1, 1, 1, 1])


def test_analyze_reports_the_tax(tmp_path, ddpprof_cli):
    """One CPU rank, five steps (the last dropped), step k at 1000k: aten::mm at 0 takes 100
    µs alone (steps 0, 1) and 125 while gloo transfers beside it (steps 2, 3); aten::add
    300-500 is alone in every step; a 1 MiB all-reduce runs alone 600-700 in every step, and
    beside the mm in steps 2 and 3 (125 µs). Compute tax: mm 125 against 100, 25%; the
    all-reduce beside compute 125 against 100 alone: 25%."""
    size = {"Input Dims": [[MIB // 4]], "Input type": ["float"]}
    events = []
    for k in range(5):
        at = 1000 * k
        mm = 125 if k in (2, 3) else 100
        events += [tb.step(k, at, at + 1000), tb.span("aten::mm", at, at + mm),
                   tb.span("aten::add", at + 300, at + 500),
                   tb.span("gloo:all_reduce", at + 600, at + 700, tid=9, **size)]
        if k in (2, 3):
            events.append(tb.span("gloo:all_reduce", at, at + mm, tid=9, **size))
    tb.write_trace(tmp_path / "run" / "rank0.json", events, world_size=1)
    result = ddpprof_cli("analyze", str(tmp_path / "run"), "--json", "-", "--wide",
                         "--html-out", str(tmp_path / "report.html"))
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)["runs"][0]
    assert run["compute_tax_pct"] == pytest.approx(25)
    assert run["comm_tax_pct"] == pytest.approx(25)
    rows = {(r["side"], r["work_class"], r["size"]): r for r in run["overlap_tax"]}
    assert rows[("compute", "gemm", "all")]["tax_pct"] == pytest.approx(25)
    assert rows[("compute", "other", "all")]["tax_pct"] is None     # add: always alone
    told = "compute +25% (25 to 25), communication +25% (25 to 25)"
    assert told in (tmp_path / "report.html").read_text()
    # and on the terminal, with the class that was told (the table moved to stderr)
    assert f"run: {told}; compute by class: gemm +25%" in result.stderr


@st.composite
def taxed_samples(draw):
    """Ops each seen both alone and overlapped over 3-6 steps, the machine's load changing
    from step to step: duration = base × load × (1 + τ) when overlapped; and one op always
    alone, which tells each step's load."""
    steps = draw(st.integers(3, 6))
    keys = draw(st.integers(1, 5))
    tax = draw(st.floats(-0.5, 4))
    load = [draw(st.floats(0.5, 2)) for _ in range(steps)]
    ops, spans = [], []
    for key in range(keys):
        base = draw(st.floats(120, 5000))   # at least MIN_WORK_US at any load
        overlapped = draw(st.lists(st.booleans(), min_size=steps, max_size=steps))
        assume(any(overlapped) and not all(overlapped))
        for k, beside in enumerate(overlapped):
            start = 1e6 * k + 1e5 * key        # ops and their collectives never meet
            end = start + base * load[k] * (1 + tax if beside else 1)
            ops.append((key, k, start, end))
            if beside:
                spans.append((start, end))
    ops += [(keys, k, 1e6 * k + 9e5, 1e6 * k + 9e5 + 300 * load[k]) for k in range(steps)]
    return ops, spans, 100 * tax, load


@settings(max_examples=80, deadline=None)
@given(taxed_samples(), st.floats(1, 10))
def test_the_tax_of_exact_samples_is_recovered(case, scale):
    ops, spans, tax_pct, _ = case
    row = overlap_tax([rank(ops, spans, compute=[])]).row("compute", "gemm")
    assert row.tax_pct == pytest.approx(tax_pct, abs=1e-6)
    # every refit that can tell it (some draw steps all alone) tells the same
    if row.low_pct is not None:
        assert row.low_pct == pytest.approx(tax_pct, abs=1e-6) == row.high_pct
    # every duration times a constant (another machine, uniformly faster): the same tax
    scaled = [(k, s, a * scale, a * scale + (b - a) * scale) for k, s, a, b in ops]
    spans = [(a * scale, a * scale + (b - a) * scale) for a, b in spans]
    assert overlap_tax([rank(scaled, spans, compute=[])]).row(
        "compute", "gemm").tax_pct == pytest.approx(tax_pct, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(taxed_samples())
def test_without_overlap_there_is_no_tax(case):
    ops, _, _, _ = case
    tax = overlap_tax([rank(ops, [], compute=[])])
    assert all(row.tax_pct is None for row in tax.rows)


@settings(max_examples=60, deadline=None)
@given(taxed_samples())
def test_a_tax_the_load_explains_as_well_is_not_told(case):
    """Without the op that tells each step's load, one op's slowdown beside a collective
    cannot be told from the load of the steps it was overlapped in: no tax, not a guess."""
    ops, spans, _, _ = case
    keys = {key for key, *_ in ops}
    single = [op for op in ops if op[0] == min(keys)]
    assert overlap_tax([rank(single, spans, compute=[])]).row("compute").tax_pct is None


def test_the_terminal_shows_the_tax_of_the_first_runs_told():
    """analyze's tax section: a run with no tax told is left out; after ten runs, a count."""
    from types import SimpleNamespace

    from ddpprof.metrics.tax import OverlapTax, TaxRow
    from ddpprof.report.console import tax_section

    def run(name: str, pct: float | None) -> SimpleNamespace:
        rows = [TaxRow("compute", "all", "all", pct, 10.0, 30.0, 2, 3, 3),
                TaxRow("compute", "gemm", "all", pct, None, None, 1, 2, 2),
                TaxRow("communication", "all", "all", None, None, None, 0, 0, 0)]
        return SimpleNamespace(name=name, overlap_tax=OverlapTax(rows))

    runs = [run("untold", None)] + [run(f"r{k}", 20.0) for k in range(12)]
    [section] = tax_section(SimpleNamespace(runs=runs))
    assert section.lines[0] == ("r0: compute +20% (10 to 30), communication n/a; compute by "
                                "class: gemm +20%")
    assert len(section.lines) == 11 and section.lines[-1] == "... and 2 more runs (--json)"
    assert tax_section(SimpleNamespace(runs=runs[:1])) == []


def _reference_gamma(log_duration, key, cluster, shares, weight, column):
    """γ by least squares on the samples themselves (numpy's SVD-based ``lstsq`` over the
    weighted, within-key demeaned design: key effects out, one dummy per cluster), None where
    the column does not vary within keys or the other columns explain it: an implementation
    independent of the one under test, which works from per-cluster sums."""
    _, key = np.unique(key, return_inverse=True)
    _, cluster = np.unique(cluster, return_inverse=True)
    keys, clusters = key.max() + 1, cluster.max() + 1
    total = np.bincount(key, weights=weight, minlength=keys)

    def demeaned(values):
        means = np.bincount(key, weights=weight * values, minlength=keys)
        return values - (means / np.where(total > 0, total, 1.0))[key]

    onehot = np.eye(clusters)[cluster]
    columns = np.stack([demeaned(c) for c in np.concatenate([shares, onehot], axis=1).T], axis=1)
    root = np.sqrt(weight)[:, None]
    design = columns * root
    if not np.any((np.abs(columns[:, column]) > 1e-9) & (weight > 0)):
        return None
    others = np.delete(design, column, axis=1)
    explained, *_ = np.linalg.lstsq(others, design[:, column], rcond=None)
    left = design[:, column] - others @ explained
    if np.linalg.norm(left) <= 1e-6 * np.linalg.norm(design[:, column]):
        return None
    solution, *_ = np.linalg.lstsq(design, demeaned(log_duration) * root[:, 0], rcond=None)
    return float(solution[column])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 6), st.integers(2, 12), st.integers(1, 3))
def test_the_fit_from_cluster_sums_equals_least_squares_on_the_samples(seed, clusters, keys,
                                                                       columns):
    """Every refit (clusters weighted by a bootstrap draw, some drawn twice, some not at all)
    gives the γ that least squares on the samples gives, or None where that says it cannot
    be told: random samples, log durations around 8 (large beside their spread: 10⁻⁶ to
    10⁻¹), some share columns all zero (a size class beside nothing), some set per cluster."""
    from ddpprof.metrics.tax_fit import Fit, Samples

    rng = np.random.default_rng(seed)
    n = int(rng.integers(keys * 2, keys * 6))
    key = rng.integers(0, keys, n)
    cluster = rng.integers(0, clusters, n)
    shares = rng.random((n, columns)) * (rng.random(columns) < 0.7)
    # some columns a pattern of the clusters (a step overlapped throughout, another alone):
    # a refit that draws few clusters may then not tell them from the clusters' loads
    patterned = rng.random(columns) < 0.5
    shares[:, patterned] = rng.random((clusters, columns))[cluster][:, patterned] > 0.5
    noise = 10.0 ** rng.uniform(-6, -1)
    log_duration = 8 + rng.normal(0, noise, n) + 10 * noise * shares.sum(axis=1)
    fit = Fit(Samples(log_duration, key, cluster, shares))
    draws = np.vstack([np.ones(fit.clusters), rng.multinomial(
        fit.clusters, np.full(fit.clusters, 1 / fit.clusters), size=20)]).astype(float)
    _, cluster_id = np.unique(cluster, return_inverse=True)
    for column in range(columns):
        found = fit.gammas(draws, [column])[0]
        for drawn, gamma in zip(draws, found, strict=True):
            expected = _reference_gamma(log_duration, key, cluster, shares,
                                        drawn[cluster_id], column)
            if expected is None:
                assert np.isnan(gamma)
            else:
                assert gamma == pytest.approx(expected, rel=1e-6, abs=1e-6)


@settings(max_examples=15, deadline=None)
@given(taxed_samples(), st.integers(0, 2**32 - 1))
def test_the_figures_do_not_depend_on_the_number_of_threads(case, seed):
    """The rows are fitted on several threads, each with a one-threaded BLAS: one thread or
    four give the same figures to the last bit (noise added, so that every row's fit has
    work to do)."""
    import ddpprof.metrics.tax as tax_module

    ops, spans, _, _ = case
    rng = np.random.default_rng(seed)
    noisy = [(key, k, start, end + rng.uniform(0, 5)) for key, k, start, end in ops]
    found = []
    for threads in (1, 4):
        tax_module._THREADS = threads
        try:
            found.append(overlap_tax([rank(noisy, spans, compute=[])]))
        finally:
            tax_module._THREADS = tax_module.default_threads()
    assert found[0] == found[1]


def test_the_command_line_loads_blas_with_one_thread():
    """Each command imports numpy with OpenBLAS held to one thread (its idle threads would
    spin on a core the decoders and the analysis use), leaves OPENBLAS_NUM_THREADS as it found
    it for the processes it starts, and respects a count the user set."""
    import subprocess
    import sys

    script = ("import os, threadpoolctl\n"
              "from ddpprof.core.processes import import_numpy_with_one_blas_thread\n"
              "import_numpy_with_one_blas_thread()\n"
              "import numpy\n"
              "blas = [i['num_threads'] for i in threadpoolctl.threadpool_info()\n"
              "        if i['internal_api'] == 'openblas']\n"
              "print(blas, os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENBLAS_NUM_THREADS"}
    ours = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, check=True).stdout.split(maxsplit=1)
    theirs = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={**env, "OPENBLAS_NUM_THREADS": "2"}, check=True).stdout
    assert ours == ["[1]", "None\n"]
    assert theirs == "[2] 2\n"
