"""The train stage's faults end to end (real local Ray Tune, real MLflow SQLite store):
a sweep interrupted and killed, a damaged cache entry, a summary that cannot be written.
A diverging trial and an error before the first step: tests/e2e/test_sweep_failures.py."""

import json
import os
import shutil
import subprocess
import sys

import torch

from pipeline.io import sha256_file
from pipeline.models.checkpoint import load_checkpoint
from tests.support import (
    kill_train_when_resumable,
    last_sweep,
    make_project,
    resumable,
    stage,
    tracked_runs,
    train_args,
)


def _one_trial_at_a_time(root):
    """A project whose variants train one after another for up to 6 epochs, so a sweep
    stopped mid-way has one variant finished and another part-trained."""
    return make_project(root, max_epochs=6, patience=6, ray={"max_concurrent_trials": 1})


def _checkpoint_state(folder):
    """A finished variant's checkpoint as a rerun must leave it: its bytes and mtime."""
    return sha256_file(folder / "checkpoint.pt"), (folder / "checkpoint.pt").stat().st_mtime_ns


def test_a_sweep_interrupted_then_killed_resumes_from_tune_checkpoints_each_time(tmp_path):
    """One sweep, its variants one at a time, stopped twice before it ends: first by
    Ctrl-C, which Tune ends normally (the stage must not call the stopped variants
    failed; it exits non-zero with one line of the project's own resume advice), then by
    SIGKILL of the driver's whole process group. Each time one variant has finished and
    another has reported a Tune checkpoint; each rerun keeps the finished ones untouched
    and resumes the checkpointed one from that checkpoint, not from zero, under the same
    MLflow parent run."""
    root = tmp_path
    params = _one_trial_at_a_time(root)
    outcome: dict = {}
    finished, interrupted = kill_train_when_resumable(params, root, interrupt=outcome)
    assert finished and interrupted, "no finished + checkpointed pair before the deadline"
    errors = [line for line in outcome["stderr"].splitlines() if line.startswith("error:")]
    assert outcome["returncode"] != 0 and len(errors) == 1, outcome["stderr"][-2000:]
    assert "interrupted" in errors[0] and "resume" in errors[0]
    assert "Tuner.restore" not in outcome["stderr"]  # resume advice from the project only
    (parent,) = [
        r.info.run_id for r in tracked_runs(root, kind="sweep")[1] if r.info.status == "RUNNING"
    ]
    first = finished[0]
    kept = {folder: _checkpoint_state(folder) for folder in finished}
    for folder in finished:  # a finished variant's folder translates at once, no --tok
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.translate", str(folder), "--greedy"],
            input="a b c\n",
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]

    later, killed = kill_train_when_resumable(params, root)
    assert later and killed, "no second finished + checkpointed pair before the deadline"
    assert interrupted <= {folder.name for folder in later}  # resumed, then finished
    kept |= {folder: _checkpoint_state(folder) for folder in later}  # the killed run's too

    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-3000:]
    for folder, state in kept.items():  # untouched, and taken as they were
        assert _checkpoint_state(folder) == state, folder.name
        assert last_sweep(root)["variants"][folder.name]["source"] == "cached", folder.name
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    assert all(v["status"] == "finished" for v in sweep["variants"].values())
    for variant_id in interrupted | killed:  # continued from its last Tune checkpoint
        info = sweep["variants"][variant_id]
        assert info["status"] == "finished" and info["resumed_at_step"] > 0, info
        history = (root / "models" / variant_id / "history.csv").read_text().splitlines()
        assert [int(row.split(",")[0]) for row in history[1:]] == list(
            range(1, info["epochs_run"] + 1)
        )
    _, after = tracked_runs(root)
    assert len([r for r in after if r.info.run_name == first.name]) == 1
    # one child run per variant, all under the interrupted sweep's parent run, continued
    children = [r for r in after if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.info.run_name for r in children) == sorted(sweep["variants"])
    assert last_sweep(root)["parent_run_id"] == parent
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent}
    assert len(tracked_runs(root, kind="sweep")[1]) == 1
    assert resumable(root) == {}  # every resume record cleared once its variant finished


def test_a_summary_that_cannot_be_written_then_a_corrupted_cache_entry(tmp_path):
    """Training succeeds, then ``models/sweep.json`` cannot be written (a folder holds its
    name): one line naming the file, exit 1, what stood there left as it was, and no
    MLflow run left RUNNING. Then 64 bytes flip inside one finished variant's checkpoint
    (models/ and the variant cache share the file): the rerun names the damaged entry,
    retrains that variant and serves the retrained weights, which equal the first run's;
    the other variant is taken from the cache."""
    root = tmp_path
    params = make_project(root, grid={"scorer": ["none", "dot"]}, max_epochs=1)
    blocker = root / "models" / "sweep.json"
    (blocker / "kept").mkdir(parents=True)
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "sweep.json" in errors[0], result.stderr[-3000:]
    assert (blocker / "kept").is_dir()  # what stood there is left as it was
    _, all_runs = tracked_runs(root)
    (parent,) = [r for r in all_runs if r.data.tags.get("kind") == "sweep"]
    assert parent.info.status == "FAILED"
    children = {r.info.run_name: r.info.status for r in all_runs if r is not parent}
    assert children == {"none-fwd-h16-s1": "FINISHED", "dot-fwd-h16-s1": "FINISHED"}

    shutil.rmtree(blocker)
    model = root / "models" / "none-fwd-h16-s1" / "checkpoint.pt"
    weights = load_checkpoint(model).model.state_dict()
    entries = (root / ".study_cache" / "variants").glob("*/checkpoint.pt")
    (entry,) = [path for path in entries if os.path.samefile(path, model)]
    data = bytearray(entry.read_bytes())
    data[2000:2064] = bytes(b ^ 0xFF for b in data[2000:2064])
    with open(entry, "r+b") as handle:  # in place, as a disk error would
        handle.write(data)
    rerun = stage("stages.train", params, root, *train_args(root))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"variant cache entry {entry.parent}: checkpoint.pt does not match" in rerun.stderr
    sources = {k: v["source"] for k, v in last_sweep(root)["variants"].items()}
    assert sources == {"none-fwd-h16-s1": "trained", "dot-fwd-h16-s1": "cached"}, sources
    retrained = load_checkpoint(model).model.state_dict()
    assert all(torch.equal(retrained[k], weights[k]) for k in weights)
