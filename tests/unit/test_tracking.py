"""The MLflow tracker on a real SQLite store: runs found by tags, recreated when gone."""

import mlflow.pyfunc
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from pipeline.config.infra import Infra, InfraFile, TrackingConfig, resolve
from pipeline.tracking.store import (
    Tracker,
    TrackingError,
    experiment_key,
    resolve_uri,
)
from pipeline.translate import Translator
from pipeline.translate.mlflow_model import save_pyfunc


def infra_at(root, **tracking) -> Infra:
    settings = InfraFile(tracking=TrackingConfig(experiment="unit", **tracking))
    return resolve(settings, root, "test infra")


@pytest.fixture
def tracker(tmp_path, monkeypatch):
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "DVC_EXP_NAME"):
        monkeypatch.delenv(key, raising=False)
    return Tracker(infra_at(tmp_path))


def test_experiment_is_a_model_training_one_with_artifacts_beside_the_store(tracker, tmp_path):
    experiment = tracker.client.get_experiment(tracker.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert experiment.artifact_location == (tmp_path / "mlartifacts").resolve().as_uri()
    assert resolve_uri(infra_at(tmp_path)) == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"


def test_runs_are_found_by_tags_reopened_and_recreated_when_deleted(tracker, monkeypatch):
    key = {"kind": "train", "config_hash": "abc"}
    monkeypatch.setenv("DVC_EXP_NAME", "beam1")
    first = tracker.find_or_start("v", key, reuse=("RUNNING", "FAILED"), params={"a": 1})
    run = tracker.client.get_run(first)
    assert run.data.tags["dvc.exp_name"] == "beam1" and run.data.params == {"a": "1"}
    assert "mlflow.user" in run.data.tags and "mlflow.source.name" in run.data.tags
    tracker.finish(first, "FAILED")
    assert tracker.find_or_start("v", key, reuse=("RUNNING", "FAILED")) == first  # resumed
    tracker.finish(first)
    second = tracker.find_or_start("v", key, reuse=("RUNNING", "FAILED"))
    assert second != first  # a finished run is not appended to
    tracker.client.delete_run(second)
    tracker.client.delete_run(first)
    third = tracker.find_or_start("v", key)
    assert third not in (first, second)  # gone from the store: recreated, no crash
    assert tracker.find_run(key).info.run_id == third


def test_a_variant_is_logged_as_an_mlflow_model_that_translates(
    tracker, tmp_path, tiny_variant_folder, monkeypatch
):
    """The logged model loads with ``mlflow.pyfunc`` and translates as the variant does;
    a registry alias points at it (once, however often it is set)."""
    run_id = tracker.start_run("lr0.01/x")
    names = ("checkpoint.pt", "config.json", "src.model", "tgt.model")
    model_dir = save_pyfunc([tiny_variant_folder / n for n in names], tmp_path / "model")
    model_id = tracker.log_model(run_id, "lr0.01/x", model_dir, step=2, params={"p": 1}, tags={})
    model = tracker.client.get_logged_model(model_id)
    assert model.name == "lr0_01_x" and model.source_run_id == run_id
    outputs = tracker.client.get_run(run_id).outputs.model_outputs
    assert [(o.model_id, o.step) for o in outputs] == [(model_id, 2)]

    # registered under the tracker's store, whatever the process's default URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    version = tracker.register("a/study", model_id, "dev-best", {"variant": "x"})
    assert tracker.register("a/study", model_id, "dev-best", {"variant": "x"}) == version

    sentences = ["ka lo mi nu", "xe va"]
    expected = Translator.load(tiny_variant_folder).translate(sentences, beam_size=2)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracker.uri)  # where a user's store is
    loaded = mlflow.pyfunc.load_model(f"models:/{model_id}")
    assert loaded.predict(sentences, params={"beam_size": 2}) == [t.translation for t in expected]
    assert loaded.predict(pd.DataFrame({"text": sentences[:1]}), params={"beam_size": 2}) == [
        expected[0].translation
    ]
    aliased = mlflow.pyfunc.load_model("models:/a_study@dev-best")  # a name MLflow accepts
    assert aliased.predict(sentences[1:], params={"beam_size": 2}) == [expected[1].translation]


def test_an_unusable_tracking_uri_is_one_line_naming_the_setting(tmp_path):
    with pytest.raises(TrackingError) as err:
        Tracker(infra_at(tmp_path, uri="nosuchscheme://x"))
    message = str(err.value)
    assert message.startswith("tracking.uri 'nosuchscheme://x' (test infra")
    assert "\n" not in message and "unsupported URI" in message


def test_client_sees_what_the_tracker_wrote(tracker, tmp_path):
    run_id = tracker.start_run("x")
    tracker.log_metrics(run_id, {"a": 1.5, "bad": float("nan"), "flag": True}, step=3)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.get_run(run_id).data.metrics == {"a": 1.5}


def test_evaluation_runs_are_per_dvc_experiment(tracker, monkeypatch):
    """Two experiments with the same inputs get their own runs; a plain `dvc repro`
    (no experiment) reuses only runs of no experiment."""
    key = {"kind": "evaluation", "eval_key": "k"}
    plain = tracker.find_or_start("e", experiment_key(key))
    assert "dvc.exp_name" not in tracker.client.get_run(plain).data.tags
    monkeypatch.setenv("DVC_EXP_NAME", "beam1")
    first = tracker.find_or_start("e", experiment_key(key))
    monkeypatch.setenv("DVC_EXP_NAME", "beam3")
    second = tracker.find_or_start("e", experiment_key(key))
    assert len({plain, first, second}) == 3
    assert tracker.client.get_run(first).data.tags["dvc.exp_name"] == "beam1"  # not re-tagged
    monkeypatch.setenv("DVC_EXP_NAME", "beam1")
    assert tracker.find_or_start("e", experiment_key(key)) == first
    monkeypatch.delenv("DVC_EXP_NAME")
    assert tracker.find_or_start("e", experiment_key(key)) == plain


def test_a_test_run_links_its_own_experiments_training_run(tracker, monkeypatch):
    """Two queued experiments both trained a variant: each one's test run links its own
    experiment's training run, not the newest; a variant this experiment took from the
    variant cache links the run that trained it."""
    from pipeline.evaluate.registry import training_runs

    runs = {}
    for name in ("exp-a", "exp-b"):  # b's runs are the newer
        monkeypatch.setenv("DVC_EXP_NAME", name)
        runs[name] = tracker.start_run("additive", tags={"kind": "train", "config_hash": "h"})
    only_b = tracker.start_run("general", tags={"kind": "train", "config_hash": "g"})
    monkeypatch.setenv("DVC_EXP_NAME", "exp-a")
    linked = training_runs(tracker)
    assert linked["h"].info.run_id == runs["exp-a"]
    assert linked["g"].info.run_id == only_b
    monkeypatch.delenv("DVC_EXP_NAME")  # outside an experiment: the newest of any
    assert training_runs(tracker)["h"].info.run_id == runs["exp-b"]
