"""Every test in this folder is end to end (real processes, Ray, MLflow, DVC) and so
``slow``: the folder is the marker, so ``-m "not slow"`` and ``tests/unit`` are the same
tests."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
