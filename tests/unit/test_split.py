import numpy as np
import pytest

from pipeline.config.params import SplitConfig
from pipeline.data.split import SplitError, bucket_label, length_bucket, split_pairs
from tests.support import synthetic_pairs

CONFIG = SplitConfig(
    seed=7, dev_size=60, test_size=180, bucket_width=10, num_buckets=6, test_min_per_bucket=20
)


def test_bucket_boundaries():
    assert [length_bucket(w, 10, 6) for w in (1, 10, 11, 20, 50, 51, 300)] == [0, 0, 1, 1, 4, 5, 5]
    assert [bucket_label(i, 10, 6) for i in (0, 4, 5)] == ["1-10", "41-50", "51+"]


def test_split_is_deterministic_by_seed():
    pairs = synthetic_pairs(1500, seed=1)
    first, second = split_pairs(pairs, CONFIG), split_pairs(pairs, CONFIG)
    assert first.as_dict() == second.as_dict()
    other = split_pairs(pairs, CONFIG.model_copy(update={"seed": 8}))
    assert other.test != first.test


def test_no_dev_or_test_source_in_train():
    pairs = synthetic_pairs(1500, seed=2)
    # the same source with several translations must land in one split
    pairs += [(pairs[i][0], f"ALT {i}") for i in range(0, 1500, 3)]
    split = split_pairs(pairs, CONFIG)
    train_sources = {s for s, _ in split.train}
    assert not train_sources & {s for s, _ in split.test}
    assert not train_sources & {s for s, _ in split.dev}
    assert not {s for s, _ in split.dev} & {s for s, _ in split.test}
    assert len(split.train) + len(split.dev) + len(split.test) == len(pairs)


def test_test_set_is_length_stratified():
    pairs = synthetic_pairs(1500, seed=3, max_words=75)
    split = split_pairs(pairs, CONFIG)
    all_buckets = np.bincount([length_bucket(len(s.split()), 10, 6) for s, _ in pairs], minlength=6)
    test_buckets = np.bincount(
        [length_bucket(len(s.split()), 10, 6) for s, _ in split.test], minlength=6
    )
    assert all(all_buckets >= 40), "fixture must populate every bucket"
    assert all(test_buckets >= CONFIG.test_min_per_bucket)
    # the rarest bucket is lifted by the floor: its share of test exceeds its share overall
    rare = int(np.argmin(all_buckets))
    assert test_buckets[rare] / len(split.test) > all_buckets[rare] / len(pairs)


def test_train_length_cut_and_cap_apply_to_train_only():
    pairs = synthetic_pairs(1500, seed=4)
    config = CONFIG.model_copy(update={"max_train_words": 30, "max_train_pairs": 500})
    split = split_pairs(pairs, config)
    assert max(len(s.split()) for s, _ in split.train) <= 30
    assert max(len(s.split()) for s, _ in split.test) > 30
    assert len(split.train) == 500 and split.dropped_train_long > 0 and split.dropped_train_cap > 0


def test_buckets_beyond_the_cut_may_give_all_their_sentences_to_test():
    """Pairs longer than max_train_words cannot train, so a bucket beyond the cut may fill
    its test quota from all of it, where an in-range bucket gives at most half; dev stays
    inside the training lengths and disjoint from test."""
    pairs = synthetic_pairs(1500, seed=5, max_words=75)
    words = lambda s: len(s.split())  # noqa: E731
    sizes = np.bincount([length_bucket(words(s), 10, 6) for s, _ in pairs], minlength=6)
    rare = int(np.argmax(np.arange(6) >= 3))  # first bucket beyond a 30-word cut
    wanted = int(sizes[rare] * 0.8)  # more than half of it
    config = CONFIG.model_copy(
        update={"max_train_words": 30, "test_min_per_bucket": wanted, "test_size": 6 * wanted}
    )
    split = split_pairs(pairs, config)
    test = np.bincount([length_bucket(words(s), 10, 6) for s, _ in split.test], minlength=6)
    assert sizes[rare] >= test[rare] >= wanted > sizes[rare] // 2
    assert all(test[b] <= sizes[b] // 2 for b in range(3))  # in range: half at most
    assert max(words(s) for s, _ in split.dev) <= 30
    assert not {s for s, _ in split.dev} & {s for s, _ in split.test}
    assert split.dropped_train_long == sum(sizes[3:]) - sum(test[3:])


def test_too_small_corpus_is_a_clear_error():
    with pytest.raises(SplitError, match="corpus has 100 distinct source sentences"):
        split_pairs(synthetic_pairs(100), CONFIG)
