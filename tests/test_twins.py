import pytest

from pipeline.twins import group_without, twins


def _variant(scorer, reverse=False, hidden=256, seed=1, lr=0.002):
    return {
        "model": {"scorer": scorer, "reverse_source": reverse, "hidden_size": hidden},
        "train": {"seed": seed, "learning_rate": lr},
    }


VARIANTS = {
    "none-fwd-s1": _variant("none"),
    "none-fwd-s2": _variant("none", seed=2),
    "none-rev-s1": _variant("none", reverse=True),
    "additive-fwd-s1": _variant("additive"),
    "additive-fwd-s2": _variant("additive", seed=2),
    "additive-fwd-s1-lr": _variant("additive", lr=0.001),  # no none twin at this lr
    "general-fwd-s1": _variant("general"),
    "additive-rev-h128": _variant("additive", reverse=True, hidden=128),  # no twin at all
}


def test_twins_match_every_other_setting_seed_and_extra_axes():
    assert twins(VARIANTS, "scorer", "none") == [
        ("additive-fwd-s1", "none-fwd-s1"),
        ("additive-fwd-s2", "none-fwd-s2"),  # the seed-2 twin, not the first none row
        ("general-fwd-s1", "none-fwd-s1"),
    ]
    assert twins(VARIANTS, "reverse_source", False) == [("none-rev-s1", "none-fwd-s1")]
    assert twins(VARIANTS, "scorer", "general", "additive") == [
        ("additive-fwd-s1", "general-fwd-s1")
    ]
    only_general = twins(VARIANTS, "scorer", "additive", lambda s: s == "general")
    assert only_general == [("general-fwd-s1", "additive-fwd-s1")]
    assert twins(VARIANTS, "seed", 1) == [
        ("none-fwd-s2", "none-fwd-s1"),
        ("additive-fwd-s2", "additive-fwd-s1"),
    ]


def test_unknown_axis_and_groups_of_seeds():
    with pytest.raises(KeyError, match="colour"):
        twins(VARIANTS, "colour", 1)
    groups = group_without(VARIANTS, "seed")
    assert groups["none-fwd-s1"] == ["none-fwd-s1", "none-fwd-s2"]
    assert groups["additive-fwd-s1"] == ["additive-fwd-s1", "additive-fwd-s2"]
    assert groups["additive-rev-h128"] == ["additive-rev-h128"]
    assert sum(len(ids) for ids in groups.values()) == len(VARIANTS)
