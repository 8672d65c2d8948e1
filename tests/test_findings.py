"""Findings and their verdicts from synthetic result tables: each verdict must come out
where its stated criterion says so."""

import json

import numpy as np
import pandas as pd
import pytest

from pipeline.report.data import StudyData
from pipeline.report.findings import (
    additive_vs_multiplicative,
    attention_vs_none,
    direction_verdict,
    hidden_size_effect,
    length_effect,
    reversal_effect,
    scorer_ranking,
    seed_spread,
)

BUCKETS = [("1-10", "inside"), ("11-20", "inside"), ("21-30", "inside"), ("31+", "beyond")]


def _row(scorer, reverse=False, hidden=256, seed=1, bleu=10.0, plateaued=True):
    rev = "rev" if reverse else "fwd"
    config = json.dumps({"scorer": scorer, "reverse_source": reverse, "hidden_size": hidden})
    return {
        "variant": f"{scorer}-{rev}-h{hidden}-s{seed}",
        "scorer": scorer,
        "reverse_source": reverse,
        "hidden_size": hidden,
        "seed": seed,
        "config": config,
        "status": "evaluated",
        "bleu": bleu,
        "bleu_low": bleu - 0.8,
        "bleu_high": bleu + 0.8,
        "plateaued": plateaued,
    }


def _study(rows, curves=None, tests=()):
    """``curves``: variant -> BLEU per bucket; ``tests``: (kind, variant, baseline, delta, p)."""
    table = pd.DataFrame(rows)
    by_length = []
    for variant, values in (curves or {}).items():
        for (bucket, where), bleu in zip(BUCKETS, values):
            by_length.append({"variant": variant, "bucket": bucket, "training_range": where,
                              "sentences": 150, "bleu": bleu, "bleu_low": bleu - 1.0,
                              "bleu_high": bleu + 1.0})  # fmt: skip
    by_length = pd.DataFrame(by_length)
    if len(by_length):
        by_length = by_length.merge(table[["variant", "hidden_size", "scorer"]], on="variant")
    significance = pd.DataFrame(
        [{"comparison": k, "variant": v, "baseline": b, "delta": d, "p_holm": p,
          "bleu": 0.0, "baseline_bleu": 0.0, "p_ar": p, "p_bs": p}
         for k, v, b, d, p in tests],
        columns=["comparison", "variant", "baseline", "delta", "p_holm", "bleu",
                 "baseline_bleu", "p_ar", "p_bs"],
    )  # fmt: skip
    return StudyData(table, by_length, significance, {"variants": {}}, {}, {}, None)


BASE = [_row("none", bleu=9.0), _row("additive", bleu=18.0), _row("general", bleu=15.0)]


@pytest.mark.parametrize(
    ("none_curve", "additive_curve", "verdict"),
    [
        ([12.0, 10.5, 9.0, 7.0], [18.0, 19.0, 18.5, 15.0], "agrees"),  # -25% vs +3%
        ([12.0, 12.5, 13.0, 7.0], [18.0, 19.0, 18.5, 15.0], "disagrees"),  # none rises
        ([12.0, 11.5, 10.0, 7.0], [18.0, 19.0, 18.5, 15.0], "inconclusive"),  # -17%, overlap
        ([12.0, 10.5, 9.0, 7.0], [20.0, 17.0, 14.0, 12.0], "disagrees"),  # both fall
        # attention -12% but its intervals overlap: not evidence against flatness
        ([12.0, 10.5, 9.0, 7.0], [15.0, 14.0, 13.2, 12.0], "inconclusive"),
    ],
)
def test_length_effect_verdicts(none_curve, additive_curve, verdict):
    data = _study(BASE, {"none-fwd-h256-s1": none_curve, "additive-fwd-h256-s1": additive_curve})
    finding = length_effect(data)
    assert finding.verdict == verdict
    assert "1-10" in finding.measured and "21-30" in finding.measured
    assert "Beyond the cut (extrapolation" in finding.measured  # 31+ described, not tested


def test_length_effect_needs_two_inside_buckets_and_flags_unconverged_variants():
    rows = [_row("none", bleu=9.0, plateaued=False), _row("additive", bleu=18.0)]
    data = _study(rows, {"none-fwd-h256-s1": [12, 10.5, 9, 7], "additive-fwd-h256-s1": [18] * 4})
    finding = length_effect(data)
    assert finding.verdict == "agrees"
    assert any("1 of 2 variants stopped before" in c for c in finding.caveats)
    assert any("one seed" in c for c in finding.caveats)
    data.by_length.loc[data.by_length.bucket.isin(["11-20", "21-30"]), "training_range"] = "beyond"
    assert length_effect(data).verdict == "not testable"


def test_length_effect_needs_every_seed():
    rows = [*BASE, _row("none", seed=2, bleu=9.5)]
    curves = {
        "none-fwd-h256-s1": [12.0, 10.5, 9.0, 7.0],
        "none-fwd-h256-s2": [12.0, 12.0, 11.5, 7.0],  # the second seed barely falls
        "additive-fwd-h256-s1": [18.0, 19.0, 18.5, 15.0],
    }
    assert length_effect(_study(rows, curves)).verdict == "inconclusive"


