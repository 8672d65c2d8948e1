import json

import numpy as np
import pytest

from pipeline.decoding import attention_example_indices
from pipeline.evaluation import (
    Buckets,
    Scorer,
    attention_entropy,
    monotonicity_gap,
    paired_bootstrap,
    score_system,
)

REFS = [f"the {w} sat on the mat number {i}" for i, w in enumerate(["cat", "dog", "cow"] * 20)]
HYPS = [r if i % 3 else r.replace("mat", "rug") for i, r in enumerate(REFS)]
WORDS = np.array([3, 10, 11, 20, 21, 55] * 10)


def test_bucket_boundaries():
    buckets = Buckets(width=10, count=6)
    assert [buckets.index(w) for w in (1, 10, 11, 50, 51, 99)] == [0, 0, 1, 4, 5, 5]
    assert buckets.label(0) == "1-10" and buckets.label(5) == "51+"


def test_scores_match_sacrebleu_and_bootstrap_is_seeded():
    import sacrebleu

    scorer = Scorer("en")
    first = score_system(scorer, HYPS, REFS, WORDS, Buckets(), samples=200, seed=3)
    again = score_system(scorer, HYPS, REFS, WORDS, Buckets(), samples=200, seed=3)
    other = score_system(scorer, HYPS, REFS, WORDS, Buckets(), samples=200, seed=4)
    assert json.dumps(first) == json.dumps(again)  # NaN-safe equality
    assert (first["bleu_low"], first["bleu_high"]) != (other["bleu_low"], other["bleu_high"])
    assert first["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert first["bleu_low"] <= first["bleu"] <= first["bleu_high"]
    assert [b["sentences"] for b in first["by_length"]] == [20, 20, 10, 0, 0, 10]
    assert np.isnan(first["by_length"][3]["bleu"])
    assert "nrefs:1" in first["signature"]


def test_paired_bootstrap_direction_and_significance():
    scorer = Scorer()
    good, bad = scorer.statistics(REFS, REFS), scorer.statistics(HYPS, REFS)
    result = paired_bootstrap(scorer, good, bad, samples=200, seed=1)
    reverse = paired_bootstrap(scorer, bad, good, samples=200, seed=1)
    assert result["delta"] > 0 and result["p_value"] < 0.05
    assert reverse["delta"] == pytest.approx(-result["delta"])
    same = paired_bootstrap(scorer, good, good, samples=200, seed=1)
    assert same["delta"] == 0 and same["p_value"] == 1.0


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
