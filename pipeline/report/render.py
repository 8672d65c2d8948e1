"""The report stage's core: eval/ + models/ -> reports/ (HTML, Markdown, figures, CSV).

``reports/index.html`` uses only relative assets (``figures/*.svg``), so the folder can
be opened from disk or served as-is; ``reports/README.md`` renders on a code host.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.artifacts import EvalFiles
from pipeline.config.infra import Infra
from pipeline.config.params import Config
from pipeline.io import atomic_dir
from pipeline.records.sweep import FAILED
from pipeline.report.data import ReportPaths, StudyData, length_means, load_study
from pipeline.report.figures import (
    bleu_by_length_figure,
    forest_figure,
    heatmap_comparison_figure,
    learning_curves_figure,
)
from pipeline.report.findings import late_gains, lengths, lock_provenance, ranking_chrf
from pipeline.report.pages import Figures, PageInputs, render_html, render_markdown
from pipeline.report.samples import sample_translations
from pipeline.scorers import catalogue
from pipeline.study.record import FindingRecord
from pipeline.tracking.provenance import machine

logger = logging.getLogger(__name__)

TABLE_COLUMNS = {
    "variant": "variant",
    "scorer": "scorer",
    "reverse_source": "reversed",
    "hidden_size": "hidden",
    "parameters": "parameters",
    "seed": "seed",
    "bleu_ci": "test BLEU, all lengths [95% CI]",
    "chrf": "test chrF, all lengths",
    "best_dev_bleu": "best dev BLEU",
    "epochs_run": "epochs",
    "converged": "stopped",
    "train_minutes": "train min",
    "tokens_per_s": "tokens/s",
    "shown_status": "status",
}


def table_headers(cut: int | None) -> list[str]:
    """The all-variants table's headers; the score columns say which test lengths they
    cover (``fetch.split.max_train_words``: inside the training cut and beyond)."""
    covered = lengths(cut)
    names = dict(TABLE_COLUMNS, bleu_ci=f"test BLEU, {covered} [95% CI]", chrf="test chrF")
    return list(names.values())


def heatmap_panels(data: StudyData) -> tuple[list[dict], str]:
    """Panels for the longest attention example, at the largest hidden size: one per
    configuration (its lowest seed), titled by scorer and source order."""
    examples = data.evaluation.attention_examples
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
        order = "reversed source" if row.reverse_source else "forward source"
        label = f"{row.scorer}, {order}"
        if rows.seed.nunique() > 1:
            label += f", seed {row.seed}"
        panels.append(
            {
                "label": label,
                "matrix": matrix[: len(target)],
                "source": pieces["source"],
                "target": target,
            }
        )
    seeds = f", seed {rows.seed.iloc[0]}" if rows.seed.nunique() == 1 else ""
    title = (
        f"Test {sentence.replace('_', ' ')} ({len(panels[0]['source']) - 1} source subwords), "
        f"hidden size {size}{seeds}"
    )
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
        "-" if status == FAILED else "plateau" if plateaued else f"{reason} (not converged)"
        for status, plateaued, reason in zip(table.status, table.plateaued, table.stop_reason)
    ]
    table["shown_status"] = [
        status if evaluated or status == FAILED else f"{status}, not evaluated"
        for status, evaluated in zip(table.status, table.evaluated)
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
        listed = ", ".join(
            f"{name} ({n} variant{'s' if n != 1 else ''})" for name, n in counts.items()
        )
        parts.append(f"{verb} in {listed}")
    return "; ".join(parts) + " (weights, optimizer and loss in fp32; TF32 off on GPUs)"


PIPELINE_OUTPUTS = ("dvc.lock", "metrics", "reports")
"""Committed files the pipeline itself rewrites: a change there is a result, not a change
to what produced it."""


def commit_state(root: Path) -> str:
    """The commit the report was built from: "abc1234def56", or "abc1234def56 + uncommitted
    changes" when a tracked file other than the pipeline's own outputs
    (``PIPELINE_OUTPUTS``) differs from it (code, params); "unknown" outside git."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return "unknown"
        excluded = [f":(exclude){path}" for path in PIPELINE_OUTPUTS]
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if status.returncode != 0:
        return f"{head.stdout.strip()} (uncommitted changes unknown)"
    dirty = " + uncommitted changes" if status.stdout.strip() else ""
    return head.stdout.strip() + dirty


def test_set_note(corpus: dict[str, Any]) -> str:
    """What the test set was kept from: the sentences earlier studies decoded
    (``fetch.split.exclude_from_test``), from ``corpus.json``."""
    excluded = corpus.get("exclude_from_test") or {}
    if not excluded.get("path"):
        return (
            "The test set was drawn without regard to what earlier studies decoded "
            "(fetch.split.exclude_from_test: null)."
        )
    return (
        f"The test set holds none of the {excluded['sentences']:,} source sentences listed "
        f"in {excluded['path']}, the test sentences earlier studies decoded "
        f"({excluded['in_corpus']:,} of them occur in this corpus), so no declaration made "
        "after reading their results can have been tuned to it."
    )


