"""Seed-aware statistics: contrasts of configurations whose intervals cover training seeds
and test sentences, with the seed variance pooled across configurations; equivalence;
a-priori power and each design's minimal detectable effect.

The estimand of a contrast is a weighted sum of configurations' expected scores,
``D = sum_j w_j * E_s[f(score(configuration_j, seed s, on subset S_j))]``, e.g. additive
minus none on the test sentences inside the training lengths, or (none's log BLEU beyond
the training lengths minus inside them) minus the same for additive (a length x model
interaction). ``f`` is the contrast's scale: BLEU, or log BLEU (a ratio scale, on which a
fall from 10 to 8 is as large as one from 25 to 20). A configuration is one set of
settings trained with several seeds; seeds of *different* configurations are independent
draws (seed 1 of one architecture has nothing in common with seed 1 of another), so
configurations enter unpaired, and terms of one configuration are paired (same model).

Two sources of variance (a two-level design: a random seed effect, sentences sampled):

- **training**: each configuration ``c`` contributes ``w_c^2 * sigma_u^2 / k_c`` for its
  ``k_c`` seeds. ``sigma_u^2``, the pure seed variance, is pooled over every configuration
  of the grid with at least two seeds: the residual variance of a one-way model of the
  per-seed values on the configuration (statsmodels OLS, ``z ~ C(configuration)``),
  whose residual degrees of freedom are the seed part's. Between-seed variance measured on
  a *fixed* test set also holds the seed x sentence interaction, which the bootstrap of
  the seed mean counts already; it is estimated from the bootstrap (per-seed versus
  seed-mean variance) and taken out, so nothing is counted twice.
- **test sampling**: a paired bootstrap over sentences of the seed means, stratified by
  length bucket (the test set is drawn per bucket) and, when the test sentences carry
  cluster ids (chapters), resampling whole clusters, with the same resamples for every
  system.

The standard error is the root of the two parts' sum; its degrees of freedom follow
Welch-Satterthwaite from the pooled seed part's. Intervals, p-values, equivalence, the
minimal detectable effect and the a-priori power use Student's t with them. A
configuration with one seed borrows the pooled seed variance; with no configuration of
two seeds there is none to borrow, and the contrast says so (``se_seed`` 0, exploratory).

Corpus BLEU is recomputed from sacreBLEU's own sentence statistics (n-gram matches and
totals, lengths), summed over a resample, exactly as ``sacrebleu.metrics.BLEU`` scores a
corpus (default ``exp`` smoothing, tested against it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

ALPHA = 0.05
"""Family-wise error rate of the primary tests (Bonferroni: each primary interval is at
``1 - ALPHA / m`` for a family of ``m``), and the level of each exploratory interval."""
POWER = 0.80
"""Power at which the minimal detectable effect is stated."""
NGRAMS = 4
STATS_WIDTH = 2 + 2 * NGRAMS  # hyp_len, ref_len, correct_1..4, total_1..4 (sacreBLEU's order)
SCALES = ("bleu", "log_bleu")
"""What a contrast's terms are summed on: BLEU points, or the natural log of BLEU."""
LOG_FLOOR = 0.1
"""BLEU below this is taken as this before the log (a resample with no match has BLEU 0)."""


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
    """One weighted score of a contrast: ``weight * f(metric(system on subset))``, with
    ``systems`` one configuration's variant of each seed."""

    weight: float
    systems: dict[int, str]  # seed -> variant id
    subset: str  # name of a sentence subset: "inside", "all", a bucket label


@dataclass(frozen=True)
class Contrast:
    name: str
    terms: tuple[Term, ...]
    scale: str = "bleu"  # one of SCALES

    def configurations(self) -> list[tuple[dict[int, str], tuple[tuple[float, str], ...]]]:
        """Each configuration (terms with the same systems are one configuration's,
        paired: the same models) with its ``(weight, subset)`` terms."""
        groups: dict[tuple, tuple[dict[int, str], list[tuple[float, str]]]] = {}
        for term in self.terms:
            key = tuple(sorted(term.systems.items()))
            groups.setdefault(key, (term.systems, []))[1].append((term.weight, term.subset))
        return [(systems, tuple(terms)) for systems, terms in groups.values()]

    @property
    def seeds(self) -> int:
        """The fewest seeds of any configuration (0 when one has none)."""
        return min((len(systems) for systems, _ in self.configurations()), default=0)


