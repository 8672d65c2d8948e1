"""Seed-aware statistics: paired differences whose intervals cover training seeds and
test sentences, equivalence (TOST) and interaction tests, and each design's minimal
detectable effect (Holm's adjustment: :func:`holm`).

The estimand of a comparison is a *contrast*: per seed ``s``, a weighted sum of corpus
BLEU scores ``D_s = sum_j w_j * BLEU(system_j,s on sentences S_j)``, e.g. additive minus
none on all test sentences inside the training lengths, or (none's BLEU on 21-30 words
minus on 1-10 words) minus the same for additive (a length x model interaction). Systems
of one seed are twins: they share every setting but the one compared.

Two sources of variance enter the interval (a two-level design, as in a mixed model with
a random seed effect and resampled sentences):

- training: the spread of ``D_s`` between seeds, ``var(D_s) / k`` for ``k`` seeds;
- test sampling: a paired bootstrap over sentences, stratified by length bucket (the test
  set is drawn per bucket), of the seed mean, with the same resamples for every system.

The mean's standard error is the root of their sum; its degrees of freedom follow
Welch-Satterthwaite (``k - 1`` when the seeds dominate), and intervals, p-values, TOST
and the minimal detectable effect (80% power) use Student's t with them. With one seed
the training variance cannot be estimated: such a contrast is exploratory and says so.

Corpus BLEU is recomputed from sacreBLEU's own sentence statistics (n-gram matches and
totals, lengths), summed over a resample, exactly as ``sacrebleu.metrics.BLEU`` scores a
corpus (default ``exp`` smoothing, tested against it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

ALPHA = 0.05
"""Family-wise error rate of the primary hypotheses (Holm), and the level of each
exploratory test and equivalence test."""
POWER = 0.80
"""Power at which the minimal detectable effect is stated."""
NGRAMS = 4
STATS_WIDTH = 2 + 2 * NGRAMS  # hyp_len, ref_len, correct_1..4, total_1..4 (sacreBLEU's order)


# ------------------------------------------------------------------------------ BLEU
def sentence_stats(
    hypotheses: Sequence[str], references: Sequence[str], target_language: str = ""
) -> np.ndarray:
    """sacreBLEU's per-sentence BLEU statistics, ``(sentences, 10)`` integers."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = BLEU(trg_lang=target_language)
    rows = metric._extract_corpus_statistics(list(hypotheses), [list(references)])
    return np.asarray(rows, dtype=np.int64).reshape(len(hypotheses), STATS_WIDTH)


