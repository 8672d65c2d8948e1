"""HTML and Markdown pages of the report, from one context built in ``render.py``."""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np
import pandas as pd

from pipeline.evaluation import format_p

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2rem auto;padding:0 1rem;color:#1d2733;line-height:1.45}
h1{font-size:1.6rem}h2{border-bottom:1px solid #d8dee4;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.82rem;margin:.6rem 0}
th,td{border:1px solid #d8dee4;padding:.25rem .5rem;text-align:right}
th{background:#f3f5f7}td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eef0f2}
.agrees{color:#137333;font-weight:600}.disagrees{color:#b3261e;font-weight:600}
.not,.inconclusive{color:#6b7280;font-weight:600}.failed{background:#fdecea}
details{margin:.5rem 0}pre{background:#f6f8fa;padding:.6rem;overflow:auto;font-size:.78rem}
.caption{color:#4b5563;font-size:.85rem}
.findings td{text-align:left;vertical-align:top}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _html_table(headers: list[str], rows: list[list[Any]], row_classes=None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        css = f' class="{row_classes[index]}"' if row_classes and row_classes[index] else ""
        body.append(f"<tr{css}>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _md_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _bleu_cell(bleu: float, low: float, high: float) -> str:
    return f"{bleu:.1f} [{low:.1f}, {high:.1f}]"


def by_length_pivot(by_length: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Variant x bucket BLEU [95% interval], sentence counts and the training range in
    the header (buckets beyond the training cut are extrapolation)."""
    if by_length.empty:
        return [], []
    buckets = list(dict.fromkeys(by_length["bucket"]))
    first = by_length.groupby("bucket", sort=False).first()
    headers = ["variant"] + [
        f"{b} (n={first.loc[b, 'sentences']}"
        + (", beyond cut)" if first.loc[b].get("training_range") == "beyond" else ")")
        for b in buckets
    ]
    rows = []
    for variant, curve in by_length.groupby("variant", sort=False):
        values = curve.set_index("bucket")
        rows.append(
            [variant]
            + [
                _bleu_cell(
                    values.loc[b, "bleu"], values.loc[b, "bleu_low"], values.loc[b, "bleu_high"]
                )
                for b in buckets
            ]
        )
    return headers, rows


def _significance_rows(significance: pd.DataFrame) -> list[list[str]]:
    return [
        [r.comparison, r.variant, r.baseline, f"{r.bleu:.2f}", f"{r.baseline_bleu:.2f}",
         f"{r.delta:+.2f}", format_p(r.p_ar), format_p(r.p_bs), format_p(r.p_holm)]
        for r in significance.itertuples()
    ]  # fmt: skip


_SIG_HEADERS = ["comparison", "variant", "baseline", "BLEU", "baseline BLEU", "ΔBLEU",
                "p (AR)", "p (bootstrap)", "p (AR, Holm)"]  # fmt: skip
_FINDING_HEADERS = ["effect", "literature", "test (stated in advance)", "this study", "verdict"]
_RANK_HEADERS = [
    "rank", "scorer", "seeds", "mean BLEU", "range over seeds", "95% CI (widest)",
    "Δ vs reference (twins)", "p vs reference (Holm)", "p vs none (Holm)", "plateaued",
]  # fmt: skip
_RANK_NOTE = (
    "Largest hidden size, forward source, mean over seeds. Reference: the attention "
    "scorer with the highest mean test BLEU over all its variants (every size, order and "
    "seed), against which the evaluate stage tests each other attention scorer; Δ is the "
    "scorer minus the reference on their twin pairs (same size, order and seed)."
)
_SEED_HEADERS = ["configuration", "seeds", "mean BLEU", "sd", "range", "per seed: BLEU [95% CI]"]


def _finding_cells(f) -> list[str]:
    measured = f.measured + "".join(f" Caveat: {c}." for c in f.caveats)
    return [f.title, f.literature, f.criterion, measured]


def _ranking_rows(ranking: pd.DataFrame) -> list[list[str]]:
    return [
        [r.rank, r.scorer, r.seeds, f"{r.bleu_mean:.2f}", f"{r.bleu_min:.2f}-{r.bleu_max:.2f}",
         f"[{r.bleu_low:.2f}, {r.bleu_high:.2f}]",
         "-" if np.isnan(r.vs_best_delta) else f"{r.vs_best_delta:+.2f}",
         "reference" if r.scorer == ranking.attrs.get("reference") else format_p(r.vs_best_p),
         format_p(r.vs_none_p), r.plateaued]
        for r in ranking.itertuples()
    ]  # fmt: skip


def _ranking_note(ranking: pd.DataFrame) -> str:
    note = f"{_RANK_NOTE} Here: {ranking.attrs.get('reference') or 'none'}."
    seed_range = ranking.attrs.get("seed_range")
    if seed_range:
        gap, scorer = seed_range
        close = _within(ranking, gap)
        note += (
            f" The seeds of one scorer here differ by up to {gap:.2f} BLEU ({scorer}): a "
            "gap smaller than that is within training variance, which the p-values (test "
            "sampling only) do not cover" + (f"; within it: {', '.join(close)}." if close else ".")
        )
    return note


def _within(ranking: pd.DataFrame, gap: float) -> list[str]:
    """Adjacent ranks whose mean BLEU differ by less than ``gap``, as "a ~ b" (the ranking
    is in rank order)."""
    pairs = zip(ranking.itertuples(), ranking.iloc[1:].itertuples())
    return [f"{a.scorer} ~ {b.scorer}" for a, b in pairs if a.bleu_mean - b.bleu_mean < gap]


def _seed_rows(seeds: pd.DataFrame) -> list[list[str]]:
    return [
        [r.configuration, r.seeds, f"{r.bleu_mean:.2f}", f"{r.bleu_sd:.2f}",
         f"{r.bleu_range:.2f}", r.intervals]
        for r in seeds.itertuples()
    ]  # fmt: skip


def _intro(c: dict[str, Any]) -> str:
    conv = c["convergence"]
    corpus = c["provenance"]["corpus"]
    flagged = len(conv["flagged"])
    return (
        f"{len(c['rows'])} variants; corpus: {corpus.get('source_translation', '')} -> "
        f"{corpus.get('target_translation', '')}; no-attention baseline: {conv['baseline']} "
        f"(rnnencdec: Cho et al. 2014's RNN Encoder-Decoder, Bahdanau et al. 2014's "
        f"RNNencdec). {conv['plateaued']} of {conv['variants']} evaluated variants trained "
        f"until their dev BLEU plateaued; {flagged} were stopped by their budget first and "
        "are flagged. Every number is computed by the pipeline; nothing is written by hand."
    )


_CONVERGENCE_NOTE = (
    "Dev BLEU (greedy, the trainer's own) at every evaluation, against epochs and against "
    "training minutes. A hollow end marker: stopped by its budget before a plateau."
)
_SEEDS_NOTE = (
    "Seed spread is training variance; the bracketed intervals are each seed's test-set "
    "bootstrap (test sampling only)."
)
_ONE_SEED = "One seed per configuration: every interval covers test sampling only."


def render_html(c: dict[str, Any]) -> str:
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(c['title'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(c['title'])}</h1>",
        f"<p>{_e(_intro(c))}</p>",
        "<h2>Findings</h2>",
    ]
    finding_rows = "".join(
        "<tr>" + "".join(f"<td>{_e(x)}</td>" for x in _finding_cells(f))
        + f"<td class='{f.verdict.split()[0]}'>{_e(f.verdict)}</td></tr>"
        for f in c["findings"]
    )  # fmt: skip
    parts.append(
        "<table class='findings'><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in _FINDING_HEADERS)
        + f"</tr></thead><tbody>{finding_rows}</tbody></table>"
    )
    figures = c["figures"]
    if "bleu_by_length" in figures:
        parts += [
            "<h2>BLEU by source length</h2>",
            f"<img src='{figures['bleu_by_length']}.svg' alt='BLEU vs source length'>",
            "<p class='caption'>Lines: scorers (lowest seed); dashed: reversed source; "
            "bands: 95% bootstrap intervals; grey: buckets beyond the training cut, where "
            "every model extrapolates. After Bahdanau et al. (2014), Fig. 2.</p>",
        ]
        headers, rows = by_length_pivot(c["by_length"])
        parts.append(_html_table(headers, rows))
    if not c["ranking"].empty:
        parts += [
            "<h2>Scorers ranked</h2>",
            f"<p>{_e(_ranking_note(c['ranking']))}</p>",
            _html_table(_RANK_HEADERS, _ranking_rows(c["ranking"])),
        ]
    if "learning_curves" in figures:
        parts += [
            "<h2>Learning curves</h2>",
            f"<img src='{figures['learning_curves']}.svg' alt='learning curves'>",
            f"<p class='caption'>{_CONVERGENCE_NOTE}</p>",
        ]
    parts.append("<h2>Seeds</h2>")
    if c["seeds"].empty:
        parts.append(f"<p>{_ONE_SEED}</p>")
    else:
        parts += [f"<p>{_SEEDS_NOTE}</p>", _html_table(_SEED_HEADERS, _seed_rows(c["seeds"]))]
    if c["samples"]:
        parts.append("<h2>Sample translations</h2>")
        for sample in c["samples"]:
            rows = [["source", sample["source"]], ["reference", sample["reference"]]]
            rows += [[variant, text] for _, variant, text in sample["outputs"]]
            parts += [
                f"<h3>{_e(sample['bucket'])} words ({_e(sample['training_range'])} the "
                f"training range), test sentence {sample['index']}</h3>",
                _html_table(["", "text"], rows).replace("<td>", "<td style='text-align:left'>"),
            ]
    if "heatmaps" in figures:
        parts += [
            "<h2>Attention heatmaps</h2>",
            f"<img src='{figures['heatmaps']}.svg' alt='attention heatmaps'>",
            f"<p class='caption'>{_e(c['heatmap_title'])}: source subwords in original "
            "order on x, each variant's own output on y, one shared colour scale.</p>",
        ]
    if "effects" in figures:
        parts += ["<h2>Effects</h2>", f"<img src='{figures['effects']}.svg' alt='effects'>"]
    classes = ["failed" if row[-1] == "failed" else "" for row in c["rows"]]
    parts += ["<h2>All variants</h2>", _html_table(c["headers"], c["rows"], classes)]
    if not c["significance"].empty:
        parts += [
            "<h2>Paired tests</h2>",
            f"<p>{_e(_SIG_NOTE)}</p>",
            _html_table(_SIG_HEADERS, _significance_rows(c["significance"])),
        ]
    if c["failed"]:
        parts += ["<h2>Failed variants</h2>", _html_table(["variant", "error"], c["failed"])]
    parts += [
        "<h2>Provenance</h2>",
        f"<pre>{_e(json.dumps(c['provenance'], indent=2, ensure_ascii=False))}</pre>",
        "<details><summary>params.yaml (resolved)</summary>"
        f"<pre>{_e(json.dumps(c['params'], indent=2))}</pre></details>",
        "</body></html>",
    ]
    return "\n".join(parts)


_SIG_NOTE = (
    "sacreBLEU's paired approximate randomization (10,000 shuffles by default) and paired "
    "bootstrap tests, two-sided; p (AR, Holm): adjusted over every comparison in this "
    "table. Pairs are twins equal in every other setting (seed included)."
)


def render_markdown(c: dict[str, Any]) -> str:
    lines = [
        f"# {c['title']}",
        "",
        _intro(c) + " Generated by `dvc repro report`; open `index.html` for the same "
        "report as a web page.",
        "",
        "## Findings",
        "",
        _md_table(
            _FINDING_HEADERS, [[*_finding_cells(f), f"**{f.verdict}**"] for f in c["findings"]]
        ),
        "",
    ]
    figures = c["figures"]
    if "bleu_by_length" in figures:
        headers, rows = by_length_pivot(c["by_length"])
        lines += [
            "## BLEU by source length",
            "",
            f"![BLEU vs source length]({figures['bleu_by_length']}.png)",
            "",
            "Grey: buckets beyond the training cut (extrapolation). Lowest seed per line.",
            "",
            _md_table(headers, rows),
            "",
        ]
    if not c["ranking"].empty:
        lines += [
            "## Scorers ranked",
            "",
            _ranking_note(c["ranking"]),
            "",
            _md_table(_RANK_HEADERS, _ranking_rows(c["ranking"])),
            "",
        ]
    if "learning_curves" in figures:
        lines += [
            "## Learning curves",
            "",
            f"![learning curves]({figures['learning_curves']}.png)",
            "",
            _CONVERGENCE_NOTE,
            "",
        ]
    lines += ["## Seeds", ""]
    if c["seeds"].empty:
        lines += [_ONE_SEED, ""]
    else:
        lines += [_SEEDS_NOTE, "", _md_table(_SEED_HEADERS, _seed_rows(c["seeds"])), ""]
    if c["samples"]:
        lines += ["## Sample translations", ""]
        for sample in c["samples"]:
            rows = [["source", sample["source"]], ["reference", sample["reference"]]]
            rows += [[variant, text] for _, variant, text in sample["outputs"]]
            lines += [
                f"### {sample['bucket']} words ({sample['training_range']} the training "
                f"range), test sentence {sample['index']}",
                "",
                _md_table(["", "text"], rows),
                "",
            ]
    if "heatmaps" in figures:
        lines += [
            "## Attention heatmaps",
            "",
            f"![attention heatmaps]({figures['heatmaps']}.png)",
            "",
            f"{c['heatmap_title']}; one shared colour scale.",
            "",
        ]
    if "effects" in figures:
        lines += ["## Effects", "", f"![effects]({figures['effects']}.png)", ""]
    lines += ["## All variants", "", _md_table(c["headers"], c["rows"]), ""]
    if not c["significance"].empty:
        lines += [
            "## Paired tests",
            "",
            _SIG_NOTE,
            "",
            _md_table(_SIG_HEADERS, _significance_rows(c["significance"])),
            "",
        ]
    if c["failed"]:
        lines += ["## Failed variants", "", _md_table(["variant", "error"], c["failed"]), ""]
    lines += [
        "## Provenance",
        "",
        "```json",
        json.dumps(c["provenance"], indent=2, ensure_ascii=False),
        "```",
        "",
    ]
    return "\n".join(lines)
