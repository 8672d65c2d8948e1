"""What the report says, section by section, built once as data (:mod:`~pipeline.report.blocks`)
from what :mod:`~pipeline.report.render` gathered (:class:`PageInputs`); the web page and
the Markdown are its two formats (:mod:`~pipeline.report.writers`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeline.records.sweep import FAILED
from pipeline.report.blocks import (
    Block,
    Bullets,
    Code,
    Contents,
    Figure,
    Heading,
    Paragraph,
    Report,
    Section,
    Table,
)
from pipeline.report.figures import seed_span
from pipeline.report.findings import (
    EXPLORE_HEADERS,
    GATE_HEADERS,
    LATE_GAIN_HEADERS,
    METHOD,
    PART_HEADERS,
    answer,
    answers,
    best_scorer,
    design_lines,
    design_notes,
    exploratory_rows,
    gate_rows,
    late_gain_note,
    lengths,
    part_rows,
    rank_headers,
    ranking_rows,
    verdict_headers,
    verdict_rows,
)
from pipeline.report.samples import Sample
from pipeline.report.writers import to_html, to_markdown
from pipeline.study.record import FindingRecord, StudyRecord
from pipeline.study.statistics import POWER


@dataclass(frozen=True)
class Figures:
    """The figures written (``figures/<name>`` without its suffix), ``None`` where the
    study had nothing to draw."""

    differences: str | None = None
    bleu_by_length: str | None = None
    learning_curves: str | None = None
    heatmaps: str | None = None


@dataclass(frozen=True)
class PageInputs:
    """What the pages show, gathered by :func:`pipeline.report.render.build_report`."""

    title: str
    study: StudyRecord  # eval/findings.json
    comparisons: pd.DataFrame  # eval/comparisons.csv: every contrast, every decoding
    table: pd.DataFrame  # one row per variant (pipeline.report.data.StudyData.table)
    ranking: pd.DataFrame  # the main decoding's scorer ranking
    headers: list[str]  # the all-variants table's headers and rows
    rows: list[list[str]]
    failed: list[list[Any]]  # [variant, error] of each failed variant
    provenance: dict[str, Any]
    params: dict[str, Any]  # params.yaml, resolved
    figures: Figures = field(default_factory=Figures)
    heatmap_title: str = ""
    cut: int | None = None  # fetch.split.max_train_words
    length_means: pd.DataFrame = field(default_factory=pd.DataFrame)
    chrf: dict[str, float] | None = None  # each ranked scorer's mean chrF
    samples: Sequence[Sample] = ()
    late_gains: pd.DataFrame | None = None


def render_html(inputs: PageInputs) -> str:
    return to_html(report_model(inputs))


def render_markdown(inputs: PageInputs) -> str:
    return to_markdown(report_model(inputs))


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
    "Estimate: the main contrast of each finding, mean over seeds, on the scale given, "
    "with its interval over seeds and sentences at the level in the header (Bonferroni over "
    "the primary parts of the confirmatory findings; a row at another level says so). "
    "Effect of interest: the smallest effect that matters, declared before the run; power: "
    "the design's at that effect, computed before the run (below {power} makes a finding "
    "not testable); MDE: the smallest effect the design detects with {power} power at the "
    "interval's level; gates: whether the baseline passed the gates the claim (or only the "
    "comparison of its size) needs. Method: Findings in detail."
)
_GATE_NOTE = (
    "Gates on the no-attention baseline (source forward, the findings' hidden size), "
    "declared before the run and measured on the test sentences inside the training "
    "lengths: a gate passes when the lower end of its 95% interval (seeds and sentences; "
    "the share as a ratio of mean BLEU, from log BLEU) reaches the declared threshold. A "
    "claim about the baseline's own behaviour is not testable where a gate it needs fails; "
    "for Attention only the comparison of its size with the paper's needs them."
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


def _verdict_note() -> str:
    return _VERDICT_NOTE.format(power=f"{POWER:.0%}")


def variants_caption(cut: int | None) -> str:
    """What the all-variants table's scores cover."""
    return (
        f"Test BLEU and chrF of each variant on {lengths(cut)}; 95% interval: sacreBLEU's "
        "bootstrap over test sentences (one seed each)."
    )


# ---------------------------------------------------------------------------- model
def _table(headers: Sequence[Any], rows: Sequence[Sequence[Any]], **kw: Any) -> Table:
    """A table of the cells' text."""
    cells = tuple(tuple(str(cell) for cell in row) for row in rows)
    return Table(tuple(str(h) for h in headers), cells, **kw)


def _section(anchor: str, title: str, blocks: Sequence[Block]) -> Section:
    return Section(Heading(title, anchor=anchor), tuple(blocks))


def report_model(c: PageInputs) -> Report:
    """The report's sections, in order (a section without data to show is left out)."""
    sections = [
        _opening(c),
        _verdicts(c),
        _ranking(c),
        _differences(c),
        _findings(c),
        _length(c),
        _exploratory(c),
        _curves(c),
        _late_gains(c),
        _samples(c),
        _heatmaps(c),
        _variants(c),
        _provenance(c),
    ]
    return Report(c.title, tuple(s for s in sections if s is not None))


def _opening(c: PageInputs) -> Section:
    """What the study found, in words, then how far its variants trained."""
    return Section(
        None,
        (
            Bullets(tuple(answers(c.study)), style="answers"),
            Paragraph(answer(c.study, c.table), style="strong"),
            Contents(),
            Paragraph(
                "Generated by `dvc repro report`; `index.html` is the same report as a web page.",
                only="markdown",
            ),
        ),
    )


