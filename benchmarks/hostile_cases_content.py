"""Hostile content: traces, run manifests, gate baselines, ``--measured`` and ``--calibration``
files that are empty, cut short, nested without end, or hold numbers JSON can write but
nothing can use (NaN, Infinity, 1e400, a 400-digit integer, a negative duration), duplicate
keys, and values of the wrong type. Each is used or refused in one line, exit 2. See
``hostile_campaign.py``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hostile_campaign import Attempt, Case
from hostile_cases_reads import RUN_READERS, fill
from hostile_workspace import span, trace

BIG_INT = "9" * 400
DEEP = 200_000


def _event(**fields: object) -> str:
    return json.dumps({**span("aten::mm", 100, 10), **fields})


def _with_event(text: str) -> str:
    """rank1's trace with the JSON ``text`` as one more event."""
    body = json.dumps(trace(1))
    return body.replace('"traceEvents": [', '"traceEvents": [' + text + ",", 1)


#: What a trace may hold instead of a good one (JSON text, or bytes).
TRACES: dict[str, str | bytes] = {
    "empty": "", "blank": " \n\t ", "bom-only": b"\xef\xbb\xbf", "null": "null", "array": "[]",
    "object": "{}", "string": '"traceEvents"', "events-null": '{"traceEvents": null}',
    "events-object": '{"traceEvents": {}}', "events-numbers": '{"traceEvents": [1, "a", null]}',
    "zero-events": '{"traceEvents": [], "distributedInfo": {"rank": 1, "world_size": 2}}',
    "deep-arrays": "[" * DEEP + "]" * DEEP,
    "deep-in-args": _with_event(json.dumps(span("aten::x", 1, 1))[:-1] + ', "z": '
                                + "[" * DEEP + "]" * DEEP + "}"),
    "deep-objects": '{"a":' * DEEP + "1" + "}" * DEEP,
    "truncated": json.dumps(trace(1))[:-300], "not-utf8": b'{"traceEvents": [{"name": "\xff\xfe"'
                                                         b', "ph": "X", "ts": 1, "dur": 1}]}',
    "nul-bytes": "\x00" * 1000, "nan-ts": _with_event(_event(ts=0).replace('"ts": 0', '"ts": NaN')),
    "infinity-dur": _with_event(_event(dur=0).replace('"dur": 0', '"dur": Infinity')),
    "minus-infinity-ts": _with_event(_event(ts=0).replace('"ts": 0', '"ts": -Infinity')),
    "1e400-ts": _with_event(_event(ts=0).replace('"ts": 0', '"ts": 1e400')),
    "bigint-ts": _with_event(_event(ts=0).replace('"ts": 0', f'"ts": {BIG_INT}')),
    "bigint-dur": _with_event(_event(dur=0).replace('"dur": 0', f'"dur": {BIG_INT}')),
    "negative-dur": _with_event(_event(dur=-500)), "huge-dur": _with_event(_event(dur=1e308)),
    "huge-negative-ts": _with_event(_event(ts=-1e300)),
    "duplicate-keys": _with_event('{"ph": "X", "name": "aten::mm", "ts": 1, "ts": "x", '
                                  '"dur": 5, "dur": null, "pid": 1, "tid": 1}'),
    "string-ts": _with_event(_event(ts="12")), "name-number": _with_event(_event(name=5)),
    "args-list": _with_event(_event(args=[1, 2])), "tid-object": _with_event(_event(tid={})),
    "pid-bigint": _with_event(_event(pid=0).replace('"pid": 0', f'"pid": {BIG_INT}')),
    "step-negative": _with_event(json.dumps(span("ProfilerStep#-1", 50, 10,
                                                 cat="user_annotation"))),
    "step-bigint": _with_event(json.dumps(span(f"ProfilerStep#{BIG_INT}", 50, 10,
                                               cat="user_annotation"))),
    "step-nan-dur": _with_event(json.dumps(span("ProfilerStep#9", 50, 0, cat="user_annotation"
                                                )).replace('"dur": 0', '"dur": NaN')),
    "rank-out-of-world": json.dumps({**trace(1), "distributedInfo": {"rank": 5,
                                                                     "world_size": 2}}),
    "rank-negative": json.dumps({**trace(1), "distributedInfo": {"rank": -1, "world_size": 2}}),
    "rank-string": json.dumps({**trace(1), "distributedInfo": {"rank": "1", "world_size": 2}}),
    "rank-bigint": json.dumps(trace(1)).replace('"rank": 1', f'"rank": {BIG_INT}'),
    "rank-nan": json.dumps(trace(1)).replace('"rank": 1', '"rank": NaN'),
    "world-zero": json.dumps({**trace(1), "distributedInfo": {"rank": 1, "world_size": 0}}),
    "world-billion": json.dumps({**trace(1), "distributedInfo": {"rank": 1,
                                                                 "world_size": 10**9}}),
    "world-mixed": json.dumps({**trace(1), "distributedInfo": {"rank": 1, "world_size": 4}}),
    "rank-duplicate": json.dumps(trace(0)), "info-null": json.dumps({**trace(1),
                                                                     "distributedInfo": None}),
    "trailing-garbage": json.dumps(trace(1)) + "}]garbage",
    "two-documents": json.dumps(trace(1)) + json.dumps(trace(1)),
}


