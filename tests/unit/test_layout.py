"""The package's import graph: no cycle between modules, and each package imports only
the packages its docstring's "May import:" line names (the layering of pipeline/__init__)."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PACKAGE = REPO_ROOT / "pipeline"
SHARED = {"errors", "io", "artifacts", "plotting", "records"}
"""Top-level modules (and the records package) every package may import."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere (lazy imports too)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                found = _resolve(target) if target.startswith("pipeline") else None
                if found and found != name:
                    graph[name].add(found)
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pipeline"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def allowed_imports(package: str) -> set[str]:
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text())) or ""
    match = re.search(r"May import:\s*(.+?)\.?\s*$", doc, flags=re.M | re.S)
    assert match, f"pipeline/{package}/__init__.py: its docstring has no 'May import:' line"
    text = match.group(1)
    if text.startswith("nothing"):
        return set(SHARED)
    text = re.sub(r"\([^)]*\)", "", text)  # remarks in parentheses
    return {w.strip() for w in re.split(r"[,\s]+", text) if w.strip()} | SHARED


def test_no_module_imports_itself_back():
    assert find_cycle(import_graph()) is None, find_cycle(import_graph())


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_each_package_imports_only_what_its_docstring_allows(package):
    allowed = allowed_imports(package)
    used = {
        _package(target)
        for module, targets in import_graph().items()
        if _package(module) == package
        for target in targets
        if _package(target) != package
    }
    assert used <= allowed, f"pipeline/{package} imports {sorted(used - allowed)}"


SCRIPTS = ("benchmarks", "tools")
"""Folders of code that runs from a checkout and is not part of the package."""


def private_uses(source: str) -> list[str]:
    """Private names of the package a script uses: ``from pipeline... import _name``, and
    ``obj._name`` on anything but the script's own ``self``/``cls``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline"):
            found += [a.name for a in node.names if a.name[0] == "_"]
        elif isinstance(node, ast.Attribute) and node.attr[0] == "_" and node.attr[:2] != "__":
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner not in ("self", "cls"):
                found.append(node.attr)
    return found


def test_benchmarks_and_tools_use_no_private_name_of_the_package():
    """Benchmarks and tools drive the public API (callbacks, functions), never internals."""
    offenders = [
        f"{path.name}: {name}"
        for path in (p for folder in SCRIPTS for p in (REPO_ROOT / folder).rglob("*.py"))
        for name in private_uses(path.read_text())
    ]
    assert not offenders, offenders


def test_the_private_name_check_sees_imports_and_attributes():
    script = (
        "from pipeline.train.trainer import _DevSet, Trainer\n"
        "trainer._evaluate(3)\n"
        "self._own = trainer.progress\n"
    )
    assert private_uses(script) == ["_DevSet", "_evaluate"]


SCRIPT_MODULES = sorted(
    ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts)
    for folder in SCRIPTS
    for p in (REPO_ROOT / folder).rglob("*.py")
    if p.name != "__init__.py"
)


@pytest.mark.parametrize("module", SCRIPT_MODULES)
def test_every_benchmark_and_tool_module_imports(module):
    """A benchmark or tool is not run by the tests, but a moved or renamed name it imports
    fails here rather than on the next user's run."""
    assert importlib.import_module(module).__name__ == module


def test_tools_import_nothing_from_benchmarks():
    """Benchmarks may drive a tool (two revisions side by side); a tool never depends on a
    benchmark's code: what both need lives in the package."""
    offenders = []
    for path in sorted((REPO_ROOT / "tools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "benchmarks"]
    assert not offenders, offenders
