"""The import contract, over ddpprof's import graph (read with ``ast``, nothing imported):

* no import inside a function but of an optional or heavy dependency (:data:`OPTIONAL`: torch
  and what needs it, HTA, Dask, pandas, fsspec, ...), save the ones :data:`LOCAL_IMPORTS`
  lists by name, so that the list can only shrink (each keeps a module off a command's start
  that does not need it);
* the packages are layered (:data:`LAYERS`, drawn in docs/layout.md): a package imports only
  packages of the layers below its own, so no two import each other; the package root holds
  only the facade, the command line and ``__init__.py``;
* each import inside a function says why, in a comment on its line or the line above (one
  comment may head a block of them);
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
#: DataFrames, fsspec for URLs, isal for faster gzip, re2 for --comm-kernel patterns).
OPTIONAL = {"torch", "workloads", "transformers", "hta", "dask", "distributed", "pandas",
            "fsspec", "isal", "plotly", "re2"}

#: Every other import made inside a function today, as "importer: imported" (one entry per
#: import statement). Remove an entry when its import moves to the top of its module; never
#: add one. None breaks an import cycle: ddpprof's own keep the step-graph and replay
#: machinery off ``analyze`` of traces ddpprof did not record (``tests/test_no_torch.py``:
#: ``graph.build`` and ``simulate.run`` are imported where a replay is made) or torch off the
#: launcher (``variants.fsdp_tp``); the light dependencies are ``rich``'s tables and progress
#: and ``jinja2`` (each 50-170 ms of a command's start, measured with ``python -X importtime``)
#: and numpy, which ``core.processes`` imports after telling OpenBLAS to use one thread.
LOCAL_IMPORTS = sorted([
    # ddpprof's own modules
    "ddpprof.advice.bucket_cap: ddpprof.simulate.run",
    "ddpprof.advice.bucket_cap: ddpprof.simulate.sources",
    "ddpprof.advice.ranks: ddpprof.graph.summary",
    "ddpprof.analysis.runs: ddpprof.graph.build",
    "ddpprof.commands.analyze: ddpprof.commands.critical_path",
    "ddpprof.record.launcher: ddpprof.variants.fsdp_tp",
    # light dependencies kept off a command's start
    "ddpprof.core.processes: numpy",
    "ddpprof.core.progress: rich.console",
    "ddpprof.core.progress: rich.markup",
    "ddpprof.core.progress: rich.markup",
    "ddpprof.core.progress: rich.markup",
    "ddpprof.core.progress: rich.progress",
    "ddpprof.core.progress: rich.progress",
    "ddpprof.render.table: jinja2",
    "ddpprof.render.table: rich",
    "ddpprof.render.table: rich.console",
    "ddpprof.render.table: rich.table",
    "ddpprof.render.table: rich.text",
    # the facade (ddpprof.Job): each analyzer loads its machinery when first called, so that
    # ``import ddpprof`` and ``analyze`` stay as light as before (tests/test_no_torch.py)
    "ddpprof.job: ddpprof.diff.compare",
    "ddpprof.job: ddpprof.diff.noise",
    "ddpprof.job: ddpprof.gate.rules",
    "ddpprof.job: ddpprof.graph.summary",
    "ddpprof.job: ddpprof.graph.whatif",
    "ddpprof.job: ddpprof.memory.estimate",
    "ddpprof.job: ddpprof.simulate.run",
    "ddpprof.job: ddpprof.simulate.sources",
    "ddpprof.job: ddpprof.trace.classify",
    "ddpprof.job_results: ddpprof.graph.summary",
    "ddpprof: ddpprof.analysis",
    "ddpprof: ddpprof.job",
])

#: The modules of the package root: the facade (``ddpprof.Job``), the command line, and the
#: package itself (``python -m ddpprof``); everything else lives in a package of its feature
#: or layer (docs/layout.md).
ROOT_MODULES = {"__init__.py", "__main__.py", "cli.py", "job.py", "job_results.py"}

#: The packages, bottom layer first (a module of the root is a package of its own name;
#: ``ddpprof`` is ``__init__.py``). A package imports only packages of lower layers.
LAYERS = [
    {"core"},                                   # errors, units, limits, atomic writes, input
    {"metrics", "render", "variants"},          # pure figures; tables and charts; the registry
    {"trace"},                                  # load and classify events
    {"grammar"},                                # the command line's parameter types and options
    {"run", "graph"},                           # run folders; step dependency graphs
    {"analysis", "record", "memory"},           # per-rank results; launching runs; ZeRO bytes
    {"diff", "simulate", "bench", "sweep"},     # features over analyses and recordings
    {"advice"},                                 # findings, told by the critical path and replays
    {"hang"},                                   # hang diagnosis
    {"gate"},                                   # CI rules over analyze documents
    {"job_results"}, {"job"},                   # the facade
    {"report"},                                 # the HTML and terminal reports: its clients
    {"ddpprof", "commands"}, {"cli"},           # the package, each command, the dispatcher
]

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


def _uncommented_local_imports(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    local: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                if in_function:
                    local.append(child)
            else:
                visit(child, in_function or isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(ast.parse(text), False)
    ends = {node.end_lineno: node for node in local}
    commented: set[int] = set()
    for node in sorted(local, key=lambda n: n.lineno):
        above = lines[node.lineno - 2].strip()
        if ("#" in lines[node.lineno - 1] or above.startswith("#")
                or (node.lineno - 1 in ends and ends[node.lineno - 1].lineno in commented)):
            commented.add(node.lineno)
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}" for node in local
            if node.lineno not in commented]


def test_each_import_inside_a_function_says_why():
    missing = [place for path in sorted(PACKAGE.rglob("*.py"))
               for place in _uncommented_local_imports(path)]
    assert missing == [], "say why in a comment: " + ", ".join(missing)


def test_metrics_is_the_pure_layer():
    for module, imports in _graph().items():
        if module.startswith("ddpprof.metrics"):
            wrong = [t for t, _ in imports if t.startswith(ABOVE_METRICS)]
            assert wrong == [], f"{module} imports {wrong}"
    for path in (PACKAGE / "metrics").glob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Name)}
        assert not names & {"UsageError", "TraceError", "RunFailed"}, path.name


def _package(module: str) -> str:
    """``ddpprof.gate.rules`` -> ``gate``; a module of the root is a package of its own."""
    return module.split(".")[1] if "." in module else "ddpprof"


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package): the imports, as "module -> module"."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, imports in _graph().items():
        for target, _ in imports:
            if target.startswith("ddpprof.") and _package(module) != _package(target):
                edges.setdefault((_package(module), _package(target)), []).append(
                    f"{module} -> {target}")
    return edges


def test_packages_import_only_lower_layers():
    layer = {package: n for n, packages in enumerate(LAYERS) for package in packages}
    unplaced = {p for pair in _package_imports() for p in pair} - set(layer)
    assert not unplaced, f"place in LAYERS (and docs/layout.md): {sorted(unplaced)}"
    upward = [f"{a} ({layer[a]}) imports {b} ({layer[b]}): " + "; ".join(sorted(set(imports)))
              for (a, b), imports in sorted(_package_imports().items()) if layer[a] <= layer[b]]
    assert upward == [], "imports that do not go down a layer:\n" + "\n".join(upward)


def test_no_two_packages_import_each_other():
    edges = _package_imports()
    both = [f"{a} <-> {b}: " + "; ".join(sorted({*edges[(a, b)], *edges[(b, a)]}))
            for a, b in sorted(edges) if a < b and (b, a) in edges]
    assert both == [], "two-way dependencies between packages:\n" + "\n".join(both)


def test_the_package_root_holds_only_the_facade_and_the_command_line():
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert modules <= ROOT_MODULES, f"move into a package: {sorted(modules - ROOT_MODULES)}"
