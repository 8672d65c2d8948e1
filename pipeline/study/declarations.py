"""What the study asks, declared before any test number is read: each finding's
contrast, claim and smallest effect of interest with its source, and the a-priori power
of the design that tests it.

An **effect of interest** is in the units of the finding's contrast (BLEU points, or log
BLEU for the length finding). For a directional claim its sign is the claimed direction
and its size the literature's effect (or one declared here, ``published=False``); for an
equivalence claim it is the margin. The labels that read an interval against it are in
:mod:`pipeline.study.findings`; "agrees with the literature" needs a published effect and
the literature's own model (:class:`Literature`), which this pipeline's settings can
spell.

A **gate** (:class:`Gate`) is a condition on the no-attention baseline that a claim needs
before its interval means anything: a baseline at the BLEU floor cannot degrade with
length or gain from reversal. Each finding declares its gates (:data:`GATES`): for a
claim about the baseline's own behaviour (Length, Reversal) a failed gate makes the
finding "not testable"; for Attention only the comparison of its size with the paper's
needs them, its direction does not.

The **a-priori power** of each test comes from the grid (seeds per configuration, known
before training) and variance components measured on an earlier run of the study
(:data:`PILOT`), never from the run being judged: a finding whose power at its effect of
interest is below :data:`~pipeline.study.statistics.POWER` is "not testable" with this
design, whatever its data then show, and the report prints the seeds per configuration
that would make it testable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.study.record import Design
from pipeline.study.statistics import ALPHA, POWER, power_directional, power_equivalence


@dataclass(frozen=True)
class Literature:
    """The model a paper measured its effect with, as this pipeline's ``model`` settings
    where it has them: a finding "agrees with the literature" only when the tested model
    has every one of them (:meth:`differences` is empty)."""

    paper: str
    settings: tuple[tuple[str, Any], ...]  # ModelConfig field -> the paper's value
    words: str  # the paper's model in words

    def differences(self, model: Mapping[str, Any]) -> list[str]:
        """Each setting where ``model`` (a ModelConfig's fields, the findings' hidden size
        applied) is not the paper's: "layers 1, not 4" ("cell not recorded" where
        ``model`` lacks it)."""
        return [
            f"{key} {model[key]}, not {value}" if key in model else f"{key} not recorded"
            for key, value in self.settings
            if model.get(key) != value
        ]


@dataclass(frozen=True)
class Effect:
    """A finding's declared smallest effect of interest."""

    claim: str  # "> 0" | "< 0" | "equivalent"
    value: float  # in ``scale`` units; an equivalence claim's margin (> 0)
    scale: str  # "bleu" | "log_bleu"
    source: str  # the literature's numbers, quoted
    why: str  # why this number is the effect that matters
    published: bool = True  # False: the size (or margin) is declared here, no paper gives it
    literature: Literature | None = None  # the paper's model, where the settings spell it
    limits: str = ""  # what the declared effect cannot tell apart, in words

    def describe(self) -> str:
        unit = "log BLEU" if self.scale == "log_bleu" else "BLEU"
        if self.claim == "equivalent":
            return f"within +-{self.value:g} {unit}"
        return f"{self.value:+g} {unit}"

    def declaration(self) -> dict[str, Any]:
        """What the design lock holds of it (:mod:`pipeline.study.design`): everything but
        the reasons in words."""
        literature = None
        if self.literature is not None:
            paper = self.literature
            literature = {"paper": paper.paper, "settings": dict(paper.settings)}
        return {
            "claim": self.claim,
            "value": self.value,
            "scale": self.scale,
            "source": self.source,
            "published": self.published,
            "literature": literature,
        }


@dataclass(frozen=True)
class Gate:
    """A condition on the no-attention baseline (forward source, the findings' hidden
    size) that a claim needs, declared before the run and measured on the test sentences
    inside the training lengths, each measure with its 95% interval: it passes when the
    interval's lower end reaches ``threshold`` (the measure is *shown* there)."""

    name: str
    measure: str  # "bleu": none's test BLEU | "share": none's BLEU over additive's
    threshold: float
    what: str  # what is measured, in words
    source: str  # where the threshold comes from
    why: str  # what a baseline below it cannot show

    def declaration(self) -> dict[str, Any]:
        return {"name": self.name, "measure": self.measure, "threshold": self.threshold}


