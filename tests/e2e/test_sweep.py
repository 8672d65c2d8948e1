"""The train stage end to end: real local Ray Tune, real MLflow SQLite store."""

import hashlib
import json

import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from pipeline.models.checkpoint import load_checkpoint
from tests.support import (
    kill_train_when_resumable,
    last_sweep,
    make_project,
    resumable,
    stage,
    train_args,
)


def runs(root, kind=None):
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("test")
    found = client.search_runs([experiment.experiment_id])
    return client, [r for r in found if kind is None or r.data.tags.get("kind") == kind]


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    params = make_project(root)
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-3000:]
    (root / "train.stderr").write_text(result.stderr)
    return root, params


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
    client, all_runs = runs(root)
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
        assert child.data.metrics["best_dev_bleu"] == pytest.approx(info["best_dev_bleu"])
        assert child.data.metrics["best_epoch"] == info["best_epoch"]
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
    before = {p: digest(p) for p in (root / "models").glob("*/checkpoint.pt")}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    everything = {p: digest(p) for p in (root / "models").rglob("*") if p.is_file()}
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-2000:]
    # byte-identical, sweep.json included: DVC sees an unchanged output
    assert {p: digest(p) for p in (root / "models").rglob("*") if p.is_file()} == everything
    assert {p: digest(p) for p in before} == before
    assert {p: p.stat().st_mtime_ns for p in before} == mtimes
    assert {v["source"] for v in last_sweep(root)["variants"].values()} == {"cached"}
    _, all_runs = runs(root)
    assert len([r for r in all_runs if "mlflow.parentRunId" in r.data.tags]) == 4
    assert len(runs(root, "sweep")[1]) == 1  # nothing trained: no new sweep run

    grown = params.read_text().replace("- additive\n", "- additive\n    - dot\n")
    assert grown != params.read_text()
    bigger = root / "params-grown.yaml"  # beside infra.yaml: the same project
    bigger.write_text(grown)
    result = stage("stages.train", bigger, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-2000:]
    statuses = {k: v["source"] for k, v in last_sweep(root)["variants"].items()}
    assert statuses["dot-fwd-h16-s1"] == statuses["dot-rev-h16-s1"] == "trained"
    assert [s for k, s in statuses.items() if not k.startswith("dot")] == ["cached"] * 4
    assert {p: digest(p) for p in before} == before


def _one_trial_at_a_time(root):
    """A project whose variants train one after another for up to 6 epochs, so a sweep
    stopped mid-way has one variant finished and another part-trained."""
    return make_project(root, max_epochs=6, patience=6, ray={"max_concurrent_trials": 1})


def test_killed_sweep_resumes_from_tune_checkpoints_without_retraining(tmp_path):
    """SIGKILL the driver once one variant finished and another has reported a Tune
    checkpoint: the rerun keeps the first and resumes the second from that checkpoint."""
    root = tmp_path
    params = _one_trial_at_a_time(root)
    finished, checkpointed = kill_train_when_resumable(params, root)
    assert finished and checkpointed, "no finished + checkpointed pair before the deadline"
    first = finished[0]
    kept = digest(first / "checkpoint.pt"), (first / "checkpoint.pt").stat().st_mtime_ns
    _, before = runs(root)
    first_runs = [r for r in before if r.info.run_name == first.name]

    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (digest(first / "checkpoint.pt"), (first / "checkpoint.pt").stat().st_mtime_ns) == kept
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    assert last_sweep(root)["variants"][first.name]["source"] == "cached"
    assert all(v["status"] == "finished" for v in sweep["variants"].values())
    for variant_id in checkpointed:  # continued from its last Tune checkpoint, not from zero
        info = sweep["variants"][variant_id]
        assert info["status"] == "finished" and info["resumed_at_step"] > 0, info
        history = (root / "models" / variant_id / "history.csv").read_text().splitlines()
        assert [int(row.split(",")[0]) for row in history[1:]] == list(
            range(1, info["epochs_run"] + 1)
        )
    _, after = runs(root)
    assert len([r for r in after if r.info.run_name == first.name]) == len(first_runs) == 1
    # one child run per variant, all under the resumed parent
    children = [r for r in after if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.info.run_name for r in children) == sorted(sweep["variants"])
    parent = last_sweep(root)["parent_run_id"]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent}
    assert len(runs(root, "sweep")[1]) == 1  # the killed sweep's parent run, continued
    assert resumable(root) == {}  # every resume record cleared once its variant finished


