"""A real two-node Ray cluster whose worker cannot see the repo or the project.

The head (1 CPU) is the driver's node. The worker node (1 CPU and a ``worker_node``
resource the trials and decode tasks ask for) runs in its own mount namespace with an
empty tmpfs over the repository and over the study project: only the virtualenv (bound
back in place) and the Tune storage folder (standing in for S3/NFS) are visible to it.
So a trial or task that opened a file of the repo, imported the project from its path,
or wrote into the driver's folders would fail. Token authentication is on, as Ray 2.60
sets it up for a cluster.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support import (
    REPO_ROOT,
    RayHead,
    kill_train_when_resumable,
    last_sweep,
    make_project,
    ray_nodes,
    stage,
    stop_session,
    train_args,
)

RAY = str(Path(sys.executable).parent / "ray")


def _mount_namespaces_work() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True
    )
    if probe.returncode != 0:
        return f"mount namespaces unavailable: {probe.stderr.decode().strip()}"
    return None


def _hide(paths: list[Path], keep: Path) -> str:
    """Shell lines that hide ``paths`` under empty tmpfs mounts, keeping the virtualenv."""
    lines = []
    venv = Path(sys.prefix).resolve()
    inside = [p for p in paths if venv.is_relative_to(p)]
    if inside:
        lines += [f"mkdir -p {keep}", f"mount --bind {venv} {keep}"]
    for path in paths:
        lines.append(f"mount -t tmpfs tmpfs {path}")
    if inside:
        lines += [f"mkdir -p {venv}", f"mount --bind {keep} {venv}"]
    return " && ".join(lines)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = _mount_namespaces_work()
    if reason:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("cluster")
    projects, storage = tmp_path / "projects", tmp_path / "storage"
    storage.mkdir()
    started = time.perf_counter()
    head = RayHead(num_cpus=1, temp_dir=Path(tempfile.mkdtemp(prefix="rt", dir="/tmp")))
    address, env = head.address, head.environment()
    projects.mkdir()
    hide = _hide([REPO_ROOT, projects], tmp_path / "venv")
    worker_cmd = (
        f"{hide} && cd / && exec {RAY} start --address={address} --node-ip-address=127.0.0.1"
        " --num-cpus=1 --num-gpus=0 --resources='{\"worker_node\": 1}' --block"
    )
    worker = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", worker_cmd],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline, nodes = time.time() + 120, []
        while time.time() < deadline:
            assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
            nodes = [n for n in ray_nodes(address, env) if n["alive"]]
            if any("worker_node" in n["resources"] for n in nodes):
                break
            time.sleep(1)
        workers = [n["id"] for n in nodes if "worker_node" in n["resources"]]
        assert len(nodes) == 2 and len(workers) == 1, nodes
        yield {
            "address": address,
            "env": env,
            "projects": projects,
            "storage": storage,
            "worker_node_id": workers[0],
            "start_s": time.perf_counter() - started,
        }
    finally:
        stop_session(worker)
        head.stop()


def _run(module, params, project, env, *args):
    started = time.perf_counter()
    result = stage(module, params, project, *args, extra_env=env)
    return result, time.perf_counter() - started


def _ray_params(cluster, name: str, **extra) -> dict:
    return {
        "address": cluster["address"],
        "resources_per_trial": {"worker_node": 1},  # only the worker node has it
        "storage_path": str(cluster["storage"] / name),
        **extra,
    }


def test_train_and_evaluate_on_a_worker_without_the_repo(cluster):
    project, storage = cluster["projects"] / "study", cluster["storage"] / "study"
    # a plugin scorer of the project's own: its source travels with the trials and tasks
    grid = {"scorer": ["none", "cosine"], "reverse_source": [False, True], "hidden_size": [16]}
    params = make_project(project, ray=_ray_params(cluster, "study"), plugin=True, grid=grid)
    env = cluster["env"]
    trained, train_s = _run("stages.train", params, project, env, *train_args(project))
    assert trained.returncode == 0, trained.stderr[-4000:]
    paths = [f"--{n}" for n in ("tok", "raw", "models", "out", "metrics")]
    folders = ("data/tok", "data/raw", "models", "eval", "metrics")
    evaluate_args = [x for pair in zip(paths, [str(project / f) for f in folders]) for x in pair]
    evaluated, evaluate_s = _run("stages.evaluate", params, project, env, *evaluate_args)
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    print(
        f"\ntwo-node cluster: start {cluster['start_s']:.1f} s, train {train_s:.1f} s, "
        f"evaluate {evaluate_s:.1f} s"
    )

    sweep = json.loads((project / "models" / "sweep.json").read_text())
    assert len(sweep["variants"]) == 4
    test_sentences = len((project / "data" / "raw" / "test.tsv").read_text().splitlines())
    for variant_id, info in sweep["variants"].items():
        assert info["status"] == "finished", (variant_id, info.get("error"))
        assert info["node_id"] == cluster["worker_node_id"]  # trained on the worker
        folder = project / "models" / variant_id
        for name in ("checkpoint.pt", "history.csv", "config.json", "result.json"):
            assert (folder / name).is_file(), (variant_id, name)
        assert not (folder / "last.pt").exists()
        out = project / "eval" / variant_id
        for name in ("hypotheses.txt", "metrics.json", "by_length.csv", "decode.json"):
            assert (out / name).is_file(), (variant_id, name)
        hypotheses = (out / "hypotheses.txt").read_text().split("\n")[:-1]
        assert len(hypotheses) == test_sentences
        assert (out / "attention.npz").is_file() == variant_id.startswith("cosine")
        assert info["model"]["scorer"] == variant_id.split("-")[0]
    # Tune checkpoints went through the shared storage, nowhere else
    assert list(storage.glob("sweep-*/*/checkpoint_*/checkpoint.pt"))

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("test")
    runs = client.search_runs([experiment.experiment_id])
    kinds = [r.data.tags["kind"] for r in runs]
    assert sorted(kinds) == sorted(["sweep", "evaluation"] + ["train"] * 4 + ["test"] * 4)
    for child in (r for r in runs if r.data.tags["kind"] == "train"):
        assert child.data.tags["node_id"] == cluster["worker_node_id"]
        assert child.data.tags["mlflow.parentRunId"] == last_sweep(project)["parent_run_id"]
        history = client.get_metric_history(child.info.run_id, "dev_bleu")
        steps = [m.step for m in history]  # two epoch-end evaluations, at optimizer steps
        assert len(steps) == 2 and 0 < steps[0] < steps[1]
    for test in (r for r in runs if r.data.tags["kind"] == "test"):
        assert "test_bleu" in test.data.metrics


def test_killed_driver_resumes_from_the_workers_tune_checkpoints(cluster):
    """SIGKILL the driver mid-sweep: the rerun keeps the finished variant and resumes
    the unfinished one on the worker from its last checkpoint in the shared storage."""
    project = cluster["projects"] / "resume"
    ray_params = _ray_params(cluster, "resume", max_concurrent_trials=1)
    params = make_project(project, max_epochs=6, patience=6, ray=ray_params)
    env = cluster["env"]
    started = time.perf_counter()
    finished, resumable = kill_train_when_resumable(params, project, extra_env=env)
    killed_s = time.perf_counter() - started
    assert finished and resumable, "no finished + checkpointed pair before the deadline"
    first = finished[0]
    kept = (first / "checkpoint.pt").read_bytes()
    rerun, rerun_s = _run("stages.train", params, project, env, *train_args(project))
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    print(f"\nkilled after {killed_s:.1f} s; rerun {rerun_s:.1f} s")
    sweep = json.loads((project / "models" / "sweep.json").read_text())
    assert last_sweep(project)["variants"][first.name]["source"] == "cached"
    assert (first / "checkpoint.pt").read_bytes() == kept
    for variant_id in resumable:
        info = sweep["variants"][variant_id]
        assert info["status"] == "finished" and info["resumed_at_step"] > 0, info
        assert info["node_id"] == cluster["worker_node_id"]
    assert all(v["status"] == "finished" for v in sweep["variants"].values())


def test_a_cluster_without_the_resources_a_trial_needs_stops_within_its_bound(cluster):
    """No node has what a trial asks for: the wait is bounded by
    ray.pending_timeout_minutes and ends in one line saying what is missing."""
    project = cluster["projects"] / "starved"
    ray_params = _ray_params(
        cluster, "starved", resources_per_trial={"no_such_node": 1}, pending_timeout_minutes=0.1
    )
    params = make_project(project, ray=ray_params, grid={"scorer": ["none"]}, max_epochs=1)
    result, seconds = _run("stages.train", params, project, cluster["env"], *train_args(project))
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith("error: ray.pending_timeout_minutes: no preflight task"), errors
    assert "no_such_node: 1 per trial, the cluster has 0" in errors[0]
    assert "run the stage again" in errors[0]
    assert seconds < 120  # 6 s of waiting, plus Ray's start and the project's imports
