"""``run.json``: version 3 stores the run's ``RunConfig`` itself; version 1 and 2 files (a
recorded one is kept in ``fixtures/ddpprof-h100``) are read into the same form."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgspec
import pytest

from ddpprof.core.atomic import json_text
from ddpprof.core.errors import UsageError
from ddpprof.run.config import RunConfig, encode_hook
from ddpprof.run.manifest import (
    SCHEMA_VERSION,
    RunManifest,
    RunMeasurements,
    manifest_from_json,
    read_manifest,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ddpprof-h100"


def _written(manifest: RunManifest, path: Path) -> Path:
    """As the launcher writes it."""
    path.write_text(json_text(msgspec.to_builtins(manifest, enc_hook=encode_hook)))
    return path


def test_a_version_2_manifest_reads_into_the_run_config():
    manifest = read_manifest(FIXTURES / "pytorch_ddp" / "run.json")
    assert manifest.schema_version == 2 and manifest.status == "complete"
    assert manifest.config == RunConfig(
        variant="pytorch_ddp", model="mlp-small", model_path=None, data=None, nproc=1,
        steps=8, global_batch=1024, grad_accum=1, bucket_cap_mib=25.0,
        gradient_as_bucket_view=False, backend="nccl", wait=1, warmup=2, active=3, nnodes=1,
        lr=0.001, seed=0, timeout_s=300.0, profile=True)
    assert manifest.config.world_size == 1
    assert manifest.measured == RunMeasurements(
        parameters=1462538, world_size=1, devices=["NVIDIA H100 80GB HBM3"],
        threads_per_rank=16, torch_version="2.11.0+cu130",
        collectives_per_sync={"all_reduce": 1}, seq_len=None)
    assert manifest.measured.allreduces_per_sync == 1
    assert RunMeasurements(collectives_per_sync={"reduce_scatter": 2}).allreduces_per_sync == 0
    assert RunMeasurements().allreduces_per_sync is None


def test_version_2_renames_are_mapped():
    manifest = manifest_from_json({"schema_version": 2, "config": {
        "variant": "zero1", "world_size": 4, "nnodes": 2, "data": "/data/a.jsonl",
        "model_path": "/ckpt", "seq_len": 64, "profiler": None, "allreduces_per_sync": 3}},
        "run.json")
    config = manifest.config
    assert (config.nproc, config.nnodes, config.world_size) == (2, 2, 4)
    assert (config.data, config.model_path) == (Path("/data/a.jsonl"), Path("/ckpt"))
    assert config.seq_len == 64 and not config.profile
    assert manifest.measured.collectives_per_sync == {"all_reduce": 3}
    # without a variant it is not a run's configuration; what was measured is kept
    bare = manifest_from_json({"config": {"world_size": 3, "parameters": 10}}, "run.json")
    assert bare.config is None and bare.measured.parameters == 10
    assert manifest_from_json({"status": "complete"}, "run.json").config is None


def test_version_4_stores_the_run_config_itself(tmp_path):
    config = RunConfig(variant="zero2", model="mlp-tiny", model_path=Path("/ckpt"), nproc=3,
                       grad_accum=1, backend="gloo", bucket_cap_mib=0.5)
    manifest = RunManifest(schema_version=SCHEMA_VERSION, status="complete", config=config,
                           measured=RunMeasurements(parameters=7, world_size=3))
    path = _written(manifest, tmp_path / "run.json")
    written = json.loads(path.read_text())
    assert SCHEMA_VERSION == written["schema_version"] == 4
    assert written["config"]["bucket_cap_mib"] == 0.5 and "bucket_cap_mb" not in written["config"]
    # every field of RunConfig, under its own name, and nothing else
    assert written["config"] == json.loads(config.to_json())
    assert set(written["config"]) == {f.name for f in dataclasses.fields(RunConfig)}
    assert read_manifest(path) == manifest


def test_a_partial_version_3_config_takes_the_defaults_and_writes_them(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema_version": 3, "config": {"variant": "zero1"}}))
    manifest = read_manifest(path)
    assert manifest.config == RunConfig(variant="zero1")
    again = json.loads(_written(manifest, tmp_path / "again.json").read_text())
    assert again["config"] == json.loads(RunConfig(variant="zero1").to_json())


def test_a_version_3_config_s_bucket_cap_mb_reads_as_bucket_cap_mib(tmp_path):
    """Version 3 named the cap ``bucket_cap_mb`` (MiB, as PyTorch's parameter): it reads into
    ``bucket_cap_mib``, and a document that gives both names is read by today's."""
    old = manifest_from_json({"schema_version": 3, "config": {
        "variant": "pytorch_ddp", "bucket_cap_mb": 5.0}}, "run.json")
    assert old.config == RunConfig(variant="pytorch_ddp", bucket_cap_mib=5.0)
    both = manifest_from_json({"schema_version": 4, "config": {
        "variant": "pytorch_ddp", "bucket_cap_mb": 5.0, "bucket_cap_mib": 2.0}}, "run.json")
    assert both.config is not None and both.config.bucket_cap_mib == 2.0
    assert RunConfig.from_json(b'{"variant": "zero1", "bucket_cap_mb": 3.0}').bucket_cap_mib == 3.0
    with pytest.raises(UsageError, match=r"^run.json: config.bucket_cap_mib: .* not > 0"):
        manifest_from_json({"schema_version": 3, "config": {"variant": "zero1",
                                                            "bucket_cap_mb": -1}}, "run.json")


@pytest.mark.parametrize(("document", "problem"), [
    ({"schema_version": 3, "config": {"steps": "eight"}}, "config.steps: expected int"),
    ({"schema_version": 3, "config": {"variant": 1}}, "config.variant: expected str"),
    ({"schema_version": 3, "measured": {"parameters": "many"}},
     "measured.parameters: expected int"),
    ({"schema_version": 2, "config": {"nproc_per_node": "two"}},
     "config.nproc_per_node: expected int"),
])
def test_a_field_of_the_wrong_type_names_the_field(document, problem):
    with pytest.raises(UsageError, match=f"^run.json: {problem}"):
        manifest_from_json(document, "run.json")