def test_failing_trial_is_retried_reported_and_others_finish(tmp_path):
    # lr 1e36 makes the loss overflow at step 2: a real divergence, caught by the trainer
    root = tmp_path
    grid = {"scorer": ["none", "additive"], "hidden_size": [16], "learning_rate": [0.01, 1e36]}
    params = make_project(root, grid=grid, max_epochs=1)
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "2 of 4 variants failed" in errors[0], result.stderr[-3000:]
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    log = last_sweep(root)
    for variant_id, info in sweep["variants"].items():
        if variant_id.endswith("lr1e+36"):
            assert info["status"] == "failed" and log["variants"][variant_id]["attempts"] == 2
            # the underlying exception, not Ray's wrapper text
            assert info["error"].startswith("TrainingDivergedError: "), info["error"]
            assert "loss is" in info["error"] and variant_id in errors[0]
        else:
            assert info["status"] == "finished"
    _, all_runs = runs(root)
    statuses = {
        r.info.run_name: r.info.status for r in all_runs if "mlflow.parentRunId" in r.data.tags
    }
    assert statuses == {
        k: "FAILED" if k.endswith("lr1e+36") else "FINISHED" for k in sweep["variants"]
    }


def test_ctrl_c_leaves_a_resumable_sweep_and_says_so(tmp_path):
    """Tune ends fit() normally on Ctrl-C: the stage must not call the stopped variants
    failed, must exit non-zero with one line, and the rerun resumes them."""
    root = tmp_path
    params = _one_trial_at_a_time(root)
    outcome: dict = {}
    finished, checkpointed = kill_train_when_resumable(params, root, interrupt=outcome)
    assert finished and checkpointed, "no finished + checkpointed pair before the deadline"
    errors = [line for line in outcome["stderr"].splitlines() if line.startswith("error:")]
    assert outcome["returncode"] != 0 and len(errors) == 1, outcome["stderr"][-2000:]
    assert "interrupted" in errors[0] and "resume" in errors[0]
    assert "Tuner.restore" not in outcome["stderr"]  # resume advice from the project only
    (parent,) = [r.info.run_id for r in runs(root, "sweep")[1] if r.info.status == "RUNNING"]

    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    assert last_sweep(root)["parent_run_id"] == parent  # the interrupted sweep's run, reused
    assert all(v["status"] == "finished" for v in sweep["variants"].values())
    assert any(sweep["variants"][k]["resumed_at_step"] > 0 for k in checkpointed)


def test_two_independent_runs_of_a_study_give_identical_models_and_metrics(trained, tmp_path):
    """Reproducible means the same params give the same numbers: a second project, with its
    own Ray, cache and MLflow store, trains the same tiny study to the same weights, steps,
    stop reasons and dev metrics (wall time and tokens/s aside)."""
    import torch

    root, _ = trained
    other = tmp_path / "again"
    params = make_project(other)
    result = stage("stages.train", params, other, *train_args(other))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (json.loads((r / "models" / "sweep.json").read_text()) for r in (root, other))
    timing = {"wall_time_s", "tokens_per_s", "history", "node_id"}  # where and how fast
    assert len(second["variants"]) == 4
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


TRIAL_ONLY_FAILURE = """
import sys

import torch

from pipeline.models.attention import Scorer
from pipeline.scorers import register_scorer


@register_scorer("trialfail", paper="test", formula="q . k, failing inside Ray workers")
class TrialFail(Scorer):
    def score_projected(self, query, keys):
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():  # a trial, not the driver's preflight
            raise RuntimeError("no kernel for this shape")
        return torch.bmm(query, keys.transpose(1, 2))
"""


