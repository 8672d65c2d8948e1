"""The whole pipeline as a user runs it: `dvc repro` over all five stages on a tiny grid
(real DVC, Ray, MLflow, sacreBLEU, Chromium), its outputs, its MLflow runs as the MLflow
server shows them, translation and serving of its models, its console and plots. One
variant diverges on purpose (learning rate 1e36) and `allow_partial` lets the study
finish around it. The study is built once per test run (tests/e2e/conftest.py); DVC
experiments on copies of it: tests/e2e/test_study_experiments.py."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.data.dataset import SubwordTokenizer
from pipeline.study.findings import VERDICTS
from tests.support import (
    needs_browser,
    stages_run,
    tracked_runs,
    translate_cli,
)
from tools.browser import check_page
from tools.mlflow_ui import (
    compare_url,
    free_port,
    mlflow_server,
    newest_evaluation,
    rest,
    runs_url,
    screenshot,
    search_runs,
)


def test_repro_writes_every_stage_output_and_second_repro_does_nothing(study):
    root, sh = study
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
        "reports/figures/differences.png",
        "eval/findings.json",
        "eval/comparisons.csv",
        "eval/ranking.csv",
        "eval/additive-rev-h16-s1-lr0.01/sentence_stats.npz",
        "eval/additive-rev-h16-s1-lr0.01/hypotheses_greedy.txt",
        "reports/figures/learning_curves.svg",
        "eval/learning_curves.csv",
    ):
        assert (root / path).is_file(), path
    again = sh(sys.executable, "-m", "dvc", "repro")
    assert again.returncode == 0 and not stages_run(again.stdout), again.stdout


def test_metrics_schema_and_dvc_metrics_and_plots(study):
    root, sh = study
    summary = json.loads((root / "eval" / "summary.json").read_text())
    assert set(summary["variants"]) == {
        "none-fwd-h16-s1-lr0.01",
        "none-rev-h16-s1-lr0.01",
        "additive-fwd-h16-s1-lr0.01",
        "additive-rev-h16-s1-lr0.01",
        "cosine-fwd-h16-s1-lr0.01",
    }
    # what every variant decoded in (precision resolved), for the report's provenance
    assert summary["decode_precision"] == {v: "fp32" for v in summary["variants"]}
    for values in summary["variants"].values():
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
    # the DVC metrics file: a few headline numbers, all numeric (dvc metrics diff), not
    # one column per variant; the words (best scorer, verdicts) are in eval/summary.json
    test = json.loads((root / "metrics" / "test.json").read_text())
    assert set(test) == {
        "best_bleu_inside",
        "best_bleu_all",
        "bleu_inside",
        "bleu_all",
        "findings",
        "failed_variants",
        "capped_variants",
    }
    flat = pd.json_normalize(test).iloc[0]
    assert all(isinstance(v, int | float) for v in flat) and all(" " not in k for k in flat.index)
    words = summary["headline"]
    # one "best": the attention scorer chosen on dev, quoted with its test BLEU
    assert words["best_scorer"] == "additive" and "dev" in words["best_chosen_on"]
    assert test["best_bleu_all"] == test["bleu_all"]["additive"]
    additive = summary["variants"]["additive-fwd-h16-s1-lr0.01"]["bleu"]
    assert test["bleu_all"]["additive"] == pytest.approx(additive, abs=0.01)
    assert set(test["bleu_inside"]) == {"none", "additive", "cosine"}
    assert test["failed_variants"] == 1
    # one seed: nothing confirmatory can be tested, under either decoding
    assert (
        set(words["verdicts"].values())
        == set(words["verdicts_greedy"].values())
        == {"not testable"}
    )
    assert test["findings"] == {  # every verdict, so dvc exp show's columns stay put
        "agrees_with_the_literature": 0,
        "claimed_direction_at_least_the_effect_of_interest": 0,
        "claimed_direction_not_shown_to_reach_it": 0,
        "claimed_direction_size_not_compared": 0,
        "smaller_than_claimed": 0,
        "opposite_direction": 0,
        "equivalent": 0,
        "not_equivalent": 0,
        "inconclusive": 0,
        "not_testable": len(words["verdicts"]),
    }
    variant = json.loads(
        (root / "eval" / "additive-rev-h16-s1-lr0.01" / "metrics.json").read_text()
    )
    test_size = len((root / "data" / "raw" / "test.tsv").read_text().splitlines())
    assert sum(b["sentences"] for b in variant["by_length"]) == variant["sentences"] == test_size
    assert variant["signature"].startswith("nrefs:1|") and variant["beam_size"] == 2
    assert 0 <= variant["attention_entropy"] and "sentences_per_s" in variant
    shown = sh(sys.executable, "-m", "dvc", "metrics", "show", "--json")
    assert shown.returncode == 0 and "best_bleu_inside" in shown.stdout
    # plots: BLEU by length per configuration (seed means, coloured by scorer), the
    # learning curves (dev BLEU and loss per step), the report's figures as images
    by_length = pd.read_csv(root / "metrics" / "bleu_by_length.csv")
    assert set(by_length.columns) == {
        "configuration",
        "setting",
        "scorer",
        "bucket",
        "sentences",
        "training_range",
        "bleu",
        "seeds",
        "low",
        "high",
    }
    assert (by_length.low <= by_length.bleu).all() and (by_length.bleu <= by_length.high).all()
    assert by_length.groupby("configuration").scorer.nunique().max() == 1
    curves = pd.read_csv(root / "metrics" / "learning_curves.csv")
    assert set(curves.scorer) == {"none", "additive", "cosine"}
    history = pd.read_csv(root / "models" / "additive-rev-h16-s1-lr0.01" / "history.csv")
    assert len(curves[curves.variant == "additive-rev-h16-s1-lr0.01"]) == len(history)
    plots = sh(sys.executable, "-m", "dvc", "plots", "show", "--json")
    assert plots.returncode == 0, plots.stderr[-2000:]
    drawn = json.loads(plots.stdout)["data"]
    assert {"dev_bleu", "dev_loss", "reports/figures/bleu_by_length.png"} <= set(drawn)
    assert drawn["reports/figures/bleu_by_length.png"][0]["type"] == "image"


def test_attention_examples_are_in_original_source_order(study):
    root, _ = study
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


def test_failed_variants_are_reported_not_fatal(study):
    root, _ = study
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    failed = sorted(k for k, v in sweep["variants"].items() if v["status"] == "failed")
    assert failed == ["additive-fwd-h16-s1-lr1e+36"]
    summary = pd.read_csv(root / "reports" / "summary.csv")
    assert sorted(summary[summary.status == "failed"].variant) == failed
    assert set(summary[summary.evaluated].variant) == set(
        json.loads((root / "eval" / "summary.json").read_text())["variants"]
    )
    readme = (root / "reports" / "README.md").read_text()
    assert "## Failed variants" in readme
    # the overflow shows as inf (fp32 products) or nan (bf16 products: inf - inf)
    assert re.search(r"loss is (inf|nan) at epoch 1 step 2", readme)
    comparisons = pd.read_csv(root / "eval" / "comparisons.csv")
    # one seed: the exploratory comparisons, and the params comparison (not testable),
    # under both decodings, intervals around them
    exploratory = comparisons[comparisons.family == "exploratory"]
    assert set(comparisons.decoding) == {"beam", "greedy"}
    assert {"additive - none", "cosine - none"} <= set(exploratory.name)
    comparisons = exploratory
    assert (
        (comparisons.low <= comparisons.estimate) & (comparisons.estimate <= comparisons.high)
    ).all()
    findings = json.loads((root / "eval" / "findings.json").read_text())
    assert findings["reference"] == "additive" and findings["main_decoding"] == "beam"
    # one seed, stopped at the cap: no finding has the plateaued twins it needs
    beam = findings["findings"]["beam"]
    assert all(f["verdict"] == "not testable" and "plateau" in f["why"] for f in beam)
    curves = pd.read_csv(root / "eval" / "learning_curves.csv")
    assert set(curves.variant) == set(summary[summary.evaluated].variant)
    sections = (
        "## Verdicts",
        "## Scorers ranked",
        "## Differences",
        "## Findings in detail",
        "## Learning curves",
        "## Sample translations",
        "## Exploratory comparisons",
    )
    for section in sections:
        assert section in readme, section
    # the report opens with the study's answer, one line per finding (cosine's too)
    opening = readme.split("\n\n")[1].splitlines()
    assert len(opening) == 6 and all(line.startswith("- ") for line in opening)
    ranked = readme.split("## Scorers ranked")[1].split("## ")[0]
    assert "Best scorer, chosen on dev" in ranked
    words = "|".join(re.escape(v) for v in VERDICTS)
    table = readme.split("## Verdicts")[1].split("## ")[0].split("### Baseline gates")[0]
    verdicts = re.findall(rf"\| ((?:{words})(?: [^|]*)?) \|", table)  # a label qualifies it
    assert len(verdicts) == 6  # length, attention, reversal, scorer, hidden size; cosine


def test_test_metrics_land_in_test_runs_linked_to_their_training_runs(study):
    root, _ = study
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    summary = json.loads((root / "eval" / "summary.json").read_text())
    client, (parent,) = tracked_runs(root, kind="evaluation", eval_key=summary["eval_key"])
    _, children = tracked_runs(root, kind="test", eval_key=summary["eval_key"])
    assert sorted(r.info.run_name for r in children) == sorted(
        f"test:{v}" for v in summary["variants"]
    )
    # timed by the work: the evaluation from the stage's start, a test run by its decoding
    assert parent.info.end_time - parent.info.start_time > 1000
    for run in children:
        decoded = json.loads((root / "eval" / run.data.tags["variant"] / "decode.json").read_text())
        elapsed = (run.info.end_time - run.info.start_time) / 1000
        assert elapsed == pytest.approx(decoded["decode_seconds"], abs=0.002)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {
        "study.csv",
        "comparisons.csv",
        "findings.json",
        "report",
    } <= artifacts  # the report stage's too
    assert "index.html" in {
        a.path.split("/")[-1] for a in client.list_artifacts(parent.info.run_id, "report")
    }
    for run in children:
        variant_id = run.data.tags["variant"]
        info, values = sweep["variants"][variant_id], summary["variants"][variant_id]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.metrics["test_bleu"] == pytest.approx(values["bleu"])
        assert "test_bleu_len_11plus" in run.data.metrics
        # beside the test scores, the training summary: best dev BLEU, did it converge
        assert run.data.metrics["checkpoint_dev_bleu"] == pytest.approx(info["best_dev_bleu"])
        assert run.data.metrics["still_improving"] in (0.0, 1.0)
        training = client.get_run(run.data.tags["training_run_id"])
        assert training.data.tags["config_hash"] == info["config_hash"]
        assert "dev_loss" in training.data.metrics  # the run the sweep logged epochs into
        # the same param names as the training run (the axes: what tells variants apart)
        shared = {k for k in run.data.params if k.startswith(("model.", "train."))}
        assert {"model.scorer", "train.seed"} <= shared
        assert {k: run.data.params[k] for k in shared} == {
            k: training.data.params[k] for k in shared
        }
        # test BLEU is a metric of the variant's logged model, measured on the test set
        model = client.get_logged_model(run.data.tags["model_id"])
        assert model.source_run_id == training.info.run_id
        (linked,) = [m for m in model.metrics if m.key == "test_bleu"]
        assert linked.value == pytest.approx(values["bleu"]) and linked.dataset_name == "test"


def test_report_renders_in_a_real_browser(study, tmp_path):
    root, _ = study
    page = root / "reports" / "index.html"
    needs_browser()
    result = check_page(page, screenshot=tmp_path / "screenshot.png")
    assert result.images >= 3
    assert result.problems == []
    assert (tmp_path / "screenshot.png").stat().st_size > 10_000
    html = page.read_text()
    assert "Findings" in html and "additive-rev-h16-s1-lr0.01" in html and "Provenance" in html


def test_mlflow_server_shows_parents_children_and_summary_metrics(study, tmp_path):
    """The store as the MLflow UI sees it: through `mlflow server`'s REST API on
    127.0.0.1, and its pages in headless Chromium (runs, not the GenAI overview)."""
    root, _ = study
    with mlflow_server(f"sqlite:///{root / 'mlflow.db'}") as url:
        experiment = rest(url, "experiments/get-by-name?experiment_name=test")["experiment"]
        tags = {t["key"]: t["value"] for t in experiment["tags"]}
        assert tags["mlflow.experimentKind"] == "custom_model_development"
        experiment_id, parent, children = newest_evaluation(url, "test")
        assert len(children) == 5  # the variants that trained (lr 1e36 diverged), cosine too
        for child in children:
            metrics = {m["key"]: m["value"] for m in child["data"]["metrics"]}
            assert {"test_bleu", "checkpoint_dev_bleu", "peak_dev_bleu", "still_improving"} <= set(
                metrics
            )
        train = search_runs(url, experiment_id, "tags.kind = 'train'")
        sweeps = search_runs(url, experiment_id, "tags.kind = 'sweep'")
        parents = {
            t["value"] for r in train for t in r["data"]["tags"] if t["key"] == "mlflow.parentRunId"
        }
        assert parents == {sweeps[0]["info"]["run_id"]} and len(train) == 6
        ids = [c["info"]["run_id"] for c in children]
        page = compare_url(url, experiment_id, ids)
        text = screenshot(page, tmp_path / "compare.png", "test_bleu")
        assert all(c["info"]["run_name"] in text for c in children)
        # MLflow 3.17's UI starts in its GenAI mode whatever the experiment's kind tag;
        # the runs table is one URL parameter (or the "Model training" toggle) away
        text = screenshot(runs_url(url, experiment_id), tmp_path / "runs.png", "sweep-")
        assert "Run Name" in text and parent["info"]["run_name"] in text
        # the Models tab: every variant's logged model with its test BLEU beside it
        models = f"{url}/#/experiments/{experiment_id}/models?workflowType=machine_learning"
        text = screenshot(models, tmp_path / "models.png", "additive-fwd", width=3000)
        assert "test_bleu" in text and "additive-rev-h16-s1-lr0_01" in text


def test_a_trained_variant_translates_text_as_the_evaluation_decoded_it(study, tmp_path):
    """`python -m pipeline.translate <variant>` on the test sources gives the evaluate
    stage's hypotheses; an exported copy gives them too, alone in another folder."""
    root, _ = study
    variant = "additive-rev-h16-s1-lr0.01"
    sources = [
        line.split("\t")[0]
        for line in (root / "data" / "raw" / "test.tsv").read_text(encoding="utf-8").splitlines()
    ]
    expected = (root / "eval" / variant / "hypotheses.txt").read_text(encoding="utf-8")
    done = translate_cli(root, variant, "--beam", 2, stdin="\n".join(sources) + "\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == expected
    exported = tmp_path / "exported"
    assert translate_cli(root, variant, "--export", exported, stdin="").returncode == 0
    alone = translate_cli(root, exported, "--beam", 2, stdin="\n".join(sources[:5]) + "\n")
    assert alone.stdout.splitlines() == expected.splitlines()[:5]


def test_the_dev_chosen_variant_loads_and_serves_from_the_mlflow_registry(study):
    """`models:/test@dev-best` (the variant with the best dev BLEU of the scorer chosen
    on dev) loads with mlflow.pyfunc and answers HTTP through `mlflow models serve`."""
    root, _ = study
    client, (parent,) = tracked_runs(root, kind="evaluation")
    chosen = parent.data.tags["registered_variant"]
    sweep = json.loads((root / "models" / "sweep.json").read_text())
    additive = {
        i: v["best_dev_bleu"]
        for i, v in sweep["variants"].items()
        if v["status"] == "finished" and v["axes"]["scorer"] == "additive"
    }
    assert chosen == max(additive, key=additive.get)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    sources = ["la casa", "el perro come"]
    local = translate_cli(root, chosen, "--beam", 5, stdin="\n".join(sources) + "\n")
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, mlflow.pyfunc; "
            "print(mlflow.pyfunc.load_model('models:/test@dev-best').predict(sys.argv[1:]))",
            *sources,
        ],
        cwd=root,
        env={**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip() == str(local.stdout.splitlines())
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "models",
            "serve",
            "-m",
            "models:/test@dev-best",
            "--env-manager",
            "local",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=root,
        env={**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(root)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "mlflow models serve did not start"
                time.sleep(1)
        request = urllib.request.Request(
            f"{url}/invocations",
            data=json.dumps({"inputs": sources}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert answer["predictions"] == local.stdout.splitlines()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_train_stage_prints_the_studys_lines_and_rays_go_to_the_run_log(study):
    """The terminal of `dvc repro`'s train stage: the study's lines and bar, at most 60
    lines, none of Ray Tune's tables, checkpoint lines or snapshot warnings; those are
    in the run log whose path the stage prints once."""
    from tests.e2e.conftest import console

    text = console(study[0]).read_text()
    train = text.split("Running stage 'train'", 1)[1].split("Running stage", 1)[0]
    lines = train.split("\n")  # what a terminal scrolls; the bar redraws with \r in place
    assert len(lines) <= 60, train[-3000:]
    for noise in ("│", "Trial status", "Checkpoint successfully created", "snapshotting"):
        assert noise not in train, noise
    named = re.findall(r"Ray, Tune and MLflow log to (\S+\.log)", train)
    assert len(named) == 1, train[-3000:]
    run_log = Path(named[0]).read_text()
    library = [m for m in ("Token authentication", "MLflow database tables") if m in run_log]
    assert library and not any(m in train for m in library), library  # the file's, not ours
    assert "sweep done" in train  # the stage's summary


def test_dvc_plots_show_draws_every_plot_offline(study, tmp_path):
    """`dvc plots show` with the repo's page template (.dvc/config plots.html_template):
    Vega inline, so in a browser without network every Vega plot is drawn and every
    image loads; the length plot's configurations differ by dash, with whole labels."""
    root, sh = study
    shown = sh(sys.executable, "-m", "dvc", "plots", "show", "-o", str(tmp_path / "plots"))
    assert shown.returncode == 0, shown.stderr[-2000:]
    page = tmp_path / "plots" / "index.html"
    assert "cdn.jsdelivr.net" not in page.read_text()
    check = check_page(page, screenshot=tmp_path / "plots.png")
    assert not check.problems, check.problems  # no request failed: nothing from a network
    vega = json.loads(sh(sys.executable, "-m", "dvc", "plots", "show", "--json").stdout)
    views = [k for k, v in vega["data"].items() if v and v[0]["type"] == "vega"]
    assert check.drawn == len(views) >= 3 and check.images >= 4, (check, views)
    spec = vega["data"]["metrics/bleu_by_length.csv"][0]["content"]
    assert spec["encoding"]["strokeDash"]["field"] == "setting"
    settings = {row["setting"] for row in spec["data"]["values"]}
    assert len(settings) >= 2 and all(len(s) <= 40 for s in settings), settings  # fit
