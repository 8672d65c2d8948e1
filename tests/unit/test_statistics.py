"""The study's statistics: BLEU from sentence statistics, interval coverage with seeds and
sentences (pooled seed variance, nothing counted twice), clustered resampling, log scale,
equivalence, minimal detectable effect and a-priori power."""

from __future__ import annotations

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from pipeline.study.statistics import (
    Contrast,
    ContrastEstimator,
    Estimate,
    Resampler,
    Term,
    bleu_from_stats,
    corpus_bleu,
    mde,
    power_directional,
    power_equivalence,
    sentence_stats,
)

WORDS = "el la de que y en un una los las por con para es su al lo como más pero".split()


def _sentences(rng, count, noise):
    refs = [" ".join(rng.choice(WORDS, rng.integers(3, 15))) for _ in range(count)]
    hyps = []
    for ref in refs:
        tokens = [w if rng.random() > noise else str(rng.choice(WORDS)) for w in ref.split()]
        hyps.append(" ".join(tokens[: max(1, len(tokens) - int(rng.integers(0, 3)))]))
    return hyps, refs


@pytest.mark.parametrize("noise", [0.1, 0.5, 0.95])
def test_bleu_from_sentence_stats_is_sacrebleus_corpus_bleu(noise):
    rng = np.random.default_rng(3)
    hyps, refs = _sentences(rng, 60, noise)
    stats = sentence_stats(hyps, refs, "es")
    expected = BLEU(trg_lang="es").corpus_score(hyps, [refs]).score
    assert corpus_bleu(stats) == pytest.approx(expected, abs=1e-9)
    rows = np.arange(0, 60, 7)  # a subset, as buckets use
    subset = BLEU(trg_lang="es").corpus_score([hyps[i] for i in rows], [[refs[i] for i in rows]])
    assert corpus_bleu(stats, rows) == pytest.approx(subset.score, abs=1e-9)


def test_bleu_of_a_hypothesis_with_no_four_gram_match_is_smoothed_as_sacrebleu():
    hyps, refs = ["a b c d e"], ["a b c x e f"]
    expected = BLEU().corpus_score(hyps, [refs]).score
    assert expected > 0
    assert float(bleu_from_stats(sentence_stats(hyps, refs).sum(0))) == pytest.approx(expected)


def test_bleu_of_output_with_no_matching_word_is_zero_as_in_sacrebleu():
    hyps, refs = ["x y z", "q"], ["a b c d", "e f"]
    assert BLEU().corpus_score(hyps, [refs]).score == 0.0
    assert float(bleu_from_stats(sentence_stats(hyps, refs).sum(0))) == 0.0


def _mean_metric(totals):
    return totals[..., 0] / totals[..., 1]


def _simulate(rng, effect, seeds, sentences, seed_sd):
    """Two systems, ``seeds`` twins each: sentence score = difficulty + system effect +
    a per-seed training offset + noise; the metric is the mean score (stats: sum, count)."""
    difficulty = rng.normal(0, 1, sentences)
    stats, a, b = {}, {}, {}
    for s in range(seeds):
        for name, shift, table in (("a", effect, a), ("b", 0.0, b)):
            score = difficulty + shift + rng.normal(0, seed_sd) + rng.normal(0, 1, sentences)
            stats[f"{name}{s}"] = np.stack([score, np.ones(sentences)], axis=1)
            table[s] = f"{name}{s}"
    contrast = Contrast("a - b", (Term(1.0, a, "all"), Term(-1.0, b, "all")))
    return stats, contrast


def test_intervals_cover_a_known_effect_with_seed_and_sentence_variance():
    """95% intervals over 3 seeds and resampled sentences cover the true effect about 95%
    of the time; intervals from the sentences alone (one seed's view) cover far less."""
    rng = np.random.default_rng(0)
    covered, covered_test_only, runs = 0, 0, 300
    for _ in range(runs):
        stats, contrast = _simulate(rng, effect=0.3, seeds=3, sentences=400, seed_sd=0.15)
        resampler = Resampler(np.zeros(400, dtype=int), replicates=200, seed=int(rng.integers(1e9)))
        estimate = ContrastEstimator(
            stats, {"all": np.arange(400)}, resampler, metric=_mean_metric
        ).estimate(contrast)
        covered += estimate.low <= 0.3 <= estimate.high
        half = 1.96 * estimate.se_test
        covered_test_only += estimate.estimate - half <= 0.3 <= estimate.estimate + half
    assert 0.90 <= covered / runs <= 0.99
    assert covered_test_only / runs < 0.85


def test_a_real_effect_is_found_and_no_effect_is_rarely_called_significant():
    rng = np.random.default_rng(1)
    significant = {0.0: 0, 0.6: 0}
    for effect in significant:
        for _ in range(100):
            stats, contrast = _simulate(rng, effect, seeds=3, sentences=400, seed_sd=0.05)
            resampler = Resampler(np.zeros(400, dtype=int), 200, int(rng.integers(1e9)))
            estimate = ContrastEstimator(
                stats, {"all": np.arange(400)}, resampler, metric=_mean_metric
            ).estimate(contrast)
            significant[effect] += estimate.p < 0.05
    assert significant[0.0] <= 10  # about 5% false positives
    assert significant[0.6] >= 80  # and power where the MDE says there is


def _estimate(mean, se, df=1e6, seeds=3):
    return Estimate(
        "x", mean, {}, se, se, 0.0, df, mean - 1.96 * se, mean + 1.96 * se, 0.5, mde(se, df), seeds
    )


