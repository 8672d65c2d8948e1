"""The verdict rules on synthetic studies with known answers, in both directions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.study.findings import Grid, choose_reference, judge
from pipeline.study.statistics import ContrastEstimator, Resampler

BUCKETS = ["1-10", "11-20", "21-30"]
PER_BUCKET = 300


def _mean(totals):
    return totals[..., 0] / totals[..., 1]


def _study(quality, seed_sd=0.05, noise=1.0, plateaued=lambda v: True, dev=None):
    """``quality(scorer, reverse, bucket) -> mean score``; 3 seeds each of none, additive,
    general forward and none, additive reversed."""
    rng = np.random.default_rng(11)
    strata = np.repeat(np.arange(len(BUCKETS)), PER_BUCKET)
    difficulty = rng.normal(0, 1, len(strata))
    rows, stats = [], {}
    configs = [(s, False) for s in ("none", "additive", "general")]
    configs += [("none", True), ("additive", True)]
    for scorer, reverse in configs:
        for seed in (1, 2, 3):
            vid = f"{scorer}-{'rev' if reverse else 'fwd'}-h256-s{seed}"
            offset = rng.normal(0, seed_sd)
            means = np.array([quality(scorer, reverse, b) for b in BUCKETS])[strata]
            score = means + difficulty + offset + rng.normal(0, noise, len(strata))
            stats[vid] = np.stack([score, np.ones(len(strata))], axis=1)
            rows.append(
                {
                    "variant": vid,
                    "scorer": scorer,
                    "reverse_source": reverse,
                    "hidden_size": 256,
                    "seed": seed,
                    "rest": "{}",
                    "plateaued": plateaued(vid),
                    "best_dev_bleu": (dev or {}).get(scorer, 10.0) + seed * 0.01,
                }
            )
    subsets = {b: np.flatnonzero(strata == i) for i, b in enumerate(BUCKETS)}
    subsets["inside"] = subsets["all"] = np.arange(len(strata))
    estimator = ContrastEstimator(stats, subsets, Resampler(strata, 300, 5), metric=_mean)
    grid = Grid(pd.DataFrame(rows))
    return {f.title: f for f in judge(estimator, grid, BUCKETS)}, grid


def _verdicts(quality, **kw):
    findings, _ = _study(quality, **kw)
    return {k: f.verdict for k, f in findings.items()}


def good_attention(scorer, reverse, bucket):
    base = {"none": 10.0, "additive": 20.0, "general": 19.0}[scorer]
    if scorer == "none":  # falls with length; reversal helps it
        base -= {"1-10": 0.0, "11-20": 3.0, "21-30": 6.0}[bucket]
        base += 3.0 if reverse else 0.0
    return base


def bad_attention(scorer, reverse, bucket):
    base = {"none": 20.0, "additive": 10.0, "general": 12.0}[scorer]
    if scorer == "additive":  # falls with length, reversal helps it, not none
        base -= {"1-10": 0.0, "11-20": 3.0, "21-30": 6.0}[bucket]
        base += 3.0 if reverse else 0.0
    return base


def test_every_finding_agrees_when_the_data_say_so():
    verdicts = _verdicts(good_attention)
    assert verdicts["Attention"] == "agrees"
    assert verdicts["Length"] == "agrees"
    assert verdicts["Reversal"] == "agrees"
    assert verdicts["Scorer"] == "agrees"  # +1 with tight intervals
    assert verdicts["Hidden size"] == "not testable"  # one size in the grid


def test_every_finding_disagrees_when_the_data_say_the_opposite():
    verdicts = _verdicts(bad_attention)
    assert verdicts["Attention"] == "disagrees"
    assert verdicts["Length"] == "disagrees"
    assert verdicts["Reversal"] == "disagrees"
    assert verdicts["Scorer"] == "disagrees"


def test_no_difference_with_a_precise_design_is_inconclusive_not_a_verdict():
    flat = lambda scorer, reverse, bucket: 15.0  # noqa: E731
    findings, _ = _study(flat, noise=0.05, seed_sd=0.01)
    assert findings["Scorer"].verdict == "inconclusive"  # MDE below 0.2: could have seen it
    assert findings["Attention"].verdict == "inconclusive"


def test_an_effect_below_the_designs_mde_is_not_testable():
    flat = lambda scorer, reverse, bucket: 15.0  # noqa: E731
    findings, _ = _study(flat, noise=3.0, seed_sd=1.0)
    scorer = findings["Scorer"]
    assert scorer.verdict == "not testable" and "MDE" in scorer.why


def test_noise_alone_gives_no_disagreement():
    """Seed noise well above the test-set noise: the tests include it, so no verdict."""
    flat = lambda scorer, reverse, bucket: 15.0  # noqa: E731
    verdicts = _verdicts(flat, seed_sd=1.5, noise=0.2)
    assert "disagrees" not in verdicts.values() and "agrees" not in verdicts.values()


def test_variants_stopped_at_the_step_cap_are_kept_out_of_confirmatory_tests():
    capped = lambda vid: not vid.startswith("additive-fwd")  # noqa: E731
    findings, _ = _study(good_attention, plateaued=capped)
    assert findings["Attention"].verdict == "not testable"
    assert "plateaued" in findings["Attention"].why


def test_reference_is_chosen_on_dev_among_scorers_with_equal_seeds():
    _, grid = _study(good_attention, dev={"additive": 20.0, "general": 21.0})
    reference, means = choose_reference(grid)
    assert reference == "general" and means["general"] > means["additive"]
    assert "none" not in means


@pytest.mark.parametrize("title", ["Attention", "Length", "Reversal", "Scorer"])
def test_each_finding_reports_effect_interval_and_mde(title):
    findings, _ = _study(good_attention)
    main = findings[title].main.estimate
    assert main.low < main.estimate < main.high and main.mde > 0 and main.seeds == 3


def _size_study(gap_small, gap_large):
    """dot and scaled_dot at hidden 128 and 512, 3 seeds each: dot minus scaled_dot is
    ``gap_small`` at 128 and ``gap_large`` at 512 (plus none/additive for the grid)."""
    rng = np.random.default_rng(4)
    strata = np.repeat(np.arange(len(BUCKETS)), PER_BUCKET)
    difficulty = rng.normal(0, 1, len(strata))
    rows, stats = [], {}
    for scorer, hidden, mean in [
        ("none", 128, 10.0),
        ("none", 512, 10.0),
        ("scaled_dot", 128, 20.0),
        ("scaled_dot", 512, 21.0),
        ("dot", 128, 20.0 + gap_small),
        ("dot", 512, 21.0 + gap_large),
    ]:
        for seed in (1, 2, 3):
            vid = f"{scorer}-fwd-h{hidden}-s{seed}"
            score = mean + difficulty + rng.normal(0, 0.05) + rng.normal(0, 1, len(strata))
            stats[vid] = np.stack([score, np.ones(len(strata))], axis=1)
            rows.append(
                {
                    "variant": vid,
                    "scorer": scorer,
                    "reverse_source": False,
                    "hidden_size": hidden,
                    "seed": seed,
                    "rest": "{}",
                    "plateaued": True,
                    "best_dev_bleu": mean,
                }
            )
    subsets = {b: np.flatnonzero(strata == i) for i, b in enumerate(BUCKETS)}
    subsets["inside"] = subsets["all"] = np.arange(len(strata))
    estimator = ContrastEstimator(stats, subsets, Resampler(strata, 300, 5), metric=_mean)
    return {f.title: f for f in judge(estimator, Grid(pd.DataFrame(rows)), BUCKETS)}


def test_hidden_size_rule_agrees_and_disagrees_on_the_size_x_scaling_interaction():
    # unscaled dot falls behind scaled_dot as the size grows: the claim
    assert _size_study(gap_small=0.0, gap_large=-2.0)["Hidden size"].verdict == "agrees"
    # unscaled dot gains on scaled_dot as the size grows: against it
    assert _size_study(gap_small=0.0, gap_large=2.0)["Hidden size"].verdict == "disagrees"