@dataclass
class Estimate:
    """A contrast's estimate: the sum of its configurations' seed means, its interval and
    tests."""

    name: str
    estimate: float
    per_seed: dict[str, dict[int, float]]  # configuration -> seed -> its part of the contrast
    se: float
    se_seed: float  # training part of the standard error (pooled seed variance)
    se_test: float  # test-sampling part
    df: float
    low: float
    high: float
    p: float  # two-sided, H0: contrast = 0
    mde: float  # minimal detectable effect at POWER, two-sided at the level it is tested
    seeds: int  # the fewest seeds of a configuration
    alpha: float = ALPHA  # the interval is at 1 - alpha
    extra: dict = field(default_factory=dict)

    def t_quantile(self, q: float) -> float:
        return float(scipy_stats.t.ppf(q, self.df))

    def at_level(self, alpha: float) -> Estimate:
        """The same estimate with its interval and MDE at ``1 - alpha``."""
        return _finish(
            self.name,
            self.estimate,
            self.per_seed,
            self.se_seed,
            self.se_test,
            self.df,
            self.seeds,
            alpha,
            self.extra,
        )

    def tost(self, margin: float) -> float:
        """Equivalence p-value (two one-sided tests) that the contrast lies in
        ``(-margin, +margin)``: small when it is shown to be within the margin."""
        if self.se == 0:
            return 0.0 if abs(self.estimate) < margin else 1.0
        lower = scipy_stats.t.sf((self.estimate + margin) / self.se, self.df)
        upper = scipy_stats.t.cdf((self.estimate - margin) / self.se, self.df)
        return float(max(lower, upper))


class Resampler:
    """Paired bootstrap replicates of the test set, shared by every system and contrast:
    row ``b`` of :attr:`weights` counts how often each sentence is drawn in replicate
    ``b``. Resampling is stratified (without clusters each length stratum keeps its size)
    and, given ``clusters`` (a cluster id per sentence, e.g. its chapter), draws a
    cluster's sentences of one stratum together (a chapter's fragment in each length
    bucket), so sentences of one passage and length are not counted as independent."""

    def __init__(
        self,
        strata: np.ndarray,
        replicates: int,
        seed: int,
        clusters: Sequence | None = None,
    ):
        strata = np.asarray(strata)
        rng = np.random.default_rng(seed)
        weights = np.zeros((replicates, len(strata)), dtype=np.float32)
        for stratum in np.unique(strata):
            rows = np.flatnonzero(strata == stratum)
            if clusters is None:
                units, inverse = rows, np.arange(len(rows))
            else:
                units, inverse = np.unique(np.asarray(clusters)[rows], return_inverse=True)
            draws = rng.multinomial(len(units), np.full(len(units), 1 / len(units)), replicates)
            weights[:, rows] = draws[:, inverse]
        self.weights = weights
        self.clustered = clusters is not None


@dataclass(frozen=True)
class SeedVariance:
    """The seed variance of one measure (a configuration's weighted terms on a scale),
    pooled over configurations: ``between`` on the fixed test set, ``interaction`` its
    seed x sentence part (also in the bootstrap), ``pure = between - interaction``."""

    between: float
    interaction: float
    df: float
    configurations: int

    @property
    def clamped(self) -> bool:
        """The interaction estimate reached the between-seed variance: no pure seed
        variance is left to estimate."""
        return self.between <= self.interaction

    @property
    def pure(self) -> float:
        """The pure seed variance; when the estimate is not positive, the between-seed
        variance itself (the interaction then counted twice: wider, never narrower)."""
        return self.between if self.clamped else self.between - self.interaction

    @property
    def pure_df(self) -> float:
        """Satterthwaite's df of :attr:`pure`: ``df * (pure / between)^2`` (the
        interaction's own sampling variance left out), ``df`` when clamped."""
        if self.clamped or self.between <= 0:
            return self.df
        return self.df * (self.pure / self.between) ** 2


