"""The report stage's core: eval/ + models/ -> reports/ (HTML, Markdown, figures, CSV).

``reports/index.html`` uses only relative assets (``figures/*.svg``), so the folder can
be opened from disk or served as-is; ``reports/README.md`` renders on a code host.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.artifacts import EvalFiles
from pipeline.config.infra import Infra
from pipeline.config.params import Config
from pipeline.io import atomic_dir, write_json
from pipeline.report.data import StudyData, load_study
from pipeline.report.figures import (
    bleu_by_length_figure,
    forest_figure,
    heatmap_comparison_figure,
    learning_curves_figure,
)
from pipeline.report.samples import sample_translations
from pipeline.scorers import catalogue
from pipeline.tracking.provenance import git_commit, machine

logger = logging.getLogger(__name__)

TABLE_COLUMNS = {
    "variant": "variant",
    "scorer": "scorer",
    "reverse_source": "reversed",
    "hidden_size": "hidden",
    "parameters": "parameters",
    "seed": "seed",
    "bleu_ci": "BLEU [95% CI]",
    "chrf": "chrF",
    "best_dev_bleu": "best dev BLEU",
    "epochs_run": "epochs",
    "converged": "stopped",
    "train_minutes": "train min",
    "tokens_per_s": "tokens/s",
    "status": "status",
}


def heatmap_panels(data: StudyData) -> tuple[list[dict], str]:
    """Panels for the longest attention example, at the largest hidden size."""
    examples = data.evaluation.get("attention_examples") or []
    table = data.first_seeds[data.first_seeds.scorer != "none"]  # one panel per configuration
    if not examples or table.empty:
        return [], ""
    sentence = f"sentence_{_heatmap_example(data, examples)}"
    size = table.hidden_size.max()
    rows = table[table.hidden_size == size].copy()
    rows["order"] = rows.scorer.map(catalogue.order_of)
    panels = []
    for _, row in rows.sort_values(["order", "reverse_source", "variant"]).iterrows():
        folder = data.eval_dir / row.variant
        with np.load(EvalFiles(folder).attention) as arrays:
            matrix = arrays[sentence]
        pieces = json.loads(EvalFiles(folder).attention_pieces.read_text())[sentence]
        target = pieces["target"][: len(matrix)]
        panels.append(
            {
                "label": row.variant,
                "matrix": matrix[: len(target)],
                "source": pieces["source"],
                "target": target,
            }
        )
    title = f"Test {sentence.replace('_', ' ')} ({len(panels[0]['source']) - 1} source subwords)"
    return panels, title


HEATMAP_MAX_SOURCE = 40
"""The heatmap sentence: the longest attention example with at most this many source
subwords (long enough to show reordering, short enough to read its tick labels)."""


def _heatmap_example(data: StudyData, examples: list[int]) -> int:
    some = data.evaluated.variant[data.evaluated.scorer != "none"].iloc[0]
    pieces = json.loads(EvalFiles(data.eval_dir / some).attention_pieces.read_text())
    fitting = [i for i in examples if len(pieces[f"sentence_{i}"]["source"]) <= HEATMAP_MAX_SOURCE]
    return (fitting or examples)[-1]


def summary_table(data: StudyData) -> pd.DataFrame:
    table = data.table.copy()
    table["bleu_ci"] = [
        f"{b:.2f} [{lo:.2f}, {hi:.2f}]" if pd.notna(b) else "-"
        for b, lo, hi in zip(table.bleu, table.bleu_low, table.bleu_high)
    ]
    table["converged"] = [
        "-" if status == "failed" else "plateau" if plateaued else f"{reason} (not converged)"
        for status, plateaued, reason in zip(table.status, table.plateaued, table.stop_reason)
    ]
    table["order"] = table.scorer.map(catalogue.order_of)
    table = table.sort_values(["hidden_size", "order", "reverse_source", "variant"])
    return table


def _format_cell(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        return (
            "-" if np.isnan(value) else (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}")
        )
    return str(value)


def _table_rows(table: pd.DataFrame) -> list[list[str]]:
    return [[_format_cell(row[c]) for c in TABLE_COLUMNS] for _, row in table.iterrows()]


def numerics(table: pd.DataFrame) -> str:
    """What the variants actually trained and decoded in (``precision: auto`` resolved),
    with counts: "trained in fp32 (18 variants); decoded in fp32 (18 variants)"."""
    parts = []
    for column, verb in (("train_precision", "trained"), ("decode_precision", "decoded")):
        values = table[column].dropna() if column in table else pd.Series(dtype=object)
        counts = values.astype(str).value_counts().sort_index()
        if counts.empty:
            parts.append(f"{verb} in: not recorded")
            continue
        listed = ", ".join(f"{name} ({n} variant{'s' if n != 1 else ''})"
                           for name, n in counts.items())  # fmt: skip
        parts.append(f"{verb} in {listed}")
    return "; ".join(parts) + " (weights, optimizer and loss in fp32; TF32 off on GPUs)"


def provenance(config: Config, root: Path, data: StudyData, experiment: str) -> dict[str, Any]:
    return {
        "git commit": git_commit(root),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "data hash (sha256 of data/tok)": data.sweep.get("data_hash", "unknown"),
        "corpus": data.corpus.get("source", {}),
        "sacreBLEU signature": data.evaluation.get("signature", "unknown"),
        "decoding": f"beam {config.evaluate.beam_size}, length penalty "
        f"{config.evaluate.length_penalty}; verdicts also under greedy decoding",
        "numerics": numerics(data.table),
        "machine": machine(),
        "MLflow": f"experiment {experiment!r}: evaluation and test runs tagged "
        f"eval_key={data.evaluation.get('eval_key', 'unknown')}",
    }


def build_report(
    config: Config,
    infra: Infra,
    root: Path,
    models_dir: Path,
    eval_dir: Path,
    raw_dir: Path,
    out_dir: Path,
) -> dict[str, Any]:
    """Write the whole report folder atomically, then add it to the evaluation's MLflow
    run; returns a small summary."""
    from pipeline.report.pages import render_html, render_markdown

    data = load_study(models_dir, eval_dir, raw_dir)
    main = data.main_decoding
    with atomic_dir(out_dir) as tmp:
        figures = tmp / "figures"
        figures.mkdir()
        written: dict[str, str] = {}
        if not data.by_length.empty:
            first = data.by_length[data.by_length.variant.isin(data.first_seeds.variant)]
            bleu_by_length_figure(first, figures / "bleu_by_length")
            written["bleu_by_length"] = "figures/bleu_by_length"
        shown = data.comparisons[data.comparisons.decoding == main] if len(data.comparisons) else []
        if len(shown):
            forest_figure(shown, figures / "differences")
            written["differences"] = "figures/differences"
        if len(data.curves) and "dev_bleu" in data.curves:
            learning_curves_figure(data.curves, data.evaluated, figures / "learning_curves")
            written["learning_curves"] = "figures/learning_curves"
        panels, title = heatmap_panels(data)
        if panels:
            heatmap_comparison_figure(panels, title, figures / "attention_heatmaps")
            written["heatmaps"] = "figures/attention_heatmaps"
        table = summary_table(data)
        table.drop(columns=["order", "config"]).to_csv(tmp / "summary.csv", index=False)
        write_json(tmp / "findings.json", data.findings)  # what the README's results quote
        data.ranking.to_csv(tmp / "ranking.csv", index=False)
        context = {
            "title": config.report.title,
            "study": data.findings,
            "comparisons": data.comparisons,
            "table": data.table,
            "figures": written,
            "heatmap_title": title,
            "headers": list(TABLE_COLUMNS.values()),
            "rows": _table_rows(table),
            "failed": table[table.status == "failed"][["variant", "error"]].values.tolist(),
            "provenance": provenance(config, root, data, infra.tracking.experiment),
            "params": config.model_dump(),
            "by_length": data.by_length,
            "ranking": data.ranking,
            "samples": sample_translations(data),
            "convergence": convergence(data),
        }
        (tmp / "index.html").write_text(render_html(context), encoding="utf-8")
        (tmp / "README.md").write_text(render_markdown(context), encoding="utf-8")
    log_report(infra, data.evaluation.get("eval_key"), out_dir)
    return {
        "variants": len(data.table),
        "evaluated": len(data.evaluated),
        "findings": {f["title"]: f["verdict"] for f in data.findings["findings"][main]},
        "plateaued": f"{context['convergence']['plateaued']}/{len(data.evaluated)}",
    }


def convergence(data: StudyData) -> dict[str, Any]:
    """How many variants plateaued, which were stopped by a budget, and the baseline."""
    table = data.evaluated
    baselines = sorted({b for b in table.baseline if b})
    return {
        "variants": len(table),
        "plateaued": int(table.plateaued.sum()),
        "flagged": table[~table.plateaued].variant.tolist(),
        "baseline": ", ".join(baselines) or "-",
        "seeds": sorted(int(s) for s in table.seed.unique()),
    }


def log_report(infra: Infra, key: str | None, report_dir: Path) -> None:
    """Attach the report to the evaluation run it was built from (found by its
    ``eval_key``); a missing run is a warning, never a failed report."""
    from pipeline.tracking.store import Tracker, experiment_key

    try:
        tracker = Tracker(infra)
        run = tracker.find_run(experiment_key({"kind": "evaluation", "eval_key": key}))
        if run is None:
            logger.warning("no MLflow evaluation run with eval_key=%s; report not logged", key)
            return
        tracker.log_artifacts(run.info.run_id, [report_dir], subdir="report")
    except Exception as err:  # the report is written; tracking trouble is a warning
        logger.warning("report not logged to MLflow: %s: %s", type(err).__name__, err)
        return
    logger.info("report logged to MLflow run %s", run.info.run_id)
