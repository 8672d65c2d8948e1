"""The whole pipeline as a user runs it: `dvc repro` over all five stages on a tiny grid
(real DVC, Ray, MLflow, sacreBLEU, Chromium). One variant family diverges on purpose
(learning rate 1e36) and `allow_partial` lets the study finish around it."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from pipeline.data.tokenized import SubwordTokenizer
from pipeline.report.browser import check_page
from tests.helpers import REPO_ROOT, synthetic_pairs, write_params, write_tsv
from tests.study import tiny_params

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    for name in ("pipeline", "stages"):
        shutil.copytree(REPO_ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "dvc.yaml", root / "dvc.yaml")
    write_tsv(root / "corpus.tsv", synthetic_pairs(400, seed=11, max_words=14))
    params = tiny_params(
        root,
        allow_partial=True,
        grid={
            "scorer": ["none", "additive"],
            "reverse_source": [False, True],
            "learning_rate": [0.01, 1e36],
        },
    )
    params["fetch"]["path"] = "corpus.tsv"
    write_params(root / "params.yaml", params)
    env = dict(os.environ, PYTHONPATH=str(root))
    for key in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)

    def sh(*command, timeout=900):
        return subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )

    assert sh("git", "init", "-q").returncode == 0
    assert sh(sys.executable, "-m", "dvc", "init", "-q").returncode == 0
    (root / ".dvc" / "plots").mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / ".dvc" / "plots" / "bleu_by_length.json", root / ".dvc" / "plots")
    result = sh(sys.executable, "-m", "dvc", "repro")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return root, sh


def test_repro_writes_every_stage_output_and_second_repro_does_nothing(project):
    root, sh = project
    for path in (
        "data/raw/test.tsv",
        "data/tok/train.npz",
        "models/sweep.json",
        "eval/summary.json",
        "metrics/test.json",
        "metrics/bleu_by_length.csv",
        "reports/index.html",
        "reports/README.md",
        "reports/summary.csv",
        "reports/figures/bleu_by_length.svg",
        "reports/figures/bleu_by_length.png",
        "reports/figures/attention_heatmaps.svg",
        "reports/figures/effects.png",
    ):
        assert (root / path).is_file(), path
    again = sh(sys.executable, "-m", "dvc", "repro")
    assert again.returncode == 0 and "Running stage" not in again.stdout


def test_metrics_schema_and_dvc_metrics_and_plots(project):
    root, sh = project
    test = json.loads((root / "metrics" / "test.json").read_text())
    assert set(test) == {
        "none-fwd-h16-s1-lr0.01",
        "none-rev-h16-s1-lr0.01",
        "additive-fwd-h16-s1-lr0.01",
        "additive-rev-h16-s1-lr0.01",
    }
    for values in test.values():
        assert set(values) == {
            "bleu",
            "bleu_low",
            "bleu_high",
            "chrf",
            "bleu_len_1_5",
            "bleu_len_6_10",
            "bleu_len_11plus",
        }
        assert values["bleu_low"] <= values["bleu"] <= values["bleu_high"]
    variant = json.loads(
        (root / "eval" / "additive-rev-h16-s1-lr0.01" / "metrics.json").read_text()
    )
    test_size = len((root / "data" / "raw" / "test.tsv").read_text().splitlines())
    assert sum(b["sentences"] for b in variant["by_length"]) == variant["sentences"] == test_size
    assert variant["signature"].startswith("nrefs:1|") and variant["beam_size"] == 2
    assert 0 <= variant["attention_entropy"] and "sentences_per_s" in variant
    shown = sh(sys.executable, "-m", "dvc", "metrics", "show", "--json")
    assert shown.returncode == 0 and "additive-rev-h16-s1-lr0.01" in shown.stdout
    plots = sh(sys.executable, "-m", "dvc", "plots", "show", "-o", str(root / "dvc_plots"))
    assert plots.returncode == 0, plots.stderr[-2000:]
    assert (root / "dvc_plots" / "index.html").is_file()


def test_attention_examples_are_in_original_source_order(project):
    root, _ = project
    folder = root / "eval" / "additive-rev-h16-s1-lr0.01"
    pieces = json.loads((folder / "attention.json").read_text())
    src_tok = SubwordTokenizer(root / "data" / "tok" / "src.model")
    tests = [line.split("\t")[0] for line in (root / "data/raw/test.tsv").read_text().splitlines()]
    with np.load(folder / "attention.npz") as arrays:
        for key, entry in pieces.items():
            index = int(key.split("_")[1])
            original = src_tok.pieces(src_tok.encode([tests[index]])[0]) + ["</s>"]
            assert entry["source"] == original  # not reversed
            matrix = arrays[key]
            assert matrix.shape[1] == len(original)
            assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-4)


def test_failed_variants_are_reported_not_fatal(project):
    root, _ = project
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    failed = sorted(k for k, v in sweep["variants"].items() if v["status"] == "failed")
    assert failed == sorted(k for k in sweep["variants"] if k.endswith("lr1e+36"))
    summary = pd.read_csv(root / "reports" / "summary.csv")
    assert sorted(summary[summary.status == "failed"].variant) == failed
    assert set(summary[summary.status == "evaluated"].variant) == set(
        json.loads((root / "metrics" / "test.json").read_text())
    )
    readme = (root / "reports" / "README.md").read_text()
    assert "## Failed variants" in readme
    # the overflow shows as inf (fp32 products) or nan (bf16 products: inf - inf)
    assert re.search(r"loss is (inf|nan) at epoch 1 step 2", readme)
    significance = pd.read_csv(root / "eval" / "significance.csv")
    assert set(significance.comparison) == {"vs_none", "reversed_vs_forward"}
    assert len(significance) == 4


def test_test_metrics_land_in_the_training_child_runs(project):
    root, _ = project
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    test = json.loads((root / "metrics" / "test.json").read_text())
    for variant_id, values in test.items():
        run = client.get_run(sweep["variants"][variant_id]["run_id"])
        assert run.data.metrics["test_bleu"] == pytest.approx(values["bleu"])
        assert "test_bleu_len_11plus" in run.data.metrics
        assert "dev_loss" in run.data.metrics  # the same run the sweep logged into


def test_report_renders_in_a_real_browser(project):
    root, _ = project
    page = root / "reports" / "index.html"
    result = check_page(page, screenshot=root / "screenshot.png")
    assert result.images >= 3
    assert result.problems == []
    assert (root / "screenshot.png").stat().st_size > 10_000
    html = page.read_text()
    assert "Findings" in html and "additive-rev-h16-s1-lr0.01" in html and "Provenance" in html