def _strict_json(*names: str):
    """Outputs that must be standard JSON when the command succeeded."""
    def check(folder: Path, result: subprocess.CompletedProcess) -> str | None:
        if result.returncode != 0:
            return None
        for name in names:
            path = folder / name
            if not path.is_file():
                return f"{name} was not written"
            try:
                json.loads(path.read_text(), parse_constant=_refuse_constant)
            except ValueError as error:
                return f"{name} is not standard JSON ({error})"
        return None
    return check


def _refuse_constant(name: str) -> None:
    raise ValueError(f"holds {name}")


def _write(path: Path, content: str | bytes) -> None:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


def trace_cases() -> list[Case]:
    cases = []
    for name, content in TRACES.items():
        for command in ("analyze", "critical-path", "simulate"):
            argv = RUN_READERS[command]
            cases.append(Case(f"{command}-trace-{name}", "malformed-trace",
                              lambda d, a=argv, c=content: _trace_attempt(d, a, c)))
        cases.append(Case(f"analyze-named-trace-{name}", "malformed-trace",
                          lambda d, c=content: _named_attempt(d, c)))
    for name in ("deep-arrays", "nan-ts", "bigint-ts", "negative-dur", "rank-duplicate",
                 "world-mixed", "truncated", "zero-events"):
        for command in ("gate", "diff", "memory"):
            cases.append(Case(f"{command}-trace-{name}", "malformed-trace",
                              lambda d, a=RUN_READERS[command], c=TRACES[name]: _trace_attempt(
                                  d, a, c)))
    return cases


def _trace_attempt(folder: Path, argv: list[str], content: str | bytes) -> Attempt:
    _write(folder / "run" / "rank1.json", content)
    return Attempt([*fill(argv, run="run"), "--json", "out.json"], codes=(0, 2), one_line=True,
                   check=_strict_json("out.json"), timeout_s=60)


def _named_attempt(folder: Path, content: str | bytes) -> Attempt:
    _write(folder / "t.json", content)
    return Attempt(["analyze", "t.json", "--json", "out.json"], codes=(0, 2), one_line=True,
                   check=_strict_json("out.json"))


def _edited(path: Path, edit) -> str:
    data = json.loads(path.read_text())
    result = edit(data)
    return result if isinstance(result, str) else json.dumps(data)


