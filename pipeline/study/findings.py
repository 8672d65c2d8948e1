"""The study's findings: questions declared in advance (:mod:`pipeline.study.declarations`),
tested with seed-aware statistics, judged by rules that are symmetric in evidence.

Each finding has one *primary* part, a contrast (:mod:`pipeline.study.statistics`) with
a claim and a declared smallest effect of interest ``E``, and may have *secondary* parts
that describe it further (reported at level alpha, never deciding). The primary parts
of all findings, and of the user's comparisons (``evaluate.comparisons``), form one
family of ``m``: each primary interval is drawn at ``1 - alpha / m`` (Bonferroni), the
level at which the verdicts together err with probability at most alpha, and the MDE and
the a-priori power are stated at that level too. The verdict rules, which read that
interval against the declared effect of interest, the baseline's gates
(:mod:`pipeline.study.gates`) and the design lock (:mod:`pipeline.study.design`), and the
vocabulary they use (:data:`VERDICTS`), are in :mod:`pipeline.study.labels`. A finding
whose declaration was not locked before training, or changed after training started, is
exploratory: it is judged at the level the declared design gave it (``alpha / M`` for
all ``M`` declared primary parts) and left out of the family.

Every verdict but "inconclusive" and "not testable" needs an interval that excludes a
value, so noise alone produces none of them. Variants that stopped before their plateau (at
the step cap) are left out of every confirmatory contrast. Other scorer comparisons are
exploratory: reported apart, at level alpha, never verdicts.

The attention model of the length and reversal findings is ``additive`` (Bahdanau's
RNNsearch), fixed in advance. The *reference* scorer of the exploratory comparisons is
chosen on dev: the attention scorer with the highest mean best dev BLEU over the seeds
every candidate has (equal seeds, matched twins).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pipeline.config.params import ConfigError
from pipeline.study.declarations import (
    ATTENTION_50,
    EFFECTS,
    GATES,
    GPU_HIDDEN_SIZE,
    PAPER_BASELINE_RATIO,
    Effect,
    Power,
    design_power,
    paper_baseline_ratio,
)
from pipeline.study.gates import GateResult, measure_gates
from pipeline.study.labels import VERDICTS, decide
from pipeline.study.record import (
    DeclarationChange,
    EffectOfInterest,
    FindingRecord,
    PartEstimate,
    PartRecord,
    finite,
)
from pipeline.study.statistics import (
    ALPHA,
    Contrast,
    ContrastEstimator,
    Estimate,
    Term,
    bonferroni,
)

__all__ = ["PAPER_BASELINE_RATIO", "VERDICTS", "paper_baseline_ratio"]  # with the rest

LITERATURE_EFFECT = {title: effect.value for title, effect in EFFECTS.items()}
"""Each finding's effect of interest, by title (:data:`~pipeline.study.declarations.EFFECTS`)."""
FINDINGS_SIZE = 256
"""The hidden size the findings are judged at when the grid has several with as many
seeds: the attention dimension of Britz et al.'s 0.00 and of the pilot's variances."""


@dataclass
class Part:
    label: str
    claim: str  # "> 0" | "< 0" | "equivalent"
    estimate: Estimate | None
    effect: float | None = None  # the declared effect of interest (primary parts)
    margin: float = 0.0  # an equivalence claim's margin
    primary: bool = True
    p_adjusted: float = float("nan")  # Bonferroni over the family
    state: str = "undecided"  # the verdict rule's reading of this part

    def record(self) -> PartRecord:
        """The part as ``eval/findings.json`` holds it."""
        e = self.estimate
        estimate = None
        if e is not None:
            estimate = PartEstimate(
                estimate=e.estimate,
                low=e.low,
                high=e.high,
                level=1 - e.alpha,
                p=e.p,
                mde=e.mde,
                seeds=e.seeds,
                per_seed={c: {str(k): v for k, v in s.items()} for c, s in e.per_seed.items()},
                se=e.se,
                se_seed=e.se_seed,
                se_test=e.se_test,
                df=e.df,
            )
        return PartRecord(
            label=self.label,
            claim=self.claim,
            state=self.state,
            primary=self.primary,
            effect=finite(self.effect),
            margin=self.margin,
            p_adjusted=finite(self.p_adjusted),
            estimate=estimate,
        )


