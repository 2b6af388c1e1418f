"""The package's layout: imports between torch_zyx's modules form no cycle and follow the layers.

Walks every module's imports of the package (at module level and inside functions: an import
moved into a function to hide a cycle is still a cycle; imports under ``TYPE_CHECKING`` are
annotations only and skipped) and checks them against the layers docs/architecture.md
describes: a module imports only from its own layer or the layers below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "torch_zyx"

# Top to bottom. The flow enters at dispatch and runs down: a layer drives the ones below it
# (the executor runs the kernelizer, codegen and the runtimes) or reads their data (codegen
# lowers the kernelizer's kernels), never the other way. The first prefix that matches a
# module's name gives its layer.
LAYERS = [
    ("torch_zyx", "torch_zyx.demo", "torch_zyx.info"),
    ("torch_zyx.integration",),
    ("torch_zyx.compile",),
    ("torch_zyx.dispatch",),
    ("torch_zyx.ops",),
    ("torch_zyx.record",),
    ("torch_zyx.execute",),
    ("torch_zyx.runtime",),
    ("torch_zyx.codegen",),
    ("torch_zyx.lazy",),
    ("torch_zyx.memory",),
    ("torch_zyx.config", "torch_zyx.counters", "torch_zyx.dtypes"),
]


def module_files() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "torch_zyx" and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"{module} is in no layer of LAYERS"
    return best


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The package modules ``module`` imports, with the line of the first import of each."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        # ``from pkg import name`` imports pkg.name when that is a module, else pkg itself.
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != module:
            found.setdefault(target, line)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "torch_zyx":
                        add(alias.name, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - child.level + 1]
                    origin = ".".join(base + ([child.module] if child.module else []))
                else:
                    origin = child.module or ""
                if origin.split(".")[0] == "torch_zyx":
                    for alias in child.names:
                        name = f"{origin}.{alias.name}"
                        add(name if name in modules else origin, child.lineno)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph() -> dict[str, dict[str, int]]:
    modules = module_files()
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, {})):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = walk(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = walk(module)
            if cycle:
                return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_follow_the_layers():
    upward = []
    for module, targets in import_graph().items():
        for target, line in targets.items():
            if layer_of(target) < layer_of(module):
                upward.append(f"{module}:{line} imports {target} (a layer above it)")
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("imports, cycle", [
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}, ["a", "b", "c", "a"]),
    ({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 2}}, None),
])
def test_cycle_finder(imports, cycle):
    assert find_cycle(imports) == cycle


def test_function_level_imports_count(tmp_path, monkeypatch):
    """An import inside a function is an edge: hiding a cycle there does not hide it here."""
    root = tmp_path / "torch_zyx"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from . import b\n")
    (root / "b.py").write_text("def f():\n    from . import a\n")
    (root / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", root)
    graph = import_graph()
    assert graph["torch_zyx.b"] == {"torch_zyx.a": 2} and graph["torch_zyx.c"] == {}
    assert find_cycle(graph) == ["torch_zyx.a", "torch_zyx.b", "torch_zyx.a"]