MANIFESTS = {
    "status-number": lambda m: m.update(status=5), "status-unknown": lambda m: m.update(
        status="complete-ish"), "status-null": lambda m: m.update(status=None),
    "config-list": lambda m: m.update(config=[1]), "world-billion": lambda m: m["config"].update(
        world_size=10**9), "world-negative": lambda m: m["config"].update(world_size=-2),
    "world-nan": lambda m: json.dumps(m).replace('"world_size": 2', '"world_size": NaN'),
    "cap-bigint": lambda m: json.dumps(m).replace('"bucket_cap_mb": 25.0',
                                                  f'"bucket_cap_mb": {BIG_INT}'),
    "cap-1e400": lambda m: json.dumps(m).replace('"bucket_cap_mb": 25.0', '"bucket_cap_mb": 1e400'),
    "cap-negative": lambda m: m["config"].update(bucket_cap_mb=-25),
    "cap-zero": lambda m: m["config"].update(bucket_cap_mb=0),
    "schema-future": lambda m: m.update(schema_version=999),
    "schema-bigint": lambda m: json.dumps(m).replace('"schema_version": 3',
                                                     f'"schema_version": {BIG_INT}'),
    "duplicate-status": lambda m: json.dumps(m).replace('"status": "complete"',
                                                        '"status": "failed", "status": "complete"'),
    "deep": lambda m: '{"a":' * DEEP + "1" + "}" * DEEP, "empty": lambda m: "",
    "not-object": lambda m: "[1, 2]", "variant-number": lambda m: m["config"].update(variant=7),
    "grad-accum-zero": lambda m: m["config"].update(grad_accum=0),
    "global-batch-bigint": lambda m: json.dumps(m).replace('"global_batch": 64',
                                                           f'"global_batch": {BIG_INT}'),
}
BASELINES = {
    "nan-metric": lambda a: json.dumps(a).replace('"overlap_pct": ', '"overlap_pct": NaN, "x": ',
                                                  1),
    "bigint-metric": lambda a: json.dumps(a).replace('"step_ms": ', f'"step_ms": {BIG_INT}, "x": ',
                                                    1),
    "1e400-metric": lambda a: json.dumps(a).replace('"step_ms": ', '"step_ms": 1e400, "x": ', 1),
    "negative-step": lambda a: json.dumps(a).replace('"step_ms": ', '"step_ms": -5, "x": ', 1),
    "runs-empty": lambda a: a.update(runs=[]), "runs-null": lambda a: a.update(runs=None),
    "runs-numbers": lambda a: a.update(runs=[1, 2]),
    "runs-duplicate-names": lambda a: a.update(runs=[a["runs"][0], a["runs"][0]]),
    "schema-wrong": lambda a: a.update(schema="something.else"),
    "version-future": lambda a: a.update(version=999),
    "version-bigint": lambda a: json.dumps(a).replace('"version": ', f'"version": {BIG_INT}, "y": ',
                                                      1),
    "deep": lambda a: "[" * DEEP + "]" * DEEP, "empty": lambda a: "",
    "duplicate-keys": lambda a: json.dumps(a).replace('"runs": ', '"runs": [], "runs": ', 1),
    "unfinished-bogus": lambda a: a.update(unfinished=[{"run": 5}]),
    "name-null": lambda a: a["runs"][0].update(run=None),
}
MEASURED = {
    "rows-null": '{"schema": "ddpprof.sweep", "rows": null}',
    "rows-numbers": '{"schema": "ddpprof.sweep", "rows": [1, 2]}',
    "cap-string": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                  '"bucket_cap_mib": "25", "step_ms": 1}]}',
    "step-nan": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                '"bucket_cap_mib": 25, "step_ms": NaN}]}',
    "step-negative": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                     '"bucket_cap_mib": 25, "step_ms": -1}]}',
    "step-bigint": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                   f'"bucket_cap_mib": 25, "step_ms": {BIG_INT}}}]}}',
    "cap-1e400": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                 '"bucket_cap_mib": 1e400, "step_ms": 1}]}',
    "cap-zero": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                '"bucket_cap_mib": 0, "step_ms": 1}]}',
    "variant-number": '{"schema": "ddpprof.sweep", "rows": [{"variant": 5, "step_ms": 1}]}',
    "no-schema": '{"rows": []}', "schema-number": '{"schema": 1, "rows": []}',
    "no-usable-rows": '{"schema": "ddpprof.sweep", "rows": [{"variant": "other", "step_ms": 1}]}',
    "duplicate-caps": '{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
                      '"bucket_cap_mib": 25, "step_ms": 1}, {"variant": "bucket_ddp_async", '
                      '"bucket_cap_mib": 25, "step_ms": 9}]}',
    "deep": "[" * DEEP + "]" * DEEP, "empty": "", "array": "[]",
}
CALIBRATIONS = {
    "alpha-nan": '"alpha_us": NaN', "beta-zero": '"beta_busbw_gbps": 0',
    "beta-negative": '"beta_busbw_gbps": -1', "beta-1e400": '"beta_busbw_gbps": 1e400',
    "alpha-bigint": f'"alpha_us": {BIG_INT}', "alpha-negative": '"alpha_us": -50',
    "r2-string": '"r2": "x"', "world-zero": '"world_size": 0',
    "world-bigint": f'"world_size": {BIG_INT}', "status-missing": '"status": null',
    "points-bogus": '"points": [{"size_bytes": -1}]', "fit-null": '"fit": null',
}