@pytest.mark.parametrize(
    ("tests", "verdict"),
    [
        ([(1.2, 0.001), (0.9, 0.01)], "agrees"),
        ([(1.2, 0.001), (0.3, 0.4)], "inconclusive"),  # one twin not significant
        ([(-1.0, 0.001), (-0.2, 0.5)], "disagrees"),
        ([(1.0, 0.001), (-1.0, 0.001)], "inconclusive"),  # significant both ways
        ([], "not testable"),
    ],
)
def test_direction_verdict(tests, verdict):
    rows = pd.DataFrame([{"delta": d, "p_holm": p} for d, p in tests], columns=["delta", "p_holm"])
    assert direction_verdict(rows) == verdict


def test_reversal_attention_and_scorer_findings_read_their_comparisons():
    rows = [*BASE, _row("none", reverse=True, bleu=10.0), _row("additive", reverse=True)]
    tests = [
        ("reversed_vs_forward", "none-rev-h256-s1", "none-fwd-h256-s1", 1.0, 0.0002),
        ("reversed_vs_forward", "additive-rev-h256-s1", "additive-fwd-h256-s1", 0.1, 0.6),
        ("vs_none", "additive-fwd-h256-s1", "none-fwd-h256-s1", 9.0, 0.0002),
        ("additive_vs_general", "additive-fwd-h256-s1", "general-fwd-h256-s1", 3.0, 0.0002),
    ]
    data = _study(rows, tests=tests)
    reversal = reversal_effect(data)
    assert reversal.verdict == "agrees"
    assert "p_Holm < 0.001" in reversal.measured and "0 significant" in reversal.measured
    mixed = _study(
        [*rows, _row("general"), _row("general", reverse=True)],
        tests=[*tests, ("reversed_vs_forward", "general-rev-h256-s1", "general-fwd-h256-s1",
                        -2.0, 0.001)],
    )  # fmt: skip
    expected = "2 twin pairs, 1 significant (1 lower with reversal, 0 higher)"
    assert expected in reversal_effect(mixed).measured
    assert attention_vs_none(data).verdict == "agrees"
    scorer = additive_vs_multiplicative(data)  # right direction, 3 BLEU: not "slightly"
    assert scorer.verdict == "inconclusive" and "far above" in scorer.measured
    small = _study(rows, tests=[(*tests[3][:3], 0.5, 0.01)])
    assert additive_vs_multiplicative(small).verdict == "agrees"
    assert reversal_effect(small).verdict == "not testable"


def test_hidden_size_needs_512_and_1024():
    rows = [_row("dot", hidden=128), _row("dot", hidden=256)]
    assert hidden_size_effect(_study(rows)).verdict == "not testable"


def test_ranking_and_seed_spread():
    rows = [*BASE, _row("additive", seed=2, bleu=17.0), _row("none", reverse=True)]
    tests = [
        ("vs_best", "general-fwd-h256-s1", "additive-fwd-h256-s1", -3.0, 0.0002),
        ("vs_none", "general-fwd-h256-s1", "none-fwd-h256-s1", 6.0, 0.0002),
    ]
    data = _study(rows, tests=tests)
    ranking = scorer_ranking(data)
    assert ranking.scorer.tolist() == ["additive", "general", "none"]
    assert ranking.loc[0, "bleu_mean"] == pytest.approx(17.5) and ranking.loc[0, "seeds"] == 2
    assert ranking.loc[1, "vs_best_p"] == pytest.approx(0.0002)
    assert ranking.attrs["reference"] == "additive"
    assert ranking.loc[1, "vs_best_delta"] == pytest.approx(-3.0)  # general minus additive
    assert ranking.attrs["seed_range"] == (pytest.approx(1.0), "additive")
    spread = seed_spread(data)
    assert spread.configuration.tolist() == ["additive-fwd-h256"]
    assert spread.loc[0, "bleu_sd"] == pytest.approx(np.std([18.0, 17.0], ddof=1))
    assert "s2: 17.00 [16.20, 17.80]" in spread.loc[0, "intervals"]


def test_ranking_shows_the_direction_and_flags_gaps_within_the_seed_spread():
    """A scorer above the reference shows a positive delta, one below it a negative one,
    and adjacent ranks closer than the largest seed spread are named."""
    from pipeline.report.pages import _ranking_note

    rows = [
        _row("additive", bleu=12.5),
        _row("additive", seed=2, bleu=14.5),
        _row("scaled_dot", bleu=14.0),
        _row("dot", bleu=9.0),
        _row("none", bleu=6.0),
    ]
    tests = [
        ("vs_best", "scaled_dot-fwd-h256-s1", "additive-fwd-h256-s1", 1.5, 0.004),
        ("vs_best", "dot-fwd-h256-s1", "additive-fwd-h256-s1", -3.5, 0.004),
    ]
    ranking = scorer_ranking(_study(rows, tests=tests))
    by_scorer = ranking.set_index("scorer")
    assert ranking.scorer.tolist() == ["scaled_dot", "additive", "dot", "none"]
    assert by_scorer.loc["scaled_dot", "vs_best_delta"] == pytest.approx(1.5)
    assert by_scorer.loc["dot", "vs_best_delta"] == pytest.approx(-3.5)
    note = _ranking_note(ranking)
    assert "differ by up to 2.00 BLEU (additive)" in note
    assert "within it: scaled_dot ~ additive." in note  # 14.0 vs 13.5; dot is 4.5 below
