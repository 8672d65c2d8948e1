"""HTML and Markdown pages of the report, from one context built in ``render.py``."""

from __future__ import annotations

import html
import json
from typing import Any

import pandas as pd

from pipeline.report.findings import (
    EXPLORE_HEADERS,
    METHOD,
    PART_HEADERS,
    RANK_HEADERS,
    VERDICT_HEADERS,
    answer,
    exploratory_rows,
    part_rows,
    ranking_rows,
    verdict_rows,
)

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
.toc{font-size:.85rem;margin:.4rem 0 1rem}.toc a{color:#1f4e79}
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


_CONVERGENCE_NOTE = (
    "Dev BLEU (greedy, the trainer's own) at every evaluation, against epochs and against "
    "training minutes (minutes depend on the machine; steps and verdicts do not). A hollow "
    "end marker: stopped at the step cap before its dev loss plateaued."
)
_RANK_NOTE = (
    "The findings' configuration (source forward, the hidden size with the most seeds), mean "
    "test BLEU over seeds. Intervals cover seeds and test sentences; with one seed they "
    "cover test sentences only (exploratory). Inside: sentences no longer than the training "
    "cut, which the findings use; all lengths includes extrapolation."
)
_EXPLORE_NOTE = (
    "Exploratory: not declared in advance, unadjusted p-values, never a verdict. Each "
    "scorer minus the best scorer (chosen on dev) and minus none, inside the training "
    "lengths. Where a scorer has one seed, its interval covers test sentences only: seed "
    "spread of 1-2 BLEU between seeds of one configuration is not in it."
)
_SECTIONS = [
    ("answer", "The answer"), ("differences", "Paired differences"),
    ("findings", "Findings in detail"), ("length", "BLEU by source length"),
    ("exploratory", "Exploratory comparisons"), ("curves", "Learning curves"),
    ("samples", "Sample translations"), ("heatmaps", "Attention heatmaps"),
    ("variants", "All variants"), ("provenance", "Provenance"),
]  # fmt: skip


def _sections(c: dict[str, Any]) -> list[tuple[str, str]]:
    present = {"answer", "findings", "variants", "provenance"}
    figures = c["figures"]
    present |= {k for k, f in (("differences", "differences"), ("length", "bleu_by_length"),
                               ("curves", "learning_curves"), ("heatmaps", "heatmaps"))
                if f in figures}  # fmt: skip
    if len(c["comparisons"]) and (c["comparisons"].family == "exploratory").any():
        present.add("exploratory")
    if c["samples"]:
        present.add("samples")
    return [(k, t) for k, t in _SECTIONS if k in present]


def _verdict_html(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in VERDICT_HEADERS)
    body = "".join(
        "<tr>" + "".join(
            f"<td class='{_e(str(cell).split()[0])}'>{_e(cell)}</td>" if i in (1, 2)
            else f"<td>{_e(cell)}</td>" for i, cell in enumerate(row)
        ) + "</tr>"
        for row in rows
    )  # fmt: skip
    return f"<table class='findings'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(c: dict[str, Any]) -> str:
    study, figures, main = c["study"], c["figures"], c["study"]["main_decoding"]
    toc = " · ".join(f"<a href='#{k}'>{_e(t)}</a>" for k, t in _sections(c))
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(c['title'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(c['title'])}</h1>",
        f"<nav class='toc'>{toc}</nav>",
        "<h2 id='answer'>The answer</h2>",
        f"<p><strong>{_e(answer(study, c['ranking'], c['table']))}</strong></p>",
        _html_table(RANK_HEADERS, ranking_rows(c["ranking"])) if len(c["ranking"]) else "",
        f"<p class='caption'>{_e(_RANK_NOTE)}</p>",
        _verdict_html(verdict_rows(study)),
        f"<p class='caption'>Verdicts under {_e(main)} decoding, then greedy. Effect: the "
        "main contrast of each finding in BLEU, mean over seeds, with its 95% interval over "
        "seeds and sentences; MDE: the smallest effect this design detects (method: "
        "<a href='#findings'>Findings in detail</a>).</p>",
    ]
    if "differences" in figures:
        parts += [
            "<h2 id='differences'>Paired differences</h2>",
            f"<img src='{figures['differences']}.svg' alt='paired differences'>",
            "<p class='caption'>Each contrast's mean over seeds with its 95% interval (seeds "
            "and sentences); dots: each seed's value; |: plus/minus the design's MDE. Blue: "
            "primary (Holm); purple: equivalence parts; grey: exploratory.</p>",
        ]
    parts += ["<h2 id='findings'>Findings in detail</h2>", f"<p>{_e(METHOD)}</p>"]
    for f in study["findings"][main]:
        parts += [
            f"<h3>{_e(f['title'])}: <span class='{_e(f['verdict'].split()[0])}'>"
            f"{_e(f['verdict'])}</span></h3>",
            f"<p><em>Literature.</em> {_e(f['literature'])}</p>",
            f"<p><em>Test, stated in advance.</em> {_e(f['criterion'])}</p>",
            _html_table(PART_HEADERS, part_rows(f))
            if f["parts"]
            else f"<p>No contrast: {_e(f['why'])}.</p>",
        ]
    if "bleu_by_length" in figures:
        headers, rows = by_length_pivot(c["by_length"])
        parts += [
            "<h2 id='length'>BLEU by source length</h2>",
            f"<img src='{figures['bleu_by_length']}.svg' alt='BLEU vs source length'>",
            "<p class='caption'>Lines: scorers (lowest seed); dashed: reversed source; "
            "bands: 95% bootstrap intervals of that seed; grey: buckets beyond the training "
            "cut, where every model extrapolates. After Bahdanau et al. (2014), Fig. 2.</p>",
            "<details><summary>The numbers</summary>", _html_table(headers, rows), "</details>",
        ]  # fmt: skip
    explore = exploratory_rows(c["comparisons"], main) if len(c["comparisons"]) else []
    if explore:
        parts += ["<h2 id='exploratory'>Exploratory comparisons</h2>",
                  f"<p>{_e(_EXPLORE_NOTE)}</p>", _html_table(EXPLORE_HEADERS, explore)]  # fmt: skip
    if "learning_curves" in figures:
        parts += [
            "<h2 id='curves'>Learning curves</h2>",
            f"<img src='{figures['learning_curves']}.svg' alt='learning curves'>",
            f"<p class='caption'>{_CONVERGENCE_NOTE}</p>",
        ]
    if c["samples"]:
        parts.append("<h2 id='samples'>Sample translations</h2>")
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
            "<h2 id='heatmaps'>Attention heatmaps</h2>",
            f"<img src='{figures['heatmaps']}.svg' alt='attention heatmaps'>",
            f"<p class='caption'>{_e(c['heatmap_title'])}: source subwords in original "
            "order on x, each variant's own output on y, one shared colour scale.</p>",
        ]
    classes = ["failed" if row[-1] == "failed" else "" for row in c["rows"]]
    parts += ["<h2 id='variants'>All variants</h2>", _html_table(c["headers"], c["rows"], classes)]
    if c["failed"]:
        parts += ["<h3>Failed variants</h3>", _html_table(["variant", "error"], c["failed"])]
    parts += [
        "<h2 id='provenance'>Provenance</h2>",
        f"<pre>{_e(json.dumps(c['provenance'], indent=2, ensure_ascii=False))}</pre>",
        "<details><summary>params.yaml (resolved)</summary>"
        f"<pre>{_e(json.dumps(c['params'], indent=2))}</pre></details>",
        "</body></html>",
    ]
    return "\n".join(parts)


