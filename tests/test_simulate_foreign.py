"""``simulate`` on traces ddpprof did not record: their own configuration replayed within 3 % of
``analyze``'s step, edits that need no cost model answered, what needs one not (in one line),
and nothing written beside the trace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddpprof.core.errors import UsageError
from ddpprof.graph.whatif import parse_edits
from ddpprof.simulate.run import simulate_run

REAL = Path(__file__).parent / "fixtures" / "real-traces"
HTA = Path(__file__).parent / "fixtures" / "hta-gpu"
FOREIGN = [HTA / "nccl-data", HTA / "two-rank", REAL / "param-dlrm-8rank-alltoall",
           REAL / "tracelens-b200-eager-ws8", REAL / "tbplugin-micro-nccl",
           REAL / "tracelens-mi300-ddp-resnet",
           REAL / "modded-nanogpt-hook-pair" / "hook"
           / "modded-nanogpt-hook-gpu-rank-00-chrome-trace.json.gz",
           REAL / "modded-nanogpt-8rank-compile"]


@pytest.mark.parametrize("path", FOREIGN, ids=lambda p: p.name[:40])
def test_a_foreign_trace_replays_its_own_configuration(path):
    """The unedited replay of every analyzed step, against ``analyze``'s step (the mean over
    ranks of the window over the steps): within 3 %."""
    simulation = simulate_run(path, [], [])
    assert simulation.measured.step_source == "the trace's analyzed steps"
    assert simulation.own is not None
    assert simulation.own.step_ms == pytest.approx(simulation.measured.step_ms, rel=0.03)


def test_edits_are_answered_without_a_cost_model():
    """The all-to-all job's collectives record no message sizes: no cost model, so no other
    world size, said once; its own configuration and a 50 % faster network are answered, the
    faster network shortening the step (its collectives wait less)."""
    path = REAL / "param-dlrm-8rank-alltoall"
    plain = simulate_run(path, [], [2, 4])
    assert [p.world_size for p in plain.predictions] == [8]
    assert any(n.startswith("other world sizes and bucket caps: not predicted: no cost model: "
                            "the trace's collectives record no message sizes")
               for n in plain.notes)
    faster = simulate_run(path, [], [], edits=parse_edits([], ["50"], []))
    assert faster.own is not None and plain.own is not None
    assert faster.own.step_ms <= plain.own.step_ms


def test_a_bucket_cap_needs_a_bucketed_variant():
    simulation = simulate_run(REAL / "tracelens-mi300-ddp-resnet", [1.0, 25.0], [])
    assert any(n.startswith("--bucket-cap-mib: not applied") for n in simulation.notes)
    assert {p.bucket_cap_mib for p in simulation.predictions} == {None}


def test_other_world_sizes_from_the_traces_own_collectives():
    """The MI300 DDP rank records its all-reduces' sizes (8 transfers of different sizes): the
    model is fitted on them, and world sizes 4 and 8 are predicted. HTA's NCCL sample records
    its 14 too, but time does not follow size there (R² 0.35): that fit predicts nothing, and
    says so."""
    simulation = simulate_run(REAL / "tracelens-mi300-ddp-resnet", [], [2, 4, 8])
    assert simulation.cost.source.startswith("fit over the run's 8 collective transfers")
    assert simulation.cost.r2 is not None and simulation.cost.r2 >= 0.5
    assert [p.world_size for p in simulation.predictions] == [2, 4, 8]
    poor = simulate_run(HTA / "nccl-data", [], [2, 4, 8])
    assert [p.world_size for p in poor.predictions] == [2]
    assert any(n.startswith("other world sizes and bucket caps: not predicted: no cost model: "
                            "the fit over the run's 14 collective transfers has R² = 0.353")
               for n in poor.notes)


def test_a_folder_of_runs_is_refused_naming_them(tmp_path):
    for name in ("a", "b"):
        shutil.copytree(REAL / "tbplugin-micro-nccl", tmp_path / name)
    with pytest.raises(UsageError, match=r"holds 2 runs \(a, b\); simulate replays one"):
        simulate_run(tmp_path, [], [])


def test_nothing_is_written_beside_the_trace(tmp_path, ddpprof_cli):
    """No calibration is measured or written: the folder holds what it held."""
    run = shutil.copytree(HTA / "nccl-data", tmp_path / "run")
    before = sorted(p.name for p in run.iterdir())
    result = ddpprof_cli("simulate", str(run), "--world-size", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in run.iterdir()) == before