class ContrastEstimator:
    """Estimates contrasts of systems whose per-sentence statistics are ``stats``.

    ``subsets`` maps a subset name to the rows of the test set it holds; ``metric`` turns
    summed statistics ``(..., width)`` into scores (BLEU by default; the tests use a mean
    to check coverage against a known effect). ``configurations`` (each ``{seed:
    variant}``) are the grid's, over which seed variance is pooled; by default a
    contrast's own."""

    def __init__(
        self,
        stats: dict[str, np.ndarray],
        subsets: dict[str, np.ndarray],
        resampler: Resampler,
        metric: Callable[[np.ndarray], np.ndarray] = bleu_from_stats,
        configurations: Sequence[dict[int, str]] = (),
    ):
        self.stats, self.subsets, self.metric = stats, subsets, metric
        self.weights = resampler.weights
        self.configurations = [dict(c) for c in configurations if c]
        self._cache: dict[tuple[str, str], tuple[float, np.ndarray]] = {}
        self._pooled: dict[tuple, SeedVariance | None] = {}

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

    def _measure(self, variant: str, terms, scale: str) -> tuple[float, np.ndarray]:
        """One system's ``sum w * f(score)`` over ``terms``, point and replicates."""
        point, replicates = 0.0, np.zeros(len(self.weights))
        for weight, subset in terms:
            value, boot = self._score(variant, subset)
            point += weight * float(_on_scale(np.float64(value), scale))
            replicates = replicates + weight * _on_scale(boot, scale)
        return point, replicates

    def seed_variance(self, terms, scale: str, fallback=()) -> SeedVariance | None:
        """Seed variance of the measure ``terms`` (weights normalised to a first weight of
        1), pooled over the configurations with two seeds or more (the grid's, else
        ``fallback``): the residual variance of ``z ~ C(configuration)``."""
        first = terms[0][0]
        shape = tuple((round(w / first, 12), s) for w, s in terms)
        key = (shape, scale, tuple(tuple(sorted(c.items())) for c in fallback))
        if key in self._pooled:
            return self._pooled[key]
        rows, interaction, weights = [], [], []
        for index, systems in enumerate(self.configurations or [dict(c) for c in fallback]):
            if len(systems) < 2 or any(v not in self.stats for v in systems.values()):
                continue
            measured = [self._measure(systems[s], shape, scale) for s in sorted(systems)]
            points = np.array([m[0] for m in measured])
            replicates = np.stack([m[1] for m in measured])
            k = len(points)
            per_seed = float(replicates.var(axis=1, ddof=1).mean())
            of_mean = float(replicates.mean(axis=0).var(ddof=1))
            interaction.append(max(per_seed - of_mean, 0.0) * k / (k - 1))
            weights.append(k - 1)
            rows += [{"configuration": f"c{index}", "z": float(p)} for p in points]
        if not rows:
            self._pooled[key] = None
            return None
        table = pd.DataFrame(rows)
        formula = "z ~ C(configuration)" if table.configuration.nunique() > 1 else "z ~ 1"
        fit = smf.ols(formula, data=table).fit()
        result = SeedVariance(
            float(fit.scale),
            float(np.average(interaction, weights=weights)),
            float(fit.df_resid),
            len(weights),
        )
        self._pooled[key] = result
        return result

    def estimate(self, contrast: Contrast, alpha: float = ALPHA) -> Estimate:
        configurations = contrast.configurations()
        if not configurations or any(not systems for systems, _ in configurations):
            raise ValueError(f"{contrast.name}: a configuration has no variant")
        fallback = [systems for systems, _ in configurations]
        total, replicates, var_seed, dfs, per_seed = 0.0, 0.0, 0.0, [], {}
        clamped = False
        for systems, terms in configurations:
            measured = {
                s: self._measure(systems[s], terms, contrast.scale) for s in sorted(systems)
            }
            k = len(measured)
            total += float(np.mean([m[0] for m in measured.values()]))
            replicates = replicates + np.mean([m[1] for m in measured.values()], axis=0)
            per_seed[_label(systems)] = {s: m[0] for s, m in measured.items()}
            pooled = self.seed_variance(terms, contrast.scale, fallback)
            if pooled is not None and pooled.df > 0:
                var_seed += terms[0][0] ** 2 * pooled.pure / k
                dfs.append(pooled.pure_df)
                clamped = clamped or pooled.clamped
        var_test = float(np.var(replicates, ddof=1))
        variance = var_seed + var_test
        df_seed = min(dfs) if dfs else 0.0
        # Welch-Satterthwaite: the pooled seed part's df, ~infinite for the test part's
        df = variance**2 / (var_seed**2 / df_seed) if var_seed > 0 and df_seed > 0 else 1e6
        extra = {"seed_df": df_seed, "no_seed_variance": not dfs, "seed_variance_clamped": clamped}
        return _finish(
            contrast.name,
            total,
            per_seed,
            np.sqrt(var_seed),
            np.sqrt(var_test),
            df,
            contrast.seeds,
            alpha,
            extra,
        )


