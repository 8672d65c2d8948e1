"""``metrics/test.json`` counts every verdict word, the new ones too, all numeric, with the
same keys whichever verdicts a study got (``dvc exp show``'s columns)."""

from __future__ import annotations

from pipeline.evaluate.tables import verdict_counts

KEYS = [
    "agrees_with_the_literature",
    "claimed_direction_at_least_the_effect_of_interest",
    "claimed_direction_not_shown_to_reach_it",
    "claimed_direction_size_not_compared",
    "smaller_than_claimed",
    "opposite_direction",
    "equivalent",
    "not_equivalent",
    "inconclusive",
    "not_testable",
]


def test_every_verdict_is_counted_under_its_snake_case_key():
    counts = verdict_counts(
        [
            "claimed direction, not shown to reach it",
            "smaller than claimed",
            "equivalent",
            "equivalent",
            "not testable",
        ]
    )
    assert list(counts)[: len(KEYS)] == KEYS
    assert counts == {
        **dict.fromkeys(KEYS, 0),
        "claimed_direction_not_shown_to_reach_it": 1,
        "smaller_than_claimed": 1,
        "equivalent": 2,
        "not_testable": 1,
    }
    assert all(isinstance(v, int) for v in counts.values())


def test_no_verdicts_still_gives_every_key_and_an_unknown_word_is_counted_too():
    none = verdict_counts([])
    assert set(KEYS) <= set(none) and not any(none.values())
    counts = verdict_counts(["equivalent", "partly agrees"])
    assert counts["partly_agrees"] == 1 and sum(counts.values()) == 2