@dataclass
class Finding:
    title: str
    literature: str
    criterion: str
    parts: list[Part] = field(default_factory=list)
    verdict: str = "not testable"
    why: str = ""  # one line: what decided the verdict
    answer: str = ""  # one sentence in words: what the study found
    effect: Effect | None = None
    power: Power | None = None
    scale: str = "bleu"
    notes: list[str] = field(default_factory=list)
    label: str = ""  # the verdict with what qualifies it (pipeline.study.labels)
    reason: str = ""  # a "not testable" verdict's reason, in a few words
    confirmatory: bool = True  # False: its declaration was not locked before training
    exploratory: str = ""  # why it is exploratory
    change: DeclarationChange | None = None  # its declaration, locked and now
    gated: str = ""  # what its gates decide: "claim", "size" or "" (it needs none)
    gates: list[GateResult] = field(default_factory=list)
    settings: Mapping[str, Any] | None = None  # the model tested (ModelConfig fields)

    @property
    def main(self) -> Part | None:
        return self.parts[0] if self.parts else None

    def failed_gates(self) -> list[GateResult]:
        """The gates it needs that did not pass (failed or not measured)."""
        return [g for g in self.gates if not g.passed]

    def literature_differences(self) -> list[str]:
        """How the model tested differs from the paper's whose effect it declares (every
        declared setting, when the model is unknown); empty when it is the paper's or the
        effect names no paper's model."""
        effect = self.effect
        if effect is None or effect.literature is None:
            return []
        return effect.literature.differences(self.settings or {})

    def literature_agrees(self) -> bool:
        """Whether a size verdict may read "agrees with the literature": a published
        effect, the paper's model, and every gate the claim needs passed."""
        effect = self.effect
        return (
            effect is not None
            and effect.published
            and effect.literature is not None
            and self.settings is not None
            and not self.literature_differences()
            and not self.failed_gates()
        )

    def record(self) -> FindingRecord:
        """The finding as ``eval/findings.json`` holds it."""
        effect = self.effect
        declared = None
        if effect is not None:
            declared = EffectOfInterest(
                effect.claim, effect.value, effect.source, effect.why, effect.published
            )
        return FindingRecord(
            title=self.title,
            literature=self.literature,
            criterion=self.criterion,
            verdict=self.verdict,
            why=self.why,
            answer=self.answer,
            scale=self.scale,
            effect_of_interest=declared,
            design=None if self.power is None else self.power.design(),
            notes=tuple(self.notes),
            parts=tuple(p.record() for p in self.parts),
            label=self.label,
            confirmatory=self.confirmatory,
            exploratory=self.exploratory,
            change=self.change,
            gated=self.gated,
            gates=tuple(g.record() for g in self.gates),
        )

    def summary(self) -> dict[str, Any]:
        """:meth:`record`'s JSON (what ``eval/findings.json`` lists per decoding)."""
        return self.record().to_json()


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
        most = [key for key, n in counts.items() if n == counts.max()]
        # most seeds, then the size the declared effects are about (256), then the largest
        best = max(most, key=lambda key: (key[0] == FINDINGS_SIZE, key[0])) if most else None
        self.hidden_size, self.rest = (int(best[0]), best[1]) if best else (None, None)

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

    def capped(self, scorer: str, reverse: bool = False, hidden: int | None = None) -> int:
        """How many of a configuration's variants stopped before their plateau."""
        every = self.systems(scorer, reverse, hidden, confirmatory=False)
        return len(every) - len(self.systems(scorer, reverse, hidden))

    def configurations(self) -> list[dict[int, str]]:
        """Every configuration's plateaued ``{seed: variant}`` (the seed variance pools
        over them)."""
        t = self.table[self.table.plateaued]
        keys = ["scorer", "reverse_source", "hidden_size", "rest"]
        return [
            {int(r.seed): str(r.variant) for r in rows.itertuples()}
            for _, rows in t.groupby(keys, sort=True)
        ]

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
class Config:
    """One configuration a finding compares: scorer, source order, hidden size."""

    scorer: str
    reverse: bool = False
    hidden: int | None = None

    def label(self, grid: Grid) -> str:
        order = "rev" if self.reverse else "fwd"
        return f"{self.scorer}-{order}-h{self.hidden or grid.hidden_size}"


