"""Bad input to ``ddpprof record``: one line naming the problem, exit 2, no traceback, no run."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

CASES = {
    "unknown variant": (["--variant", "simple_ddp,fancy_ddp"],
                        "Invalid value for '--variant': 'fancy_ddp' is not a variant; `ddpprof "
                        "variants` lists them"),
    "empty variant list": (["--variant", ""], "Invalid value for '--variant': '': expected"),
    "empty model list": (["--model", ","], "Invalid value for '--model': ',': expected"),
    "control character in a name": (["--name", "a\nb"], "must not hold control characters"),
    "unknown model": (["--model", "gpt-9"], "unknown model 'gpt-9'"),
    "batch not divisible": (["--global-batch", "100", "--nproc", "3"],
                            "not divisible by world size 3 x grad-accum 1"),
    "batch not divisible with accumulation": (
        ["--variant", "simple_ddp_ga", "--global-batch", "6"],
        "not divisible by world size 2 x grad-accum 2"),
    "nccl ranks without GPUs": (["--backend", "nccl", "--nproc", "2"],
                                "--backend nccl needs one GPU per rank"),
    "window longer than the run": (["--steps", "3"], "does not fit in --steps 3"),
    "non-positive bucket": (["--bucket-cap-mib", "0"],
                            "Invalid value for '--bucket-cap-mib': '0' is not > 0"),
    "non-positive bucket, old spelling": (["--bucket-cap-mb", "1,0"],
                                          "Invalid value for '--bucket-cap-mib': '0' is not > 0"),
    "bad option value": (["--nproc", "two"],
                         "Invalid value for '--nproc': 'two' is not a whole number (digits 0-9)"),
    "missing data file": (["--data", "nowhere.jsonl"], "nowhere.jsonl: no such data file"),
    "not a checkpoint": (["--model-path", "."], "not a Hugging Face checkpoint folder"),
    "sequence longer than the model": (["--model", "smollm2-tiny", "--seq-len", "4096"],
                                       "longer than smollm2-tiny's 512 positions"),
    "single across nodes": (["--variant", "single", "--nnodes", "2", "--rdzv-endpoint",
                             "127.0.0.1:1"], "cannot span --nnodes > 1"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, ddpprof_cli):
    args, message = CASES[case]
    result = ddpprof_cli("record", "--out", str(tmp_path / "out"), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "out").glob("*/run.json"))


def test_unwritable_output_folder(tmp_path, ddpprof_cli):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = ddpprof_cli("record", "--variant", "single", "--out", str(blocker / "traces"))
    assert result.returncode == 2
    assert result.stderr == (f"ddpprof: error: {blocker / 'traces' / 'single'}: output folder "
                             "cannot be written (Not a directory)\n")
    assert result.stderr.count("\n") == 1


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None,
                    reason="needs root to mount a small file system")
def test_a_full_disk_before_anything_is_recorded(tmp_path, ddpprof_cli):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (disk / "fill").write_bytes(b"\0" * 4096)   # nothing left
        result = ddpprof_cli("record", "--variant", "simple_ddp", "--model", "mlp-tiny",
                             "--global-batch", "16", "--out", str(disk / "out"))
        assert result.returncode == 2, result.stderr
        assert result.stderr == f"ddpprof: error: {disk / 'out'}: No space left on device\n"
    finally:
        subprocess.run(["umount", str(disk)])
