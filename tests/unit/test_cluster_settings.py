"""The Ray runtime's settings and failure causes (no Ray started)."""

import pickle

import pytest

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


def test_tokenized_data_pickles_as_its_files(tiny_tok_dir):
    data = TokenizedData.load(tiny_tok_dir)
    assert data.src_tokenizer.vocab_size > 4  # parsed once here ...
    copy = pickle.loads(pickle.dumps(data))  # ... and not part of the pickle
    assert "src_tokenizer" not in copy.__dict__
    assert copy.fingerprint() == data.fingerprint()
    assert copy.split("dev").src_ids.tolist() == data.split("dev").src_ids.tolist()
    assert copy.tgt_tokenizer.sha256 == data.tgt_tokenizer.sha256


def test_rays_token_file_is_made_private_to_its_owner(tmp_path):
    from pipeline.runtime.cluster import private_token_file

    fresh = private_token_file(tmp_path / "a" / "auth_token")
    assert fresh.stat().st_mode & 0o777 == 0o600 and len(fresh.read_text()) == 64
    shared = tmp_path / "b_token"
    shared.write_text("x" * 64)
    shared.chmod(0o644)
    private_token_file(shared)
    assert shared.stat().st_mode & 0o777 == 0o600 and shared.read_text() == "x" * 64
