"""HTML and Markdown pages of the report, from one context built in ``render.py``."""

from __future__ import annotations

import html
import json
from typing import Any

import pandas as pd

from pipeline.report.figures import seed_span
from pipeline.report.findings import (
    EXPLORE_HEADERS,
    LATE_GAIN_HEADERS,
    METHOD,
    PART_HEADERS,
    VERDICT_HEADERS,
    answer,
    answers,
    best_scorer,
    design_lines,
    design_notes,
    exploratory_rows,
    late_gain_note,
    lengths,
    part_rows,
    rank_headers,
    ranking_rows,
    verdict_class,
    verdict_rows,
)
from pipeline.study.statistics import POWER

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2rem auto;padding:0 1rem;color:#1d2733;line-height:1.45}
h1{font-size:1.6rem}h2{border-bottom:1px solid #d8dee4;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.82rem;margin:.6rem 0}
th,td{border:1px solid #d8dee4;padding:.25rem .5rem;text-align:right}
th{background:#f3f5f7}td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eef0f2}
.v-agrees{color:#137333;font-weight:600}.v-disagrees{color:#b3261e;font-weight:600}
.v-smaller{color:#a15c00;font-weight:600}.v-equivalent{color:#1f4e79;font-weight:600}
.v-none,.v-other{color:#6b7280;font-weight:600}.failed{background:#fdecea}
.answers{font-size:1.05rem}.answers li{margin:.25rem 0}
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
    if pd.isna(bleu):
        return "-"
    if pd.isna(low) or pd.isna(high):
        return f"{bleu:.1f}"
    return f"{bleu:.1f} [{low:.1f}, {high:.1f}]"


def configuration_name(scorer: str, reverse_source: bool, hidden_size: int) -> str:
    """ "additive, forward, h256": a configuration of the grid, seeds aside."""
    return f"{scorer}, {'reversed' if reverse_source else 'forward'}, h{int(hidden_size)}"


def by_length_pivot(means: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Configuration x bucket: mean BLEU over seeds [95% interval]
    (:func:`pipeline.report.data.length_means`), the seeds and what the interval covers;
    sentence counts and the training range in the header (buckets beyond the training
    cut are extrapolation)."""
    if means.empty:
        return [], []
    buckets = list(dict.fromkeys(means["bucket"]))
    first = means.groupby("bucket", sort=False).first()
    headers = ["configuration", "seeds", "interval over"] + [
        f"{b} (n={first.loc[b, 'sentences']}"
        + (
            ", beyond the cut: extrapolation)"
            if first.loc[b, "training_range"] == "beyond"
            else ")"
        )
        for b in buckets
    ]
    rows = []
    for _, curve in means.groupby(["config", "scorer"], sort=False):
        one = curve.iloc[0]
        values = curve.set_index("bucket")
        seeds = sorted({s for listed in curve["seed_list"] for s in listed})
        covers = "seeds" if curve["seeds"].min() >= 2 else "test sentences only (1 seed)"
        cells = [
            _bleu_cell(values.loc[b, "bleu"], values.loc[b, "low"], values.loc[b, "high"])
            if b in values.index
            else "-"
            for b in buckets
        ]
        name = configuration_name(one.scorer, one.reverse_source, one.hidden_size)
        rows.append([name, seed_span(seeds) or "-", covers, *cells])
    return headers, rows


def late_gain_rows(gains: pd.DataFrame) -> list[list[str]]:
    """The late-gain table's rows (:func:`pipeline.report.findings.late_gains`)."""
    rows = []
    for r in gains.itertuples() if gains is not None else []:
        low, high = int(r.steps_low), int(r.steps_high)
        steps = f"{low:,}" if low == high else f"{low:,}-{high:,}"
        gain = f"{r.gain:+.2f}"
        if r.seeds > 1:
            gain += f" [{r.gain_low:+.2f}, {r.gain_high:+.2f}]"
        name = configuration_name(r.scorer, r.reverse_source, r.hidden_size)
        rows.append([name, str(r.seeds), steps, f"{r.best:.2f}", gain])
    return rows


_CONVERGENCE_NOTE = (
    "Dev BLEU (greedy, the trainer's own) at every evaluation, against epochs and against "
    "training minutes (minutes depend on the machine; steps and verdicts do not). A hollow "
    "end marker: stopped at the step cap before its dev loss and dev BLEU plateaued."
)
_RANK_NOTE = (
    "The findings' configuration (source forward, the hidden size with the most seeds), mean "
    "test BLEU over seeds. Intervals cover seeds (the seed variance pooled over the "
    "configurations, which a scorer with one seed borrows) and test sentences; exploratory. "
    "Inside: sentences no longer than the training cut, which the findings use; all lengths "
    "includes extrapolation. chrF: the mean over the same seeds of each variant's chrF on "
    "all test sentences."
)
_LENGTH_NOTE = (
    "One line per configuration: the mean test BLEU over its seeds; band: 95% interval "
    "over the seeds (mean +- t * sd / sqrt(k)), which leaves out test sampling (every seed "
    "reads the same sentences). A dotted line has one seed: its band is that seed's "
    "bootstrap interval over test sentences only. Shaded, marked 'beyond': buckets beyond "
    "the training cut, where every model extrapolates. After Bahdanau et al. (2014), Fig. 2."
)
_VERDICT_NOTE = (
    "Estimate: the main contrast of each finding, mean over seeds, with its interval over "
    "seeds and sentences at the level given (Bonferroni over the primary parts of all "
    "findings). Effect of interest: the smallest effect that matters, declared before the "
    "run; power: the design's at that effect, computed before the run (below {power} makes "
    "a finding not testable); MDE: the smallest effect the design detects with {power} "
    "power. Method: Findings in detail."
)
_FOREST_NOTE = (
    "Each contrast's mean over seeds with its interval (seeds and sentences; primary parts "
    "at the Bonferroni level, the others at 95%); dots: each seed's value where the "
    "configurations share their seeds; |: plus/minus the design's MDE; shaded band: a "
    "part's equivalence margin; diamond: its declared smallest effect of interest. Blue: "
    "primary; purple: secondary; grey: exploratory. One panel per scale (BLEU, log BLEU)."
)
_HEATMAP_NOTE = (
    "source subwords in original order on x, each variant's own output (generated, not "
    "the reference) on y, one shared colour scale"
)
_EXPLORE_NOTE = (
    "Exploratory: not declared in advance, unadjusted p-values, never a verdict. Each "
    "scorer minus the best scorer (chosen on dev) and minus none, inside the training "
    "lengths. A scorer with one seed borrows the seed variance pooled over the "
    "configurations with more: its own seed's luck is not measured."
)
_SECTIONS = [
    ("verdicts", "Verdicts"),
    ("ranking", "Scorers ranked"),
    ("differences", "Differences"),
    ("findings", "Findings in detail"),
    ("length", "BLEU by source length"),
    ("exploratory", "Exploratory comparisons"),
    ("curves", "Learning curves"),
    ("samples", "Sample translations"),
    ("heatmaps", "Attention heatmaps"),
    ("variants", "All variants"),
    ("provenance", "Provenance"),
]


def _sections(c: dict[str, Any]) -> list[tuple[str, str]]:
    present = {"verdicts", "findings", "variants", "provenance"}
    if len(c["ranking"]):
        present.add("ranking")
    figures = c["figures"]
    present |= {
        k
        for k, f in (
            ("differences", "differences"),
            ("length", "bleu_by_length"),
            ("curves", "learning_curves"),
            ("heatmaps", "heatmaps"),
        )
        if f in figures
    }
    if len(c["comparisons"]) and (c["comparisons"].family == "exploratory").any():
        present.add("exploratory")
    if c["samples"]:
        present.add("samples")
    return [(k, t) for k, t in _SECTIONS if k in present]


def _verdict_html(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in VERDICT_HEADERS)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='{verdict_class(cell)}'>{_e(cell)}</td>"
            if i in (1, 2)
            else f"<td>{_e(cell)}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table class='findings'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict_note() -> str:
    return _VERDICT_NOTE.format(power=f"{POWER:.0%}")


def variants_caption(cut: int | None) -> str:
    """What the all-variants table's scores cover."""
    return (
        f"Test BLEU and chrF of each variant on {lengths(cut)}; 95% interval: sacreBLEU's "
        "bootstrap over test sentences (one seed each)."
    )


def render_html(c: dict[str, Any]) -> str:
    study, figures, main = c["study"], c["figures"], c["study"]["main_decoding"]
    cut = c.get("cut")
    toc = " · ".join(f"<a href='#{k}'>{_e(t)}</a>" for k, t in _sections(c))
    best = best_scorer(study, c["ranking"], c["comparisons"])
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(c['title'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(c['title'])}</h1>",
        "<ul class='answers'>" + "".join(f"<li>{_e(a)}</li>" for a in answers(study)) + "</ul>",
        f"<p><strong>{_e(answer(study, c['ranking'], c['table']))}</strong></p>",
        f"<nav class='toc'>{toc}</nav>",
        "<h2 id='verdicts'>Verdicts</h2>",
        _verdict_html(verdict_rows(study)),
        f"<p class='caption'>Verdicts under {_e(main)} decoding, then greedy. "
        f"{_e(_verdict_note())}</p>",
    ]
    if len(c["ranking"]):
        rows = ranking_rows(c["ranking"], c.get("chrf"))
        parts += [
            "<h2 id='ranking'>Scorers ranked</h2>",
            f"<p>{_e(best)}</p>" if best else "",
            _html_table(rank_headers(cut), rows),
            f"<p class='caption'>{_e(_RANK_NOTE)}</p>",
        ]
    if "differences" in figures:
        parts += [
            "<h2 id='differences'>Differences</h2>",
            f"<img src='{figures['differences']}.svg' alt='the differences the findings rest on'>",
            f"<p class='caption'>{_e(_FOREST_NOTE)}</p>",
        ]
    notes = design_notes(study)
    parts += ["<h2 id='findings'>Findings in detail</h2>", f"<p>{_e(METHOD)}</p>"]
    parts += [f"<p>{_e(notes)}</p>"] if notes else []
    for f in study["findings"][main]:
        parts += [
            f"<h3>{_e(f['title'])}: <span class='{verdict_class(f['verdict'])}'>"
            f"{_e(f['verdict'])}</span></h3>",
            f"<p><em>Answer.</em> {_e(f['answer'])}</p>" if f.get("answer") else "",
            f"<p><em>Literature.</em> {_e(f['literature'])}</p>",
            f"<p><em>Test, stated in advance.</em> {_e(f['criterion'])}</p>",
            *(f"<p>{_e(line)}</p>" for line in design_lines(f)),
            _html_table(PART_HEADERS, part_rows(f))
            if f["parts"]
            else f"<p>No contrast: {_e(f['why'])}.</p>",
        ]
    if "bleu_by_length" in figures:
        headers, rows = by_length_pivot(c["length_means"])
        parts += [
            "<h2 id='length'>BLEU by source length</h2>",
            f"<img src='{figures['bleu_by_length']}.svg' alt='BLEU vs source length'>",
            f"<p class='caption'>{_e(_LENGTH_NOTE)}</p>",
            "<details><summary>The numbers</summary>",
            _html_table(headers, rows),
            "</details>",
        ]
    explore = exploratory_rows(c["comparisons"], main) if len(c["comparisons"]) else []
    if explore:
        parts += [
            "<h2 id='exploratory'>Exploratory comparisons</h2>",
            f"<p>{_e(_EXPLORE_NOTE)}</p>",
            _html_table(EXPLORE_HEADERS, explore),
        ]
    if "learning_curves" in figures:
        parts += [
            "<h2 id='curves'>Learning curves</h2>",
            f"<img src='{figures['learning_curves']}.svg' alt='learning curves'>",
            f"<p class='caption'>{_CONVERGENCE_NOTE}</p>",
        ]
    gains = late_gain_rows(c.get("late_gains"))
    if gains:
        parts += [
            _html_table(LATE_GAIN_HEADERS, gains),
            f"<p class='caption'>{_e(late_gain_note(c['late_gains']))}</p>",
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
            f"<p class='caption'>{_e(c['heatmap_title'])}: {_e(_HEATMAP_NOTE)}.</p>",
        ]
    classes = ["failed" if row[-1] == "failed" else "" for row in c["rows"]]
    parts += [
        "<h2 id='variants'>All variants</h2>",
        f"<p class='caption'>{_e(variants_caption(cut))}</p>",
        _html_table(c["headers"], c["rows"], classes),
    ]
    if c["failed"]:
        parts += ["<h3>Failed variants</h3>", _html_table(["variant", "error"], c["failed"])]
    parts += [
        "<h2 id='provenance'>Provenance</h2>",
        f"<pre>{_e(json.dumps(c['provenance'], indent=2, ensure_ascii=False))}</pre>",
        "<details><summary>params.yaml (resolved)</summary>"
        f"<pre>{_e(json.dumps(c['params'], indent=2))}</pre></details>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def render_markdown(c: dict[str, Any]) -> str:
    study, figures, main = c["study"], c["figures"], c["study"]["main_decoding"]
    cut = c.get("cut")
    best = best_scorer(study, c["ranking"], c["comparisons"])
    lines = [f"# {c['title']}", ""]
    lines += [f"- {a}" for a in answers(study)]
    lines += [
        "",
        f"**{answer(study, c['ranking'], c['table'])}**",
        "",
        "Generated by `dvc repro report`; `index.html` is the same report as a web page.",
        "",
        "## Verdicts",
        "",
        _md_table(VERDICT_HEADERS, verdict_rows(study)),
        "",
        f"Verdicts under {main} decoding, then greedy. {_verdict_note()}",
        "",
    ]
    if len(c["ranking"]):
        rows = ranking_rows(c["ranking"], c.get("chrf"))
        lines += ["## Scorers ranked", ""] + ([best, ""] if best else [])
        lines += [_md_table(rank_headers(cut), rows), "", _RANK_NOTE, ""]
    if "differences" in figures:
        lines += [
            "## Differences",
            "",
            f"![the differences the findings rest on]({figures['differences']}.png)",
            "",
            _FOREST_NOTE,
            "",
        ]
    lines += ["## Findings in detail", "", METHOD, ""]
    lines += [design_notes(study), ""] if design_notes(study) else []
    for f in study["findings"][main]:
        lines += [f"### {f['title']}: {f['verdict']}", ""]
        if f.get("answer"):
            lines += [f"*Answer.* {f['answer']}", ""]
        lines += [
            f"*Literature.* {f['literature']}",
            "",
            f"*Test, stated in advance.* {f['criterion']}",
            "",
            *(x for line in design_lines(f) for x in (line, "")),
            _md_table(PART_HEADERS, part_rows(f)) if f["parts"] else f"No contrast: {f['why']}.",
            "",
        ]
    if "bleu_by_length" in figures:
        headers, rows = by_length_pivot(c["length_means"])
        lines += [
            "## BLEU by source length",
            "",
            f"![BLEU vs source length]({figures['bleu_by_length']}.png)",
            "",
            _LENGTH_NOTE,
            "",
            _md_table(headers, rows),
            "",
        ]
    explore = exploratory_rows(c["comparisons"], main) if len(c["comparisons"]) else []
    if explore:
        lines += [
            "## Exploratory comparisons",
            "",
            _EXPLORE_NOTE,
            "",
            _md_table(EXPLORE_HEADERS, explore),
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
    gains = late_gain_rows(c.get("late_gains"))
    if gains:
        lines += [_md_table(LATE_GAIN_HEADERS, gains), "", late_gain_note(c["late_gains"]), ""]
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
            f"{c['heatmap_title']}: {_HEATMAP_NOTE}.",
            "",
        ]
    lines += [
        "## All variants",
        "",
        variants_caption(cut),
        "",
        _md_table(c["headers"], c["rows"]),
        "",
    ]
    if c["failed"]:
        lines += ["### Failed variants", "", _md_table(["variant", "error"], c["failed"]), ""]
    lines += [
        "## Provenance",
        "",
        "```json",
        json.dumps(c["provenance"], indent=2, ensure_ascii=False),
        "```",
        "",
    ]
    return "\n".join(lines)