def test_equivalence_needs_the_whole_interval_inside_the_margin():
    assert _estimate(0.1, 0.2).tost(margin=1.0) < 0.05  # shown to be within +-1
    assert _estimate(0.1, 2.0).tost(margin=1.0) > 0.05  # too uncertain to say
    assert _estimate(1.5, 0.1).tost(margin=1.0) > 0.5  # clearly outside


def test_minimal_detectable_effect_is_the_t_quantiles_times_the_standard_error():
    assert mde(1.0, 1e6) == pytest.approx(1.95996 + 0.84162, abs=1e-4)
    assert mde(1.0, 2) > mde(1.0, 1e6) * 1.8  # two degrees of freedom cost a lot


def test_one_seed_has_no_training_variance_and_says_so():
    rng = np.random.default_rng(2)
    stats, contrast = _simulate(rng, 0.3, seeds=1, sentences=200, seed_sd=0.3)
    estimate = ContrastEstimator(
        stats, {"all": np.arange(200)}, Resampler(np.zeros(200), 100, 1), metric=_mean_metric
    ).estimate(contrast)
    assert estimate.seeds == 1 and estimate.se_seed == 0.0


def _configurations(rng, means, seeds, sentences, seed_sd, interaction_sd=0.0):
    """Configurations ``name -> mean``, ``seeds`` each: sentence score = difficulty + the
    configuration's mean + a seed offset + a seed x sentence term + noise. Returns the
    stats and each configuration's ``{seed: variant}``."""
    difficulty = rng.normal(0, 1, sentences)
    stats, configs = {}, {}
    for name, mean in means.items():
        configs[name] = {}
        for s in range(seeds):
            score = (
                difficulty
                + mean
                + rng.normal(0, seed_sd)
                + rng.normal(0, interaction_sd, sentences)
                + rng.normal(0, 1, sentences)
            )
            stats[f"{name}{s}"] = np.stack([score, np.ones(sentences)], axis=1)
            configs[name][s] = f"{name}{s}"
    return stats, configs


def test_pooled_seed_variance_covers_the_truth_and_counts_nothing_twice():
    """Five configurations of 3 seeds, a seed x sentence interaction as large as the seed
    effect: the interval of an unpaired difference covers the true effect about 95% of the
    time, and its standard error matches the estimate's spread over repetitions (the
    between-seed variance on a fixed test set holds the interaction, which the bootstrap
    counts too: adding both would overstate it)."""
    rng = np.random.default_rng(7)
    means = {"a": 0.3, "b": 0.0, "c": 0.1, "d": -0.2, "e": 0.5}
    estimates, ses, covered, runs = [], [], 0, 150
    for _ in range(runs):
        stats, configs = _configurations(rng, means, 3, 300, seed_sd=0.1, interaction_sd=1.0)
        resampler = Resampler(np.zeros(300, dtype=int), 200, int(rng.integers(1e9)))
        estimator = ContrastEstimator(
            stats,
            {"all": np.arange(300)},
            resampler,
            _mean_metric,
            configurations=list(configs.values()),
        )
        contrast = Contrast("a - b", (Term(1, configs["a"], "all"), Term(-1, configs["b"], "all")))
        e = estimator.estimate(contrast)
        assert estimator.seed_variance(((1.0, "all"),), "bleu").df == 5 * 2  # every config
        assert 0 < e.extra["seed_df"] <= 5 * 2
        estimates.append(e.estimate)
        ses.append(e.se)
        covered += e.low <= 0.3 <= e.high
    assert 0.90 <= covered / runs <= 0.99
    assert 0.8 < np.mean(ses) / np.std(estimates) < 1.25


def test_clustered_resampling_draws_whole_clusters_within_strata():
    strata = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    clusters = ["x", "x", "y", "y", "z", "z", "z", "w"]
    weights = Resampler(strata, 50, 3, clusters).weights
    assert np.all(weights[:, 0] == weights[:, 1]) and np.all(weights[:, 4] == weights[:, 6])
    assert np.all(weights[:, :4].sum(axis=1) % 2 == 0)  # 2 clusters of 2 sentences each
    assert len({tuple(row) for row in weights}) > 1


def test_a_log_scale_contrast_is_a_ratio_of_scores():
    stats = {
        f"{n}{s}": np.array([[v * (1 + 0.01 * s), 1.0]] * 10)
        for n, v in (("a", 20.0), ("b", 10.0))
        for s in range(3)
    }
    a, b = ({s: f"{n}{s}" for s in range(3)} for n in "ab")
    estimator = ContrastEstimator(
        stats, {"all": np.arange(10)}, Resampler(np.zeros(10), 20, 1), _mean_metric
    )
    contrast = Contrast("a / b", (Term(1, a, "all"), Term(-1, b, "all")), scale="log_bleu")
    assert estimator.estimate(contrast).estimate == pytest.approx(np.log(2.0), abs=1e-9)


def test_power_is_eighty_percent_at_the_mde_and_grows_with_the_effect():
    se, df, alpha = 0.4, 30.0, 0.01
    assert power_directional(mde(se, df, alpha), se, df, alpha) == pytest.approx(0.80, abs=0.02)
    assert power_directional(2 * mde(se, df, alpha), se, df, alpha) > 0.99
    assert power_equivalence(0.5, se, df, alpha) < 0.05 < power_equivalence(2.0, se, df, alpha)
