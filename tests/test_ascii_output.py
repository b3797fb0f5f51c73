"""Every command writes to a terminal that cannot encode its rules, arrows and µ
(``PYTHONIOENCODING=ascii``, a C or Latin-1 locale): what the stream's encoding lacks is
written as ASCII that reads the same (``ddpprof/render/ascii.py``), never a
``UnicodeEncodeError`` (the code before ended ``analyze``, ``gate``, ``diff`` and
``critical-path`` so). Each command runs here in this process, its standard streams made
ASCII ones."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile_inputs import GIVEN_COST
from test_hostile_outputs import two_rank_run

from ddpprof.core import atomic
from ddpprof.render.ascii import to_ascii

FIXTURES = Path(__file__).parent / "fixtures"
COMMANDS = ["analyze", "gate", "diff", "critical-path", "simulate", "memory", "variants",
            "record", "calibrate", "bench", "sweep"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("ascii")
    run = two_rank_run(folder / "run")
    from ddpprof.cli import main

    main(["analyze", str(run), "--json", str(folder / "a.json"), "--quiet"])
    return {"run": str(run), "doc": str(folder / "a.json")}


def _ascii_run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    """``ddpprof ARGS`` with standard output and error that encode ASCII only (strictly)."""
    from ddpprof.cli import main

    streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict",
                                      write_through=True) for name in ("stdout", "stderr")}
    for name, stream in streams.items():
        monkeypatch.setattr(sys, name, stream)
    code = 0
    try:
        main(list(args))
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    finally:
        atomic._INPUTS.clear()
    texts = []
    for stream in streams.values():
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("ascii"))   # type: ignore[attr-defined]
    return code, texts[0], texts[1]


def _argv(command: str, inputs: dict[str, str]) -> list[str]:
    run, doc = inputs["run"], inputs["doc"]
    return {"analyze": ["analyze", run], "gate": ["gate", run, "--baseline", doc],
            "diff": ["diff", doc, run], "critical-path": ["critical-path", run],
            "simulate": ["simulate", run, *GIVEN_COST], "memory": ["memory", run],
            "variants": ["variants"],
            # the commands that launch torchrun: their errors and help, which are ASCII-safe
            # the same way (no recording here)
            "record": ["record", "--nproc", "٣"], "calibrate": ["calibrate", "--iters", "²"],
            "bench": ["bench", "--model", "mlp-small", "--nproc", "٣"],
            "sweep": ["sweep", "--bucket-cap-mib", "µ"]}[command]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_writes_ascii_where_the_terminal_has_nothing_else(command, inputs,
                                                                        monkeypatch):
    code, out, err = _ascii_run(monkeypatch, *_argv(command, inputs))
    assert "Traceback" not in err and "UnicodeEncodeError" not in err, err
    assert code in (0, 1, 2), (code, err)
    assert out or err
    code, out, err = _ascii_run(monkeypatch, command, "--help")
    assert code == 0 and "Usage" in out, err


def test_rules_arrows_and_units_read_the_same_in_ascii():
    assert to_ascii("──→ 5 µs ≥ 2 × 3…") == "---> 5 us >= 2 x 3..."
    assert to_ascii("café ┃ ┏━┓") == "cafe | +-+"


def test_a_real_ascii_terminal(inputs):
    """The same through a real process under ``PYTHONIOENCODING=ascii``."""
    result = subprocess.run([sys.executable, "-m", "ddpprof.cli", "critical-path",
                             inputs["run"]], capture_output=True, timeout=120,
                            env={"PYTHONIOENCODING": "ascii", "CI": "true",
                                 "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    result.stdout.decode("ascii")
    assert b"---" in result.stdout
