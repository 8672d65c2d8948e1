"""Every test in this folder is end to end (real processes, Ray, MLflow, DVC) and so
``slow``: the folder is the marker, so ``-m "not slow"`` and ``tests/unit`` are the same
tests.

The tiny study (:func:`study`) is built once per test session and read by every test that
only reads a study's outputs; a test that changes a study works on a copy of it
(:func:`study_copy`), never on a rebuilt one. Its tests live in two files (what reads it,
what changes a copy of it), which ``make test``'s workers run side by side; the first to
need the study builds it while the other waits."""

import contextlib
import fcntl
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import (
    commit_all,
    dvc_repo,
    shell,
    synthetic_pairs,
    tiny_infra,
    tiny_params,
    write_tsv,
)

HERE = Path(__file__).parent


LONGEST_FIRST = (
    "test_study_e2e.py",  # builds the tiny study the experiments file reads
    "test_sweep_faults.py",
    "test_disk_full.py",
    "test_tracking_outage.py",
    "test_study_experiments.py",  # by the time a worker takes it, the study is built
    "test_sweep_failures.py",
    "test_parallel_experiments.py",
    "test_sweep.py",
    "test_two_node_cluster.py",
    "test_model_env.py",
    "test_cluster.py",
    "test_kernel_build.py",
    "test_stages.py",
)
"""The end-to-end files, longest first (as measured on four workers): ``make test``'s
workers take whole files in collection order, so the long ones do not start last."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)

    def rank(item) -> int:
        path = Path(item.fspath)
        if HERE not in path.parents:
            return len(LONGEST_FIRST) + 1  # unit tests after every end-to-end file
        return LONGEST_FIRST.index(path.name) if path.name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a file's tests keep their order


STUDY_BUILD_S = 1200
"""How long a worker waits for another to finish building the tiny study."""


@pytest.fixture(scope="session")
def study(tmp_path_factory, worker_id):
    """A tiny study as a user's clone has it, after ``dvc repro`` and a commit: real DVC,
    Ray, MLflow. Its grid: none and additive in both source orders at learning rate
    0.01, the plugin scorer ``scorers/cosine.py``, and one additive variant at learning
    rate 1e36, which diverges on purpose (``allow_partial`` lets the study finish around
    it); a comparison is declared in params. Returns ``(root, sh)``.

    Built once per test run: under pytest-xdist the first worker that needs it builds it
    in the run's shared temporary folder while the others wait (at most
    :data:`STUDY_BUILD_S`), then all read it. Read-only: a test that changes the project
    works on :func:`study_copy`."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    root = shared / "study0"
    with open(shared / "study0.lock", "w") as lock:
        deadline = time.monotonic() + STUDY_BUILD_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "another worker's study build timed out"
                time.sleep(1)
        failed = shared / "study0.failed"
        assert not failed.exists(), f"the study build failed on another worker: {failed}"
        if not (shared / "study0.built").exists():
            try:
                _build_study(root)
            except BaseException:
                failed.write_text("failed")
                raise
            (shared / "study0.built").write_text("built")
    return root, shell(root)


def _build_study(root: Path) -> None:
    root.mkdir()
    write_tsv(root / "corpus.tsv", synthetic_pairs(400, seed=11, max_words=14))
    params = tiny_params(
        root,
        allow_partial=True,
        grid={
            "scorer": ["none", "additive"],
            "reverse_source": [False, True],
            "learning_rate": [0.01],
        },
    )
    params["fetch"]["path"] = "corpus.tsv"
    # a scorer of the project's own (scorers/cosine.py), and a comparison declared in params
    params = {"plugins": ["scorers/cosine.py"], **params}
    params["train"]["grid"]["include"] = [
        {"scorer": ["cosine"], "learning_rate": [0.01]},
        {"scorer": ["additive"], "reverse_source": [False], "learning_rate": [1e36]},
    ]
    params["evaluate"]["comparisons"] = [
        {
            "name": "Cosine vs additive",
            "plus": {"scorer": "cosine"},
            "minus": {"scorer": "additive"},
            "effect": 0.5,
        }
    ]
    infra = tiny_infra(root)
    infra["ray"]["storage_path"] = None  # the default, .ray_results in the project root
    sh = dvc_repo(root, params, infra)
    result = sh(sys.executable, "-m", "dvc", "repro", merged=True)
    assert result.returncode == 0, result.stdout[-4000:]
    console(root).write_text(result.stdout)  # what the user's terminal showed
    commit_all(sh, "study")


def console(root: Path) -> Path:
    """Where the :func:`study` fixture keeps its ``dvc repro``'s terminal output."""
    return root.with_name(f"{root.name}-console.txt")


@pytest.fixture
def study_copy(study, tmp_path):
    """A copy of the built study (``cp -a``: its git repo, DVC cache, models, MLflow
    store and artifacts, variant cache) for a test that changes it, its MLflow store
    moved with it (:func:`move_sqlite_paths`), so the copy never writes into the
    original. Returns ``(root, sh)``."""
    root = tmp_path / "study"
    copied = subprocess.run(["cp", "-a", str(study[0]), str(root)], capture_output=True, text=True)
    assert copied.returncode == 0, copied.stderr
    move_sqlite_paths(root / "mlflow.db", study[0], root)
    return root, shell(root)


def move_sqlite_paths(database: Path, old: Path, new: Path) -> None:
    """Rewrite every text value under ``old`` to lie under ``new`` in an SQLite file:
    MLflow's store records absolute artifact locations (experiments, runs, logged models,
    model versions), which would otherwise point a copied store at the original."""
    with contextlib.closing(sqlite3.connect(database)) as connection, connection:
        tables = [
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        for table in tables:
            for column in connection.execute(f'PRAGMA table_info("{table}")').fetchall():
                if column[2].upper().startswith(("TEXT", "VARCHAR")):
                    connection.execute(
                        f'UPDATE "{table}" SET "{column[1]}" = REPLACE("{column[1]}", ?, ?) '
                        f'WHERE "{column[1]}" LIKE ?',
                        (str(old), str(new), f"%{old}%"),
                    )
