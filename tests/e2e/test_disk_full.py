"""The train stage on a full disk (real local Ray Tune, MLflow SQLite store): the fault
drill of a small filesystem mounted over ``.study_cache``, then over ``models/``.

How the disk fills: ``tests/e2e/fullfs/sitecustomize.py``, put first on ``PYTHONPATH``,
emulates a filesystem of ``FULL_DISK_BYTES`` at ``FULL_DISK_FOLDER`` in every Python
process of the stage (the driver and the Ray workers it starts inherit its environment):
used space is what the files there hold (4 KiB blocks), a write past the size raises
``OSError(ENOSPC)`` after writing what fits, links and renames across its edge raise
``EXDEV``, and ``statvfs`` reports its size and free space, as a tmpfs of that size
would. A real tmpfs or loop mount needs root, and ``ulimit -f`` gives ``EFBIG`` per
file, not ``ENOSPC`` per filesystem: the hook runs wherever the tests run, as any user.

Each drill: variants trained one at a time; the first run finds no space for a write of
the second variant and must say so in one line naming the path and the space needed,
after its summary line; keep the finished variants, recorded finished; train nothing
after that write; leave no MLflow run RUNNING once a rerun with space has finished.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.artifacts import VariantFiles
from pipeline.records.sweep import SweepRecord
from pipeline.translate.mlflow_model import code_modules
from tests.support import (
    CLEARED_ENV,
    REPO_ROOT,
    last_sweep,
    make_project,
    tiny_infra,
    tracked_runs,
    train_args,
    write_params,
)

HOOK = Path(__file__).parent / "fullfs"
BLOCK = 4096


def _train(params: Path, root: Path, full: tuple[Path, int] | None = None):
    """The train stage as DVC runs it; ``full``: (folder, bytes), a filesystem that size
    mounted at that folder."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    path = [str(REPO_ROOT)]
    if full is not None:
        path.insert(0, str(HOOK))
        env.update(FULL_DISK_FOLDER=str(full[0]), FULL_DISK_BYTES=str(full[1]))
    env.update(PYTHONPATH=os.pathsep.join(path), RAY_DEDUP_LOGS="0")
    command = [sys.executable, "-m", "stages.train", "--params", str(params), *train_args(root)]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _project(root: Path, log_models: bool = True) -> Path:
    """Three variants of one family, trained one after another for one epoch;
    ``log_models``: tracking.log_models."""
    grid, one_at_a_time = {"scorer": ["none"], "seed": [1, 2, 3]}, {"max_concurrent_trials": 1}
    params = make_project(root, grid=grid, max_epochs=1, ray=one_at_a_time)
    infra = tiny_infra(root, one_at_a_time, {"log_models": log_models})
    write_params(root / "infra.yaml", infra)
    return params


def _terminal(stderr: str) -> list[str]:
    """The stage's lines as a terminal shows them (the progress bar redraws in place)."""
    return [line for line in re.split(r"[\r\n]", stderr) if line.strip()]


def _check_stopped_run(result, root: Path, full: Path) -> set[str]:
    """The first run's terminal, records and outputs; returns the finished variants."""
    assert result.returncode == 1, result.stderr[-4000:]
    lines = _terminal(result.stderr)
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-4000:]
    assert f"no space left on device for {full}" in errors[0], errors[0]
    assert re.search(r"\(\S+ [KM]B free there, \S+ [KM]B needed\)", errors[0]), errors[0]
    about_space = [line for line in lines if re.search("space|errno 28", line, re.I)]
    warned = [line for line in about_space if "pipeline.sweep.space" in line]
    assert len(warned) == 1 and "about 1 fit" in warned[0], about_space  # the preflight
    assert set(about_space) == {errors[0], warned[0]}, about_space
    for noise in ("Traceback", "could not collect", "tracking (", "Trial task failed"):
        assert noise not in result.stderr, noise
    summary = [line for line in lines if "sweep stopped:" in line]
    assert len(summary) == 1 and lines.index(summary[0]) < lines.index(errors[0]), lines[-5:]

    sweep = SweepRecord.load(root / "models")
    finished = set(sweep.finished)
    assert finished, sweep
    for variant_id, variant in sweep.variants.items():
        if variant.finished:  # kept, and recorded finished
            assert VariantFiles(root / "models" / variant_id).finished(variant.config_hash)
        else:  # failed with the real cause: the write with its path
            assert f"no space left on device for {full}" in variant.error, variant.error
    attempts = {k: v["attempts"] for k, v in last_sweep(root)["variants"].items()}
    order = sorted(attempts)
    tried = [v for v in order if attempts[v]]
    assert tried == order[: len(tried)] and len(tried) < len(order), attempts
    assert len(tried) <= len(finished) + 1, attempts  # none trained after the failed write
    return finished


def _check_rerun(params: Path, root: Path, kept: set[str], idle: bool = False) -> None:
    """A rerun with space: the rest trained, what finished taken as it was, and no MLflow
    run left RUNNING, even the one whose end record is lost (simulated: set RUNNING
    again, as a journal that ran out of space before the end record leaves it); with
    ``idle``, then a rerun that trains nothing ends such a run too."""
    client, runs = tracked_runs(root, kind="train")
    lost = next(r for r in runs if r.info.run_name in kept and r.info.status == "FINISHED")
    client.update_run(lost.info.run_id, status="RUNNING")
    rerun = _train(params, root)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert "sweep done:" in rerun.stderr
    sweep = SweepRecord.load(root / "models")
    assert set(sweep.finished) == set(sweep.variants), sweep
    log = last_sweep(root)["variants"]
    assert all(log[v]["source"] == "cached" for v in kept), log
    _, after = tracked_runs(root)
    assert not [r.info.run_name for r in after if r.info.status == "RUNNING"]
    assert client.get_run(lost.info.run_id).info.status == "FINISHED"
    if not idle:
        return
    client.update_run(lost.info.run_id, status="RUNNING")
    idle = _train(params, root)
    assert idle.returncode == 0, idle.stderr[-4000:]
    assert client.get_run(lost.info.run_id).info.status == "FINISHED"


def _cache_size() -> int:
    """A size for ``.study_cache`` where the first variant fits whole (its cache entry,
    its logged model in the tracking journal, about 110 KB and the model's code) and the
    second variant's logged model does not (about 190 KB more, and its code): room for
    the code's blocks and half its bytes more. The code of a logged model is the
    project's, so the size follows it as the project grows."""
    sizes = [path.stat().st_size for path in code_modules().values()]
    blocks = sum(-(-size // BLOCK) * BLOCK for size in sizes)
    return blocks + sum(sizes) // 2 + 260_000


def test_a_full_variant_cache_stops_the_sweep_and_a_rerun_finishes_it(tmp_path):
    """The operator's drill: the tracking journal (in ``.study_cache``) finds no room for
    the second variant's logged model."""
    root = tmp_path
    params = _project(root)
    folder = root / ".study_cache"
    first = _train(params, root, (folder, _cache_size()))
    finished = _check_stopped_run(first, root, folder)
    _check_rerun(params, root, finished, idle=True)


def test_a_full_models_folder_stops_the_sweep_and_a_rerun_finishes_it(tmp_path):
    """``models/`` with room for one variant's folder (about 70 KB) and the sweep's
    summary, not for a second folder: the variant is in the variant cache, not in
    ``models/``, and the rerun takes it from there."""
    root = tmp_path
    params = _project(root, log_models=False)  # no logged models: not what this drill is about
    folder = root / "models"
    first = _train(params, root, (folder, 110_000))
    finished = _check_stopped_run(first, root, folder)
    _check_rerun(params, root, finished)