@dataclass(frozen=True)
class GateUse:
    """The gates a finding's claim needs: ``applies`` "claim" (the whole claim is about
    the baseline's behaviour: without them it is not testable) or "size" (only the
    comparison of the effect's size with the paper's needs them; its direction does not)."""

    gates: tuple[str, ...]
    applies: str  # "claim" | "size"
    why: str


PAPER_BASELINE_RATIO = 13.93 / 21.50
"""Bahdanau et al. 2014, Table 1: RNNencdec-30's BLEU over RNNsearch-30's (13.93 / 21.50)."""
PAPER_BASELINE_RATIO_50 = 17.82 / 26.75
"""The same for the -50 models (17.82 / 26.75)."""
GATE_SHARE_OF_PAPER = 0.5
"""The share gate's threshold as a fraction of the paper's ratio: half of it."""
SHUFFLED_SOURCE_BLEU = 1.26
"""docs/baseline.md: the best dev BLEU of the study's baseline trained on shuffled sources
(which cannot use them; 0.3-0.8 after its first evaluations)."""


def paper_baseline_ratio(train_cut: int | None = 30) -> float:
    """RNNencdec's BLEU over RNNsearch's in Bahdanau et al.'s Table 1, for the models
    whose training length matches ``train_cut`` (-30, or -50 from 50 words on)."""
    return PAPER_BASELINE_RATIO_50 if train_cut is None or train_cut >= 50 else PAPER_BASELINE_RATIO


USES_SOURCE = "baseline uses its source"
REACHES_SHARE = "baseline reaches a share of attention"


def baseline_gates(train_cut: int | None = 30) -> dict[str, Gate]:
    """The baseline's gates, by name, for a study whose training length cut is
    ``train_cut`` (the paper's ratio is the -30 or the -50 models')."""
    paper = paper_baseline_ratio(train_cut)
    models = "-50" if train_cut is None or train_cut >= 50 else "-30"
    numbers = "17.82 / 26.75" if models == "-50" else "13.93 / 21.50"
    uses = Gate(
        USES_SOURCE,
        "bleu",
        2 * SHUFFLED_SOURCE_BLEU,
        "none's test BLEU inside the training lengths (mean over seeds)",
        "declared here: the grid has no shuffled-source control, so an absolute floor, "
        f"twice the best dev BLEU ({SHUFFLED_SOURCE_BLEU}) of the study's baseline trained "
        "on shuffled sources, which cannot use them (docs/baseline.md)",
        "a model that does not use its source has no source length to degrade with and no "
        "source order to gain from",
    )
    share = Gate(
        REACHES_SHARE,
        "share",
        round(GATE_SHARE_OF_PAPER * paper, 3),
        "none's test BLEU over additive's inside the training lengths (means over seeds)",
        f"half of Bahdanau et al. 2014's ratio, Table 1: RNNencdec{models} over "
        f"RNNsearch{models}, {numbers} = {paper:.2f}",
        "the paper's claims are about a baseline at about two thirds of attention's BLEU; "
        "one at less than half of that ratio is near the floor, and its gaps to attention "
        "and its changes measure the floor, not the paper's model",
    )
    return {uses.name: uses, share.name: share}


GATES: dict[str, GateUse] = {
    "Attention": GateUse(
        (USES_SOURCE, REACHES_SHARE),
        "size",
        "the paper's +7.57 is against an RNNencdec at 65% of RNNsearch's BLEU; against a "
        "baseline at the floor the gap is larger for that reason alone",
    ),
    "Length": GateUse(
        (USES_SOURCE, REACHES_SHARE),
        "claim",
        "a baseline at the floor has no BLEU to lose beyond the training lengths",
    ),
    "Reversal": GateUse(
        (USES_SOURCE, REACHES_SHARE),
        "claim",
        "a baseline at the floor cannot gain from reversal what a working one does",
    ),
}
"""The gates each finding's claim needs (a finding not named needs none)."""

BAHDANAU = Literature(
    "Bahdanau et al. 2014",
    (("cell", "gru"), ("hidden_size", 1000), ("embedding_size", 620), ("wiring", "bahdanau")),
    "gated recurrent units of 1000, 620-dimensional embeddings, the context fed into the "
    "decoder RNN",
)
SUTSKEVER = Literature(
    "Sutskever et al. 2014",
    (
        ("cell", "lstm"),
        ("layers", 4),
        ("hidden_size", 1000),
        ("embedding_size", 1000),
        ("baseline", "init_only"),
    ),
    "a 4-layer LSTM of 1000 units, 1000-dimensional embeddings, the decoder started from "
    "the encoder's final state",
)


