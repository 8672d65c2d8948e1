"""The study's findings: hypotheses declared in advance, tested with seed-aware statistics,
judged by rules that are symmetric in evidence.

Each finding is one or more *parts*, each a contrast (:mod:`pipeline.study.statistics`) with a
claim: ``> 0``, ``< 0`` or ``flat`` (inside a stated margin). A part is

- *supported*: its test rejects the opposite at the level below (``> 0``: the contrast is
  significantly positive; ``flat``: TOST shows it inside the margin);
- *contradicted*: the same test, the other way (significantly negative; significantly
  outside the margin);
- *undecided* otherwise.

A finding **agrees** when all its parts are supported and **disagrees** when any part is
contradicted: both need a significant test, so noise alone produces neither. Otherwise
it is **not testable with this design** when its main contrast's minimal detectable effect
(MDE, 80% power at the Holm level) exceeds the effect the literature reports, or the grid
lacks the variants or seeds (at least 2 plateaued twins); else **inconclusive**.

The p-values of the main parts of the testable findings form the primary family, Holm-
adjusted together; the equivalence tests are at level alpha. Variants that stopped at
the step cap (not plateaued) are left out of every confirmatory contrast. Other scorer
comparisons are exploratory: reported apart, unadjusted, never verdicts.

The attention model of the length and reversal findings is ``additive`` (Bahdanau's
RNNsearch), fixed in advance. The *reference* scorer of the exploratory comparisons and the
study's single "best" is chosen on dev: the attention scorer with the highest mean best
dev BLEU over the seeds every candidate has (equal seeds, matched twins).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pipeline.study.statistics import (
    ALPHA,
    Contrast,
    ContrastEstimator,
    Estimate,
    Term,
    holm,
    mde,
)

VERDICTS = ("agrees", "disagrees", "inconclusive", "not testable")
FLAT_MARGIN = 0.10
"""Length: the attention model counts as flat if its BLEU change from the shortest to the
longest bucket inside the training lengths is shown (TOST) to lie within +-10% of its
BLEU on the shortest bucket."""

LITERATURE_EFFECT = {
    "Attention": 2.0,
    "Length": 2.0,
    "Reversal": 2.0,
    "Scorer": 0.2,
    "Hidden size": 0.5,
}
"""The smallest effect (BLEU) each claim implies, to which the design's MDE is compared:
attention and reversal gains of several BLEU (Bahdanau et al. 2014, Table 1; Sutskever et
al. 2014: +4.7), a length interaction of a few BLEU (Bahdanau Fig. 2), additive over
multiplicative by +0.2-0.7 (Britz et al. 2017, Table 6), a size effect of about half a
BLEU (Britz et al. 2017)."""


@dataclass
class Part:
    label: str
    claim: str  # "> 0" | "< 0" | "flat"
    estimate: Estimate | None
    margin: float = 0.0
    primary: bool = True
    p_holm: float = float("nan")
    state: str = "undecided"  # supported | contradicted | undecided

    def summary(self) -> dict[str, Any]:
        e = self.estimate
        out = {
            "label": self.label,
            "claim": self.claim,
            "state": self.state,
            "margin": self.margin,
            "p_holm": self.p_holm,
        }
        if e is not None:
            out.update(
                estimate=e.estimate,
                low=e.low,
                high=e.high,
                p=e.p,
                mde=e.mde,
                seeds=e.seeds,
                per_seed={str(k): v for k, v in e.per_seed.items()},
                se_seed=e.se_seed,
                se_test=e.se_test,
                df=e.df,
            )
        return out


@dataclass
class Finding:
    title: str
    literature: str
    criterion: str
    parts: list[Part] = field(default_factory=list)
    verdict: str = "not testable"
    why: str = ""  # one line: what decided the verdict
    effect: float | None = None  # smallest effect that matters (None: LITERATURE_EFFECT's)

    @property
    def main(self) -> Part | None:
        return self.parts[0] if self.parts else None

    def summary(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "literature": self.literature,
            "criterion": self.criterion,
            "verdict": self.verdict,
            "why": self.why,
            "parts": [p.summary() for p in self.parts],
        }


# ------------------------------------------------------------------------- variants
class Grid:
    """The evaluated variants (``table``: variant, scorer, reverse_source, hidden_size,
    seed, plateaued, best_dev_bleu, rest: every other setting), looked up as twins."""

    def __init__(self, table: pd.DataFrame):
        self.table = table
        counts = table[(table.scorer == "none") & ~table.reverse_source]
        counts = counts.groupby(["hidden_size", "rest"]).seed.nunique()
        if counts.empty:
            counts = table.groupby(["hidden_size", "rest"]).seed.nunique()
        best = counts[counts == counts.max()].index.max()  # most seeds, then largest size
        self.hidden_size, self.rest = (int(best[0]), best[1]) if len(counts) else (None, None)

    def systems(
        self,
        scorer: str,
        reverse: bool = False,
        hidden: int | None = None,
        confirmatory: bool = True,
    ) -> dict[int, str]:
        """``{seed: variant}`` of one configuration (plateaued only when confirmatory)."""
        t = self.table
        rows = t[
            (t.scorer == scorer)
            & (t.reverse_source == reverse)
            & (t.hidden_size == (hidden or self.hidden_size))
            & (t.rest == self.rest)
        ]
        if confirmatory:
            rows = rows[rows.plateaued]
        return {int(r.seed): str(r.variant) for r in rows.itertuples()}

    def sizes(self) -> list[int]:
        return sorted(int(s) for s in self.table.hidden_size.unique())


def choose_reference(grid: Grid) -> tuple[str | None, dict[str, float]]:
    """The attention scorer with the highest mean best dev BLEU over the seeds that every
    candidate has, at the findings' size, source forward; and the candidates' means."""
    t = grid.table
    rows = t[
        (t.scorer != "none")
        & ~t.reverse_source
        & (t.hidden_size == grid.hidden_size)
        & (t.rest == grid.rest)
    ]
    if rows.empty:
        return None, {}
    seeds = rows.groupby("scorer").seed.apply(set)
    most = max(len(s) for s in seeds)
    candidates = seeds[seeds.map(len) == most]
    common = set.intersection(*candidates)
    chosen = rows[rows.scorer.isin(candidates.index) & rows.seed.isin(common)]
    means = chosen.groupby("scorer").best_dev_bleu.mean().sort_values(ascending=False)
    return (str(means.index[0]) if len(means) else None), {k: float(v) for k, v in means.items()}


# -------------------------------------------------------------------------- findings
@dataclass(frozen=True)
class Spec:
    """One declared part: a contrast (None when the grid lacks its variants) and its claim.
    A ``flat`` claim's margin is :data:`FLAT_MARGIN` of the BLEU of the contrast's
    subtracted term (the shorter sentences)."""

    label: str
    claim: str  # "> 0" | "< 0" | "flat"
    contrast: Contrast | None


def _contrast(name: str, *terms: tuple[float, dict[int, str], str]) -> Contrast | None:
    built = tuple(Term(w, s, subset) for w, s, subset in terms)
    contrast = Contrast(name, built)
    return contrast if all(t.systems for t in built) and len(contrast.seeds) >= 2 else None


def _difference(name: str, plus: dict, minus: dict, subset: str, minus_subset: str = ""):
    """``plus`` minus ``minus`` (``minus`` on ``minus_subset`` when given)."""
    return _contrast(name, (1, plus, subset), (-1, minus, minus_subset or subset))


def _interaction(name: str, a1: dict, a0: dict, b1: dict, b0: dict, s1: str, s0: str):
    """(a1 on s1 - a0 on s0) - (b1 on s1 - b0 on s0): how much more ``a`` changes than ``b``."""
    return _contrast(name, (1, a1, s1), (-1, a0, s0), (-1, b1, s1), (1, b0, s0))


ATTENTION = Finding(
    "Attention",
    "Attention (RNNsearch, additive scorer) translates better than the RNN Encoder-Decoder "
    "without it (Bahdanau et al. 2014, Table 1).",
    "additive minus none (forward source, test sentences inside the training lengths), "
    "mean over seeds: > 0.",
)
LENGTH = Finding(
    "Length",
    "Without attention (RNNencdec) BLEU falls as sentences get longer; with attention "
    "(RNNsearch) it stays nearly flat (Bahdanau et al. 2014, Fig. 2; Cho et al. 2014).",
    "Inside the training lengths, BLEU on {last} minus on {first} words: the no-attention "
    "model's change minus additive's < 0 (a length x model interaction), and additive's "
    "change flat: within +-{margin:.0%} of its BLEU on {first} words (TOST). Buckets beyond "
    "the training cut are extrapolation: described, not tested.",
)
REVERSAL = Finding(
    "Reversal",
    "Reversing the source helps the model without attention (Sutskever et al. 2014: "
    "25.9 -> 30.6 BLEU); attention makes the order matter much less.",
    "Inside the training lengths: none reversed minus forward > 0, and that gain minus "
    "additive's reversal gain > 0 (an order x model interaction).",
)
SCORER = Finding(
    "Scorer",
    "Additive attention is slightly but consistently better than multiplicative (general) "
    "attention: +0.2-0.7 BLEU (Britz et al. 2017, Table 6).",
    "additive minus general (forward, inside the training lengths), mean over seeds: > 0.",
)
HIDDEN_SIZE = Finding(
    "Hidden size",
    "Dot products grow with the dimension of queries and keys, pushing the softmax into "
    "regions of small gradients; scaling by 1/sqrt(d) avoids it (Vaswani et al. 2017, "
    "sec. 3.2.1). Britz et al. (2017) vary the attention dimensionality (128-1024) and "
    "find multiplicative attention falling behind additive as it grows. Here the "
    "attention dimension of dot and scaled_dot is the hidden size.",
    "dot minus scaled_dot at the largest hidden size minus the same at the smallest "
    "< 0 (a size x scaling interaction), forward, inside the training lengths.",
)


def declare(grid: Grid, buckets: list[str], inside: str = "inside") -> list[tuple]:
    """The primary hypotheses, as ``(Finding, [Spec, ...])``: written before any number is
    read, from the grid alone (a fresh copy of each declared :class:`Finding`)."""
    none_f, none_r = grid.systems("none"), grid.systems("none", reverse=True)
    add_f, add_r = grid.systems("additive"), grid.systems("additive", reverse=True)
    first, last = (buckets[0], buckets[-1]) if len(buckets) >= 2 else (None, None)
    criterion = LENGTH.criterion.format(first=first, last=last, margin=FLAT_MARGIN)
    length_specs = []
    if first:
        length_specs = [
            Spec("none's fall minus additive's", "< 0",
                 _interaction("length x model", none_f, none_f, add_f, add_f, last, first)),
            Spec("additive's change", "flat",
                 _difference("additive length change", add_f, add_f, last, first)),
        ]  # fmt: skip
    sizes, size_specs = grid.sizes(), []
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        dot = {h: grid.systems("dot", hidden=h) for h in (small, large)}
        scaled = {h: grid.systems("scaled_dot", hidden=h) for h in (small, large)}
        size_specs = [
            Spec("(dot - scaled_dot) large minus small", "< 0",
                 _interaction("size x scaling", dot[large], scaled[large], dot[small],
                              scaled[small], inside, inside)),
        ]  # fmt: skip
    return [
        (replace(ATTENTION, parts=[]), [Spec("additive - none", "> 0",
                                   _difference("attention", add_f, none_f, inside))]),
        (replace(LENGTH, criterion=criterion, parts=[]), length_specs),
        (replace(REVERSAL, parts=[]), [
            Spec("none's reversal gain minus additive's", "> 0",
                 _interaction("order x model", none_r, none_f, add_r, add_f, inside, inside)),
            Spec("none's reversal gain", "> 0",
                 _difference("none reversal gain", none_r, none_f, inside)),
        ]),
        (replace(SCORER, parts=[]), [Spec("additive - general", "> 0",
                                _difference("additive vs general", add_f,
                                            grid.systems("general"), inside))]),
        (replace(HIDDEN_SIZE, parts=[]), size_specs),
    ]  # fmt: skip


def declare_comparisons(grid: Grid, comparisons) -> list[tuple]:
    """The user's comparisons (``evaluate.comparisons``) as declared findings."""
    declared = []
    for c in comparisons:
        finding = Finding(
            c.name,
            c.source or "declared in params (evaluate.comparisons)",
            f"{_describe(c.plus)} minus {_describe(c.minus)} ({c.subset}), mean over seeds: "
            f"{c.claim}.",
            effect=c.effect,
        )
        plus, minus = (grid.systems(s.scorer, s.reverse_source, s.hidden_size)
                       for s in (c.plus, c.minus))  # fmt: skip
        contrast = _difference(c.name, plus, minus, c.subset)
        declared.append((finding, [Spec(f"{c.plus.scorer} - {c.minus.scorer}", c.claim, contrast)]))
    return declared