def provenance(config: Config, root: Path, data: StudyData, experiment: str) -> dict[str, Any]:
    return {
        "git commit": commit_state(root),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "data hash (sha256 of data/tok)": data.sweep.data_hash or "unknown",
        "corpus": data.corpus.get("source", {}),
        "test set": test_set_note(data.corpus),
        "sacreBLEU signature": data.evaluation.signature,
        "decoding": f"beam {config.evaluate.beam_size}, length penalty "
        f"{config.evaluate.length_penalty}; verdicts also under greedy decoding",
        "numerics": numerics(data.table),
        "design": lock_provenance(data.findings),
        "machine": machine(),
        "MLflow": f"experiment {experiment!r}: evaluation and test runs tagged "
        f"eval_key={data.evaluation.eval_key}",
    }


def build_report(config: Config, infra: Infra, paths: ReportPaths) -> dict[str, Any]:
    """Write the whole report folder atomically, then add it to the evaluation's MLflow
    run; returns a small summary."""
    data = load_study(paths.models, paths.eval, paths.raw)
    cut = config.fetch.split.max_train_words
    with atomic_dir(paths.out) as tmp:
        means = length_means(data.by_length)
        figures, heatmap_title = draw_figures(data, means, tmp / "figures")
        table = summary_table(data)
        table.drop(columns=["order", "config", "shown_status"]).to_csv(
            tmp / "summary.csv", index=False
        )
        data.findings.write(tmp / "findings.json")  # what the README's results quote
        data.ranking.to_csv(tmp / "ranking.csv", index=False)
        inputs = PageInputs(
            title=config.report.title,
            study=data.findings,
            comparisons=data.comparisons,
            table=data.table,
            ranking=data.ranking,
            headers=table_headers(cut),
            rows=_table_rows(table),
            failed=table[table.status == FAILED][["variant", "error"]].values.tolist(),
            provenance=provenance(config, paths.root, data, infra.tracking.experiment),
            params=config.model_dump(),
            figures=figures,
            heatmap_title=heatmap_title,
            cut=cut,
            length_means=means,
            chrf=ranking_chrf(data.table, data.ranking),
            samples=sample_translations(data),
            late_gains=late_gains(data.curves, data.evaluated),
        )
        (tmp / "index.html").write_text(render_html(inputs), encoding="utf-8")
        (tmp / "README.md").write_text(render_markdown(inputs), encoding="utf-8")
    log_report(infra, data.evaluation.eval_key, paths.out)
    return {
        "variants": len(data.table),
        "evaluated": len(data.evaluated),
        "findings": data.findings.verdicts(data.main_decoding),
        "plateaued": f"{convergence(data)['plateaued']}/{len(data.evaluated)}",
    }


def draw_figures(data: StudyData, means: pd.DataFrame, folder: Path) -> tuple[Figures, str]:
    """Draw the report's figures into ``folder`` (each as SVG and PNG): BLEU by length,
    the differences, the learning curves and the attention heatmaps, where the study has
    the data for them. Returns which were drawn (:class:`~pipeline.report.pages.Figures`)
    and the heatmaps' title."""
    folder.mkdir()
    drawn = Figures()
    if not means.empty:
        bleu_by_length_figure(means, data.by_length, folder / "bleu_by_length")
        drawn = replace(drawn, bleu_by_length="figures/bleu_by_length")
    main = data.main_decoding
    shown = data.comparisons[data.comparisons.decoding == main] if len(data.comparisons) else []
    if len(shown):
        forest_figure(forest_rows(shown, data.findings.under(main)), folder / "differences")
        drawn = replace(drawn, differences="figures/differences")
    if len(data.curves) and "dev_bleu" in data.curves:
        learning_curves_figure(data.curves, data.evaluated, folder / "learning_curves")
        drawn = replace(drawn, learning_curves="figures/learning_curves")
    panels, title = heatmap_panels(data)
    if panels:
        heatmap_comparison_figure(panels, title, folder / "attention_heatmaps")
        drawn = replace(drawn, heatmaps="figures/attention_heatmaps")
    return drawn, title


def forest_rows(comparisons: pd.DataFrame, findings: Sequence[FindingRecord]) -> pd.DataFrame:
    """The forest plot's rows: ``comparisons`` with each finding part's ``margin`` and
    ``effect`` (``findings.json``) where the table lacks them, matched by finding and
    part label (exploratory rows have neither), and each row's ``scale`` (its finding's:
    BLEU or log BLEU; exploratory rows: BLEU)."""
    parts = {(f.title, p.label): p for f in findings for p in f.parts}
    scales = {f.title: f.scale for f in findings}
    rows = comparisons.copy()
    own = [r.family != "exploratory" for r in rows.itertuples()]
    for column in ("margin", "effect"):
        given = rows[column] if column in rows else pd.Series(np.nan, index=rows.index)
        found = [
            getattr(parts.get((r.finding, r.comparison)), column, None) if mine else None
            for r, mine in zip(rows.itertuples(), own)
        ]
        rows[column] = given.where(given.notna(), pd.Series(found, index=rows.index, dtype=float))
    rows["scale"] = [
        scales.get(r.finding, "bleu") if mine else "bleu" for r, mine in zip(rows.itertuples(), own)
    ]
    return rows


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
