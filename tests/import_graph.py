"""The repository's own import graph, read with ``ast`` (nothing is imported), for test_import_contracts.py.

An edge is an import statement that runs: at a module's top, or inside a function, which runs as surely,
only later. Imports under ``if TYPE_CHECKING:`` never run and name a type only (the model's forward is typed
with the attention backend it is handed), so they are left out, as tests/kernels/test_engine_layout.py
leaves them out. Module names come from pyproject.toml's ``package-dir`` (``kvcourse.kernels`` is the folder
``kernels/``), plus ``benchmarks``, imported by its own name; a notebook's code cells are read as one more
importer. Only the repository's own modules are nodes: ``torch`` and the standard library are not.
"""

from __future__ import annotations

import ast
import json
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

TOP_LEVEL_PACKAGES = {"benchmarks": "benchmarks"}  # first-party packages outside pyproject's package-dir


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target``, both the repository's modules."""

    source: str
    target: str
    path: str  # the importing file, relative to the repository's root
    line: int
    statement: str

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path}:{self.line}: {self.statement})"


def package_dirs(root: Path) -> dict[str, str]:
    """Package name -> folder (relative to ``root``), as pyproject.toml's package-dir maps them."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return {**setuptools["package-dir"], **TOP_LEVEL_PACKAGES}


def module_files(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Every module of the given packages: dotted name -> its file (a package's is its __init__.py)."""
    found: dict[str, Path] = {}
    for package, folder in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _known(name: str, modules: Iterable[str]) -> str | None:
    """The longest leading part of a dotted name that is one of ours (``a.b.C`` -> ``a.b``), else None."""
    known = set(modules)
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def statement_targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: Iterable[str]
) -> list[str]:
    """The repository's modules one import statement loads: ``from p import m`` names the module ``p.m`` where
    ``m`` is a module, else ``p`` itself. A package's parents, which Python also runs, are not counted."""
    modules = set(modules)
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    targets = [_known(name, modules) for name in names]
    return sorted({t for t in targets if t and t != module})


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): they never run."""
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in (
            getattr(node.test, "id", None),
            getattr(node.test, "attr", None),
        ):
            hidden.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return hidden


def source_imports(source: str, module: str, path: str, is_package: bool, modules: Iterable[str]) -> list[Import]:
    """Every edge from one module's source that runs: top-level and function-local imports, not type-only."""
    modules = set(modules)
    tree = ast.parse(source, filename=path)
    hidden = _type_checking_only(tree)
    edges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in hidden:
            for target in statement_targets(node, module, is_package, modules):
                edges.append(Import(module, target, path, node.lineno, ast.unparse(node)))
    return edges


def repo_imports(root: Path, files: dict[str, Path]) -> list[Import]:
    """Every edge between the given modules."""
    edges = []
    for module, path in files.items():
        text = path.read_text(encoding="utf-8")
        edges += source_imports(text, module, str(path.relative_to(root)), path.name == "__init__.py", files)
    return edges


def notebook_code(path: Path) -> Iterator[tuple[int, str]]:
    """A notebook's code cells as (cell number, Python source), ``%magic`` and ``!shell`` lines blanked."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for number, cell in enumerate(cells, start=1):
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
            yield number, "\n".join(lines)


def notebook_imports(root: Path, path: Path, modules: Iterable[str]) -> list[Import]:
    """The repository's modules a notebook's code imports (the source is the notebook, cell by cell)."""
    edges = []
    for number, code in notebook_code(path):
        name = f"{path.relative_to(root)}, cell {number}"
        edges += source_imports(code, f"<{name}>", name, False, modules)
    return edges


def strongly_connected(edges: Iterable[Import]) -> list[list[str]]:
    """The groups of modules that import one another round a loop (Tarjan's algorithm), largest first."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups, key=lambda g: (-len(g), g))


def one_cycle(group: list[str], edges: Iterable[Import]) -> list[Import]:
    """One loop through a strongly connected group, as the import statements that make it."""
    inside = {}
    for edge in edges:
        if edge.source in group and edge.target in group:
            inside.setdefault(edge.source, []).append(edge)
    start = group[0]
    paths: dict[str, list[Import]] = {start: []}
    frontier = [start]
    while frontier:  # breadth first: the shortest loop back to start
        nxt = []
        for node in frontier:
            for edge in sorted(inside.get(node, []), key=lambda e: (e.target, e.line)):
                if edge.target == start:
                    return [*paths[node], edge]
                if edge.target not in paths:
                    paths[edge.target] = [*paths[node], edge]
                    nxt.append(edge.target)
        frontier = nxt
    raise AssertionError(f"{group} is not a loop")  # a strongly connected group always has one


def cycles(edges: list[Import]) -> list[list[Import]]:
    """One loop per group of modules that import one another, each as its import statements."""
    return [one_cycle(group, edges) for group in strongly_connected(edges)]


def reachable(starts: Iterable[str], edges: Iterable[Import]) -> dict[str, list[Import]]:
    """Every module that importing ``starts`` loads, each with the chain of imports that gets there."""
    out: dict[str, list[Import]] = {}
    by_source: dict[str, list[Import]] = {}
    for edge in edges:
        by_source.setdefault(edge.source, []).append(edge)
    frontier = [(start, []) for start in sorted(set(starts))]
    seen = {start for start, _ in frontier}
    while frontier:
        nxt = []
        for node, chain in frontier:
            for edge in sorted(by_source.get(node, []), key=lambda e: (e.target, e.line)):
                if edge.target not in seen:
                    seen.add(edge.target)
                    out[edge.target] = [*chain, edge]
                    nxt.append((edge.target, out[edge.target]))
        frontier = nxt
    return out


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The index of the layer a module belongs to (0 is the top), or None: ``p.*`` names the package ``p`` and
    everything in it, a plain name that one module alone."""
    for index, names in enumerate(layers):
        for name in names:
            if name.endswith(".*") and (module == name[:-2] or module.startswith(name[:-1])):
                return index
            if module == name:
                return index
    return None


def layer_violations(edges: Iterable[Import], layers: tuple[tuple[str, ...], ...]) -> list[Import]:
    """The imports that reach up: from a module of a layer to one of a layer above it (both in ``layers``)."""
    wrong = []
    for edge in edges:
        source, target = layer_of(edge.source, layers), layer_of(edge.target, layers)
        if source is not None and target is not None and target < source:
            wrong.append(edge)
    return wrong