def _describe(selector) -> str:
    order = "reversed" if selector.reverse_source else "forward"
    size = f", h{selector.hidden_size}" if selector.hidden_size else ""
    return f"{selector.scorer} ({order}{size})"


def judge(
    estimator: ContrastEstimator,
    grid: Grid,
    buckets: list[str],
    alpha: float = ALPHA,
    comparisons=(),
) -> list[Finding]:
    """Estimate every declared part (the study's findings, then ``comparisons`` from
    params), Holm over the main parts, and give each verdict."""
    declared = declare(grid, buckets) + declare_comparisons(grid, comparisons)
    findings = []
    for finding, specs in declared:
        for spec in specs:
            contrast = spec.contrast
            estimate = estimator.estimate(contrast, alpha) if contrast is not None else None
            margin = 0.0
            if spec.claim == "flat" and estimate is not None:
                base = contrast.terms[1]  # the subtracted term: BLEU on the shorter sentences
                scores = [estimator.score(base.systems[s], base.subset) for s in contrast.seeds]
                margin = FLAT_MARGIN * float(np.mean(scores))
            primary = spec.claim != "flat"
            finding.parts.append(Part(spec.label, spec.claim, estimate, margin, primary=primary))
        findings.append(finding)
    primary = [p for f in findings for p in f.parts if p.primary and p.estimate is not None]
    for part, adjusted in zip(primary, holm([p.estimate.p for p in primary])):
        part.p_holm = adjusted
    levels = max(len(primary), 1)
    for part in primary:  # the MDE of a primary test is at the level Holm can reach
        part.estimate.mde = mde(part.estimate.se, part.estimate.df, alpha / levels)
    for finding in findings:
        _decide(finding, alpha)
    return findings