def test_a_failure_before_the_first_step_is_not_retried_and_named_once(tmp_path):
    """An error every attempt would repeat (before any step) ends the trial without
    Tune's retry; the stage's one line names the cause once, with the variants it hit."""
    root = tmp_path
    params = make_project(root, grid={"scorer": ["none", "dot"], "seed": [1, 2]}, max_epochs=1)
    (root / "scorers").mkdir()
    (root / "scorers" / "trialfail.py").write_text(TRIAL_ONLY_FAILURE)
    sections = yaml.safe_load(params.read_text())
    sections["plugins"] = ["scorers/trialfail.py"]
    sections["train"]["grid"]["scorer"] = ["none", "trialfail"]
    params.write_text(yaml.safe_dump(sections))
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].count("no kernel for this shape") == 1, errors[0]
    assert "2 of 4 variants failed" in errors[0]
    assert "trialfail-fwd-h16-s1" in errors[0] and "trialfail-fwd-h16-s2" in errors[0]
    log = last_sweep(root)
    for variant_id, info in log["variants"].items():
        if variant_id.startswith("trialfail"):
            assert info["status"] == "failed" and info["attempts"] == 1, info
        else:
            assert info["source"] == "trained", info
    # the study bar never counts a failed variant as done
    bars = [line for line in result.stderr.replace("\r", "\n").splitlines() if "study:" in line]
    assert bars and not any("4/4" in line for line in bars), bars[-3:]


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


def test_a_corrupted_cached_variant_is_retrained_not_served(tmp_path):
    """64 flipped bytes inside a finished variant's checkpoint (models/ and the variant
    cache share the file): the rerun names the damaged entry, retrains the variant and
    serves the retrained weights, which equal the first run's."""
    root = tmp_path
    params = make_project(root, grid={"scorer": ["none"]}, max_epochs=1)
    first = stage("stages.train", params, root, *train_args(root))
    assert first.returncode == 0, first.stderr[-3000:]
    model = root / "models" / "none-fwd-h16-s1" / "checkpoint.pt"
    weights = load_checkpoint(model).model.state_dict()
    (entry,) = (root / ".study_cache" / "variants").glob("*/checkpoint.pt")
    data = bytearray(entry.read_bytes())
    data[2000:2064] = bytes(b ^ 0xFF for b in data[2000:2064])
    with open(entry, "r+b") as handle:  # in place, as a disk error would
        handle.write(data)
    rerun = stage("stages.train", params, root, *train_args(root))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"variant cache entry {entry.parent}: checkpoint.pt does not match" in rerun.stderr
    assert last_sweep(root)["variants"]["none-fwd-h16-s1"]["source"] == "trained"
    retrained = load_checkpoint(model).model.state_dict()
    assert all(torch.equal(retrained[k], weights[k]) for k in weights)


def test_an_error_writing_sweep_json_after_training_ends_the_parent_run_failed(tmp_path):
    """Training succeeds, then ``models/sweep.json`` cannot be written (a folder holds its
    name): one line naming the file, exit 1, and no MLflow run left RUNNING."""
    root = tmp_path
    params = make_project(root, grid={"scorer": ["none", "dot"]}, max_epochs=1)
    blocker = root / "models" / "sweep.json"
    (blocker / "kept").mkdir(parents=True)
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "sweep.json" in errors[0], result.stderr[-3000:]
    assert (blocker / "kept").is_dir()  # what stood there is left as it was
    _, all_runs = runs(root)
    (parent,) = [r for r in all_runs if r.data.tags.get("kind") == "sweep"]
    assert parent.info.status == "FAILED"
    children = {r.info.run_name: r.info.status for r in all_runs if r is not parent}
    assert children == {"none-fwd-h16-s1": "FINISHED", "dot-fwd-h16-s1": "FINISHED"}