@dataclass(frozen=True)
class Pilot:
    """Variance components of an earlier run, for the a-priori power."""

    source: str
    seed_sd: dict[str, float]  # scale -> pooled seed sd of one configuration's score
    measure_sd: dict[str, float]  # finding -> seed sd of each configuration's measure
    test_se: dict[str, float]  # finding -> test-sampling SE of its main contrast
    default_test_se: float  # a comparison of the user's: two configurations on ``inside``


PILOT = Pilot(
    source=(
        "the study's earlier committed default run (hidden 256; 5-6 seeds of none, "
        "additive and general forward, of none and additive reversed and of additive at "
        "hidden 128; the per-seed values and standard errors in reports/findings.json at "
        "commit e2b3cd2), whose test chapters this design's split does not decode"
    ),
    # pooled sd of a configuration's test BLEU inside the training lengths over its seeds:
    # 6 configurations, df 26 (none 0.35, additive 0.34, general 0.68, additive h128 0.67,
    # none reversed 0.44, additive reversed 0.45); log BLEU: the same spreads over each
    # configuration's BLEU, pooled
    seed_sd={"bleu": 0.50, "log_bleu": 0.033},
    # Length's measure is a configuration's change (log BLEU beyond minus inside): its
    # per-seed sd was 0.059 for none and 0.027 for additive (6 seeds each), pooled 0.046
    measure_sd={"Length": 0.046},
    test_se={  # the test-sampling part of each main contrast's standard error
        "Attention": 0.47,  # additive - none inside the training lengths
        "Scorer": 0.20,  # additive - general
        "Reversal": 0.13,  # none reversed - forward
        "Hidden size": 0.18,  # additive h256 - h128
        "Length": 0.04,  # length x model on log BLEU, beyond minus inside
    },
    default_test_se=0.25,  # a comparison of the user's: the mean of the four BLEU contrasts'
)

EFFECTS: dict[str, Effect] = {
    "Attention": Effect(
        "> 0",
        7.57,
        "bleu",
        "Bahdanau et al. 2014, Table 1 (all test sentences): RNNsearch-30 21.50 vs "
        "RNNencdec-30 13.93, +7.57; RNNsearch-50 26.75 vs RNNencdec-50 17.82, +8.93.",
        "the gain of the -30 models, which this study's training length cut reproduces",
        literature=BAHDANAU,
    ),
    "Length": Effect(
        "< 0",
        -0.20,
        "log_bleu",
        "Bahdanau et al. 2014, Fig. 2: beyond the 30 words they were trained on, the "
        "RNNencdec-30 curve falls far below RNNsearch-30's; the paper gives no table of "
        "it.",
        "declared by this study: a no-attention model that loses at least 18% more of its "
        "BLEU (a log ratio of -0.20) beyond the training lengths than additive attention",
        published=False,
        literature=BAHDANAU,
    ),
    "Reversal": Effect(
        "> 0",
        4.7,
        "bleu",
        "Sutskever et al. 2014 (deep LSTM, no attention): 25.9 -> 30.6 BLEU when the "
        "source is reversed, +4.7.",
        "the paper's gain for a model without attention",
        literature=SUTSKEVER,
    ),
    "Scorer": Effect(
        "equivalent",
        2.0,
        "bleu",
        "Britz et al. 2017 (attention type, newstest2013): additive minus multiplicative "
        "+0.20 at attention dimension 128, 0.00 at 256, +0.69 at 512, +3.88 at 1024; "
        "Luong et al. 2015, Table 4: global dot 18.6 vs general 17.3.",
        "at this study's dimension (256) Britz et al. measured no difference; the margin is "
        "the study's practical threshold: Mathur et al. (2020) found that BLEU differences "
        "below 1-2 points often disagree with human judgements, so a gap within 2 BLEU is "
        "no difference a user could rely on",
        published=False,
        limits="Britz et al.'s gaps at attention dimensions 128-512 (0.00 to +0.69) lie "
        "inside the margin as well as no gap at all: equivalence within it cannot tell "
        "their result from no difference",
    ),
    "Hidden size": Effect(
        "> 0",
        2.0,
        "bleu",
        "Britz et al. 2017: from attention dimension 256 to 1024 multiplicative attention "
        "falls 4.1 BLEU while additive stays within 0.4 (no paper measures a whole model's "
        "size at this data size).",
        "the study's practical threshold (Mathur et al. 2020: BLEU differences below 1-2 "
        "points often disagree with human judgements), for a model whose hidden size, "
        "twice as large, makes each training step about 1.5x as long on a CPU (the train "
        "stage's preflight on a 2-core AVX2 CPU: 302 against 203 ms for additive attention)",
        published=False,
    ),
}
"""The findings' effects of interest, frozen before the committed run."""