def _state(part: Part, alpha: float) -> str:
    e = part.estimate
    if e is None:
        return "undecided"
    if part.claim == "flat":
        if e.tost(part.margin) < alpha:
            return "supported"
        outside = min(
            scipy_stats.t.sf((e.estimate - part.margin) / e.se, e.df),
            scipy_stats.t.cdf((e.estimate + part.margin) / e.se, e.df),
        )
        return "contradicted" if e.se > 0 and outside < alpha else "undecided"
    if not part.p_holm < alpha:
        return "undecided"
    positive = e.estimate > 0
    return "supported" if positive == (part.claim == "> 0") else "contradicted"


def _decide(finding: Finding, alpha: float) -> None:
    for part in finding.parts:
        part.state = _state(part, alpha)
    main = finding.main
    if main is None or main.estimate is None:
        finding.verdict = "not testable"
        finding.why = "the grid lacks the variants or seeds (at least 2 plateaued twins)"
        return
    states = [p.state for p in finding.parts]
    if "contradicted" in states:
        finding.verdict = "disagrees"
        finding.why = "; ".join(
            f"{p.label} contradicts the claim" for p in finding.parts if p.state == "contradicted"
        )
        return
    if all(s == "supported" for s in states):
        finding.verdict, finding.why = "agrees", "every part supported"
        return
    holm_mde = main.estimate.mde
    effect = (
        finding.effect if finding.effect is not None else LITERATURE_EFFECT.get(finding.title, 0.0)
    )
    if main.state == "undecided" and holm_mde > effect:
        finding.verdict = "not testable"
        finding.why = f"MDE {holm_mde:.2f} BLEU at the Holm level exceeds the {effect:g} BLEU " + (
            "the literature reports" if finding.effect is None else "declared in params"
        )
        return
    finding.verdict = "inconclusive"
    finding.why = "; ".join(f"{p.label}: {p.state}" for p in finding.parts)