@dataclass(frozen=True)
class Spec:
    """One declared part: weighted terms ``(weight, configuration, subset)`` on a scale,
    its claim, and whether it is the finding's primary part."""

    label: str
    claim: str
    terms: tuple[tuple[float, Config, str], ...]
    scale: str = "bleu"
    primary: bool = True


def _difference(label, claim, plus: Config, minus: Config, subset="inside", **kw) -> Spec:
    return Spec(label, claim, ((1, plus, subset), (-1, minus, subset)), **kw)


def _change(label, claim, a: Config, b: Config | None, near: str, far: str, **kw) -> Spec:
    """``a``'s score on ``far`` minus on ``near``, minus the same for ``b`` when given."""
    terms = [(1, a, far), (-1, a, near)]
    if b is not None:
        terms += [(-1, b, far), (1, b, near)]
    return Spec(label, claim, tuple(terms), **kw)


NONE, ADDITIVE, GENERAL = Config("none"), Config("additive"), Config("general")
NONE_REV, ADDITIVE_REV = Config("none", True), Config("additive", True)

ATTENTION = Finding(
    "Attention",
    "Attention (RNNsearch, additive scorer) translates better than the RNN Encoder-Decoder "
    "without it (Bahdanau et al. 2014, Table 1).",
    "additive minus none (forward source, test sentences inside the training lengths), "
    "mean over seeds.",
)
LENGTH = Finding(
    "Length",
    "Without attention (RNNencdec-30) BLEU falls beyond the sentence lengths the model "
    "was trained on much more than with attention (RNNsearch-30) (Bahdanau et al. 2014, "
    "Fig. 2).",
    "On log BLEU: none's change from the test sentences inside the training lengths to "
    "those beyond them, minus additive's (a length x model interaction; a ratio scale, "
    "so a model with less BLEU to lose is not favoured).",
    scale="log_bleu",
)
REVERSAL = Finding(
    "Reversal",
    "Reversing the source helps the model without attention (Sutskever et al. 2014: "
    "25.9 -> 30.6 BLEU).",
    "none reversed minus none forward, inside the training lengths; secondary: that gain "
    "minus additive's (an order x model interaction).",
)
SCORER = Finding(
    "Scorer",
    "Additive and multiplicative (general) attention score alike at an attention "
    "dimension of 256 (Britz et al. 2017); the gap opens at larger dimensions.",
    "additive minus general (forward, inside the training lengths), mean over seeds: equivalence.",
)
HIDDEN_SIZE = Finding(
    "Hidden size",
    "A larger hidden size: with additive attention, a gain worth its cost; at attention "
    "dimensions of 1024 multiplicative attention falls behind additive (Britz et al. "
    "2017).",
    "{criterion}",
)


DECLARED: tuple[tuple[Finding, tuple[Spec, ...]], ...] = (
    (ATTENTION, (_difference("additive - none", "> 0", ADDITIVE, NONE),)),
    (
        LENGTH,
        (
            _change(
                "none's change minus additive's",
                "< 0",
                NONE,
                ADDITIVE,
                "inside",
                "beyond",
                scale="log_bleu",
            ),
            _change(
                "additive's change",
                "< 0",
                ADDITIVE,
                None,
                "inside",
                "beyond",
                scale="log_bleu",
                primary=False,
            ),
        ),
    ),
    (
        REVERSAL,
        (
            _difference("none reversed - forward", "> 0", NONE_REV, NONE),
            Spec(
                "none's reversal gain minus additive's",
                "> 0",
                (
                    (1, NONE_REV, "inside"),
                    (-1, NONE, "inside"),
                    (-1, ADDITIVE_REV, "inside"),
                    (1, ADDITIVE, "inside"),
                ),
                primary=False,
            ),
        ),
    ),
    (SCORER, (_difference("additive - general", "equivalent", ADDITIVE, GENERAL),)),
)
"""The findings whose parts the grid does not change (the hidden-size finding's do:
:func:`_hidden_size`), as templates: :func:`declare` hands out fresh copies."""


