"""Trials that fail, end to end (real local Ray Tune, real MLflow SQLite store): in one
sweep, a diverging trial is retried and reported, an error before the first step is not
retried and is named once, and the other variant finishes. Other faults:
tests/e2e/test_sweep_faults.py."""

import json

import yaml

from tests.support import last_sweep, make_project, stage, tracked_runs, train_args

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


def test_failing_trials_are_retried_or_not_reported_and_the_others_finish(tmp_path):
    """Additive at lr 1e36 overflows its loss at step 2: a real divergence, caught by the
    trainer, which Tune retries once. The plugin scorer ``trialfail`` raises inside every
    trial before its first step: an error every attempt would repeat, so it ends the
    trial without Tune's retry. The stage's one line names each cause once, with the
    variants it hit; additive at lr 0.01 finishes."""
    root = tmp_path
    grid = {"scorer": ["additive"], "hidden_size": [16], "learning_rate": [0.01, 1e36]}
    params = make_project(root, grid=grid, max_epochs=1)
    (root / "scorers").mkdir()
    (root / "scorers" / "trialfail.py").write_text(TRIAL_ONLY_FAILURE)
    sections = yaml.safe_load(params.read_text())
    sections["plugins"] = ["scorers/trialfail.py"]
    sections["train"]["grid"]["scorer"] = ["additive", "trialfail"]
    params.write_text(yaml.safe_dump(sections))
    result = stage("stages.train", params, root, *train_args(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "3 of 4 variants failed" in errors[0], result.stderr[-3000:]
    assert errors[0].count("no kernel for this shape") == 1, errors[0]
    assert errors[0].count("TrainingDivergedError: ") == 1, errors[0]
    assert "trialfail-fwd-h16-s1-lr0.01" in errors[0], errors[0]
    assert "trialfail-fwd-h16-s1-lr1e+36" in errors[0], errors[0]
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    log = last_sweep(root)["variants"]
    diverging, fine = "additive-fwd-h16-s1-lr1e+36", "additive-fwd-h16-s1-lr0.01"
    assert set(sweep["variants"]) == set(log) and len(log) == 4, sorted(log)
    for variant_id, info in sweep["variants"].items():
        if variant_id == fine:
            assert info["status"] == "finished" and log[variant_id]["source"] == "trained"
        elif variant_id == diverging:  # retried once
            assert info["status"] == "failed" and log[variant_id]["attempts"] == 2, info
            # the underlying exception, not Ray's wrapper text
            assert info["error"].startswith("TrainingDivergedError: "), info["error"]
            assert "loss is" in info["error"] and variant_id in errors[0]
        else:  # not retried
            assert variant_id.startswith("trialfail"), variant_id
            assert info["status"] == "failed" and log[variant_id]["attempts"] == 1, info
    _, all_runs = tracked_runs(root)
    statuses = {
        r.info.run_name: r.info.status for r in all_runs if "mlflow.parentRunId" in r.data.tags
    }
    assert {k: v for k, v in statuses.items() if k.startswith("additive")} == {
        fine: "FINISHED",
        diverging: "FAILED",
    }, statuses
    assert "FINISHED" not in {v for k, v in statuses.items() if k.startswith("trialfail")}
    # the study bar never counts a failed variant as done
    bars = [line for line in result.stderr.replace("\r", "\n").splitlines() if "study:" in line]
    assert bars and not any("2/4" in line for line in bars), bars[-3:]
