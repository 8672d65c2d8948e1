"""dvc.yaml's code deps of each stage equal the files its CLI imports (transitively), so
a code change reruns exactly the stages it affects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.support import REPO_ROOT

PACKAGES = ("pipeline", "stages")
STAGES = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]


def _module_file(name: str) -> Path | None:
    path = REPO_ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _imported_names(path: Path) -> list[str]:
    """Every project module an ``import`` anywhere in ``path`` names (lazy ones too)."""
    package = path.relative_to(REPO_ROOT).with_suffix("").parts[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return [n for n in names if n.split(".")[0] in PACKAGES]


def import_closure(entry: Path) -> set[str]:
    """Repo-relative paths of ``entry`` and every project file it imports, transitively
    (each package's ``__init__.py`` included)."""
    todo, seen = [entry], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_names(path):
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                found = _module_file(".".join(parts[:end]))
                if found is not None and found not in seen:
                    todo.append(found)
    return {str(p.relative_to(REPO_ROOT)) for p in seen}


def declared_code(stage: dict) -> set[str]:
    """The .py files a stage's deps name (a folder stands for every .py file in it)."""
    files = set()
    for dep in stage.get("deps", []):
        path = REPO_ROOT / dep
        if path.is_dir() and dep.split("/")[0] in PACKAGES:
            files |= {str(p.relative_to(REPO_ROOT)) for p in path.rglob("*.py")}
        elif dep.endswith(".py"):
            files.add(dep)
    return files


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_deps_equal_its_import_closure(name):
    module = STAGES[name]["cmd"].split("-m ")[1].split()[0]
    closure = import_closure(REPO_ROOT / (module.replace(".", "/") + ".py"))
    declared = declared_code(STAGES[name])
    assert not closure - declared, f"{name}: imported but not a dep: {sorted(closure - declared)}"
    assert not declared - closure, f"{name}: a dep but not imported: {sorted(declared - closure)}"


def test_closure_follows_lazy_and_relative_imports():
    closure = import_closure(REPO_ROOT / "stages" / "train.py")
    assert "pipeline/train/probes.py" in closure  # imported by the trial entry point
    assert "pipeline/models/rnn.py" in closure  # through encoder -> rnn
    assert "pipeline/report/render.py" not in closure


def test_python_caches_are_dvcignored():
    ignored = (REPO_ROOT / ".dvcignore").read_text().split()
    assert "__pycache__/" in ignored and "*.pyc" in ignored
