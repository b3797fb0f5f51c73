"""``run.json``'s ``buckets``: which parameters each gradient collective carried, as recorded.

The session's ``all_variants`` recording (mlp-small: 784 -> 1024 -> 512 -> 256 -> 10, fp32,
1 MiB = 1,048,576-byte buckets) is read back. By hand, in reverse registration order:
6.bias 40 B, 6.weight 10,240, 4.bias 1,024, 4.weight 524,288, 2.bias 2,048 (running total
537,640 < 1 MiB), 2.weight 2,097,152 (2,634,792: the first bucket closes), then 0.bias 4,096
and 0.weight 3,211,264 (3,215,360: the second).
"""

from __future__ import annotations

import pytest

from ddpprof.run.manifest import read_manifest

pytestmark = pytest.mark.slow

SIZES = {"0.weight": 3_211_264, "0.bias": 4_096, "2.weight": 2_097_152, "2.bias": 2_048,
         "4.weight": 524_288, "4.bias": 1_024, "6.weight": 10_240, "6.bias": 40}
REGISTRATION = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias", "6.weight",
                "6.bias"]
READY = ["6.bias", "6.weight", "4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"]
TWO_BUCKETS = [READY[:6], READY[6:]]
PER_PARAMETER_IN_REGISTRATION_ORDER = [[name] for name in REGISTRATION]
EXPECTED = {
    "single": None,
    "simple_ddp": PER_PARAMETER_IN_REGISTRATION_ORDER,
    "simple_ddp_ga": PER_PARAMETER_IN_REGISTRATION_ORDER,
    # the hooks fire in autograd's order, each bias before its weight
    "simple_ddp_hook": [[name] for name in READY],
    "simple_ddp_async": [[name] for name in READY],
    "bucket_ddp_async": TWO_BUCKETS,
    "zero1": TWO_BUCKETS,
    "zero2": TWO_BUCKETS,
    # the Reducer's rebuilt buckets: the same cap rule over the order gradients arrived
    "pytorch_ddp": TWO_BUCKETS,
    "pytorch_zero1": TWO_BUCKETS,
    # one reduce-scatter per Linear, last block first; FSDP keeps weight before bias
    "fsdp": [["6.weight", "6.bias"], ["4.weight", "4.bias"], ["2.weight", "2.bias"],
             ["0.weight", "0.bias"]],
}


@pytest.fixture(scope="module")
def manifests(all_variants):
    out, recorded = all_variants
    assert recorded.returncode == 0, recorded.stderr
    return {variant: read_manifest(out / variant / "run.json") for variant in EXPECTED}


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_run_json_names_each_buckets_parameters(manifests, variant):
    buckets = manifests[variant].buckets
    expected = EXPECTED[variant]
    if expected is None:
        assert buckets is None
        return
    assert [b.params for b in buckets] == expected
    for bucket in buckets:
        assert bucket.param_bytes == [SIZES[name] for name in bucket.params]
        assert bucket.bytes == sum(SIZES[name] for name in bucket.params)
        assert bucket.param_index == [REGISTRATION.index(name) for name in bucket.params]
    if expected is TWO_BUCKETS:
        assert [b.bytes for b in buckets] == [2_634_792, 3_215_360]


def test_analyze_puts_the_recorded_names_on_the_bucket_rows(all_variants):
    from ddpprof.analysis import analyze_paths

    out, _ = all_variants
    run = analyze_paths([out / "bucket_ddp_async"]).runs[0]
    rows = run.ranks[0].buckets.buckets
    assert [row.params for row in rows] == TWO_BUCKETS
    assert [row.gradients for row in rows] == [6, 2]
