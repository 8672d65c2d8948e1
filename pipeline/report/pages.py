"""HTML and Markdown pages of the report, from one context built in ``render.py``."""

from __future__ import annotations

import html
import json
from typing import Any

import pandas as pd

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2rem auto;padding:0 1rem;color:#1d2733;line-height:1.45}
h1{font-size:1.6rem}h2{border-bottom:1px solid #d8dee4;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.82rem;margin:.6rem 0}
th,td{border:1px solid #d8dee4;padding:.25rem .5rem;text-align:right}
th{background:#f3f5f7}td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eef0f2}
.agrees{color:#137333;font-weight:600}.disagrees{color:#b3261e;font-weight:600}
.not{color:#6b7280;font-weight:600}.failed{background:#fdecea}
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
    """Variant x bucket BLEU (with sentence counts in the header)."""
    if by_length.empty:
        return [], []
    buckets = list(dict.fromkeys(by_length["bucket"]))
    counts = by_length.groupby("bucket", sort=False)["sentences"].first()
    headers = ["variant"] + [f"{b} (n={counts[b]})" for b in buckets]
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
        [
            r.comparison,
            r.variant,
            r.baseline,
            f"{r.delta:+.2f}",
            f"[{r.delta_low:+.2f}, {r.delta_high:+.2f}]",
            f"{r.p_value:.3f}",
        ]
        for r in significance.itertuples()
    ]


_SIG_HEADERS = ["comparison", "variant", "baseline", "ΔBLEU", "95% CI", "p"]
_FINDING_HEADERS = ["effect", "literature", "this study", "verdict"]


def render_html(c: dict[str, Any]) -> str:
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(c['title'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(c['title'])}</h1>",
        f"<p>{len(c['rows'])} variants; corpus: "
        f"{_e(c['provenance']['corpus'].get('source_translation', ''))} → "
        f"{_e(c['provenance']['corpus'].get('target_translation', ''))}. "
        "Every number below is computed by the pipeline; nothing is written by hand.</p>",
        "<h2>Findings</h2>",
    ]
    finding_rows = "".join(
        f"<tr><td>{_e(f.title)}</td><td>{_e(f.literature)}</td><td>{_e(f.measured)}</td>"
        f"<td class='{f.verdict.split()[0]}'>{_e(f.verdict)}</td></tr>"
        for f in c["findings"]
    )
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
            "<p class='caption'>Lines: scorers; dashed: reversed source; bands: 95% "
            "bootstrap intervals. After Bahdanau et al. (2014), Fig. 2.</p>",
        ]
        headers, rows = by_length_pivot(c["by_length"])
        parts.append(_html_table(headers, rows))
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
            "<h2>Paired bootstrap significance</h2>",
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


def render_markdown(c: dict[str, Any]) -> str:
    corpus = c["provenance"]["corpus"]
    lines = [
        f"# {c['title']}",
        "",
        f"{len(c['rows'])} variants; corpus: {corpus.get('source_translation', '')} -> "
        f"{corpus.get('target_translation', '')}. Generated by `dvc repro report`; "
        "every number is computed by the pipeline. Open `index.html` for the same report "
        "as a web page.",
        "",
        "## Findings",
        "",
        _md_table(
            _FINDING_HEADERS,
            [[f.title, f.literature, f.measured, f"**{f.verdict}**"] for f in c["findings"]],
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
            _md_table(headers, rows),
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
            "## Paired bootstrap significance",
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