def declare(grid: Grid) -> list[tuple[Finding, list[Spec]]]:
    """The study's findings and their parts, from the grid alone (before any number)."""
    findings = [*DECLARED, _hidden_size(grid.sizes())]
    return [(_fresh(f), list(specs)) for f, specs in findings]


def _hidden_size(sizes: list[int]) -> tuple[Finding, tuple[Spec, ...]]:
    """The hidden-size finding for the grid's ``sizes``: Britz et al.'s interaction
    (additive - general, largest minus 256) where the grid reaches 1024, else additive's
    gain from the smallest size to the largest; no part with fewer than two sizes."""
    if len(sizes) < 2:
        criterion = "two hidden sizes in the grid"
        return Finding(HIDDEN_SIZE.title, HIDDEN_SIZE.literature, criterion), ()
    small, large = sizes[0], sizes[-1]
    if large >= 1024:  # Britz et al.'s test, where the grid reaches their dimensions
        base = 256 if 256 in sizes else small
        criterion = (
            f"(additive - general) at h{large} minus the same at h{base}, "
            "inside the training lengths"
        )
        spec = Spec(
            "(additive - general) large minus small",
            "> 0",
            (
                (1, Config("additive", hidden=large), "inside"),
                (-1, Config("general", hidden=large), "inside"),
                (-1, Config("additive", hidden=base), "inside"),
                (1, Config("general", hidden=base), "inside"),
            ),
        )
    else:
        criterion = f"additive at h{large} minus additive at h{small}, inside the training lengths"
        spec = _difference(
            f"additive h{large} - h{small}",
            "> 0",
            Config("additive", hidden=large),
            Config("additive", hidden=small),
        )
    return Finding(HIDDEN_SIZE.title, HIDDEN_SIZE.literature, criterion), (spec,)


def _fresh(finding: Finding) -> Finding:
    return Finding(finding.title, finding.literature, finding.criterion, scale=finding.scale)


def effect_of(finding: Finding, specs: list[Spec], train_cut: int | None = 30) -> Effect | None:
    """The finding's declared effect: the -50 models' attention gain when training saw
    sentences of 50 words or more, Britz et al.'s interaction when the grid reaches 1024."""
    if finding.title == "Hidden size" and specs and len(specs[0].terms) == 4:
        return GPU_HIDDEN_SIZE
    if finding.title == "Attention" and (train_cut is None or train_cut >= 50):
        return ATTENTION_50
    return EFFECTS.get(finding.title)


def declare_comparisons(comparisons) -> list[tuple[Finding, list[Spec], Effect]]:
    """The user's comparisons (``evaluate.comparisons``) as declared findings."""
    declared = []
    for c in comparisons:
        claim = c.claim
        finding = Finding(
            c.name,
            c.source or "declared in params (evaluate.comparisons)",
            f"{_describe(c.plus)} minus {_describe(c.minus)} ({c.subset}), mean over seeds.",
        )
        value = -c.effect if claim == "< 0" else c.effect
        effect = Effect(claim, value, "bleu", c.source or "", "declared in params", published=False)
        plus, minus = (Config(s.scorer, s.reverse_source, s.hidden_size) for s in (c.plus, c.minus))
        spec = _difference(f"{c.plus.scorer} - {c.minus.scorer}", claim, plus, minus, c.subset)
        declared.append((finding, [spec], effect))
    return declared


def _describe(selector) -> str:
    order = "reversed" if selector.reverse_source else "forward"
    size = f", h{selector.hidden_size}" if selector.hidden_size else ""
    return f"{selector.scorer} ({order}{size})"


