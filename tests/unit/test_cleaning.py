from pipeline.config.params import CleanConfig
from pipeline.data.cleaning import clean_pairs, normalize


def test_normalize_whitespace_controls_and_nfkc():
    assert normalize("  a\tb\n c\u00a0d ") == "a b c d"
    assert normalize("ﬁne\x07") == "fine"


def test_each_rule_drops_and_counts():
    config = CleanConfig(min_words=2, max_words=6, min_length_ratio=0.5, max_length_ratio=2.0)
    pairs = [
        ("a b c", "x y z"),  # kept
        ("a b c", "x y z"),  # duplicate
        ("", "x y"),  # empty
        ("a", "x y"),  # too short
        ("a b c d e f g", "x y z"),  # too long
        ("a b c d", "x"),  # too short on the target side
        ("a b c d e f", "x y"),  # ratio 1/3
        ("a b", "v w x y z"),  # ratio 2.5
        ("a\tb  c", "x\ny z"),  # duplicate once whitespace is normalised
        ("b c", "y z"),  # kept
    ]
    result = clean_pairs(pairs, config)
    assert result.pairs == [("a b c", "x y z"), ("b c", "y z")]
    assert result.dropped == {
        "duplicate": 2,
        "empty": 1,
        "too_short": 2,
        "too_long": 1,
        "length_ratio": 2,
    }
