"""The Ray runtime: settings, failure causes, GPU requests without CUDA (real Ray)."""

import json
import pickle
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import ray

from pipeline.config.infra import RayConfig, load_infra
from pipeline.data.dataset import TokenizedData
from pipeline.runtime.cluster import (
    ClusterError,
    TaskResources,
    ray_address,
    root_cause,
    runtime_env,
    storage_uri,
)
from tests.support import make_project, stage, train_args


@pytest.mark.parametrize(
    "uri",
    ["s3://bucket/study/runs", "gs://bucket/x", "file:///mnt/nfs/ray", "abfss://c@a.dfs/x"],
)
def test_storage_uri_keeps_its_scheme(uri, tmp_path):
    assert storage_uri(uri, tmp_path) == uri


def test_storage_local_paths_become_absolute(tmp_path):
    assert storage_uri(None, tmp_path) == str(tmp_path.resolve() / ".ray_results")
    assert storage_uri("tune", tmp_path) == str(tmp_path.resolve() / "tune")
    assert storage_uri("/mnt/nfs/tune", tmp_path) == "/mnt/nfs/tune"


def test_ray_client_address_is_refused_with_the_way_out(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ClusterError, match="ray job submit") as err:
        ray_address(RayConfig(address="ray://head:10001"))
    assert "ray.address" in str(err.value) and "\n" not in str(err.value)
    params = tmp_path / "params.yaml"
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")  # the environment, through infra
    with pytest.raises(ClusterError):
        ray_address(load_infra(params).ray)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_address(load_infra(params).ray) == "10.0.0.1:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_address(load_infra(params).ray) is None  # a private local Ray


def test_task_resources_carry_custom_resources():
    resources = TaskResources.from_config(
        RayConfig(cpus_per_trial=2, gpus_per_trial=0.25, resources_per_trial={"big": 1})
    )
    assert resources.ray_options() == {"num_cpus": 2, "num_gpus": 0.25, "resources": {"big": 1}}
    assert resources.tune_resources() == {"cpu": 2, "gpu": 0.25, "big": 1}


def test_runtime_env_ships_the_package_without_caches():
    env = runtime_env()
    (module,) = env["py_modules"]
    assert module.endswith("pipeline") and "__pycache__/" in env["excludes"]


def test_root_cause_unwraps_chains_and_ray_text():
    try:
        try:
            raise ModuleNotFoundError("No module named 'pipeline'")
        except ModuleNotFoundError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "ModuleNotFoundError: No module named 'pipeline'"
    text = (
        "Failure # 1 (occurred at 2026-11-23)\n"
        "ray.exceptions.RayTaskError(ModuleNotFoundError): ray::run_trial()\n"
        '  File "x.py", line 3, in <module>\n'
        "ModuleNotFoundError: No module named 'pipeline'\n"
    )
    assert root_cause(text) == "ModuleNotFoundError: No module named 'pipeline'"
    assert root_cause(None) == "unknown error"


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


def test_tokenized_data_pickles_as_its_files(tiny_tok_dir):
    data = TokenizedData.load(tiny_tok_dir)
    assert data.src_tokenizer.vocab_size > 4  # parsed once here ...
    copy = pickle.loads(pickle.dumps(data))  # ... and not part of the pickle
    assert "src_tokenizer" not in copy.__dict__
    assert copy.fingerprint() == data.fingerprint()
    assert copy.split("dev").src_ids.tolist() == data.split("dev").src_ids.tolist()
    assert copy.tgt_tokenizer.sha256 == data.tgt_tokenizer.sha256


@pytest.mark.slow
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


@pytest.mark.slow
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
