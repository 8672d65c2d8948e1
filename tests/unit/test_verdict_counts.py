"""``metrics/test.json`` counts every verdict word, the new ones too, all numeric, with the
same keys whichever verdicts a study got (``dvc exp show``'s columns)."""

from __future__ import annotations

from pipeline.evaluate.tables import verdict_counts

KEYS = ["agrees", "disagrees", "smaller_than_claimed", "equivalent", "inconclusive", "not_testable"]


def test_every_verdict_is_counted_under_its_snake_case_key():
    counts = verdict_counts(
        ["agrees", "smaller than claimed", "equivalent", "equivalent", "not testable"]
    )
    assert list(counts)[: len(KEYS)] == KEYS
    assert counts == {
        "agrees": 1,
        "disagrees": 0,
        "smaller_than_claimed": 1,
        "equivalent": 2,
        "inconclusive": 0,
        "not_testable": 1,
    }
    assert all(isinstance(v, int) for v in counts.values())


def test_no_verdicts_still_gives_every_key_and_an_unknown_word_is_counted_too():
    none = verdict_counts([])
    assert set(KEYS) <= set(none) and not any(none.values())
    counts = verdict_counts(["agrees", "partly agrees"])
    assert counts["partly_agrees"] == 1 and sum(counts.values()) == 2
