"""DVC experiments on a copy of the tiny study (tests/e2e/conftest.py): a plugin scorer
trained like a built-in, a no-op rerun that reruns nothing, models pushed to a DVC remote
and translated in a fresh clone, and `dvc exp run` in the workspace and with `--temp`,
each experiment's runs in MLflow tagged with its name. Queued experiments (`dvc queue
start`, two at once): tests/e2e/test_parallel_experiments.py. The study is built once
per test run and read by tests/e2e/test_study_e2e.py alongside."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.support import dvc, shown_experiments, stages_run, tracked_runs, translate_cli


def test_a_plugin_scorer_trains_decodes_and_is_reported_like_a_built_in(study_copy):
    """scorers/cosine.py, named in params: trained, checkpointed and reloaded, decoded with
    attention, compared with none and the reference, in the metrics, the report and
    MLflow; editing the file makes the train stage stale."""
    root, sh = study_copy
    variant = "cosine-fwd-h16-s1-lr0.01"
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    assert sweep["variants"][variant]["status"] == "finished"
    assert (root / "eval" / variant / "attention.npz").is_file()
    metrics = json.loads((root / "metrics" / "test.json").read_text())
    assert "cosine" in metrics["bleu_inside"]
    comparisons = pd.read_csv(root / "eval" / "comparisons.csv")
    assert "cosine - none" in set(comparisons.name)  # exploratory, against none
    findings = json.loads((root / "eval" / "findings.json").read_text())
    declared = {f["title"]: f for f in findings["findings"]["beam"]}
    assert declared["Cosine vs additive"]["verdict"] == "not testable"  # one seed, unplateaued
    assert "cosine" in (root / "reports" / "index.html").read_text()
    _, runs = tracked_runs(root, kind="test")
    assert f"test:{variant}" in {r.info.run_name for r in runs}
    plugin = root / "scorers" / "cosine.py"
    original = plugin.read_text()
    try:
        plugin.write_text(original + "\n# edited\n")
        status = sh(sys.executable, "-m", "dvc", "status", "train")
        assert "scorers" in status.stdout and "modified" in status.stdout, status.stdout
    finally:
        plugin.write_text(original)
    assert "changed" not in sh(sys.executable, "-m", "dvc", "status", "train").stdout


def test_no_op_train_rerun_reruns_nothing_downstream(study_copy):
    root, sh = study_copy
    forced = dvc(sh, "repro", "--force", "--single-item", "train")
    assert forced.returncode == 0, (forced.stdout + forced.stderr)[-3000:]
    assert "Running stage 'train'" in forced.stdout
    again = dvc(sh, "repro")
    assert again.returncode == 0 and not stages_run(again.stdout), again.stdout


def test_models_pushed_to_a_dvc_remote_translate_in_a_fresh_clone(study_copy, tmp_path):
    """The documented remote: `dvc push` from the study's repo, `git clone` + `dvc pull`
    elsewhere; the clone's `dvc repro` has nothing to train or evaluate, and it
    translates."""
    root, sh = study_copy
    remote = tmp_path / "remote"
    assert dvc(sh, "remote", "add", "--local", "-d", "shared", str(remote)).returncode == 0
    pushed = dvc(sh, "push")
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    clone = tmp_path / "clone"
    assert subprocess.run(["git", "clone", "-q", str(root), str(clone)]).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env["PYTHONPATH"] = str(clone)

    def in_clone(*args):
        return subprocess.run(
            [sys.executable, "-m", "dvc", *args],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    assert in_clone("remote", "add", "--local", "-d", "shared", str(remote)).returncode == 0
    pulled = in_clone("pull")
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    repro = in_clone("repro")
    assert repro.returncode == 0, (repro.stdout + repro.stderr)[-3000:]
    assert stages_run(repro.stdout) == set(), repro.stdout  # only the always-run record
    variant = "additive-fwd-h16-s1-lr0.01"
    done = translate_cli(clone, variant, "--greedy", stdin="la casa\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == translate_cli(root, variant, "--greedy", stdin="la casa\n").stdout


def test_dvc_exp_run_temp_logs_tagged_runs_in_the_repos_store(study_copy):
    root, sh = study_copy
    result = dvc(sh, "exp", "run", "--temp", "-n", "beam1", "-S", "evaluate.beam_size=1")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    _check_experiment_runs(root, sh, "beam1", 1)
    columns = dvc(sh, "exp", "show", "--csv", "--only-changed").stdout.splitlines()[0]
    assert len(columns.split(",")) < 30, columns  # readable: headline metrics only
    # each revision drawn separately: the template splits lines by revision
    plots = dvc(sh, "plots", "diff", "HEAD", "beam1", "--json")
    assert plots.returncode == 0, plots.stderr[-2000:]
    rendered = json.loads(plots.stdout)["data"]["metrics/bleu_by_length.csv"][0]["content"]
    revisions = {d["rev"] for d in rendered["data"]["values"]}
    assert len(revisions) == 2 and rendered["encoding"]["detail"]["field"] == "series"


def test_dvc_exp_run_in_the_workspace(study_copy):
    root, sh = study_copy
    result = dvc(sh, "exp", "run", "-n", "beam4", "-S", "evaluate.beam_size=4")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "Running stage 'train'" not in result.stdout
    _check_experiment_runs(root, sh, "beam4", 4)


def _check_experiment_runs(root, sh, name: str, beam: int) -> None:
    """The experiment's test scores are in MLflow, in runs tagged with its name and
    baseline, found from `dvc exp show`'s row; no training was redone."""
    baseline = sh("git", "rev-parse", "HEAD").stdout.strip()
    client, runs = tracked_runs(root, kind="test", **{"dvc.exp_name": name})
    assert len(runs) == 5, [r.info.run_name for r in runs]
    for run in runs:
        assert run.data.tags["dvc.baseline_rev"] == baseline
        assert run.data.params["evaluate.beam_size"] == str(beam)
        assert "test_bleu" in run.data.metrics and "checkpoint_dev_bleu" in run.data.metrics
    _, evaluations = tracked_runs(root, kind="evaluation", **{"dvc.exp_name": name})
    assert len(evaluations) == 1
    _, trained = tracked_runs(root, kind="train")
    finished = [r for r in trained if r.info.status == "FINISHED"]
    assert len(finished) == 5  # the experiment reused the trained models
    shown = dvc(sh, "exp", "show", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    rows = shown_experiments(json.loads(shown.stdout), name)
    assert rows, f"experiment {name} not in `dvc exp show`"
    row = rows[0]
    metrics = row["data"]["metrics"]["metrics/test.json"]["data"]
    best = evaluations[0].data.tags["best_scorer"]  # chosen on dev
    chosen = [r for r in runs if r.data.tags["variant"].startswith(f"{best}-fwd")]
    assert metrics["best_bleu_all"] == pytest.approx(chosen[0].data.metrics["test_bleu"], abs=0.01)
    assert row["data"]["params"]["params.yaml"]["data"]["evaluate"]["beam_size"] == beam
