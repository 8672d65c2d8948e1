"""BLEU by length in the report: per configuration, the mean over seeds with an interval
that covers the seeds (one seed: its bootstrap interval over test sentences, labelled so),
buckets beyond the training cut marked as extrapolation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline.report import figures
from pipeline.report.data import length_means
from pipeline.report.pages import by_length_pivot

BUCKETS = [("1-10", "inside"), ("11-20", "inside"), ("21+", "beyond")]


def by_length(seeds: dict[tuple[str, bool], list[int]]) -> pd.DataFrame:
    """Per-seed rows as the evaluate stage writes them: BLEU = 30 - 5 * bucket + seed."""
    rows = []
    for (scorer, reverse), listed in seeds.items():
        for seed in listed:
            for index, (bucket, where) in enumerate(BUCKETS):
                bleu = 30.0 - 5 * index + seed
                rows.append(
                    {
                        "variant": f"{scorer}-{'rev' if reverse else 'fwd'}-s{seed}",
                        "scorer": scorer,
                        "reverse_source": reverse,
                        "hidden_size": 64,
                        "seed": seed,
                        "config": json.dumps({"scorer": scorer, "reverse_source": reverse}),
                        "bucket": bucket,
                        "sentences": 100 + index,
                        "training_range": where,
                        "bleu": bleu,
                        "bleu_low": bleu - 1.5,
                        "bleu_high": bleu + 2.0,
                    }
                )
    return pd.DataFrame(rows)


def test_the_mean_over_seeds_with_a_t_interval_over_the_seeds():
    means = length_means(by_length({("additive", False): [1, 2, 4]}))
    assert list(means.bucket) == ["1-10", "11-20", "21+"]
    first = means.iloc[0]
    values = np.array([31.0, 32.0, 34.0])
    half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / np.sqrt(3)
    assert first.bleu == pytest.approx(values.mean())  # not the lowest seed's 31
    assert (first.low, first.high) == pytest.approx((values.mean() - half, values.mean() + half))
    assert first.seeds == 3 and first.seed_list == [1, 2, 4] and first.interval == "seeds"
    assert list(means.training_range) == ["inside", "inside", "beyond"]
    assert list(means.sentences) == [100, 101, 102]


def test_one_seed_keeps_its_bootstrap_interval_labelled_test_sentences_only():
    means = length_means(by_length({("dot", False): [2]}))
    first = means.iloc[0]
    assert (first.bleu, first.low, first.high) == (32.0, 30.5, 34.0)
    assert first.interval == "test sentences" and first.seeds == 1


def test_a_bucket_a_seed_did_not_score_is_left_out_of_its_mean():
    rows = by_length({("additive", False): [1, 2, 3]})
    rows.loc[(rows.seed == 3) & (rows.bucket == "21+"), "bleu"] = np.nan
    last = length_means(rows).iloc[-1]
    assert last.seeds == 2 and last.bleu == pytest.approx(21.5) and last.interval == "seeds"


def test_the_table_shows_configurations_with_seeds_and_what_the_interval_covers():
    means = length_means(by_length({("additive", False): [1, 2, 3], ("dot", True): [1]}))
    headers, rows = by_length_pivot(means)
    assert headers[:3] == ["configuration", "seeds", "interval over"]
    assert "beyond the cut: extrapolation" in headers[-1] and "beyond" not in headers[3]
    table = {row[0]: row for row in rows}
    assert set(table) == {"additive, forward, h64", "dot, reversed, h64"}
    assert table["additive, forward, h64"][1:3] == ["1-3", "seeds"]
    assert table["additive, forward, h64"][3] == "32.0 [29.5, 34.5]"  # 31, 32, 33: t(2)
    one = table["dot, reversed, h64"]
    assert one[1:4] == ["1", "test sentences only (1 seed)", "31.0 [29.5, 33.0]"]


def test_the_figure_draws_the_seed_means_and_marks_extrapolation(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, formats: drawn.append(fig))
    rows = by_length({("additive", False): [1, 2, 3], ("dot", False): [1]})
    figures.bleu_by_length_figure(length_means(rows), rows, tmp_path / "f")
    (ax,) = drawn[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["additive (3 seeds)"].get_ydata()) == [32.0, 27.0, 22.0]
    one = lines["dot (1 seed, band: test sentences only)"]
    assert one.get_linestyle() == ":"
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["1-10", "11-20", "21+\nbeyond"]
    assert any("extrapolation" in t.get_text() for t in ax.texts)
    assert ax.get_title() == "forward, h64: 2 scorers, mean of seeds 1-3"
    assert ax.get_ylabel() == "test BLEU, mean over seeds"
