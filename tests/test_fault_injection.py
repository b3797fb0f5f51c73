"""``ddpprof record --fault``: the option's grammar and checks, the registry against the
findings it expects, and (slow) faults recorded on 2 gloo ranks: in ``run.json`` but not in
the configuration, no marker in the trace, and never read by the analysis."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workloads.faults import FAULT_KINDS, FaultError, FaultSpec, parse

REPO = Path(__file__).resolve().parent.parent


def test_fault_specs_parse_with_their_defaults():
    assert parse("slow_compute:1:3") == FaultSpec("slow_compute", 1, 3.0)
    assert parse("late_join") == FaultSpec("late_join")
    assert parse("jitter::30") == FaultSpec("jitter", None, 30.0)
    assert parse("none") == FaultSpec("none")
    # a culprit kind's rank defaults to the last rank, its amount to the kind's
    assert parse("slow_data").resolve(3).rank == 2
    assert parse("slow_data:0").resolve(2).amount == FAULT_KINDS["slow_data"].default_amount
    assert parse("jitter").resolve(4).rank is None


@pytest.mark.parametrize(("spec", "problem"), [
    ("slow_compte", "unknown fault kind 'slow_compte' (did you mean 'slow_compute'?"),
    ("gremlins", "unknown fault kind 'gremlins' (choose from none, slow_compute"),
    ("jitter:1:30", "jitter takes no rank (it concerns every rank): write jitter::AMOUNT"),
    ("late_join:x", "late_join: rank 'x' is not a rank number"),
    ("late_join:-1", "late_join: rank '-1' is not a rank number"),
    ("late_join:1:-3", "late_join: amount '-3' must be a positive number (ms)"),
    ("late_join:1:nan", "late_join: amount 'nan' must be a positive number"),
    ("late_join:1:soon", "late_join: amount 'soon' is not a number"),
    ("cpu_contention:0:1.5", "cpu_contention: amount '1.5' must be a whole number"),
    ("blocking_sync::2", "blocking_sync takes no amount"),
    ("late_join:1:2:3", "expected KIND[:RANK[:AMOUNT]]"),
])
def test_bad_fault_specs_say_what_is_wrong(spec, problem):
    with pytest.raises(FaultError) as raised:
        parse(spec)
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(FaultError, match=r"rank 2 is outside the world of 2 rank\(s\)"):
        parse("slow_compute:2").resolve(2)


def test_record_checks_faults_against_each_run_before_anything_runs(tmp_path, capsys,
                                                                    monkeypatch):
    """One line, exit 2, nothing recorded: a rank outside the world of one of the runs
    (--nproc 2,3), a fault the variant cannot take, and an unknown kind at parse time."""
    from ddpprof.cli import main

    monkeypatch.setenv("CI", "true")
    base = ["record", "--model", "mlp-tiny", "--out", str(tmp_path)]
    for extra, problem in (
            (["--variant", "pytorch_ddp", "--nproc", "2,3", "--fault", "late_join:2:5"],
             "--fault late_join: rank 2 is outside the world of 2 rank(s) (0 to 1)"),
            (["--variant", "simple_ddp", "--fault", "bucket_too_small"],
             "--fault bucket_too_small: variant 'simple_ddp' has no gradient buckets"),
            (["--variant", "zero1", "--fault", "blocking_sync"],
             "--fault blocking_sync: variant 'zero1' does not all-reduce whole gradients"),
            (["--variant", "single", "--fault", "slow_data:0"],
             "--fault slow_data: variant 'single' runs one process"),
            (["--variant", "pytorch_ddp", "--fault", "slow-data:1"],
             "did you mean 'slow_data'?")):
        with pytest.raises(SystemExit) as exited:
            main([*base, *extra])
        error = capsys.readouterr().err
        assert exited.value.code == 2 and problem in error and error.count("\n") == 1, error
    assert not any(tmp_path.iterdir())


def test_every_kind_expects_documented_findings():
    """The registry's ground truth names codes that rules emit and docs/findings.md lists,
    and the docs' table of kinds lists every kind with the same codes."""
    from ddpprof.advice import rules  # noqa: F401  (the rules' codes, below)

    sources = "".join(p.read_text() for p in [*(REPO / "ddpprof" / "advice").glob("*.py"),
                                              REPO / "ddpprof" / "hang" / "finding.py"])
    docs = (REPO / "docs" / "findings.md").read_text().split("## How well it diagnoses")[1]
    for name, kind in FAULT_KINDS.items():
        for code in kind.expected_codes:
            assert f'"{code}"' in sources, code
        row = re.search(rf"^\| [^|]*`{name}`[^|]*\|(.*)$", docs, re.M)
        assert row, f"docs/findings.md has no row for {name}"
        assert all(f"`{code}`" in row.group(1) for code in kind.expected_codes), name
    recording = (REPO / "docs" / "recording.md").read_text()
    assert all(f"| `{name}` |" in recording for name in FAULT_KINDS)


