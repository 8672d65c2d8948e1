import random

import numpy as np
import pytest

from pipeline.config.params import CleanConfig, FetchConfig, SplitConfig
from pipeline.data.cleaning import clean_pairs
from pipeline.data.fetch import clean_chapters, fetch
from pipeline.data.pairs import read_groups, read_tsv_pairs
from pipeline.data.sources import RawCorpus
from pipeline.data.split import (
    SplitError,
    bucket_label,
    jaccard,
    length_bucket,
    near_duplicate_shares,
    near_duplicates,
    shingles,
    split_pairs,
)
from tests.support import synthetic_pairs, write_tsv

CONFIG = SplitConfig(
    seed=7,
    dev_size=60,
    test_size=180,
    bucket_width=10,
    num_buckets=6,
    test_min_per_bucket=20,
    max_train_words=None,  # every pair of these tests trains (the default cuts at 30 words)
    exclude_from_test=None,
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


# ------------------------------------------------------------ chapters, near duplicates
CHAPTERS = SplitConfig(
    seed=3,
    dev_size=100,
    test_size=300,
    test_min_per_bucket=50,
    max_train_words=30,
    exclude_from_test=None,
)


def chaptered_pairs(chapters: int = 150, verses: int = 24, planted: int = 150, seed: int = 0):
    """Pairs with a ``book:chapter`` each (10 chapters a book), every length bucket filled,
    and ``planted`` near duplicates: a verse copied into another chapter with its last
    word changed (trigram Jaccard (n-3)/(n-1) >= 0.6 for n >= 8 words)."""
    rng = random.Random(seed)
    pairs, labels = [], []
    for chapter in range(chapters):
        for _ in range(verses):
            words = [f"t{rng.randrange(20000)}" for _ in range(1 + int(rng.random() ** 1.5 * 70))]
            pairs.append((" ".join(words), " ".join(reversed(words)).upper()))
            labels.append(f"{1 + chapter // 10}:{1 + chapter % 10}")
    copies = 0
    while copies < planted:
        original, copy = rng.sample(range(len(pairs)), 2)
        words = pairs[original][0].split()
        if 8 <= len(words) <= 30 and labels[original] != labels[copy]:
            text = " ".join(words[:-1] + [f"x{copies}"])
            pairs[copy] = (text, text.upper())
            copies += 1
    return pairs, labels


def chapter_of(pairs, labels):
    return dict(zip(pairs, labels, strict=True))


def near_pairs(first, second, threshold=0.5):
    """Brute force: every (first, second) source pair with Jaccard >= ``threshold``."""
    a = {s: shingles(s) for s, _ in first}
    b = {s: shingles(s) for s, _ in second}
    return [
        (x, y)
        for x, gx in a.items()
        for y, gy in b.items()
        if gx & gy and len(gx & gy) >= threshold * len(gx | gy)
    ]


def test_no_chapter_is_in_two_splits():
    pairs, labels = chaptered_pairs()
    split = split_pairs(pairs, CHAPTERS, labels)
    assert split.group_by == "chapter"
    chapter = chapter_of(pairs, labels)
    used = {name: {chapter[p] for p in part} for name, part in split.as_dict().items()}
    assert used["test"] and used["dev"] and used["train"]
    assert not used["test"] & used["dev"]
    assert not used["train"] & (used["test"] | used["dev"])
    # the groups files' ids are each pair's chapter, line by line
    assert split.test_groups == [chapter[p] for p in split.test]
    assert split.dev_groups == [chapter[p] for p in split.dev]
    # every pair is accounted for: a split, the length cut, near duplicates, or unused
    assert split.unused_held_out > split.unused_held_out_inside > 0
    kept = len(split.train) + len(split.dev) + len(split.test)
    dropped = split.dropped_train_long + split.dropped_train_near_duplicate
    assert kept + dropped + split.unused_held_out == len(pairs)


def test_chapter_split_keeps_the_quotas():
    pairs, labels = chaptered_pairs()
    split = split_pairs(pairs, CHAPTERS, labels)
    test = np.bincount([length_bucket(len(s.split()), 10, 6) for s, _ in split.test], minlength=6)
    assert all(test >= CHAPTERS.test_min_per_bucket)
    assert len(split.test) == CHAPTERS.test_size  # distinct sources: quotas sum to test_size
    assert len(split.dev) == CHAPTERS.dev_size
    assert max(len(s.split()) for s, _ in split.dev) <= 30
    assert max(len(s.split()) for s, _ in split.train) <= 30


def test_near_duplicates_of_dev_and_test_leave_train():
    pairs, labels = chaptered_pairs()
    unfiltered = split_pairs(
        pairs, CHAPTERS.model_copy(update={"near_duplicate_jaccard": None}), labels
    )
    assert near_pairs(unfiltered.test, unfiltered.train), "fixture must plant cross-chapter leaks"
    assert unfiltered.dropped_train_near_duplicate == 0
    split = split_pairs(pairs, CHAPTERS, labels)
    assert split.dropped_train_near_duplicate > 0
    assert not near_pairs(split.test, split.train)
    assert not near_pairs(split.dev, split.train)
    assert (split.test, split.dev) == (unfiltered.test, unfiltered.dev)  # the filter: train only
    shares = near_duplicate_shares(unfiltered, CHAPTERS, 0.5)
    assert sum(shares.values()) > 0 and set(shares) == {
        "1-10",
        "11-20",
        "21-30",
        "31-40",
        "41-50",
        "51+",
    }
    assert not any(near_duplicate_shares(split, CHAPTERS, 0.5).values())


def test_chapter_split_is_deterministic_by_seed():
    pairs, labels = chaptered_pairs()
    first, second = split_pairs(pairs, CHAPTERS, labels), split_pairs(pairs, CHAPTERS, labels)
    assert first == second
    other = split_pairs(pairs, CHAPTERS.model_copy(update={"seed": 4}), labels)
    assert set(other.test_groups) != set(first.test_groups)


def test_sentence_grouping_without_chapters():
    pairs = synthetic_pairs(1500, seed=2)
    pairs += [(pairs[i][0], f"ALT {i}") for i in range(0, 1500, 3)]
    split = split_pairs(pairs, CONFIG)
    assert split.group_by == "sentence"
    ids = {}
    for (source, _), group in zip(
        split.test + split.dev, split.test_groups + split.dev_groups, strict=True
    ):
        assert ids.setdefault(source, group) == group  # one id per source sentence
    assert len(set(ids.values())) == len(ids) and all(g.isdigit() for g in ids.values())
    with pytest.raises(
        SplitError, match="fetch.split.group_by: 'chapter' needs a source with chapters"
    ):
        split_pairs(pairs, CONFIG.model_copy(update={"group_by": "chapter"}))
    # chapters known but grouping by sentence asked for: ids are sentence indices
    chaptered, labels = chaptered_pairs(chapters=60)
    by_sentence = split_pairs(
        chaptered, CHAPTERS.model_copy(update={"group_by": "sentence"}), labels
    )
    assert by_sentence.group_by == "sentence" and by_sentence.unused_held_out == 0


def test_impossible_quotas_name_the_key():
    pairs, labels = chaptered_pairs()
    greedy = CHAPTERS.model_copy(update={"test_min_per_bucket": 300, "test_size": 1800})
    with pytest.raises(
        SplitError, match=r"^fetch\.split\.test_min_per_bucket: the \d+ test chapters"
    ):
        split_pairs(pairs, greedy, labels)
    many_dev = CHAPTERS.model_copy(update={"dev_size": 1900})
    with pytest.raises(SplitError, match=r"^fetch\.split\.dev_size: "):
        split_pairs(pairs, many_dev, labels)


def test_cleaned_pairs_keep_their_chapters():
    raw = RawCorpus(
        pairs=[("a  b", "x"), ("a b", "x"), ("", "y"), ("c d", "z"), ("a b", "w")],
        description={},
        chapters=["1:1", "1:2", "1:2", "2:1", "2:2"],
    )
    cleaned = clean_pairs(raw.pairs, CleanConfig())
    assert cleaned.pairs == [("a b", "x"), ("c d", "z"), ("a b", "w")]
    assert clean_chapters(raw, cleaned) == ["1:1", "2:1", "2:2"]
    assert clean_chapters(RawCorpus(raw.pairs, {}), cleaned) is None


def test_fetch_writes_groups_and_the_near_duplicate_figure(tmp_path):
    pairs = synthetic_pairs(900, seed=5)
    pairs[10] = (pairs[20][0] + " extra", "EXTRA")  # a near duplicate of another source
    corpus = write_tsv(tmp_path / "corpus.tsv", pairs)
    config = FetchConfig(
        source="tsv",
        path=str(corpus),
        split=CONFIG.model_copy(
            update={"dev_size": 40, "test_size": 120, "test_min_per_bucket": 10}
        ),
    )
    summary = fetch(config, tmp_path / "raw")
    for name in ("dev", "test"):
        groups = read_groups(tmp_path / "raw" / f"{name}.groups")
        assert (
            len(groups)
            == summary["splits"][name]["pairs"]
            == len(read_tsv_pairs(tmp_path / "raw" / f"{name}.tsv"))
        )
    near = summary["near_duplicates"]
    assert (
        near["threshold"] == 0.5 and near["group_by"] == "sentence" and "chapters_only" not in near
    )
    assert (
        set(near["before"])
        == set(near["after"])
        == set(summary["all_clean"]["source_length_buckets"])
    )
    assert not any(near["after"].values())
    assert near["dropped_from_train"] == summary["counts"]["train_dropped_near_duplicate"]


def test_trigram_jaccard_and_the_inverted_index():
    assert jaccard("And the LORD said,", "and the Lord said.") == 1.0  # case, punctuation
    assert jaccard("a b c d", "a b c e") == pytest.approx(1 / 3)
    assert jaccard("Jesus wept.", "jesus wept") == 1.0  # short: the whole sentence
    assert jaccard("Jesus wept.", "Jesus wept there") == 0.0
    query_hit, corpus_hit = near_duplicates(
        ["a b c d e", "x y", "n o p"], ["a b c d f", "p q r", "X Y!"], 0.5
    )
    assert query_hit.tolist() == [True, True, False]  # 2 of 4 trigrams: exactly 0.5
    assert corpus_hit.tolist() == [True, False, True]
    assert not near_duplicates(["a b c d e"], ["a b c d f"], 0.51)[0].any()


# ------------------------------------------------------------- sentences decoded before
@pytest.mark.parametrize("grouped", [True, False])
def test_test_never_holds_a_sentence_decoded_before(grouped):
    """A second split that excludes the first one's test sentences draws a test set
    disjoint from it, still at its quotas; the excluded sentences of its test chapters
    train nowhere."""
    pairs, labels = chaptered_pairs()
    config = CHAPTERS if grouped else CHAPTERS.model_copy(update={"group_by": "sentence"})
    first = split_pairs(pairs, config, labels)
    decoded = frozenset(source for source, _ in first.test)
    second = split_pairs(pairs, config, labels, excluded=decoded)
    assert second.excluded_from_test == len(decoded)
    assert not decoded & {source for source, _ in second.test}
    assert len({source for source, _ in second.test}) == config.test_size
    test = np.bincount([length_bucket(len(s.split()), 10, 6) for s, _ in second.test], minlength=6)
    assert all(test >= config.test_min_per_bucket)
    if grouped:
        chapter = chapter_of(pairs, labels)
        held = {chapter[p] for p in second.test}
        assert not any(chapter[p] in held for p in second.train)
    assert split_pairs(pairs, config, labels) == first  # no exclusion: the same split


def test_the_exclusion_file_is_read_normalised_and_recorded(tmp_path, monkeypatch):
    from pipeline.data.fetch import read_excluded
    from pipeline.data.inputs import describe
    from pipeline.data.sources import CorpusError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "decoded.txt").write_text("# a comment\n\n  In the  beginning \nAmen.\n")
    assert read_excluded("decoded.txt") == {"In the beginning", "Amen."}
    assert read_excluded(None) == frozenset()
    corpus = write_tsv(tmp_path / "corpus.tsv", synthetic_pairs(50, seed=1))
    config = FetchConfig(
        source="tsv",
        path=str(corpus),
        split=CONFIG.model_copy(update={"exclude_from_test": "decoded.txt"}),
    )
    files = describe(config)["files"]
    assert (
        files["fetch.split.exclude_from_test"]["bytes"] == (tmp_path / "decoded.txt").stat().st_size
    )
    missing = config.model_copy(
        update={"split": config.split.model_copy(update={"exclude_from_test": "gone.txt"})}
    )
    for read in (lambda: read_excluded("gone.txt"), lambda: describe(missing)):
        with pytest.raises(
            CorpusError, match=r"^fetch\.split\.exclude_from_test: gone\.txt: no such"
        ):
            read()


def test_the_default_study_decodes_no_sentence_an_earlier_committed_study_did():
    """The committed list holds every test sentence of the fetch outputs dvc.lock's history
    locked (python -m tools.decoded_before rebuilt and hash-checked each), the default
    params exclude it, and its header names four locked outputs."""
    from tests.support import REPO_ROOT

    assert SplitConfig().exclude_from_test == "data/decoded_before.txt"
    text = (REPO_ROOT / "data" / "decoded_before.txt").read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("# ") and "data/raw" in line]
    sentences = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(header) >= 4 and len(sentences) == len(set(sentences)) > 5000
    assert f"# {len(sentences)} distinct sentences" in text