# ----------------------------------------------------------------------- exploratory
def exploratory(
    estimator: ContrastEstimator, grid: Grid, reference: str | None, inside: str = "inside"
) -> list[dict[str, Any]]:
    """Each attention scorer minus the reference and minus none (forward, findings size;
    unadjusted, seeds as available: one seed covers test sampling only)."""
    rows = []
    scorers = [s for s in dict.fromkeys(grid.table.scorer) if s != "none"]
    for scorer in scorers:
        mine = grid.systems(scorer, confirmatory=False)
        for other, label in ((reference, "vs reference"), ("none", "vs none")):
            if other is None or other == scorer:
                continue
            theirs = grid.systems(other, confirmatory=False)
            contrast = Contrast(
                f"{scorer} - {other}", (Term(1, mine, inside), Term(-1, theirs, inside))
            )
            if not contrast.seeds:
                continue
            e = estimator.estimate(contrast)
            rows.append({"comparison": label, "name": contrast.name, **_estimate_row(e)})
    return rows


def ranking(
    estimator: ContrastEstimator,
    grid: Grid,
    reference: str | None,
    subsets: tuple[str, ...] = ("inside", "all"),
) -> pd.DataFrame:
    """Scorers at the findings' size, forward, by mean test BLEU over seeds, with intervals
    covering seeds and sentences (one seed: test sampling only)."""
    rows = []
    for scorer in dict.fromkeys(grid.table.scorer):
        systems = grid.systems(scorer, confirmatory=False)
        if not systems:
            continue
        plateaued = grid.table.set_index("variant").plateaued[list(systems.values())]
        row = {
            "scorer": scorer,
            "seeds": len(systems),
            "reference": scorer == reference,
            "plateaued": int(plateaued.sum()),
        }
        for subset in subsets:
            e = estimator.estimate(Contrast(scorer, (Term(1, systems, subset),)))
            seeds = {str(k): round(v, 3) for k, v in e.per_seed.items()}
            row.update(
                {
                    f"bleu_{subset}": e.estimate,
                    f"low_{subset}": e.low,
                    f"high_{subset}": e.high,
                    f"per_seed_{subset}": json.dumps(seeds),
                }
            )
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.sort_values(f"bleu_{subsets[0]}", ascending=False, ignore_index=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


def _estimate_row(e: Estimate) -> dict[str, Any]:
    row = {k: v for k, v in asdict(e).items() if k not in ("name", "per_seed", "extra")}
    row["per_seed"] = json.dumps({str(k): round(v, 3) for k, v in e.per_seed.items()})
    return row


def comparisons_table(findings: list[Finding], explore: list[dict[str, Any]]) -> pd.DataFrame:
    """Every tested contrast, primary first: one row each."""
    rows = []
    for f in findings:
        for p in f.parts:
            if p.estimate is None:
                continue
            rows.append(
                {
                    "family": "primary" if p.primary else "equivalence",
                    "finding": f.title,
                    "comparison": p.label,
                    "claim": p.claim,
                    "state": p.state,
                    "p_holm": p.p_holm,
                    "margin": p.margin,
                    **_estimate_row(p.estimate),
                }
            )
    for r in explore:
        rows.append({"family": "exploratory", "finding": "", **r})
    return pd.DataFrame(rows)