def bleu_from_stats(totals: np.ndarray) -> np.ndarray:
    """Corpus BLEU of summed statistics ``(..., 10)`` -> ``(...)``, as sacreBLEU computes
    it (brevity penalty; ``exp`` smoothing of zero n-gram matches)."""
    totals = np.asarray(totals, dtype=np.float64)
    hyp, ref = totals[..., 0], totals[..., 1]
    correct, total = totals[..., 2 : 2 + NGRAMS], totals[..., 2 + NGRAMS :]
    # exp smoothing: the k-th n-gram order with no match gets 100 / (2^k * total)
    zero = correct == 0
    smooth = np.cumsum(zero, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(zero, 100.0 / (2.0**smooth * total), 100.0 * correct / total)
        log_p = np.where(total > 0, np.log(np.maximum(precision, 1e-300)), -9999999999.0)
        bp = np.where(hyp < ref, np.exp(1 - ref / np.maximum(hyp, 1e-300)), 1.0)
    score = bp * np.exp(log_p.mean(axis=-1))
    return np.where((hyp > 0) & (correct.sum(axis=-1) > 0), score, 0.0)  # no match: 0


def corpus_bleu(stats: np.ndarray, rows: np.ndarray | None = None) -> float:
    """Corpus BLEU of the sentences ``rows`` (all when None) of one system."""
    chosen = stats if rows is None else stats[rows]
    return float(bleu_from_stats(chosen.sum(axis=0)))


# -------------------------------------------------------------------------- contrasts
@dataclass(frozen=True)
class Term:
    """One weighted corpus score of a contrast: ``weight * metric(system on subset)``,
    with ``systems`` the variant of each seed (the same seeds in every term)."""

    weight: float
    systems: dict[int, str]  # seed -> variant id
    subset: str  # name of a sentence subset: "inside", "all", a bucket label


@dataclass(frozen=True)
class Contrast:
    name: str
    terms: tuple[Term, ...]

    @property
    def seeds(self) -> list[int]:
        common = set.intersection(*(set(t.systems) for t in self.terms))
        return sorted(common)


@dataclass
class Estimate:
    """A contrast's estimate: mean over seeds, its interval and tests."""

    name: str
    estimate: float
    per_seed: dict[int, float]
    se: float
    se_seed: float  # training part of the standard error (0 with one seed)
    se_test: float  # test-sampling part
    df: float
    low: float
    high: float
    p: float  # two-sided, H0: contrast = 0
    mde: float  # minimal detectable effect at POWER, two-sided at the level it is tested
    seeds: int
    extra: dict = field(default_factory=dict)

    def t_quantile(self, q: float) -> float:
        return float(scipy_stats.t.ppf(q, self.df))

    def tost(self, margin: float) -> float:
        """Equivalence p-value (two one-sided tests) that the contrast lies in
        ``(-margin, +margin)``: small when it is shown to be within the margin."""
        if self.se == 0:
            return 0.0 if abs(self.estimate) < margin else 1.0
        lower = scipy_stats.t.sf((self.estimate + margin) / self.se, self.df)
        upper = scipy_stats.t.cdf((self.estimate - margin) / self.se, self.df)
        return float(max(lower, upper))


class Resampler:
    """Paired, length-stratified bootstrap replicates of the test set, shared by every
    system and contrast: row ``b`` of :attr:`weights` counts how often each sentence is
    drawn in replicate ``b`` (each stratum keeps its size)."""

    def __init__(self, strata: np.ndarray, replicates: int, seed: int):
        strata = np.asarray(strata)
        rng = np.random.default_rng(seed)
        weights = np.zeros((replicates, len(strata)), dtype=np.float32)
        for stratum in np.unique(strata):
            rows = np.flatnonzero(strata == stratum)
            draws = rng.multinomial(len(rows), np.full(len(rows), 1 / len(rows)), replicates)
            weights[:, rows] = draws
        self.weights = weights


class ContrastEstimator:
    """Estimates contrasts of systems whose per-sentence statistics are ``stats``.

    ``subsets`` maps a subset name to the rows of the test set it holds; ``metric`` turns
    summed statistics ``(..., width)`` into scores (BLEU by default; the tests use a mean
    to check coverage against a known effect)."""

    def __init__(
        self,
        stats: dict[str, np.ndarray],
        subsets: dict[str, np.ndarray],
        resampler: Resampler,
        metric: Callable[[np.ndarray], np.ndarray] = bleu_from_stats,
    ):
        self.stats, self.subsets, self.metric = stats, subsets, metric
        self.weights = resampler.weights
        self._cache: dict[tuple[str, str], tuple[float, np.ndarray]] = {}

    def score(self, system: str, subset: str) -> float:
        """The point score of one system on one subset."""
        return self._score(system, subset)[0]

    def _score(self, system: str, subset: str) -> tuple[float, np.ndarray]:
        """Point score and bootstrap replicates of one system on one subset."""
        key = (system, subset)
        if key not in self._cache:
            rows = self.subsets[subset]
            values = self.stats[system][rows].astype(np.float64)
            point = float(self.metric(values.sum(axis=0)))
            replicates = self.metric(self.weights[:, rows].astype(np.float64) @ values)
            self._cache[key] = (point, np.asarray(replicates, dtype=np.float64))
        return self._cache[key]

    def estimate(self, contrast: Contrast, alpha: float = ALPHA) -> Estimate:
        seeds = contrast.seeds
        if not seeds:
            raise ValueError(f"{contrast.name}: its terms share no seed")
        per_seed, replicates = {}, np.zeros(len(self.weights))
        for seed in seeds:
            value = 0.0
            for term in contrast.terms:
                point, boot = self._score(term.systems[seed], term.subset)
                value += term.weight * point
                replicates += term.weight * boot / len(seeds)
            per_seed[seed] = value
        values = np.array([per_seed[s] for s in seeds])
        k, mean = len(values), float(values.mean())
        var_seed = float(values.var(ddof=1) / k) if k > 1 else 0.0
        var_test = float(replicates.var(ddof=1))
        variance = var_seed + var_test
        se = float(np.sqrt(variance))
        # Welch-Satterthwaite: k - 1 for the seeds' part, ~infinite for the test's; with one
        # seed there is no training variance to estimate (the contrast is flagged as such)
        df = variance**2 / (var_seed**2 / (k - 1)) if k > 1 and var_seed > 0 else 1e6
        return _finish(
            contrast.name, mean, per_seed, se, np.sqrt(var_seed), np.sqrt(var_test), df, k, alpha
        )


def _finish(name, mean, per_seed, se, se_seed, se_test, df, k, alpha) -> Estimate:
    t = scipy_stats.t
    half = float(t.ppf(1 - alpha / 2, df) * se)
    p = float(2 * t.sf(abs(mean) / se, df)) if se > 0 else float(mean == 0)
    return Estimate(
        name,
        mean,
        per_seed,
        se,
        float(se_seed),
        float(se_test),
        float(df),
        mean - half,
        mean + half,
        p,
        mde(se, df, alpha),
        k,
    )


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest true effect a two-sided t-test at ``alpha`` detects with ``power``:
    ``(t_{1-alpha/2} + t_{power}) * se``."""
    t = scipy_stats.t
    return float((t.ppf(1 - alpha / 2, df) + t.ppf(power, df)) * se)


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (statsmodels), controlling the family-wise error
    rate over every paired test the study reports."""
    if not p_values:
        return []
    return [float(p) for p in multipletests(p_values, method="holm")[1]]


def format_p(p: float) -> str:
    """A p-value as printed in the report: "< 0.001" rather than a rounded 0."""
    if p != p:  # NaN
        return "-"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"
