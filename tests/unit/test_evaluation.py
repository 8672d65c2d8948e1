import json
from dataclasses import replace

import numpy as np
import pytest

from pipeline.evaluate.data import attention_example_indices
from pipeline.evaluate.metrics import (
    Buckets,
    Scorer,
    attention_entropy,
    monotonicity_gap,
    score_system,
)
from pipeline.evaluate.registry import dev_choice
from pipeline.records.evaluation import LengthBucket, VariantMetrics
from pipeline.records.sweep import FAILED, SweepRecord, VariantRecord
from pipeline.study.statistics import bonferroni, format_p
from tests.support import variant_record

REFS = [f"the {w} sat on the mat number {i}" for i, w in enumerate(["cat", "dog", "cow"] * 20)]
HYPS = [r if i % 3 else r.replace("mat", "rug") for i, r in enumerate(REFS)]
WORDS = np.array([3, 10, 11, 20, 21, 55] * 10)


def test_bucket_boundaries():
    buckets = Buckets(width=10, count=6)
    assert [buckets.index(w) for w in (1, 10, 11, 50, 51, 99)] == [0, 0, 1, 4, 5, 5]
    assert buckets.label(0) == "1-10" and buckets.label(5) == "51+"


def test_scores_match_sacrebleu_and_intervals_are_seeded():
    import sacrebleu

    first = score_system(Scorer("en", seed=3), HYPS, REFS, WORDS, Buckets(), 200, 20)
    again = score_system(Scorer("en", seed=3), HYPS, REFS, WORDS, Buckets(), 200, 20)
    other = score_system(Scorer("en", seed=4), HYPS, REFS, WORDS, Buckets(), 200, 20)
    assert json.dumps(first) == json.dumps(again)  # NaN-safe equality
    assert (first["bleu_low"], first["bleu_high"]) != (other["bleu_low"], other["bleu_high"])
    assert first["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert first["bleu_low"] <= first["bleu"] <= first["bleu_high"]
    assert [b["sentences"] for b in first["by_length"]] == [20, 20, 10, 0, 0, 10]
    assert np.isnan(first["by_length"][3]["bleu"])
    # the training cut at 20 words: 1-10 and 11-20 inside, the rest extrapolation
    assert [b["training_range"] for b in first["by_length"]] == ["inside"] * 2 + ["beyond"] * 4
    assert "nrefs:1" in first["signature"]


def test_training_range_of_buckets():
    buckets = Buckets(width=10, count=6)
    assert [buckets.training_range(i, 30) for i in range(6)] == ["inside"] * 3 + ["beyond"] * 3
    assert buckets.training_range(2, 25) == "beyond"  # 21-30 holds sentences over the cut
    assert buckets.training_range(5, None) == "inside"  # no cut: every length was trained


def test_bonferroni_and_p_formatting():
    adjusted = bonferroni([0.01, 0.04, 0.03, 0.5])
    assert adjusted == pytest.approx([0.04, 0.16, 0.12, 1.0])
    assert bonferroni([]) == []
    assert format_p(0.0004) == "< 0.001" and format_p(0.0312) == "0.031"


def test_attention_statistics():
    diagonal = np.eye(5)
    uniform = np.full((5, 5), 0.2)
    assert attention_entropy(diagonal) == pytest.approx(0.0, abs=1e-9)
    assert attention_entropy(uniform) == pytest.approx(np.log(5))
    assert monotonicity_gap(diagonal) == 0.0
    assert monotonicity_gap(np.fliplr(diagonal)) > 0.4


def test_attention_examples_are_seeded_and_spread_over_buckets():
    words = np.array([3] * 50 + [15] * 50 + [60] * 5)
    chosen = attention_example_indices(words, 6, width=10, count=6, seed=1)
    assert np.array_equal(chosen, attention_example_indices(words, 6, 10, 6, seed=1))
    assert {int(words[i]) for i in chosen} == {3, 15, 60}
    assert len(chosen) == 6 and list(words[chosen]) == sorted(words[chosen])


def test_the_dev_choice_is_the_best_dev_bleu_of_the_chosen_scorer_even_at_zero():
    """The variant registered as dev-best: the chosen scorer's own variants only (a
    train.grid.include variant has no scorer axis), finite dev BLEU only, 0.0 included."""
    variants = {
        "additive-s1": _record("additive-s1", best_dev_bleu=0.0),
        "additive-s2": _record("additive-s2", best_dev_bleu=float("nan")),
        "additive-s3": replace(_record("additive-s3"), status=FAILED, summary=None),
        "dot-s1": _record("dot-s1", "dot", best_dev_bleu=5.0),
    }
    assert dev_choice(variants, "additive") == "additive-s1"
    assert dev_choice(variants, None) == "dot-s1"
    assert dev_choice({i: variants[i] for i in ("additive-s2", "additive-s3")}, "additive") is None


def _record(variant_id: str, scorer: str = "additive", **summary) -> VariantRecord:
    return variant_record(variant_id, scorer, **summary)


def test_bleu_by_length_is_a_seed_mean_with_an_interval_over_seeds(monkeypatch):
    """Two seeds: mean +- t * sd / sqrt(2); one seed: its bootstrap interval."""
    from pipeline.evaluate import tables

    def bucket(bleu, low, high):
        by_length = (LengthBucket("1-10", 5, "inside", bleu, low, high),)
        return VariantMetrics(bleu, low, high, 0.0, 5, "sig", by_length, 0, 1, 5, "cpu", "fp32", 5)

    metrics = {"a-s1": bucket(10, 8, 12), "a-s2": bucket(12, 9, 14), "b-s1": bucket(20, 18, 22)}
    names = {"a-s1": "a", "a-s2": "a", "b-s1": "b"}
    monkeypatch.setattr(tables, "configurations", lambda sweep, m: names)
    scorers = {"a": "additive", "b": "dot"}
    sweep = SweepRecord("data", {k: _record(k, scorers[k[0]]) for k in metrics})
    table = tables.length_plot_table(metrics, sweep).set_index("configuration")
    half = 12.706 * np.std([10, 12], ddof=1) / np.sqrt(2)  # t(0.975, 1)
    assert table.loc["a", "bleu"] == 11.0 and table.loc["a", "seeds"] == 2
    assert table.loc["a", "high"] == pytest.approx(11.0 + half, abs=0.01)
    assert (table.loc["b", "low"], table.loc["b", "high"]) == (18.0, 22.0)