def _on_scale(value: np.ndarray, scale: str) -> np.ndarray:
    if scale == "log_bleu":
        return np.log(np.maximum(value, LOG_FLOOR))
    if scale != "bleu":
        raise ValueError(f"unknown scale {scale!r} (one of {SCALES})")
    return value


def _label(systems: dict[int, str]) -> str:
    """A configuration's name: its first variant's id without the seed suffix."""
    first = systems[min(systems)]
    head, _, tail = first.rpartition("-s")
    return head if head and tail.isdigit() else first


def _finish(name, mean, per_seed, se_seed, se_test, df, k, alpha, extra=None) -> Estimate:
    t = scipy_stats.t
    se = float(np.sqrt(se_seed**2 + se_test**2))
    half = float(t.ppf(1 - alpha / 2, df) * se)
    p = float(2 * t.sf(abs(mean) / se, df)) if se > 0 else float(mean == 0)
    return Estimate(
        name,
        float(mean),
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
        alpha,
        dict(extra or {}),
    )


# ---------------------------------------------------------------------- design power
def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest true effect a two-sided t-test at ``alpha`` detects with ``power``:
    ``(t_{1-alpha/2} + t_{power}) * se``."""
    t = scipy_stats.t
    return float((t.ppf(1 - alpha / 2, df) + t.ppf(power, df)) * se)


def power_directional(effect: float, se: float, df: float, alpha: float) -> float:
    """Probability that the two-sided ``1 - alpha`` interval lies wholly on the effect's
    side of 0 when the true contrast is ``effect`` (noncentral t). By symmetry it is also
    the probability that the interval lies wholly below ``effect`` when the truth is 0."""
    if se <= 0:
        return 1.0
    q = scipy_stats.t.ppf(1 - alpha / 2, df)
    return float(scipy_stats.nct.sf(q, df, abs(effect) / se))


def power_equivalence(margin: float, se: float, df: float, alpha: float) -> float:
    """Probability that the two-sided ``1 - alpha`` interval lies wholly inside
    ``(-margin, margin)`` when the true contrast is 0."""
    if se <= 0:
        return 1.0
    q = scipy_stats.t.ppf(1 - alpha / 2, df)
    return float(max(2 * scipy_stats.t.cdf(margin / se - q, df) - 1, 0.0))


def bonferroni(p_values: list[float]) -> list[float]:
    """Bonferroni-adjusted p-values: ``min(1, m * p)`` for a family of ``m``, the level at
    which the family's intervals are drawn (``1 - ALPHA / m``)."""
    if not p_values:
        return []
    return [float(p) for p in multipletests(p_values, method="bonferroni")[1]]


def format_p(p: float) -> str:
    """A p-value as printed in the report: "< 0.001" rather than a rounded 0."""
    if p != p:  # NaN
        return "-"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"
