"""Collect what the report shows: one table row per variant, by-length curves, tests.

Failed variants stay in the table (status ``failed``, with their error) so a reader sees
what is missing instead of a silently smaller grid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.artifacts import (
    COMPARISONS,
    EVAL_SUMMARY,
    FINDINGS,
    LEARNING_CURVES,
    RANKING,
    SWEEP_FILE,
    EvalFiles,
)
from pipeline.tracking.store import still_improving


class ReportInputError(ValueError):
    """A missing or malformed input of the report stage."""


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ReportInputError(f"{path}: not found (run `dvc repro evaluate`)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ReportInputError(f"{path}: not valid JSON ({err})") from None


@dataclass
class StudyData:
    table: pd.DataFrame  # one row per variant of the grid
    by_length: pd.DataFrame  # variant x bucket
    comparisons: pd.DataFrame  # eval/comparisons.csv: every contrast, every decoding
    sweep: dict[str, Any]
    evaluation: dict[str, Any]
    corpus: dict[str, Any]
    eval_dir: Path
    curves: pd.DataFrame = None  # every dev evaluation of every variant (history rows)
    raw_dir: Path | None = None
    findings: dict[str, Any] | None = None  # eval/findings.json
    ranking: pd.DataFrame | None = None  # eval/ranking.csv, the main decoding's rows

    @property
    def main_decoding(self) -> str:
        return (self.findings or {}).get("main_decoding", "beam")

    @property
    def evaluated(self) -> pd.DataFrame:
        return self.table[self.table["status"] == "evaluated"]

    @property
    def first_seeds(self) -> pd.DataFrame:
        """Evaluated variants, one per configuration: the lowest seed (figures and
        heatmaps show these; the seeds table shows the rest)."""
        table = self.evaluated
        return table[table.seed == table.groupby("config").seed.transform("min")]


def load_study(models_dir: Path, eval_dir: Path, raw_dir: Path) -> StudyData:
    sweep = _read_json(models_dir / SWEEP_FILE)
    evaluation = _read_json(eval_dir / EVAL_SUMMARY)
    corpus = _read_json(raw_dir / "corpus.json") if (raw_dir / "corpus.json").is_file() else {}
    findings = _read_json(eval_dir / FINDINGS)
    comparisons = _read_csv(eval_dir / COMPARISONS)
    ranking = _read_csv(eval_dir / RANKING)
    if len(ranking):
        ranking = ranking[ranking.decoding == findings["main_decoding"]].reset_index(drop=True)
    rows, curves = [], []
    for variant_id, info in sweep["variants"].items():
        row = _base_row(variant_id, info)
        metrics_file = EvalFiles(eval_dir / variant_id).metrics
        if variant_id in evaluation["variants"] and metrics_file.is_file():
            metrics = _read_json(metrics_file)
            row.update(_metric_columns(metrics), status="evaluated")
            curves += [{"variant": variant_id, **b} for b in metrics["by_length"]]
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("bleu", "bleu_low", "bleu_high", "chrf", "attention_entropy"):
        if column not in table:
            table[column] = np.nan
    by_length = pd.DataFrame(curves)
    if not by_length.empty:
        columns = ["variant", "scorer", "reverse_source", "hidden_size", "seed", "config"]
        by_length = by_length.merge(table[columns], on="variant")
    path = eval_dir / LEARNING_CURVES
    history = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["variant"])
    return StudyData(table, by_length, comparisons, sweep, evaluation, corpus, eval_dir,
                     history, raw_dir, findings, ranking)  # fmt: skip


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ReportInputError(f"{path}: not found (run `dvc repro evaluate`)")
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _base_row(variant_id: str, info: dict[str, Any]) -> dict[str, Any]:
    model, train = info.get("model", {}), info.get("train", {})
    seed = train.get("seed", info.get("axes", {}).get("seed", 1))
    config = {k: v for k, v in {**model, **train}.items() if k != "seed"}
    return {
        "variant": variant_id,
        "scorer": model.get("scorer"),
        "reverse_source": bool(model.get("reverse_source")),
        "hidden_size": model.get("hidden_size"),
        "seed": seed,
        "config": json.dumps(config, sort_keys=True),  # every setting but the seed
        "baseline": model.get("baseline", "init_only") if model.get("scorer") == "none" else "",
        "stop_reason": info.get("stop_reason", ""),
        "plateaued": info.get("stop_reason") == "early_stopping",
        "still_improving": bool(still_improving(info)) if "stop_reason" in info else False,
        "best_dev_bleu": info.get("best_dev_bleu", np.nan),
        "epochs_run": info.get("epochs_run", np.nan),
        "steps": info.get("steps", np.nan),
        "status": "failed" if info.get("status") == "failed" else "not evaluated",
        "error": info.get("error") or "",
        "parameters": info.get("parameter_count", np.nan),
        "best_epoch": info.get("best_epoch", np.nan),
        "train_minutes": info.get("wall_time_s", np.nan) / 60,
        "tokens_per_s": info.get("tokens_per_s", np.nan),
    }


def _metric_columns(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "bleu": metrics["bleu"],
        "bleu_low": metrics["bleu_low"],
        "bleu_high": metrics["bleu_high"],
        "chrf": metrics["chrf"],
        "attention_entropy": metrics.get("attention_entropy", np.nan),
        "monotonicity_gap": metrics.get("attention_monotonicity_gap", np.nan),
    }
