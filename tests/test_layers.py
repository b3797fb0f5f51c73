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
    "ddpprof.analysis.rows: ddpprof.analysis.group_rows",
    "ddpprof.analysis.rows: ddpprof.diff.profile",
    "ddpprof.analysis.runs: ddpprof.analysis.rows",
    "ddpprof.analysis.runs: ddpprof.graph.build",
    "ddpprof.analysis.runs: ddpprof.hta_engine",
    "ddpprof.analysis_document: ddpprof.record.config",
    "ddpprof.calibrate: ddpprof.analysis",
    "ddpprof.calibrate: ddpprof.processes",
    "ddpprof.calibrate: ddpprof.progress",
    "ddpprof.calibrate: ddpprof.record",
    "ddpprof.calibrate: ddpprof.record.failure",
    "ddpprof.calibrate: ddpprof.record.launcher",
    "ddpprof.calibrate: ddpprof.record.launcher",
    "ddpprof.calibrate: ddpprof.trace.storage",
    "ddpprof.cli: ddpprof.processes",
    "ddpprof.cli: ddpprof.report.ascii",
    "ddpprof.commands.analyze: ddpprof.commands.critical_path",
    "ddpprof.commands.analyze: ddpprof.report.html",
    "ddpprof.commands.bench: ddpprof.bench",
    "ddpprof.commands.bench: ddpprof.record.launcher",
    "ddpprof.commands.bench: ddpprof.report.console",
    "ddpprof.commands.bench: ddpprof.report.pages",
    "ddpprof.commands.bench: ddpprof.sanity",
    "ddpprof.commands.calibrate: ddpprof.calibrate",
    "ddpprof.commands.calibrate: ddpprof.report.pages",
    "ddpprof.commands.critical_path: ddpprof.report.pages",
    "ddpprof.commands.diff: ddpprof.report",
    "ddpprof.commands.gate: ddpprof.diff.compare",
    "ddpprof.commands.gate: ddpprof.diff.explain",
    "ddpprof.commands.record: ddpprof.record.launcher",
    "ddpprof.commands.simulate: ddpprof.graph.whatif",
    "ddpprof.commands.simulate: ddpprof.report.pages",
    "ddpprof.commands.simulate: ddpprof.simulate",
    "ddpprof.commands.simulate: ddpprof.simulate.run",
    "ddpprof.commands.sweep: ddpprof.record.launcher",
    "ddpprof.commands.sweep: ddpprof.report.pages",
    "ddpprof.commands.sweep: ddpprof.sweep",
    "ddpprof.diff.noise: ddpprof.diff.compare",
    "ddpprof.findings.ranks: ddpprof.graph.summary",
    "ddpprof.gate: ddpprof.diff.noise",
    "ddpprof.gate: ddpprof.diff.profile",
    "ddpprof.gate: ddpprof.gate_noise",
    "ddpprof.graph.whatif: ddpprof.graph.edit",
    "ddpprof.memory: ddpprof.options",
    "ddpprof.options: ddpprof.metrics.registry",
    "ddpprof.param_types: ddpprof.metrics.registry",
    "ddpprof.options: ddpprof.report.output",
    "ddpprof.options: ddpprof.trace.work_names",
    "ddpprof.options: ddpprof.variants",
    "ddpprof.record.folders: ddpprof.manifest",
    "ddpprof.record.launcher: ddpprof.variants.fsdp_tp",
    "ddpprof.report.console: ddpprof.analysis.group_rows",
    "ddpprof.report.html: ddpprof.memory",
    "ddpprof.report.pages: ddpprof.sweep",
    "ddpprof.simulate.advice: ddpprof.findings",
    "ddpprof.simulate.advice: ddpprof.findings",
    "ddpprof.simulate.advice: ddpprof.simulate.run",
    "ddpprof.simulate.advice: ddpprof.simulate.sources",
    "ddpprof.simulate.sources: ddpprof.calibrate",
    "ddpprof.simulate.sources: ddpprof.calibrate",
    "ddpprof: ddpprof.analysis",
    # light dependencies kept off a command's start
    "ddpprof.calibrate: numpy",
    "ddpprof.processes: numpy",
    "ddpprof.processes: resource",
    "ddpprof.progress: rich.console",
    "ddpprof.progress: rich.markup",
    "ddpprof.progress: rich.markup",
    "ddpprof.progress: rich.markup",
    "ddpprof.progress: rich.progress",
    "ddpprof.progress: rich.progress",
    "ddpprof.report.table: jinja2",
    "ddpprof.report.table: rich",
    "ddpprof.report.table: rich.console",
    "ddpprof.report.table: rich.table",
    "ddpprof.report.table: rich.text",
    "ddpprof.user_regex: re2",
    # the facade (ddpprof.Job): each analyzer loads its machinery when first called, so that
    # ``import ddpprof`` and ``analyze`` stay as light as before (tests/test_no_torch.py)
    "ddpprof: ddpprof.job",
    "ddpprof.job: ddpprof.diff.compare", "ddpprof.job: ddpprof.diff.noise",
    "ddpprof.job: ddpprof.gate", "ddpprof.job: ddpprof.graph.summary",
    "ddpprof.job: ddpprof.memory", "ddpprof.job: ddpprof.options",
    "ddpprof.job: ddpprof.simulate.run", "ddpprof.job: ddpprof.simulate.sources",
    "ddpprof.job: ddpprof.trace.classify", "ddpprof.job_results: ddpprof.graph.summary",
])

#: What ``metrics/`` (pure functions on arrays) must never import.
ABOVE_METRICS = ("ddpprof.analysis", "ddpprof.report", "ddpprof.cli", "ddpprof.commands",
                 "ddpprof.errors")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
                if child.module is None:    # from . import a, b: the modules a and b
                    found.extend((f"{target}.{alias.name}", in_function) for alias in child.names)
                else:
                    found.append((target, in_function))
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