def _contrast(spec: Spec, grid: Grid) -> tuple[Contrast | None, str]:
    """The contrast of ``spec`` over the grid's plateaued variants, or None and why."""
    terms, missing, capped = [], [], []
    for weight, config, subset in spec.terms:
        systems = grid.systems(config.scorer, config.reverse, config.hidden)
        if len(systems) < 2:
            missing.append(config.label(grid))
            if grid.capped(config.scorer, config.reverse, config.hidden):
                capped.append(config.label(grid))
        terms.append(Term(weight, systems, subset))
    if missing:
        if capped:
            return None, (
                f"its variants stopped before their plateau (the step cap, "
                f"train.max_steps): {', '.join(sorted(set(capped)))}"
            )
        return None, f"the grid lacks 2 plateaued seeds of {', '.join(sorted(set(missing)))}"
    net: dict[tuple, float] = {}
    for weight, config, subset in spec.terms:
        key = (config.label(grid), subset)
        net[key] = net.get(key, 0.0) + weight
    if all(abs(w) < 1e-12 for w in net.values()):
        return None, "its two sides are the same configuration on the same sentences"
    return Contrast(spec.label, tuple(terms), spec.scale), ""


def judge(
    estimator: ContrastEstimator,
    grid: Grid,
    available: set[str] | None = None,
    alpha: float = ALPHA,
    comparisons=(),
    train_cut: int | None = 30,
    design_status: Callable[[str], tuple[str, DeclarationChange | None] | None] | None = None,
    exploratory: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Declare every finding (the study's, then ``comparisons`` from params), compute each
    one's a-priori power, measure the baseline's gates, estimate the parts, and give each
    verdict. ``available`` names the sentence subsets the test set has (a part on a
    missing one is not testable). ``design_status(title)``: ``(why, the change of its
    declaration)`` for a finding the design lock does not cover, ``None`` for a
    confirmatory one (:meth:`pipeline.study.design.DesignCheck.status`; without it every
    finding is confirmatory); ``exploratory``: titles declared exploratory before
    training, with why (``evaluate.exploratory``); exploratory findings are left out of
    the family."""
    declared = [(f, specs, effect_of(f, specs, train_cut)) for f, specs in declare(grid)]
    study = len(declared)  # the study's own findings come first; the user's have no gates
    declared += declare_comparisons(comparisons)
    gates = measure_gates(estimator, grid, train_cut, alpha=alpha)
    settings = _settings(grid)
    planned = []  # (finding, spec, contrast or None, why)
    for index, (finding, specs, effect) in enumerate(declared):
        finding.effect, finding.settings = effect, settings
        status = design_status(finding.title) if design_status is not None else None
        if exploratory and finding.title in exploratory:
            finding.confirmatory = False
            finding.exploratory = f"{DECLARED_EXPLORATORY}: {exploratory[finding.title]}"
        if status is not None:
            finding.confirmatory = False
            finding.exploratory, finding.change = status
        use = GATES.get(finding.title) if index < study else None
        if use is not None:
            finding.gated = use.applies
            finding.gates = [gates[name] for name in use.gates]
        for spec in specs:
            contrast, why = _contrast(spec, grid)
            subsets = {s for *_, s in spec.terms}
            absent = sorted(subsets - (subsets if available is None else available))
            if contrast is not None and absent:
                contrast, why = None, f"the test set has no sentences {', '.join(absent)}"
            planned.append((finding, spec, contrast, why))
    tested = [(f, s) for f, s, contrast, _ in planned if s.primary and contrast is not None]
    declared_family = len(tested)
    family = sum(1 for f, _ in tested if f.confirmatory)
    seed_df = sum(len(c) - 1 for c in grid.configurations())
    for finding, spec, contrast, why in planned:
        if contrast is None:
            if spec.primary:
                finding.why = why
            continue
        size = family if finding.confirmatory else declared_family
        primary_level = alpha / max(size, 1) if spec.primary else alpha
        estimate = estimator.estimate(contrast, primary_level)
        effect = finding.effect
        part = Part(spec.label, spec.claim, estimate, primary=spec.primary)
        if spec.primary and effect is not None:
            part.effect = effect.value if effect.claim != "equivalent" else None
            part.margin = effect.value if effect.claim == "equivalent" else 0.0
            seeds = {
                c.label(grid): len(t.systems) for (_, c, _), t in zip(spec.terms, contrast.terms)
            }
            # the terms of one configuration are paired (one measure each): weight 1
            weights = dict.fromkeys(seeds, 1.0)
            finding.power = design_power(
                finding.title, effect, weights, seeds, size, seed_df, alpha=alpha
            )
        finding.parts.append(part)
    findings = [d[0] for d in declared]
    primary = [p for f in findings if f.confirmatory for p in f.parts if p.primary]
    for part, adjusted in zip(primary, bonferroni([p.estimate.p for p in primary])):
        part.p_adjusted = adjusted
    for finding in findings:
        decide(finding)
    return findings


DECLARED_EXPLORATORY = "declared exploratory before training"


def check_exploratory(titles, declared: list[str]) -> None:
    """Refuse an ``evaluate.exploratory`` title that names no declared finding or
    comparison (``declared``), in one line."""
    unknown = sorted(set(titles) - set(declared))
    if unknown:
        raise ConfigError(
            f"evaluate.exploratory: {', '.join(unknown)}: no such finding or comparison "
            f"(declared: {', '.join(declared)})"
        )


def _settings(grid: Grid) -> dict[str, Any] | None:
    """The model the findings test (every setting its twins share, the findings' hidden
    size), to compare with a paper's; ``None`` when the grid does not record them."""
    try:
        rest = json.loads(grid.rest) if isinstance(grid.rest, str) else None
    except ValueError:
        rest = None
    if not isinstance(rest, dict):
        return None
    return {**rest, "hidden_size": grid.hidden_size}


def measured_gates(findings: list[Finding]) -> list[GateResult]:
    """The gates the findings needed, once each, in the order first needed."""
    seen: dict[str, GateResult] = {}
    for finding in findings:
        for gate in finding.gates:
            seen.setdefault(gate.gate.name, gate)
    return list(seen.values())


def baseline_ratio(
    estimator: ContrastEstimator, grid: Grid, subset: str = "inside"
) -> float | None:
    """none's mean BLEU over additive's (forward, findings size), to set beside the
    paper's RNNencdec-30 / RNNsearch-30 ratio (:data:`PAPER_BASELINE_RATIO`)."""
    none, additive = grid.systems("none"), grid.systems("additive")
    if not none or not additive:
        return None
    none_bleu, additive_bleu = (
        float(np.mean([estimator.score(v, subset) for v in systems.values()]))
        for systems in (none, additive)
    )
    return none_bleu / additive_bleu if additive_bleu > 0 else None


# ----------------------------------------------------------------------- exploratory
def exploratory(
    estimator: ContrastEstimator, grid: Grid, reference: str | None, inside: str = "inside"
) -> list[dict[str, Any]]:
    """Each attention scorer minus the reference and minus none (forward, findings size;
    unadjusted, seeds as available: a configuration of one seed borrows the pooled seed
    variance)."""
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
                continue  # a configuration without variants
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
    covering seeds (pooled) and sentences."""
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
            seeds = {str(k): round(v, 3) for k, v in next(iter(e.per_seed.values())).items()}
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
    row["per_seed"] = json.dumps(
        {c: {str(k): round(v, 3) for k, v in s.items()} for c, s in e.per_seed.items()}
    )
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
                    "family": "primary" if p.primary else "secondary",
                    "finding": f.title,
                    "comparison": p.label,
                    "claim": p.claim,
                    "state": p.state,
                    "p_adjusted": p.p_adjusted,
                    "effect": p.effect,
                    "margin": p.margin,
                    **_estimate_row(p.estimate),
                }
            )
    for r in explore:
        rows.append({"family": "exploratory", "finding": "", **r})
    return pd.DataFrame(rows)
