"""The Ray runtime, started for real: a task's failure cause, GPU requests without CUDA,
a local run beside a cluster's address."""

import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import ray

from pipeline.runtime.cluster import (
    root_cause,
)
from tests.support import make_project, stage, train_args


def test_root_cause_of_a_real_ray_task_error():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote
        def fails():
            raise KeyError("missing bucket")

        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get(fails.remote())
        assert root_cause(err.value) == "KeyError: 'missing bucket'"
    finally:
        ray.shutdown()


@pytest.mark.parametrize("precision", ["auto", "fp32"])
def test_gpus_requested_without_cuda_is_a_one_line_error(tmp_path, precision):
    params = make_project(
        tmp_path,
        precision=precision,
        ray={"gpus_per_trial": 1},
    )
    result = stage("stages.train", params, tmp_path, *train_args(tmp_path), timeout=180)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert "ray.gpus_per_trial" in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "models" / "sweep.json").exists()


def test_a_local_run_ignores_the_cluster_ray_last_pointed_to(tmp_path):
    """A stale ``ray_current_cluster`` (left by a killed ``ray start --head``) must not
    make the stage try to join that cluster: with no address it starts its own Ray."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rl", dir="/tmp"))  # short: socket paths
    try:
        (ray_tmp / "ray").mkdir()
        with socket.socket() as sock:  # a port nobody listens on
            sock.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{sock.getsockname()[1]}"
        (ray_tmp / "ray" / "ray_current_cluster").write_text(dead)
        grid = {"scorer": ["none"], "reverse_source": [False], "hidden_size": [16]}
        params = make_project(
            tmp_path, grid=grid, max_epochs=1, ray={"storage_path": str(tmp_path / "tune")}
        )
        env = {"RAY_TMPDIR": str(ray_tmp)}
        result = stage("stages.train", params, tmp_path, *train_args(tmp_path), extra_env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        sweep = json.loads((tmp_path / "models" / "sweep.json").read_text())
        assert [v["status"] for v in sweep["variants"].values()] == ["finished"]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