# --- recorded (slow) -----------------------------------------------------------------------

def _record(ddpprof_cli, out: Path, name: str, *faults: str) -> Path:
    args = ["record", "--variant", "pytorch_ddp", "--model", "mlp-tiny", "--nproc", "2",
            "--global-batch", "64", "--steps", "5", "--wait", "1", "--warmup", "1",
            "--active", "3", "--backend", "gloo", "--out", str(out), "--name", name, "--quiet"]
    for fault in faults:
        args += ["--fault", fault]
    result = ddpprof_cli(*args)
    assert result.returncode == 0, result.stderr
    return out / name


def _event_names(folder: Path) -> dict[int, set[str]]:
    import gzip

    names = {}
    for rank in (0, 1):
        with gzip.open(folder / f"rank{rank}.pt.trace.json.gz", "rt") as stream:
            trace = json.load(stream)
        names[rank] = {e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X"}
    return names


#: What the faults really run: tiny adds (host_bound), products (slow_compute), the blocking
#: sync's division; and what the blocking sync stops running (DDP's Reducer in backward).
FAULT_OPS = {"aten::add", "aten::mm", "aten::matmul", "aten::div_", "c10d::allreduce_"}
REDUCER_OPS = re.compile(r"reducer|DistributedDataParallel|aten::(mul|copy_|to|_to_copy|view"
                         r"|as_strided|zeros_like|empty|zero_|fill_)$")


@pytest.mark.slow
def test_faults_leave_no_marker_and_the_analysis_never_reads_them(tmp_path, ddpprof_cli):
    """A clean run, and one with every kind of fault at once: each fault in run.json, none in
    the configuration but what it changes there (the bucket cap, the batch); no event name
    but what the faults really run; the findings the same with injected_faults removed."""
    clean = _record(ddpprof_cli, tmp_path, "clean")
    kinds = ["late_join:0:5", "slow_data:1:5", "slow_compute:1:1", "cpu_contention:0:1",
             "jitter::5", "host_bound::50", "bucket_too_small", "comm_bound::2",
             "blocking_sync"]
    faulted = _record(ddpprof_cli, tmp_path, "faulted", *kinds)
    manifest = json.loads((faulted / "run.json").read_text())
    assert [f["kind"] for f in manifest["injected_faults"]] == [k.split(":")[0] for k in kinds]
    assert manifest["injected_faults"][0] == {"kind": "late_join", "rank": 0, "amount": 5.0,
                                              "unit": "ms"}
    assert manifest["injected_faults"][-1] == {"kind": "blocking_sync", "rank": None,
                                               "amount": None, "unit": None}
    config = manifest["config"]
    assert (config["bucket_cap_mib"], config["global_batch"]) == (0.01, 4)
    assert "fault" not in json.dumps(config)
    assert json.loads((clean / "run.json").read_text())["injected_faults"] is None
    clean_names, faulted_names = _event_names(clean), _event_names(faulted)
    for rank in (0, 1):
        assert faulted_names[rank] - clean_names[rank] <= FAULT_OPS
        gone = clean_names[rank] - faulted_names[rank]
        assert all(REDUCER_OPS.search(name) for name in gone), gone

    def findings_of(folder: Path) -> list[dict]:
        result = ddpprof_cli("analyze", str(folder), "--json", "-", "--quiet")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["findings"]

    before = findings_of(faulted)
    manifest.pop("injected_faults")
    (faulted / "run.json").write_text(json.dumps(manifest))
    assert findings_of(faulted) == before
