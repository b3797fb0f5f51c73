"""Move ddpprof's modules to the layout of docs/layout.md and rewrite every import and dotted
name that refers to an old place (ddpprof/, tests/, benchmarks/, workloads/, scripts/, docs/).

Re-runnable: a module already moved is not moved again, and an import or a name already
rewritten is left alone, so that it can be run again over a branch that still uses the old
names (``python scripts/moves.py``, then ``ruff check --fix --select I``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Old module -> new module (exact names; a package's modules are listed one by one).
MODULES = {
    # infrastructure
    "ddpprof.errors": "ddpprof.core.errors",
    "ddpprof.units": "ddpprof.core.units",
    "ddpprof.numbers": "ddpprof.core.numbers",
    "ddpprof.atomic": "ddpprof.core.atomic",
    "ddpprof.json_input": "ddpprof.core.json_input",
    "ddpprof.user_regex": "ddpprof.core.user_regex",
    "ddpprof.processes": "ddpprof.core.processes",
    "ddpprof.progress": "ddpprof.core.progress",
    "ddpprof.trace.io": "ddpprof.core.io",
    "ddpprof.trace.storage": "ddpprof.core.storage",
    # rendering: tables, output files, charts
    "ddpprof.report.table": "ddpprof.render.table",
    "ddpprof.report.output": "ddpprof.render.output",
    "ddpprof.report.charts": "ddpprof.render.charts",
    "ddpprof.report.ascii": "ddpprof.render.ascii",
    # the command line's grammar
    "ddpprof.options": "ddpprof.grammar.options",
    "ddpprof.param_types": "ddpprof.grammar.params",
    "ddpprof.option_groups": "ddpprof.grammar.groups",
    # a run folder: its manifest, its config, its files
    "ddpprof.manifest": "ddpprof.run.manifest",
    "ddpprof.run_folder": "ddpprof.run.folder",
    "ddpprof.record.config": "ddpprof.run.config",
    # pure figures
    "ddpprof.sanity": "ddpprof.metrics.sanity",
    # trace-level parsing
    "ddpprof.analysis.calls": "ddpprof.trace.calls",
    "ddpprof.trace.discover": "ddpprof.run.discover",
    # analysis
    "ddpprof.hta_engine": "ddpprof.analysis.hta_engine",
    "ddpprof.analysis_document": "ddpprof.analysis.document",
    "ddpprof.diff.profile": "ddpprof.analysis.profile",
    # features
    "ddpprof.gate": "ddpprof.gate.rules",
    "ddpprof.gate_noise": "ddpprof.gate.noise",
    "ddpprof.findings": "ddpprof.advice",
    "ddpprof.findings.lateness": "ddpprof.advice.lateness",
    "ddpprof.findings.model": "ddpprof.advice.model",
    "ddpprof.findings.ranks": "ddpprof.advice.ranks",
    "ddpprof.findings.rules": "ddpprof.advice.rules",
    "ddpprof.graph.advice": "ddpprof.advice.critical_path",
    "ddpprof.simulate.advice": "ddpprof.advice.bucket_cap",
    "ddpprof.calibrate": "ddpprof.simulate.calibrate",
    "ddpprof.bench": "ddpprof.bench.scaling",
    "ddpprof.sweep": "ddpprof.sweep.bucket_caps",
    "ddpprof.memory": "ddpprof.memory.estimate",
}

#: (old module, name) -> new module, for a class or constant moved out of its module.
SYMBOLS = {
    ("ddpprof.analysis.options", "LastStep"): "ddpprof.trace.last_step",
    ("ddpprof.analysis", "LastStep"): "ddpprof.trace.last_step",
    ("ddpprof.run.manifest", "MeshRecord"): "ddpprof.variants.mesh",
    ("ddpprof.run.manifest", "MeshDim"): "ddpprof.variants.mesh",
    ("ddpprof.run.manifest", "MeshGroup"): "ddpprof.variants.mesh",
    ("ddpprof.record.flight_recorder", "DEFAULT_BUFFER_SIZE"): "ddpprof.run.config",
    ("ddpprof.gate.rules", "ConfigKey"): "ddpprof.run.config_key",
    ("ddpprof.run.manifest", "Rank"): "ddpprof.core.limits",
    ("ddpprof.diff.compare", "STEP"): "ddpprof.analysis.profile",
    ("ddpprof.grammar.options", "check_rank_edits"): "ddpprof.graph.whatif",
    ("ddpprof.grammar.options", "ranks_text"): "ddpprof.render.table",
    ("ddpprof.diff.compare", "part_values"): "ddpprof.analysis.profile",
    ("ddpprof.grammar.options", "MAX_RANKS"): "ddpprof.core.limits",
    ("ddpprof.grammar.options", "MIN_BANDWIDTH_GBPS"): "ddpprof.core.limits",
    ("ddpprof.grammar.options", "MAX_BANDWIDTH_GBPS"): "ddpprof.core.limits",
    ("ddpprof.grammar.options", "MAX_LATENCY_US"): "ddpprof.core.limits",
    ("ddpprof.grammar.options", "MAX_DELAY_US"): "ddpprof.core.limits",
}

#: New packages and what each holds (their ``__init__.py``).
PACKAGES = {
    "core": "Infrastructure every layer uses: errors, units, limits, atomic writes, bounded input "
            "reading, processes, progress.",
    "render": "Rendering: rich tables, output files (JSON, CSV, Markdown), Plotly charts.",
    "grammar": "The command line's grammar: parameter types, options and option groups.",
    "run": "A run folder: its manifest (``run.json``), its config, its files, and the traces "
           "a path holds.",
    "gate": "``ddpprof gate``: rules over analyze documents, and run-to-run noise.",
    "advice": "Advice: the findings of a run, with what the critical path and the simulator "
              "say of them.",
    "bench": "``ddpprof bench``: the scaling table.",
    "sweep": "``ddpprof sweep``: the bucket-size valley.",
    "memory": "``ddpprof memory``: bytes per rank under DDP and ZeRO.",
}

#: Old packages moved whole (their ``__init__.py`` with them).
OLD_PACKAGES = {"ddpprof.findings"}

TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".txt", ".cfg", ".ini", ".sh", ".j2",
                 ".ipynb"}
TREES = ["ddpprof", "tests", "benchmarks", "workloads", "scripts", "docs", "README.md",
         "pyproject.toml", "mkdocs.yml", ".github"]


def module_path(module: str, package: bool = False) -> Path:
    parts = module.split(".")
    return ROOT.joinpath(*parts, "__init__.py") if package else ROOT.joinpath(*parts[:-1],
                                                                             parts[-1] + ".py")


def current_path(module: str) -> Path | None:
    for candidate in (module_path(module), module_path(module, package=True)):
        if candidate.exists():
            return candidate
    return None


def final_modules() -> set[str]:
    """Every module name once the moves are made."""
    names = set()
    for path in (ROOT / "ddpprof").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    for old, new in MODULES.items():
        names.discard(old) if old not in MODULES.values() else None
        names.add(new)
        for package in range(2, new.count(".") + 1):
            names.add(".".join(new.split(".")[:package]))
    return names


FINAL = final_modules()


MOVED_FROM = {new: old for old, new in MODULES.items()}


def known(module: str) -> bool:
    """Whether ``module`` is a module or package of the tree, old or new."""
    return module in FINAL or module in MODULES or module == "ddpprof"


def mapped(module: str, name: str | None = None) -> str:
    """Where ``module`` (or its member ``name``) lives now."""
    if name is not None and (module, name) in SYMBOLS:
        return SYMBOLS[(module, name)]
    if module in MODULES:
        new = MODULES[module]
        if name is not None and (module, name) in SYMBOLS:
            return SYMBOLS[(module, name)]
        if name is not None and (new, name) in SYMBOLS:
            return SYMBOLS[(new, name)]
        return new
    return module


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def render_from(target: str, names: list[str], here: str, relative: bool, is_pkg: bool,
                indent: str) -> str:
    if relative:
        base = here.split(".") if is_pkg else here.split(".")[:-1]
        parts = target.split(".")
        common = 0
        while common < min(len(base), len(parts)) and base[common] == parts[common]:
            common += 1
        dots = "." * (len(base) - common + 1)
        rest = ".".join(parts[common:])
        source = dots + rest
    else:
        source = target
    line = f"{indent}from {source} import {', '.join(names)}"
    if len(line) <= 100:
        return line
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {source} import (\n{body}{indent})"


def rewrite_imports(path: Path, old_module: str, new_module: str) -> str | None:
    text = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    is_pkg = path.name == "__init__.py"
    package = old_module if is_pkg else old_module.rpartition(".")[0]
    moved = old_module != new_module
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if not old_module.startswith("ddpprof"):
                    continue
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
                if not known(source) and old_module in MOVED_FROM:
                    # a line merged in from before the move: relative to the old place
                    before = MOVED_FROM[old_module]
                    old_package = before if is_pkg else before.rpartition(".")[0]
                    base = old_package.split(".")[:len(old_package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                    moved = True
            else:
                source = node.module or ""
            if not source.startswith("ddpprof") or (source != "ddpprof"
                                                    and not source.startswith("ddpprof.")):
                continue
            groups: dict[str, list[str]] = {}
            for alias in node.names:
                text_name = alias.name + (f" as {alias.asname}" if alias.asname else "")
                sub = f"{source}.{alias.name}"
                if sub in MODULES:
                    new_sub = MODULES[sub]
                    parent, _, leaf = new_sub.rpartition(".")
                    if leaf != alias.name and not alias.asname:
                        text_name = f"{leaf} as {alias.name}"
                    elif alias.asname:
                        text_name = f"{leaf} as {alias.asname}"
                    groups.setdefault(parent, []).append(text_name)
                elif sub in FINAL and source in MODULES:
                    groups.setdefault(source, []).append(text_name)   # already new
                else:
                    groups.setdefault(mapped(source, alias.name), []).append(text_name)
            if list(groups) == [source] and not (moved and node.level):
                continue
            indent = " " * node.col_offset
            rendered = "\n".join(
                render_from(target, names, new_module, bool(node.level)
                            and new_module.startswith("ddpprof"), is_pkg, indent)
                for target, names in groups.items())
            edits.append((node.lineno, node.end_lineno or node.lineno, node.end_col_offset,
                          rendered))
        elif isinstance(node, ast.Import):
            changed = False
            names = []
            for alias in node.names:
                new = mapped(alias.name) if alias.name not in FINAL else alias.name
                changed |= new != alias.name
                names.append(new + (f" as {alias.asname}" if alias.asname else ""))
            if changed:
                indent = " " * node.col_offset
                edits.append((node.lineno, node.end_lineno or node.lineno, node.end_col_offset,
                              f"{indent}import {', '.join(names)}"))
    if not edits:
        return None
    for start, end, end_col, rendered in sorted(edits, reverse=True):
        tail = lines[end - 1].encode()[end_col or 0:].decode() or "\n"
        lines[start - 1:end] = [rendered + tail]
    return "".join(lines)


_DOTTED = re.compile(r"\bddpprof(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"\bddpprof(?:/[A-Za-z_]\w*)+(?:\.py|/)")


#: Old modules whose bare dotted name is also a document's ``schema`` (``ddpprof.gate``): left.
SCHEMA_NAMES = {"ddpprof.bench", "ddpprof.sweep", "ddpprof.gate", "ddpprof.memory"}


def rewrite_dotted(match: re.Match[str]) -> str:
    if match.group(0) in SCHEMA_NAMES:
        return match.group(0)
    parts = match.group(0).split(".")
    for k in range(len(parts), 1, -1):
        prefix = ".".join(parts[:k])
        if prefix in MODULES:
            longer = ".".join(parts[:k + 1])
            if k < len(parts) and longer in FINAL and longer not in MODULES:
                return match.group(0)        # already a new name (ddpprof.gate.noise)
            if k < len(parts) and (prefix, parts[k]) in SYMBOLS:
                return ".".join([SYMBOLS[(prefix, parts[k])], *parts[k:]])
            new = MODULES[prefix]
            if k < len(parts) and (new, parts[k]) in SYMBOLS:
                return ".".join([SYMBOLS[(new, parts[k])], *parts[k:]])
            return ".".join([new, *parts[k:]])
        if k < len(parts) and (prefix, parts[k]) in SYMBOLS:
            return ".".join([SYMBOLS[(prefix, parts[k])], *parts[k:]])
    return match.group(0)


_FROM = re.compile(r"\bfrom (ddpprof(?:\.\w+)*) import (\w+(?: as \w+)?(?:, \w+(?: as \w+)?)*)$",
                   re.MULTILINE)


def rewrite_from(match: re.Match[str]) -> str:
    """``from ddpprof.x import a`` written in a string or a page (code in a subprocess's
    argument, a docs example), one line: as an import statement would be rewritten."""
    source = match.group(1)
    groups: dict[str, list[str]] = {}
    for text_name in match.group(2).split(", "):
        name = text_name.split(" as ")[0]
        sub = f"{source}.{name}"
        if sub in MODULES:
            parent, _, leaf = MODULES[sub].rpartition(".")
            alias = text_name.partition(" as ")[2] or name
            groups.setdefault(parent, []).append(leaf if leaf == alias else f"{leaf} as {alias}")
        elif sub in FINAL and source in MODULES:
            groups.setdefault(source, []).append(text_name)
        else:
            groups.setdefault(mapped(source, name), []).append(text_name)
    if list(groups) == [source]:
        return match.group(0)
    line_start = match.string.rfind("\n", 0, match.start()) + 1
    indent = re.match(r"[ \t]*", match.string[line_start:]).group(0)
    return f"\n{indent}".join(f"from {target} import {', '.join(names)}"
                              for target, names in groups.items())


def rewrite_path(match: re.Match[str]) -> str:
    text = match.group(0)
    if not text.endswith(".py"):
        return text
    dotted = text[:-3].replace("/", ".")
    if dotted in MODULES and dotted not in FINAL:
        new = MODULES[dotted]
        if current_path(new) is not None and current_path(new).name == "__init__.py":
            return new.replace(".", "/") + "/__init__.py"
        return new.replace(".", "/") + ".py"
    if dotted.endswith(".__init__") and dotted[:-9] in MODULES:
        return MODULES[dotted[:-9]].replace(".", "/") + "/__init__.py"
    return text


def text_files() -> list[Path]:
    files = []
    for tree in TREES:
        top = ROOT / tree
        if top.is_file():
            files.append(top)
        elif top.is_dir():
            files += [p for p in top.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES
                      and "__pycache__" not in p.parts and "site" not in p.parts
                      and p != Path(__file__).resolve()]
    return files


def main() -> None:
    new_contents: dict[Path, str] = {}
    moves: list[tuple[Path, Path]] = []
    for old, new in MODULES.items():
        if old in OLD_PACKAGES:
            source, target = module_path(old, package=True), module_path(new, package=True)
        else:
            source, target = module_path(old), module_path(new)
        if source.exists():
            moves.append((source, target))
    destination = {source: target for source, target in moves}
    for path in text_files():
        text = path.read_text(encoding="utf-8")
        new_text = text
        if path.suffix == ".py":
            old_module = module_of(path) if path.is_relative_to(ROOT / "ddpprof") else "tests"
            target = destination.get(path, path)
            new_module = module_of(target) if target.is_relative_to(ROOT / "ddpprof") \
                else old_module
            rewritten = rewrite_imports(path, old_module, new_module)
            if rewritten is not None:
                new_text = rewritten
        new_text = _FROM.sub(rewrite_from, new_text)
        new_text = _DOTTED.sub(rewrite_dotted, new_text)
        new_text = _PATH.sub(rewrite_path, new_text)
        if new_text != text:
            new_contents[path] = new_text
    for package, doc in PACKAGES.items():
        init = ROOT / "ddpprof" / package / "__init__.py"
        if not init.exists() and not any(t == init for _, t in moves):
            init.parent.mkdir(exist_ok=True)
            init.write_text('"""' + textwrap.fill(doc, 96) + '"""\n', encoding="utf-8")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    for source, target in moves:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and target.name == "__init__.py":
            subprocess.run(["git", "rm", "-q", "-f", str(target)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", str(source), str(target)], cwd=ROOT, check=True)
        print(f"moved {source.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
    for path, text in new_contents.items():
        (destination.get(path, path)).write_text(text, encoding="utf-8")
    for path in (ROOT / "ddpprof").glob("*/"):
        if path.is_dir() and not any(path.glob("*.py")) and path.name not in (
                "templates", "__pycache__"):
            print(f"empty package left: {path}", file=sys.stderr)
    print(f"rewrote {len(new_contents)} files")


if __name__ == "__main__":
    main()
