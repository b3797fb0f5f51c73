"""Each command takes one frozen options object (``<Command>Options``, beside it), built by
``ddpprof.cli`` from exactly the options its grammar parses, and the analyze document is built
once, its critical-path section a typed part of it."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import msgspec
import pytest

from ddpprof.analysis import AnalysisOptions, to_json_document
from ddpprof.cli import cli
from ddpprof.commands import options_from
from ddpprof.commands.analyze import AnalyzeOptions, analyze
from ddpprof.core.storage import location_of
from ddpprof.graph.summary import CriticalPathSection
from ddpprof.job import JobSet
from ddpprof.render.output import Outputs
from ddpprof.run.config import record_option_fields

FIXTURES = Path(__file__).parent / "fixtures"
COMMANDS = [name for name in cli.commands if name != "variants"]   # variants has no options


def _options_class(name: str) -> type:
    module = importlib.import_module(f"ddpprof.commands.{name.replace('-', '_')}")
    return getattr(module, "".join(w.title() for w in name.split("-")) + "Options")


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_a_frozen_options_object_with_one_field_per_option(name):
    kind = _options_class(name)
    fields = {f.name for f in dataclasses.fields(kind)}
    parsed = {p.name for p in cli.commands[name].params} - {
        "json_file", "csv_file", "markdown_file", "wide", "html", "html_file", "quiet"}
    if name == "record":    # the run configuration's own options travel as one mapping
        parsed = parsed - {f.name for f in record_option_fields()} | {"config"}
    assert fields == parsed
    built = options_from(kind, {f: [1] for f in fields})
    assert all(getattr(built, f) == (1,) for f in fields)     # lists held as tuples
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, next(iter(fields)), None)


def test_options_from_refuses_what_the_grammar_and_the_object_disagree_on():
    values = {f.name: None for f in dataclasses.fields(AnalyzeOptions)}
    with pytest.raises(TypeError):
        options_from(AnalyzeOptions, {**values, "stray": 1})
    with pytest.raises(TypeError):
        options_from(AnalyzeOptions, {k: v for k, v in values.items() if k != "engine"})

    @dataclasses.dataclass
    class Mutable:
        paths: tuple[str, ...]

    with pytest.raises(TypeError):
        options_from(Mutable, {"paths": []})


def test_a_command_is_not_called_with_loose_options():
    with pytest.raises(TypeError):
        analyze(paths=["x"], per_step=False, outputs=Outputs())  # type: ignore[call-arg]


def test_the_analyze_document_carries_the_critical_path_as_a_typed_part_built_once():
    path = FIXTURES / "critical-path" / "cpu-two-rank"
    found = JobSet.analyze([location_of(str(path))], AnalysisOptions(step_graphs=True))
    paths = [found.jobs[0].critical_path()]
    section = CriticalPathSection(list(paths[0].steps), list(paths[0].notes))
    document = to_json_document(found.analysis, [], section)
    assert list(document)[-1] == "critical_path" and section.steps
    assert msgspec.convert(document["critical_path"], CriticalPathSection) == section
    assert "critical_path" not in to_json_document(found.analysis, [])
    # the command hands out the document it built, with the same section
    output = analyze(AnalyzeOptions((str(path),), False, False, (), True, "native", False, True,
                                    1, None), Outputs(quiet=True))
    assert output.document["critical_path"] == document["critical_path"]