def _verdicts(c: PageInputs) -> Section:
    note = f"Verdicts under {c.study.main_decoding} decoding, then greedy. {_verdict_note()}"
    table = _table(verdict_headers(c.study), verdict_rows(c.study), verdict_columns=(1, 2))
    blocks: list[Block] = [table, Paragraph(note, style="caption")]
    gates = gate_rows(c.study)
    if gates:
        blocks += [
            Heading("Baseline gates", level=3),
            _table(GATE_HEADERS, gates, verdict_columns=(4,)),
            Paragraph(_GATE_NOTE, style="caption"),
        ]
    return _section("verdicts", "Verdicts", blocks)


def _ranking(c: PageInputs) -> Section | None:
    if not len(c.ranking):
        return None
    best = best_scorer(c.study, c.ranking, c.comparisons)
    return _section(
        "ranking",
        "Scorers ranked",
        [
            *([Paragraph(best)] if best else []),
            _table(rank_headers(c.cut), ranking_rows(c.ranking, c.chrf)),
            Paragraph(_RANK_NOTE, style="caption"),
        ],
    )


def _differences(c: PageInputs) -> Section | None:
    if c.figures.differences is None:
        return None
    figure = Figure(c.figures.differences, "the differences the findings rest on")
    return _section(
        "differences", "Differences", [figure, Paragraph(_FOREST_NOTE, style="caption")]
    )


def _findings(c: PageInputs) -> Section:
    notes = " ".join(n for n in (design_notes(c.study), c.provenance.get("test set", "")) if n)
    blocks: list[Block] = [Paragraph(METHOD), *([Paragraph(notes)] if notes else [])]
    for finding in c.study.main:
        blocks += _finding(finding)
    return _section("findings", "Findings in detail", blocks)


def _finding(f: FindingRecord) -> list[Block]:
    """One finding: its verdict, answer, the literature's claim, the test stated in
    advance, its design, and its parts (or why it has none)."""
    return [
        Heading(f.title, level=3, verdict=f.shown),
        *([Paragraph(f.answer, lead="Answer.")] if f.answer else []),
        Paragraph(f.literature, lead="Literature."),
        Paragraph(f.criterion, lead="Test, stated in advance."),
        *(Paragraph(line) for line in design_lines(f)),
        _table(PART_HEADERS, part_rows(f)) if f.parts else Paragraph(f"No contrast: {f.why}."),
    ]


def _length(c: PageInputs) -> Section | None:
    if c.figures.bleu_by_length is None:
        return None
    headers, rows = by_length_pivot(c.length_means)
    return _section(
        "length",
        "BLEU by source length",
        [
            Figure(c.figures.bleu_by_length, "BLEU vs source length"),
            Paragraph(_LENGTH_NOTE, style="caption"),
            _table(headers, rows, collapsed="The numbers"),
        ],
    )


def _exploratory(c: PageInputs) -> Section | None:
    rows = exploratory_rows(c.comparisons, c.study.main_decoding) if len(c.comparisons) else []
    if not rows:
        return None
    blocks = [Paragraph(_EXPLORE_NOTE), _table(EXPLORE_HEADERS, rows)]
    return _section("exploratory", "Exploratory comparisons", blocks)


def _curves(c: PageInputs) -> Section | None:
    if c.figures.learning_curves is None:
        return None
    return _section(
        "curves",
        "Learning curves",
        [
            Figure(c.figures.learning_curves, "learning curves"),
            Paragraph(_CONVERGENCE_NOTE, style="caption", escaped=False),
        ],
    )


def _late_gains(c: PageInputs) -> Section | None:
    """How much dev BLEU still rose before each stop (after the learning curves, or in
    their place when there are none)."""
    rows = late_gain_rows(c.late_gains)
    if not rows:
        return None
    note = Paragraph(late_gain_note(c.late_gains), style="caption")
    return Section(None, (_table(LATE_GAIN_HEADERS, rows), note))


def _samples(c: PageInputs) -> Section | None:
    if not c.samples:
        return None
    blocks: list[Block] = []
    for sample in c.samples:
        rows = [["source", sample.source], ["reference", sample.reference]]
        rows += [[variant, text] for _, variant, text in sample.outputs]
        title = (
            f"{sample.bucket} words ({sample.training_range} the training range), "
            f"test sentence {sample.index}"
        )
        blocks += [Heading(title, level=3), _table(["", "text"], rows, text=True)]
    return _section("samples", "Sample translations", blocks)


def _heatmaps(c: PageInputs) -> Section | None:
    if c.figures.heatmaps is None:
        return None
    caption = Paragraph(f"{c.heatmap_title}: {_HEATMAP_NOTE}.", style="caption")
    blocks = [Figure(c.figures.heatmaps, "attention heatmaps"), caption]
    return _section("heatmaps", "Attention heatmaps", blocks)


def _variants(c: PageInputs) -> Section:
    """Every variant of the grid, failed ones marked (and listed with their errors)."""
    classes = tuple("failed" if row[-1] == FAILED else "" for row in c.rows)
    blocks: list[Block] = [
        Paragraph(variants_caption(c.cut), style="caption"),
        _table(c.headers, c.rows, row_classes=classes),
    ]
    if c.failed:
        blocks += [Heading("Failed variants", level=3), _table(["variant", "error"], c.failed)]
    return _section("variants", "All variants", blocks)


def _provenance(c: PageInputs) -> Section:
    return _section(
        "provenance",
        "Provenance",
        [
            Code(json.dumps(c.provenance, indent=2, ensure_ascii=False), language="json"),
            Code(
                json.dumps(c.params, indent=2),
                collapsed="params.yaml (resolved)",
                only="html",
            ),
        ],
    )
