"""Findings computed from the numbers and set beside what the literature reports.

Every sentence here is filled from measured values; a finding the grid cannot measure
(e.g. one hidden size only) says so rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.report.data import StudyData


@dataclass(frozen=True)
class Finding:
    title: str
    literature: str
    measured: str
    verdict: str  # agrees | disagrees | not measurable


def _bucket_bleu(data: StudyData, variants: pd.Series, bucket_index: int) -> float:
    curves = data.by_length[data.by_length["variant"].isin(variants)]
    labels = list(dict.fromkeys(data.by_length["bucket"]))
    if not labels:
        return float("nan")
    return float(curves[curves["bucket"] == labels[bucket_index]]["bleu"].mean())


def length_effect(data: StudyData) -> Finding:
    table = data.evaluated
    none, attn = table[table.scorer == "none"].variant, table[table.scorer != "none"].variant
    literature = (
        "Without attention BLEU falls sharply as sentences get longer; attention models "
        "stay nearly flat (Bahdanau et al. 2014, Fig. 2; Cho et al. 2014)."
    )
    if none.empty or attn.empty:
        return Finding(
            "Length", literature, "Needs `none` and attention variants.", "not measurable"
        )
    drops = {
        name: _bucket_bleu(data, group, 1) - _bucket_bleu(data, group, -1)
        for name, group in (("none", none), ("attention", attn))
    }
    measured = (
        f"BLEU from the 11-20-word bucket to the longest bucket falls by {drops['none']:.2f} "
        f"without attention and by {drops['attention']:.2f} with attention (mean over variants)."
    )
    verdict = "agrees" if drops["none"] > drops["attention"] else "disagrees"
    return Finding("Length", literature, measured, verdict)


def _reversal_gain(table: pd.DataFrame, scorers) -> float:
    gains = []
    for _, fwd in table[(~table.reverse_source) & table.scorer.isin(scorers)].iterrows():
        twin = table[
            (table.reverse_source)
            & (table.scorer == fwd.scorer)
            & (table.hidden_size == fwd.hidden_size)
        ]
        if not twin.empty:
            gains.append(float(twin.bleu.iloc[0] - fwd.bleu))
    return float(np.mean(gains)) if gains else float("nan")


def reversal_effect(data: StudyData) -> Finding:
    table = data.evaluated
    literature = (
        "Reversing the source helps the no-attention model much more than attention "
        "models (Sutskever et al. 2014: 25.9 -> 30.6 BLEU without attention)."
    )
    none_gain = _reversal_gain(table, ["none"])
    attn_gain = _reversal_gain(table, [s for s in table.scorer.unique() if s != "none"])
    if np.isnan(none_gain) or np.isnan(attn_gain):
        return Finding(
            "Reversal", literature, "Needs reversed and forward twins.", "not measurable"
        )
    measured = (
        f"Reversal changes BLEU by {none_gain:+.2f} without attention and by {attn_gain:+.2f} "
        "with attention (mean over scorers and hidden sizes)."
    )
    verdict = "agrees" if none_gain > attn_gain and none_gain > 0 else "disagrees"
    return Finding("Reversal", literature, measured, verdict)


def additive_vs_multiplicative(data: StudyData) -> Finding:
    table = data.evaluated
    literature = "Additive attention is slightly better than multiplicative (Britz et al. 2017)."
    additive, general = table[table.scorer == "additive"], table[table.scorer == "general"]
    if additive.empty or general.empty:
        return Finding(
            "Scorer", literature, "Needs additive and general variants.", "not measurable"
        )
    delta = float(additive.bleu.mean() - general.bleu.mean())
    measured = f"Additive minus general: {delta:+.2f} BLEU (mean over matching variants)."
    return Finding("Scorer", literature, measured, "agrees" if delta > 0 else "disagrees")


def hidden_size_effect(data: StudyData) -> Finding:
    table = data.evaluated
    literature = (
        "Unscaled dot and general attention get worse as the hidden size grows, "
        "while scaled/additive scorers do not (Britz et al. 2017)."
    )
    sizes = sorted(int(s) for s in table.hidden_size.dropna().unique())
    if len(sizes) < 2:
        return Finding(
            "Hidden size", literature, f"One hidden size only ({sizes}).", "not measurable"
        )

    def change(scorers) -> float:
        rows = table[table.scorer.isin(scorers)]
        return float(
            rows[rows.hidden_size == sizes[-1]].bleu.mean()
            - rows[rows.hidden_size == sizes[0]].bleu.mean()
        )

    unscaled, scaled = change(["dot", "general"]), change(["scaled_dot", "additive"])
    measured = (
        f"From hidden {sizes[0]} to {sizes[-1]}: dot/general {unscaled:+.2f} BLEU, "
        f"scaled dot/additive {scaled:+.2f} BLEU."
    )
    return Finding(
        "Hidden size", literature, measured, "agrees" if unscaled < scaled else "disagrees"
    )


def all_findings(data: StudyData) -> list[Finding]:
    if data.evaluated.empty:
        return []
    return [
        length_effect(data),
        reversal_effect(data),
        additive_vs_multiplicative(data),
        hidden_size_effect(data),
    ]
