"""Beyond one machine: a real Dask cluster and an S3-compatible store, both started here on
loopback, give the same results as local files analyzed locally."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
from test_hta_parity import synthetic_gpu_run

from ddpprof.analysis import AnalysisOptions, analyze_paths, to_json_document

distributed = pytest.importorskip("distributed", reason="the cluster extra is not installed")


def _differences(a, b, where: str = "") -> list[str]:
    """Where two JSON documents differ, as paths (so a failure says what moved)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(key), b.get(key), f"{where}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"[:300]]


def _comparable(document: dict) -> dict:
    """An analyze document without the fields that name where the files were (and the
    findings: the simulator's advice is only sought for local runs)."""
    document.pop("findings", None)
    for run in document["runs"]:
        run.pop("folder")
        for rank in run["per_rank"]:
            rank.pop("path")
    return document


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    synthetic_gpu_run(root / "gpu", seed=7, ranks=3)
    (root / "gpu" / "run.json").write_text(json.dumps({
        "status": "complete", "config": {"variant": "pytorch_ddp", "world_size": 3}}))
    synthetic_gpu_run(root / "other", seed=8, ranks=2)
    return root


@pytest.fixture(scope="module")
def cluster():
    import dask

    # a task whose worker dies fails at once (the default retries it on another worker)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     host="127.0.0.1", dashboard_address=None) as local:
        yield local


def test_dask_cluster_gives_the_local_results(runs, cluster):
    local = to_json_document(analyze_paths([runs], AnalysisOptions(per_step=True)))
    remote = to_json_document(analyze_paths([runs], AnalysisOptions(
        per_step=True, scheduler=cluster.scheduler_address)))
    assert not _differences(remote, local) and len(local["runs"]) == 2


def test_dask_scheduler_from_the_environment(runs, cluster, ddpprof_cli, tmp_path):
    out = tmp_path / "a.json"
    result = ddpprof_cli("analyze", str(runs / "gpu"), "--json", str(out),
                         env={"DDPPROF_SCHEDULER": cluster.scheduler_address})
    assert result.returncode == 0, result.stderr
    local = to_json_document(analyze_paths([runs / "gpu"]))
    assert json.loads(out.read_text())["runs"][0]["compute_pct"] == pytest.approx(
        local["runs"][0]["compute_pct"])


def test_a_worker_that_dies_is_an_error_naming_the_rank(runs, cluster):
    import cloudpickle

    client = distributed.Client(cluster.scheduler_address)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        client.run(_kill_worker_on_rank1)
        analysis = analyze_paths([runs / "gpu"], AnalysisOptions(
            scheduler=cluster.scheduler_address))
    finally:
        client.run(_restore_worker)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        client.close()
    assert not analysis.runs
    [error] = analysis.errors
    assert error.error == f"{runs / 'gpu' / 'rank1.json'}: the Dask worker analyzing it died"


def _kill_worker_on_rank1() -> None:
    """Runs on each worker: analyzing rank 1 kills the worker process, as an OOM kill would."""
    from ddpprof.analysis import runs as module

    original = module._load_and_analyze

    def dying(path, *args, **kwargs):
        if str(path).endswith("rank1.json"):
            os._exit(1)
        return original(path, *args, **kwargs)

    dying.original = original
    module._load_and_analyze = dying


def _restore_worker() -> None:
    from ddpprof.analysis import runs as module

    module._load_and_analyze = getattr(module._load_and_analyze, "original",
                                       module._load_and_analyze)


def test_unreachable_scheduler_is_one_line(ddpprof_cli, runs):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = ddpprof_cli("analyze", str(runs / "gpu"), "--scheduler", f"tcp://127.0.0.1:{port}",
                         timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--scheduler tcp://127.0.0.1:{port}: cannot reach the Dask scheduler" in (
        result.stderr)


# ---- object storage -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3(runs):
    """moto's S3 server on loopback, as s3fs's own tests use it, holding the runs."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test extra")
    boto3 = pytest.importorskip("boto3")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    bucket = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket.create_bucket(Bucket="traces")
    for path in runs.rglob("*"):
        if path.is_file():
            bucket.upload_file(str(path), "traces", f"job/{path.relative_to(runs)}")
    yield env
    server.stop()


def test_s3_bucket_gives_the_local_results(runs, s3, ddpprof_cli, tmp_path):
    out = tmp_path / "s3.json"
    result = ddpprof_cli("analyze", "s3://traces/job", "--json", str(out), "--per-step",
                         env=s3)
    assert result.returncode == 0, result.stderr
    remote = _comparable(json.loads(out.read_text()))
    local = _comparable(to_json_document(analyze_paths([runs], AnalysisOptions(
        per_step=True))))
    assert not _differences(remote, local)
    assert [run["run"] for run in remote["runs"]] == ["gpu", "other"]
    assert remote["runs"][0]["variant"] == "pytorch_ddp"   # run.json read from the bucket


def test_s3_single_trace_and_missing_key(s3, ddpprof_cli):
    one = ddpprof_cli("analyze", "s3://traces/job/gpu/rank2.json", env=s3)
    assert one.returncode == 0, one.stderr
    missing = ddpprof_cli("analyze", "s3://traces/job/nothing-here", env=s3)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "s3://traces/job/nothing-here: no such file or folder" in missing.stderr
