"""Two queued DVC experiments run at once on a fresh clone (`dvc queue start -j 2`): both
finish, each with its own sweep, train and evaluation runs, no step logged twice, no
race on the SQLite store that neither found (no stage before train touches MLflow),
each test run linked to its own experiment's training run of the variant and tagged
with the experiment's baseline, and `dvc exp show`'s row of each experiment holding its
parameter and the metrics its own evaluation logged."""

from __future__ import annotations

import json
import re
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests.support import (
    commit_all,
    dvc_repo,
    run_queue,
    shown_experiments,
    synthetic_pairs,
    tiny_infra,
    tiny_params,
    write_tsv,
)


def test_two_queued_experiments_at_once_keep_their_runs_apart(tmp_path):
    root = tmp_path / "clone"
    root.mkdir()
    write_tsv(root / "corpus.tsv", synthetic_pairs(300, seed=11, max_words=12))
    params = tiny_params(root, max_epochs=1, grid={"scorer": ["none", "additive"]})
    params = {"plugins": [], **params}  # a params section DVC tracks must exist
    params["fetch"]["path"] = "corpus.tsv"
    params["evaluate"]["bootstrap_samples"] = 20
    infra = tiny_infra(root)
    infra["ray"]["storage_path"] = None
    sh = dvc_repo(root, params, infra)
    # the data both share, prepared once: DVC's parallel workers can race writing the run
    # cache of a stage they both run (the documented way: docs/infra.md)
    prepared = sh(sys.executable, "-m", "dvc", "repro", "tokenize")
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    commit_all(sh, "clone")
    assert not (root / "mlflow.db").exists()  # a fresh clone: neither finds a store

    # both train the additive variant; each trains one more of its own
    grids = {"exp-a": "[none,additive]", "exp-b": "[additive,general]"}
    for name, scorers in grids.items():
        queued = sh(
            sys.executable,
            "-m",
            "dvc",
            "exp",
            "run",
            "--queue",
            "-n",
            name,
            "-S",
            f"train.grid.scorer={scorers}",
        )
        assert queued.returncode == 0, queued.stderr[-2000:]
    status = run_queue(sh, list(grids), jobs=2)
    for name in grids:
        assert re.search(rf"{name}\s.*Success", status), status

    baseline = sh("git", "rev-parse", "HEAD").stdout.strip()
    shown = sh(sys.executable, "-m", "dvc", "exp", "show", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("test")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    for name, scorers in grids.items():
        mine = [r for r in runs if r.data.tags.get("dvc.exp_name") == name]
        kinds = sorted(r.data.tags["kind"] for r in mine)
        assert kinds.count("sweep") == 1 and kinds.count("evaluation") == 1, (name, kinds)
        trained = {r.data.tags["variant"] for r in mine if r.data.tags["kind"] == "train"}
        own = {s for s in scorers.strip("[]").split(",") if s != "additive"}
        assert {v.split("-")[0] for v in trained} >= own, (name, trained)
        sweep = next(r for r in mine if r.data.tags["kind"] == "sweep")
        for run in mine:
            if run.data.tags["kind"] == "train":  # under its own experiment's sweep
                assert run.data.tags["mlflow.parentRunId"] == sweep.info.run_id
        _check_test_runs_link_their_own_training(client, name, mine)
        _check_shown_row(json.loads(shown.stdout), name, scorers, mine, baseline)
    for run in runs:
        if run.data.tags.get("kind") == "train":
            assert run.info.status == "FINISHED", run.data.tags
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "dev_loss")]
            assert steps and len(steps) == len(set(steps)), (run.data.tags["variant"], steps)
    additive = [
        r
        for r in runs
        if r.data.tags.get("kind") == "train" and r.data.tags["variant"].startswith("additive")
    ]
    assert 1 <= len(additive) <= 2  # trained once and reused, or once by each: never merged


def _check_test_runs_link_their_own_training(client, name: str, mine: list) -> None:
    """Each of experiment ``name``'s test runs links a training run of its variant: its
    own experiment's where it trained one (both may train the shared variant), else the
    one it took the variant from."""
    own = {r.data.tags["config_hash"]: r for r in mine if r.data.tags["kind"] == "train"}
    tests = [r for r in mine if r.data.tags["kind"] == "test"]
    assert len(tests) == 2, (name, [r.info.run_name for r in tests])
    for run in tests:
        config_hash = run.data.tags["config_hash"]
        linked = client.get_run(run.data.tags["training_run_id"])
        assert linked.data.tags["kind"] == "train", (name, run.info.run_name)
        assert linked.data.tags["config_hash"] == config_hash, (name, run.info.run_name)
        if config_hash in own:
            assert linked.info.run_id == own[config_hash].info.run_id, (
                name,
                run.info.run_name,
                linked.data.tags.get("dvc.exp_name"),
            )


def _check_shown_row(shown: list, name: str, scorers: str, mine: list, baseline: str) -> None:
    """``dvc exp show``'s row of experiment ``name``: the scorers it set, and the best
    scorer's test BLEU its own evaluation logged (chosen on dev); its MLflow test runs
    carry the experiment's baseline revision and their scores."""
    rows = shown_experiments(shown, name)
    assert len(rows) == 1, f"experiment {name} not once in `dvc exp show`"
    data = rows[0]["data"]
    grid = data["params"]["params.yaml"]["data"]["train"]["grid"]
    assert grid["scorer"] == scorers.strip("[]").split(","), grid
    tests = [r for r in mine if r.data.tags["kind"] == "test"]
    for run in tests:
        assert run.data.tags["dvc.baseline_rev"] == baseline, run.info.run_name
        assert "test_bleu" in run.data.metrics and "checkpoint_dev_bleu" in run.data.metrics
    (evaluation,) = [r for r in mine if r.data.tags["kind"] == "evaluation"]
    best = evaluation.data.tags["best_scorer"]
    (chosen,) = [r for r in tests if r.data.tags["variant"].startswith(f"{best}-fwd")]
    metrics = data["metrics"]["metrics/test.json"]["data"]
    assert metrics["best_bleu_all"] == pytest.approx(chosen.data.metrics["test_bleu"], abs=0.01)