def document_cases() -> list[Case]:
    cases = []
    for name, edit in MANIFESTS.items():
        for command in ("analyze", "gate", "simulate", "memory"):
            cases.append(Case(f"{command}-run-json-{name}", "malformed-manifest",
                              lambda d, c=command, e=edit: _manifest_attempt(d, c, e)))
    for name, edit in BASELINES.items():
        for position in ("baseline", "current", "diff"):
            cases.append(Case(f"gate-{position}-{name}", "malformed-baseline",
                              lambda d, p=position, e=edit: _baseline_attempt(d, p, e)))
    for name, text in MEASURED.items():
        cases.append(Case(f"simulate-measured-{name}", "malformed-measured",
                          lambda d, t=text: _input_attempt(d, "sweep.json", t, [
                              "simulate", "run", "--latency-us", "10", "--bandwidth-gbps", "1",
                              "--measured", "sweep.json"])))
    for name, field in CALIBRATIONS.items():
        cases.append(Case(f"simulate-calibration-{name}", "malformed-calibration",
                          lambda d, f=field: _input_attempt(
                              d, "calibration.json", _calibration(d, f),
                              ["simulate", "run", "--calibration", "calibration.json"])))
    return cases


def _manifest_attempt(folder: Path, command: str, edit) -> Attempt:
    (folder / "run/run.json").write_text(_edited(folder / "run/run.json",
                                                 lambda m: edit(m)))
    argv = fill(RUN_READERS[command], run="run")
    return Attempt([*argv, "--json", "out.json"], codes=(0, 2), one_line=command != "analyze",
                   check=_strict_json("out.json"))


def _baseline_attempt(folder: Path, position: str, edit) -> Attempt:
    (folder / "bad.json").write_text(_edited(folder / "analysis.json", lambda a: edit(a)))
    argv = {"baseline": ["gate", "run", "--baseline", "bad.json"],
            "current": ["gate", "bad.json", "--baseline", "analysis.json"],
            "diff": ["diff", "bad.json", "run2"]}[position]
    return Attempt([*argv, "--json", "out.json"], codes=(0, 1, 2), one_line=True,
                   check=_strict_json("out.json"))


def _input_attempt(folder: Path, name: str, text: str, argv: list[str]) -> Attempt:
    (folder / name).write_text(text)
    return Attempt([*argv, "--json", "out.json"], codes=(0, 2), one_line=True,
                   check=_strict_json("out.json"))


def _calibration(folder: Path, field: str) -> str:
    key = field.split(":")[0]
    document = json.loads((folder / "calibration.json").read_text())
    text = json.dumps(document)
    for part in ("fit", "points", "status", "world_size"):
        if key == f'"{part}"':
            return text.replace(f'"{part}": ', f"{field}, \"old_{part}\": ", 1) if \
                f'"{part}"' in text else text[:-1] + f", {field}}}"
    return text.replace(key + ": ", f"{field}, \"old\": ", 1)


def cases() -> list[Case]:
    import hostile_cases_runs
    return [*trace_cases(), *document_cases(), *hostile_cases_runs.cases()]