def render_markdown(c: dict[str, Any]) -> str:
    study, figures, main = c["study"], c["figures"], c["study"]["main_decoding"]
    lines = [
        f"# {c['title']}",
        "",
        "Generated by `dvc repro report`; `index.html` is the same report as a web page.",
        "",
        "## The answer",
        "",
        f"**{answer(study, c['ranking'], c['table'])}**",
        "",
    ]
    if len(c["ranking"]):
        lines += [_md_table(RANK_HEADERS, ranking_rows(c["ranking"])), "", _RANK_NOTE, ""]
    lines += [_md_table(VERDICT_HEADERS, verdict_rows(study)), "",
              f"Verdicts under {main} decoding, then greedy. Effect: the main contrast of each "
              "finding, mean over seeds, 95% interval over seeds and sentences; MDE: the "
              "smallest effect this design detects (method: Findings in detail).", ""]  # fmt: skip
    if "differences" in figures:
        lines += ["## Paired differences", "",
                  f"![paired differences]({figures['differences']}.png)", ""]  # fmt: skip
    lines += ["## Findings in detail", "", METHOD, ""]
    for f in study["findings"][main]:
        lines += [f"### {f['title']}: {f['verdict']}", "", f"*Literature.* {f['literature']}",
                  "", f"*Test, stated in advance.* {f['criterion']}", "",
                  _md_table(PART_HEADERS, part_rows(f)) if f["parts"] else
                  f"No contrast: {f['why']}.", ""]  # fmt: skip
    if "bleu_by_length" in figures:
        headers, rows = by_length_pivot(c["by_length"])
        lines += ["## BLEU by source length", "",
                  f"![BLEU vs source length]({figures['bleu_by_length']}.png)", "",
                  "Grey: buckets beyond the training cut (extrapolation). Lowest seed per line.",
                  "", _md_table(headers, rows), ""]  # fmt: skip
    explore = exploratory_rows(c["comparisons"], main) if len(c["comparisons"]) else []
    if explore:
        lines += ["## Exploratory comparisons", "", _EXPLORE_NOTE, "",
                  _md_table(EXPLORE_HEADERS, explore), ""]  # fmt: skip
    if "learning_curves" in figures:
        lines += ["## Learning curves", "", f"![learning curves]({figures['learning_curves']}.png)",
                  "", _CONVERGENCE_NOTE, ""]  # fmt: skip
    if c["samples"]:
        lines += ["## Sample translations", ""]
        for sample in c["samples"]:
            rows = [["source", sample["source"]], ["reference", sample["reference"]]]
            rows += [[variant, text] for _, variant, text in sample["outputs"]]
            lines += [f"### {sample['bucket']} words ({sample['training_range']} the training "
                      f"range), test sentence {sample['index']}", "",
                      _md_table(["", "text"], rows), ""]  # fmt: skip
    if "heatmaps" in figures:
        lines += ["## Attention heatmaps", "", f"![attention heatmaps]({figures['heatmaps']}.png)",
                  "", f"{c['heatmap_title']}; one shared colour scale.", ""]  # fmt: skip
    lines += ["## All variants", "", _md_table(c["headers"], c["rows"]), ""]
    if c["failed"]:
        lines += ["### Failed variants", "", _md_table(["variant", "error"], c["failed"]), ""]
    lines += ["## Provenance", "", "```json",
              json.dumps(c["provenance"], indent=2, ensure_ascii=False), "```", ""]  # fmt: skip
    return "\n".join(lines)
