"""The train stage end to end: real local Ray Tune, real MLflow SQLite store."""

import json

import pandas as pd
import pytest
import torch

from pipeline.io import sha256_file
from pipeline.runtime import netns
from tests.support import (
    LOOPBACK_HEX,
    last_sweep,
    make_project,
    stage,
    stage_process,
    tracked_runs,
    train_args,
    watch_ray_ports,
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny project trained once; while it trains, where its Ray listens
    (``root/ports.json``, :func:`tests.support.watch_ray_ports`)."""
    root = tmp_path_factory.mktemp("sweep")
    params = make_project(root)
    with stage_process("stages.train", params, *train_args(root)) as process:
        ports = watch_ray_ports(process)
        _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    (root / "train.stderr").write_text(stderr)
    (root / "ports.json").write_text(json.dumps(ports))
    return root, params


def test_a_local_study_opens_no_port_beyond_the_loopback(trained):
    """The train stage of a study on one machine runs in a network namespace of its own:
    its Ray's listeners are on the loopback of that namespace only and none of them is
    among this machine's; where the system refuses a namespace the stage says so."""
    root, _ = trained
    ports = json.loads((root / "ports.json").read_text())
    stderr = (root / "train.stderr").read_text()
    if netns._unshare() is None:  # e.g. a container without user namespaces: said, once
        assert stderr.count("Ray listens on every interface") == 1, stderr[-2000:]
        return
    assert ports, "the stage's Ray never listened"
    assert ports["stage_netns"] != ports["own_netns"]
    addresses = {entry.rsplit(":", 1)[0] for entry in ports["ray_listeners"]}
    assert addresses <= LOOPBACK_HEX, addresses
    assert not set(ports["ray_listeners"]) & set(ports["host_listeners"])


def test_grid_trains_every_variant_with_outputs(trained):
    root, _ = trained
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    ids = {"none-fwd-h16-s1", "none-rev-h16-s1", "additive-fwd-h16-s1", "additive-rev-h16-s1"}
    assert set(sweep["variants"]) == ids
    log = last_sweep(root)
    for variant_id, info in sweep["variants"].items():
        assert info["status"] == "finished"
        assert log["variants"][variant_id]["source"] == "trained"
        assert log["variants"][variant_id]["attempts"] == 1
        assert info["parameter_count"] > 0 and info["tokens_per_s"] > 0
        folder = root / "models" / variant_id
        for name in ("checkpoint.pt", "history.csv", "config.json", "result.json"):
            assert (folder / name).is_file(), (variant_id, name)
        assert not (folder / "last.pt").exists(), variant_id  # finished: no resume state
    # one study-level progress bar over the variants, beside Tune's per-trial table
    assert "study: 100%" in (root / "train.stderr").read_text()
    assert "4/4" in (root / "train.stderr").read_text()
    assert (root / "models" / "additive-fwd-h16-s1" / "dev_attention.png").is_file()
    assert not (root / "models" / "none-fwd-h16-s1" / "dev_attention.png").exists()


def test_mlflow_children_nest_under_one_parent_with_epoch_and_summary_metrics(trained):
    root, _ = trained
    client, all_runs = tracked_runs(root)
    parents = [r for r in all_runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in all_runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    assert parents[0].data.tags["kind"] == "sweep" and parents[0].info.status == "FINISHED"
    metrics = parents[0].data.metrics
    assert metrics["variants_trained"] == metrics["variants_finished"] == 4
    assert metrics["variants_failed"] == metrics["variants_cached"] == 0
    assert "sweep.json" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    experiment = client.get_experiment(parents[0].info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    assert last_sweep(root)["parent_run_id"] == parents[0].info.run_id
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert child.info.status == "FINISHED"
        assert child.data.params["model.hidden_size"] == "16"
        assert child.data.tags["variant"] == child.info.run_name
        info = sweep["variants"][child.info.run_name]
        assert child.data.tags["kind"] == "train"
        assert child.data.tags["config_hash"] == info["config_hash"]
        # MLflow's own standard tags: user, source, the git commit of the code
        assert {"mlflow.user", "mlflow.source.name", "mlflow.source.git.commit"} <= set(
            child.data.tags
        )
        # the summary: which epoch was best, and whether it was still improving
        assert child.data.metrics["checkpoint_dev_bleu"] == pytest.approx(info["best_dev_bleu"])
        assert child.data.metrics["checkpoint_epoch"] == info["best_epoch"]
        assert child.data.metrics["peak_dev_bleu"] >= child.data.metrics["checkpoint_dev_bleu"]
        assert child.data.metrics["parameter_count"] == info["parameter_count"]
        assert child.data.metrics["still_improving"] in (0.0, 1.0)
        assert child.data.tags["stop_reason"] == info["stop_reason"]
        # the data it trained on, and the model it produced
        inputs = client.get_run(child.info.run_id).inputs.dataset_inputs
        assert [d.dataset.digest for d in inputs] == [sweep["data_hash"][:36]]
        outputs = client.get_run(child.info.run_id).outputs.model_outputs
        assert len(outputs) == 1 and outputs[0].step == info["best_step"]
        model = client.get_logged_model(outputs[0].model_id)
        assert model.name == child.info.run_name and model.status == "READY"
        # an MLflow model that translates: MLmodel, and the variant's files as artifacts
        files = {a.path for a in client.list_logged_model_artifacts(outputs[0].model_id)}
        assert {"MLmodel", "artifacts"} <= files
        variant_files = client.list_logged_model_artifacts(outputs[0].model_id, "artifacts/variant")
        assert {"checkpoint.pt", "config.json", "src.model", "tgt.model"} == {
            a.path.split("/")[-1] for a in variant_files
        }
        # precision: auto is resolved once, on the trials' hardware, before hashing
        assert child.data.tags["precision"] in ("fp32", "bf16")
        assert child.data.params["train.precision"] == child.data.tags["precision"]
        assert child.data.tags["device"] == "cpu" and child.data.tags["node_id"]
        history = client.get_metric_history(child.info.run_id, "dev_loss")
        rows = pd.read_csv(root / "models" / child.info.run_name / "history.csv")
        assert [m.step for m in history] == rows.step.tolist()  # every dev evaluation
        for metric in ("train_loss", "dev_bleu", "tokens_per_s", "learning_rate"):
            assert metric in child.data.metrics
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"history.csv", "config.json"} <= artifacts


def test_rerun_trains_nothing_and_a_new_axis_value_trains_only_new_variants(trained):
    root, params = trained
    before = {p: sha256_file(p) for p in (root / "models").glob("*/checkpoint.pt")}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    everything = {p: sha256_file(p) for p in (root / "models").rglob("*") if p.is_file()}
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-2000:]
    # byte-identical, sweep.json included: DVC sees an unchanged output
    assert {p: sha256_file(p) for p in (root / "models").rglob("*") if p.is_file()} == everything
    assert {p: sha256_file(p) for p in before} == before
    assert {p: p.stat().st_mtime_ns for p in before} == mtimes
    assert {v["source"] for v in last_sweep(root)["variants"].values()} == {"cached"}
    _, all_runs = tracked_runs(root)
    assert len([r for r in all_runs if "mlflow.parentRunId" in r.data.tags]) == 4
    assert len(tracked_runs(root, kind="sweep")[1]) == 1  # nothing trained: no new sweep run

    grown = params.read_text().replace("- additive\n", "- additive\n    - dot\n")
    assert grown != params.read_text()
    bigger = root / "params-grown.yaml"  # beside infra.yaml: the same project
    bigger.write_text(grown)
    result = stage("stages.train", bigger, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-2000:]
    statuses = {k: v["source"] for k, v in last_sweep(root)["variants"].items()}
    assert statuses["dot-fwd-h16-s1"] == statuses["dot-rev-h16-s1"] == "trained"
    assert [s for k, s in statuses.items() if not k.startswith("dot")] == ["cached"] * 4
    assert {p: sha256_file(p) for p in before} == before


def test_two_independent_runs_of_a_study_give_identical_models_and_metrics(trained, tmp_path):
    """Reproducible means the same params give the same numbers: a second project, with its
    own Ray, cache and MLflow store, trains two of the tiny study's variants (one with
    attention and a reversed source, one without) to the same weights, steps, stop
    reasons and dev metrics (wall time and tokens/s aside)."""

    root, _ = trained
    other = tmp_path / "again"
    params = make_project(other)
    chosen = ["additive-rev-h16-s1", "none-fwd-h16-s1"]
    result = stage("stages.train", params, other, *train_args(other), "--only", *chosen)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (json.loads((r / "models" / "sweep.json").read_text()) for r in (root, other))
    timing = {"wall_time_s", "tokens_per_s", "history", "node_id"}  # where and how fast
    assert sorted(second["variants"]) == sorted(chosen)
    for variant_id, again in second["variants"].items():
        info = first["variants"][variant_id]
        assert {k: v for k, v in info.items() if k not in timing} == {
            k: v for k, v in again.items() if k not in timing
        }, variant_id
        weights = [
            torch.load(r / "models" / variant_id / "checkpoint.pt", weights_only=True)["state_dict"]
            for r in (root, other)
        ]
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0]), variant_id
        curves = [pd.read_csv(r / "models" / variant_id / "history.csv") for r in (root, other)]
        columns = ["step", "dev_loss", "dev_bleu", "learning_rate"]
        pd.testing.assert_frame_equal(curves[0][columns], curves[1][columns])


def test_a_precision_this_machine_cannot_train_stops_in_the_preflight(tmp_path):
    """bf16 where the CPU has no native bf16 (forced with oneDNN's ISA cap): one line that
    names train.precision, before Ray starts, in seconds."""
    root = tmp_path
    grid = {"scorer": ["none", "additive"], "cell": ["lstm"]}  # the GRU runs step by step
    params = make_project(root, grid=grid, precision="bf16", max_epochs=1)
    result = stage(
        "stages.train", params, root, *train_args(root), extra_env={"ONEDNN_MAX_CPU_ISA": "AVX2"}
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith("error: train.precision: bf16 cannot run"), errors[0]
    assert "train.precision: fp32" in errors[0]
    assert not (root / "ray_results").exists()  # stopped before Ray and Tune started
    assert not (root / "mlflow.db").exists()
