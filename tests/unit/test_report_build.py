"""The report stage end to end on synthetic evaluate outputs with the findings' newer fields
(``answer``, a part's ``effect``, the new verdict words): every figure and page is written,
the pages open with the answers, BLEU by length is the seeds' mean, and the table and
provenance say what they cover and where they came from. No training, no MLflow."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from pipeline.artifacts import EvalFiles
from pipeline.config import load_config
from pipeline.config.infra import Infra
from pipeline.records.evaluation import EvaluationSummary, LengthBucket, VariantMetrics
from pipeline.records.sweep import SweepRecord
from pipeline.report import render
from pipeline.report.data import ReportPaths
from pipeline.study.record import (
    BaselineRatio,
    Design,
    EffectOfInterest,
    Family,
    FindingRecord,
    PartEstimate,
    PartRecord,
    StudyRecord,
)
from tests.support import tiny_params, variant_record, write_params

BUCKETS = [("1-5", "inside"), ("6-10", "inside"), ("11+", "beyond")]
SCORERS = ("none", "additive")
SEEDS = (1, 2)


def variant_id(scorer: str, seed: int) -> str:
    return f"{scorer}-fwd-h16-s{seed}"


def write_study(root):
    """models/sweep.json and eval/ as the train and evaluate stages write them."""
    models, out = root / "models", root / "eval"
    models.mkdir()
    variants, summary, curves = {}, {}, []
    for scorer in SCORERS:
        for seed in SEEDS:
            vid = variant_id(scorer, seed)
            variants[vid] = variant_record(
                vid,
                scorer,
                seed,
                model={"reverse_source": False},
                train={"max_steps": 100},
                best_dev_bleu=10.0 + seed,
                steps=50,
                epochs_run=2,
                precision="bf16" if (scorer, seed) == ("none", 1) else "fp32",
            )
            base = 20.0 if scorer == "additive" else 5.0
            by_length = [
                {
                    "bucket": b,
                    "sentences": 20,
                    "training_range": where,
                    "bleu": base - 2 * i + seed,
                    "bleu_low": base - 2 * i + seed - 1,
                    "bleu_high": base - 2 * i + seed + 1,
                }
                for i, (b, where) in enumerate(BUCKETS)
            ]
            files = EvalFiles(out / vid)
            files.folder.mkdir(parents=True)
            buckets = tuple(LengthBucket(**entry) for entry in by_length)
            metrics = VariantMetrics(
                base + seed,
                base,
                base + 2,
                30.0 + base + seed,
                60,
                "sig",
                buckets,
                0,
                1,
                60,
                "cpu",
                "fp32",
                beam_size=5,
            )
            metrics.write(files.metrics)
            files.hypotheses.write_text("a b\n" * 60)
            source, target = ["▁a", "▁b", "</s>"], ["▁A", "▁B", "</s>"]
            with open(files.attention, "wb") as handle:
                np.savez(handle, sentence_3=np.full((3, 3), 1 / 3))
            files.attention_pieces.write_text(
                json.dumps({"sentence_3": {"source": source, "target": target}})
            )
            summary[vid] = {"bleu": base + seed}
            curves += [
                {"variant": vid, "epoch": e, "wall_time": 30.0 * e, "dev_bleu": e + seed}
                for e in (1, 2)
            ]
    SweepRecord("x", variants).write(models)
    EvaluationSummary("key", summary, [], "sig", [3], dict.fromkeys(variants, "fp32")).write(out)
    pd.DataFrame(curves).to_csv(out / "learning_curves.csv", index=False)
    findings = study_findings()
    findings.write(out / "findings.json")
    rows = []
    for f in findings.main:
        for p in f.parts:
            e = p.estimate
            rows.append(
                {
                    "family": "primary",
                    "finding": f.title,
                    "comparison": p.label,
                    "name": p.label,
                    "margin": p.margin,
                    "decoding": "beam",
                    **{k: getattr(e, k) for k in ("estimate", "low", "high", "p", "mde", "seeds")},
                    "per_seed": json.dumps(e.per_seed),
                }
            )
    pd.DataFrame(rows).to_csv(out / "comparisons.csv", index=False)
    ranking = [
        {
            "rank": i + 1,
            "scorer": s,
            "seeds": 2,
            "reference": s == "additive",
            "plateaued": 2,
            "bleu_inside": b,
            "low_inside": b - 1,
            "high_inside": b + 1,
            "per_seed_inside": json.dumps({"1": b, "2": b}),
            "bleu_all": b,
            "low_all": b - 1,
            "high_all": b + 1,
            "per_seed_all": "{}",
            "decoding": "beam",
        }
        for i, (s, b) in enumerate((("additive", 21.5), ("none", 6.5)))
    ]
    pd.DataFrame(ranking).to_csv(out / "ranking.csv", index=False)
    return models, out


def study_findings() -> StudyRecord:
    """eval/findings.json: an agreeing attention finding with its declared effect and
    design, and an equivalent scorer finding on log BLEU with a note and neither."""
    per_seed = {"additive-fwd-h16": {"1": 21.0, "2": 22.0}, "none-fwd-h16": {"1": -6.0}}
    estimate = PartEstimate(15.0, 14.0, 16.0, 0.975, 0.005, 1.0, 2, per_seed, 0.5, 0.4, 0.3, 8.0)
    part = PartRecord("additive - none", "> 0", "agrees", True, 2.0, 0.0, 0.01, estimate)
    scorer = replace(
        part,
        label="additive - none, all",
        claim="equivalent",
        state="equivalent",
        margin=0.5,
        effect=None,
        estimate=replace(estimate, estimate=0.1, low=-0.2, high=0.3),
    )
    seeds = {"additive-fwd-h16": 2, "none-fwd-h16": 2}
    attention = FindingRecord(
        title="Attention",
        literature="p",
        criterion="c",
        verdict="agrees",
        why="w",
        answer="Attention: agrees with the literature.",
        scale="bleu",
        effect_of_interest=EffectOfInterest("> 0", 2.0, "A paper.", "its gain"),
        design=Design("Attention", 2.0, "> 0", "bleu", seeds, 0.5, 0.025, 0.9, True, 2),
        notes=(),
        parts=(part,),
    )
    equivalent = replace(
        attention,
        title="Scorer",
        verdict="equivalent",
        answer="",
        scale="log_bleu",
        effect_of_interest=None,
        design=None,
        notes=("A note.",),
        parts=(scorer,),
    )
    return StudyRecord(
        main_decoding="beam",
        reference="additive",
        reference_chosen_on="mean best dev BLEU over the seeds every candidate has",
        reference_dev_bleu={"additive": 12.5, "none": 11.5},
        excluded_from_confirmatory=(),
        family=Family(2, "Bonferroni", 0.05, 0.975),
        power_from="an earlier run",
        bootstrap="sentences within length strata",
        baseline_ratio=BaselineRatio(0.3, 13.93 / 21.50, "none over additive"),
        decoding_dependent=(),
        findings={"beam": (attention, equivalent)},
    )


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "log_report", lambda *args: None)  # no MLflow here
    params = tiny_params(tmp_path, grid={"scorer": list(SCORERS)})
    params["fetch"]["split"]["max_train_words"] = 10
    config = load_config(write_params(tmp_path / "params.yaml", params))
    models, out = write_study(tmp_path)
    paths = ReportPaths(tmp_path, models, out, tmp_path / "raw", tmp_path / "reports")
    render.build_report(config, Infra.default(tmp_path), paths)
    return tmp_path / "reports"


def test_the_report_is_built_from_the_newer_findings(report):
    for name in ("bleu_by_length", "differences", "learning_curves", "attention_heatmaps"):
        assert (report / "figures" / f"{name}.svg").is_file(), name
    readme = (report / "README.md").read_text()
    lines = readme.splitlines()
    assert lines[2:4] == ["- Attention: agrees with the literature.", "- Scorer: equivalent"]
    assert readme.index("Best scorer") > readme.index("## Verdicts")
    assert "all lengths (1-10 words inside the training cut, 11+ beyond)" in readme
    assert "| 1 | additive (best, chosen on dev) | 2 | 21.50 [20.50, 22.50] |" in readme
    assert "| 51.50 |" in readme  # additive's chrF, the mean of its two seeds
    # BLEU by length: the mean of the seeds (21 and 22 on the first bucket), not seed 1
    assert "| additive, forward, h16 | 1-2 | seeds | 21.5 [" in readme
    provenance = json.loads(readme.split("```json", 1)[1].split("```", 1)[0])
    assert provenance["git commit"] == "unknown"  # tmp_path is no git repository
    assert provenance["numerics"].startswith(  # what each variant's record says it ran in
        "trained in bf16 (1 variant), fp32 (3 variants); decoded in fp32 (4 variants)"
    )
    assert "Effect of interest, declared before the run: +2 BLEU. A paper." in readme
    assert "\nA note.\n" in readme
    copied = StudyRecord.load(report / "findings.json")  # what the README's results quote
    assert copied == study_findings()
    assert (report / "findings.json").read_bytes() == (
        report.parent / "eval" / "findings.json"
    ).read_bytes()
    page = (report / "index.html").read_text()
    assert "<span class='v-equivalent'>equivalent</span>" in page
    # the table's status is the record's (finished | failed); evaluated is its own column
    table = pd.read_csv(report / "summary.csv")
    assert set(table.status) == {"finished"} and table.evaluated.all()
    assert "| finished |" in readme and "not evaluated" not in readme