ATTENTION_50 = Effect(
    "> 0",
    8.93,
    "bleu",
    EFFECTS["Attention"].source,
    "the gain of the -50 models, whose training length (50 words) this study's cut reaches",
    literature=BAHDANAU,
)
"""Attention's effect when training sees sentences of 50 words or more (the GPU preset)."""

GPU_HIDDEN_SIZE = Effect(
    "> 0",
    3.88,
    "bleu",
    "Britz et al. 2017 (attention type, newstest2013): additive minus multiplicative "
    "0.00 at attention dimension 256 and +3.88 at 1024.",
    "the paper's gap at the largest dimension, where the GPU preset's grid reaches",
)
"""With sizes of 1024 and more in the grid, the hidden-size finding is Britz et al.'s
test: additive minus general at the largest size minus at 256."""


@dataclass(frozen=True)
class Power:
    """A finding's design, before the run: its planned standard error and power."""

    finding: str
    effect: Effect
    seeds: dict[str, int]  # configuration -> seeds in the grid
    se: float
    alpha: float  # the level of its interval (Bonferroni over the family)
    power: float
    seeds_needed: int | None  # per configuration for POWER (None: more than 50)

    @property
    def testable(self) -> bool:
        return self.power >= POWER

    def design(self) -> Design:
        """The design as ``eval/findings.json`` holds it (a finding's ``design``)."""
        return Design(
            finding=self.finding,
            effect=self.effect.value,
            claim=self.effect.claim,
            scale=self.effect.scale,
            seeds=self.seeds,
            planned_se=self.se,
            alpha=self.alpha,
            power=self.power,
            testable=self.testable,
            seeds_needed=self.seeds_needed,
        )


def planned_se(
    weights: dict[str, float], seeds: dict[str, int], scale: str, test_se: float, sd=None
):
    """SE of a contrast of configurations ``weights`` with ``seeds`` each: the pilot's
    pooled seed variance (``sd``, else the scale's) over each configuration's seeds plus
    its test-sampling part."""
    sd = PILOT.seed_sd[scale] if sd is None else sd
    var = sum(w**2 * sd**2 / max(seeds[c], 1) for c, w in weights.items()) + test_se**2
    return math.sqrt(var)


def design_power(
    finding: str,
    effect: Effect,
    weights: dict[str, float],
    seeds: dict[str, int],
    family: int,
    seed_df: float,
    test_se: float | None = None,
    alpha: float = ALPHA,
) -> Power:
    """The power of ``finding``'s test at its effect of interest, at the family's
    Bonferroni level ``ALPHA / family``, for the grid's ``seeds`` per configuration and
    the degrees of freedom of the grid's pooled seed variance (``seed_df``)."""
    test_se = PILOT.test_se.get(finding, PILOT.default_test_se) if test_se is None else test_se
    alpha = alpha / max(family, 1)
    measure_sd = PILOT.measure_sd.get(finding)

    def power_at(seed_counts: dict[str, int], df: float) -> float:
        se = planned_se(weights, seed_counts, effect.scale, test_se, measure_sd)
        var_seed = se**2 - test_se**2  # Welch-Satterthwaite, as the estimate's df
        df_ws = se**4 / (var_seed**2 / max(df, 1.0)) if var_seed > 0 else 1e6
        if effect.claim == "equivalent":
            return power_equivalence(effect.value, se, df_ws, alpha)
        return power_directional(effect.value, se, df_ws, alpha)

    value = power_at(seeds, seed_df)
    fewest = min(seeds.values())
    per_seed_df = seed_df / (fewest - 1) if fewest > 1 else seed_df
    # every configuration of the grid with k seeds: its pooled df grows with them
    needed = next(
        (
            k
            for k in range(2, 51)
            if power_at(dict.fromkeys(seeds, k), per_seed_df * (k - 1)) >= POWER
        ),
        None,
    )
    se = planned_se(weights, seeds, effect.scale, test_se, measure_sd)
    return Power(finding, effect, dict(seeds), se, alpha, value, needed)
