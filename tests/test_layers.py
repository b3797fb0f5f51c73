"""The import contract, over ddpprof's import graph (read with ``ast``, nothing imported):

* no import inside a function but of an optional or heavy dependency (:data:`OPTIONAL`: torch
  and what needs it, HTA, Dask, pandas, fsspec, ...), save the ones :data:`LOCAL_IMPORTS`
  lists by name, so that the list can only shrink (each either breaks an import cycle between
  packages or keeps a module off a command's start that does not need it);
* ``metrics/`` is the pure layer: it imports nothing from the analysis, the reports, the CLI or
  the commands, and never raises the CLI's errors (a caller turns a metric's ``ValueError``
  into its own one-line message).
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ddpprof"

#: Imported where they are needed, anywhere: heavy (torch and the workloads that need it,
#: transformers), or optional (HTA for --engine hta, Dask for --scheduler, pandas for
#: DataFrames, fsspec for URLs, isal for faster gzip).
OPTIONAL = {"torch", "workloads", "transformers", "hta", "dask", "distributed", "pandas",
            "fsspec", "isal", "plotly"}

#: Every other import made inside a function today, as "importer: imported" (one entry per
#: import statement). Remove an entry when its import moves to the top of its module; never
#: add one. Ten of ddpprof's own would close an import cycle at the top of their module (the
#: package's ``__init__`` -> analysis, analysis.rows -> diff.profile and -> group_rows,
#: analysis.runs -> graph.build and -> rows, diff.noise -> diff.compare, findings.ranks ->
#: graph.summary, gate -> gate_noise, graph.whatif -> graph.edit, options -> variants); the
#: others keep a module off the start of the commands that do not need it (``analyze`` does
#: not import the replay machinery, ``tests/test_no_torch.py``).
LOCAL_IMPORTS = sorted([
    # ddpprof's own modules
    "ddpprof.advice.bucket_cap: ddpprof.simulate.run",
    "ddpprof.advice.bucket_cap: ddpprof.simulate.sources",
    "ddpprof.advice.ranks: ddpprof.graph.summary",
    "ddpprof.analysis.document: ddpprof.run.config",
    "ddpprof.analysis.rows: ddpprof.analysis.group_rows",
    "ddpprof.analysis.rows: ddpprof.analysis.profile",
    "ddpprof.analysis.runs: ddpprof.analysis.hta_engine",
    "ddpprof.analysis.runs: ddpprof.analysis.rows",
    "ddpprof.analysis.runs: ddpprof.graph.build",
    "ddpprof.cli: ddpprof.core.processes",
    "ddpprof.cli: ddpprof.render.ascii",
    "ddpprof.commands.analyze: ddpprof.commands.critical_path",
    "ddpprof.commands.analyze: ddpprof.report.html",
    "ddpprof.commands.bench: ddpprof.bench.scaling",
    "ddpprof.commands.bench: ddpprof.metrics.sanity",
    "ddpprof.commands.bench: ddpprof.record.launcher",
    "ddpprof.commands.bench: ddpprof.report.console",
    "ddpprof.commands.bench: ddpprof.report.pages",
    "ddpprof.commands.calibrate: ddpprof.report.pages",
    "ddpprof.commands.calibrate: ddpprof.simulate.calibrate",
    "ddpprof.commands.critical_path: ddpprof.report.critical_path",
    "ddpprof.commands.critical_path: ddpprof.report.critical_path",
    "ddpprof.commands.critical_path: ddpprof.report.critical_path",
    "ddpprof.commands.critical_path: ddpprof.report.pages",
    "ddpprof.commands.diff: ddpprof.report.diff",
    "ddpprof.commands.gate: ddpprof.diff.compare",
    "ddpprof.commands.gate: ddpprof.diff.explain",
    "ddpprof.commands.record: ddpprof.record.launcher",
    "ddpprof.commands.simulate: ddpprof.graph.whatif",
    "ddpprof.commands.simulate: ddpprof.report.pages",
    "ddpprof.commands.simulate: ddpprof.simulate.output",
    "ddpprof.commands.simulate: ddpprof.simulate.run",
    "ddpprof.commands.sweep: ddpprof.record.launcher",
    "ddpprof.commands.sweep: ddpprof.report.pages",
    "ddpprof.commands.sweep: ddpprof.sweep.bucket_caps",
    "ddpprof.diff.noise: ddpprof.diff.compare",
    "ddpprof.gate.rules: ddpprof.advice",
    "ddpprof.gate.rules: ddpprof.advice.bucket_cap",
    "ddpprof.gate.rules: ddpprof.analysis",
    "ddpprof.gate.rules: ddpprof.analysis.profile",
    "ddpprof.gate.rules: ddpprof.diff.noise",
    "ddpprof.gate.rules: ddpprof.gate.noise",
    "ddpprof.gate.rules: ddpprof.report.console",
    "ddpprof.grammar.options: ddpprof.metrics.registry",
    "ddpprof.grammar.options: ddpprof.render.output",
    "ddpprof.grammar.options: ddpprof.trace.work_names",
    "ddpprof.grammar.options: ddpprof.variants",
    "ddpprof.grammar.params: ddpprof.metrics.registry",
    "ddpprof.graph.whatif: ddpprof.graph.edit",
    "ddpprof.memory.estimate: ddpprof.grammar.options",
    "ddpprof.record.folders: ddpprof.run.manifest",
    "ddpprof.record.launcher: ddpprof.variants.fsdp_tp",
    "ddpprof.report.console: ddpprof.analysis.group_rows",
    "ddpprof.report.html: ddpprof.memory.estimate",
    "ddpprof.report.pages: ddpprof.sweep.bucket_caps",
    "ddpprof.simulate.calibrate: ddpprof.analysis",
    "ddpprof.simulate.calibrate: ddpprof.core.processes",
    "ddpprof.simulate.calibrate: ddpprof.core.progress",
    "ddpprof.simulate.calibrate: ddpprof.core.storage",
    "ddpprof.simulate.calibrate: ddpprof.record.failure",
    "ddpprof.simulate.calibrate: ddpprof.record.folders",
    "ddpprof.simulate.calibrate: ddpprof.record.launcher",
    "ddpprof.simulate.calibrate: ddpprof.record.launcher",
    "ddpprof.simulate.calibrate: ddpprof.record.process",
    "ddpprof.simulate.sources: ddpprof.simulate.calibrate",
    "ddpprof.simulate.sources: ddpprof.simulate.calibrate",
    # light dependencies kept off a command's start
    "ddpprof.core.processes: numpy",
    "ddpprof.core.processes: resource",
    "ddpprof.core.progress: rich.console",
    "ddpprof.core.progress: rich.markup",
    "ddpprof.core.progress: rich.markup",
    "ddpprof.core.progress: rich.markup",
    "ddpprof.core.progress: rich.progress",
    "ddpprof.core.progress: rich.progress",
    "ddpprof.core.user_regex: re2",
    "ddpprof.render.table: jinja2",
    "ddpprof.render.table: rich",
    "ddpprof.render.table: rich.console",
    "ddpprof.render.table: rich.table",
    "ddpprof.render.table: rich.text",
    "ddpprof.simulate.calibrate: numpy",
    # the facade (ddpprof.Job): each analyzer loads its machinery when first called, so that
    # ``import ddpprof`` and ``analyze`` stay as light as before (tests/test_no_torch.py)
    "ddpprof.job: ddpprof.analysis",
    "ddpprof.job: ddpprof.analysis.profile",
    "ddpprof.job: ddpprof.diff.compare",
    "ddpprof.job: ddpprof.diff.noise",
    "ddpprof.job: ddpprof.gate.rules",
    "ddpprof.job: ddpprof.gate.rules",
    "ddpprof.job: ddpprof.grammar.options",
    "ddpprof.job: ddpprof.graph.summary",
    "ddpprof.job: ddpprof.memory.estimate",
    "ddpprof.job: ddpprof.simulate.run",
    "ddpprof.job: ddpprof.simulate.sources",
    "ddpprof.job: ddpprof.trace.classify",
    "ddpprof.job_results: ddpprof.graph.summary",
    "ddpprof: ddpprof.analysis",
    "ddpprof: ddpprof.job",
])

#: What ``metrics/`` (pure functions on arrays) must never import.
ABOVE_METRICS = ("ddpprof.analysis", "ddpprof.report", "ddpprof.cli", "ddpprof.commands",
                 "ddpprof.core.errors")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> list[tuple[str, bool]]:
    """Every module ``path`` imports (``from a import b`` of a module ``a.b`` counts as
    ``a.b``), and whether inside a function."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[:len(package.split(".")) - child.level + 1]
                    target = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    target = child.module or ""
                # from a import b, c: the module a.b where there is one, else a
                modules = dict.fromkeys(f"{target}.{alias.name}" if _is_module(
                    f"{target}.{alias.name}") else target for alias in child.names)
                found.extend((module, in_function) for module in modules)
            else:
                visit(child, in_function or isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


@functools.cache
def _graph() -> dict[str, list[tuple[str, bool]]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_import_inside_a_function_but_the_listed_ones():
    graph = _graph()
    local = Counter(f"{module}: {target}" for module, imports in graph.items()
                    for target, in_function in imports
                    if in_function and target.split(".")[0] not in OPTIONAL)
    allowed = Counter(LOCAL_IMPORTS)
    assert sorted((local - allowed).elements()) == [], "new imports inside functions"
    assert sorted((allowed - local).elements()) == [], "moved to the top: remove from the list"


def test_metrics_is_the_pure_layer():
    for module, imports in _graph().items():
        if module.startswith("ddpprof.metrics"):
            wrong = [t for t, _ in imports if t.startswith(ABOVE_METRICS)]
            assert wrong == [], f"{module} imports {wrong}"
    for path in (PACKAGE / "metrics").glob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Name)}
        assert not names & {"UsageError", "TraceError", "RunFailed"}, path.name
