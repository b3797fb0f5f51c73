from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: pytest-xdist's workers set COLUMNS=80 and LINES=24 in their environment: the CLI, as CI runs
#: it (output to a pipe, no terminal), sees neither; a test that wants a width says so.
_TERMINAL = ("COLUMNS", "LINES")


@pytest.fixture(autouse=True)
def _no_inherited_terminal_size(monkeypatch):
    for name in _TERMINAL:
        monkeypatch.delenv(name, raising=False)


def run_ddpprof(*args: str, cwd: Path | None = None, env: dict | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a separate process, output captured."""
    return subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], cwd=cwd,
                          env={**{k: v for k, v in os.environ.items() if k not in _TERMINAL},
                               "CI": "true", **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def ddpprof_cli():
    return run_ddpprof


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``, as scripts/test.sh runs it), the tests that
    share one of our fixtures wider than a test run on one worker, so that the fixture (a
    recording, a cluster, an S3 server) is made once, not once per worker. tryfirst: xdist's
    worker reads the groups in its own pytest_collection_modifyitems, which pluggy would
    otherwise call first, finding none (then every worker made every such fixture)."""
    tests = REPO / "tests"
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        group = None
        for name in info.names_closure:
            definitions = info.name2fixturedefs.get(name)
            if not definitions or definitions[-1].scope not in ("session", "module"):
                continue
            source = Path(definitions[-1].func.__code__.co_filename)
            if tests not in source.parents:
                continue            # pytest's own (tmp_path_factory...): cheap, shared
            if definitions[-1].scope == "session":
                group = name
                break
            group = group or item.module.__name__
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A grouped test whose group did not reach xdist's scheduler fails before its fixtures
    are made: else each worker would make every shared fixture (minutes of recordings twice),
    silently. xdist marks a grouped test by an ``@group`` suffix of its node id, which pytest
    9.2 no longer keeps (setup.cfg holds pytest below it)."""
    if (os.environ.get("PYTEST_XDIST_WORKER") and item.config.getoption("loadgroup", False)
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid):
        pytest.fail("--dist loadgroup lost this test's group (tests/conftest.py)",
                    pytrace=False)


SCHEDULE = ["--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2"]


@pytest.fixture(scope="session")
def all_variants(tmp_path_factory):
    """Every variant recorded once (2 gloo ranks, mlp-small, 1 MiB buckets so that bucketed
    variants have several buckets to overlap), shared by the record and analyze tests."""
    out = tmp_path_factory.mktemp("traces")
    result = run_ddpprof("record", "--variant", "all", "--model", "mlp-small", "--nproc", "2",
                         "--global-batch", "64", "--bucket-cap-mb", "1", *SCHEDULE,
                         "--out", str(out), "--json", str(out / "summary.json"), "--markdown", "-",
                         # eleven launches; a safety net for a hang, not a measure of speed
                         timeout=1200)
    return out, result
