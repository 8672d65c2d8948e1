"""Trials that fail, end to end (real local Ray Tune, real MLflow SQLite store): a
diverging trial is retried, reported and the others finish; an error before the first
step is not retried and is named once. Other faults: tests/e2e/test_sweep_faults.py."""

import json

import yaml

from tests.support import last_sweep, make_project, stage, tracked_runs, train_args


def test_failing_trial_is_retried_reported_and_others_finish(tmp_path):
    # lr 1e36 makes the loss overflow at step 2: a real divergence, caught by the trainer
    root = tmp_path
    grid = {"scorer": ["additive"], "hidden_size": [16], "learning_rate": [0.01, 1e36]}
    params = make_project(root, grid=grid, max_epochs=1)
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "1 of 2 variants failed" in errors[0], result.stderr[-3000:]
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
    _, all_runs = tracked_runs(root)
    statuses = {
        r.info.run_name: r.info.status for r in all_runs if "mlflow.parentRunId" in r.data.tags
    }
    assert statuses == {
        k: "FAILED" if k.endswith("lr1e+36") else "FINISHED" for k in sweep["variants"]
    }


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
