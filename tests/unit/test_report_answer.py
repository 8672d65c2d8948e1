"""The report's answer states the updates the variants trained, never more than the
numbers show: capped variants are left out of the range, and the cap is named only
when every variant shares it."""

from __future__ import annotations

import json

import pandas as pd

from pipeline.report.findings import _updates, answer


def table(steps: list[int], caps: list[int]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant": [f"v{i}" for i in range(len(steps))],
            "status": "finished",
            "evaluated": True,
            "steps": steps,
            "config": [json.dumps({"max_steps": cap}) for cap in caps],
        }
    )


def test_the_range_of_updates_and_the_shared_cap():
    assert _updates(table([3600, 5400, 4200], [9000] * 3)) == ", at 3,600-5,400 updates (cap 9,000)"
    assert _updates(table([4200], [9000])) == ", at 4,200 updates (cap 9,000)"


def test_no_cap_is_named_when_variants_differ_or_have_none():
    assert _updates(table([3600, 5400], [9000, 6000])) == ", at 3,600-5,400 updates"
    assert _updates(table([3600], [0])) == ", at 3,600 updates"
    assert _updates(table([], [])) == ""


def test_capped_variants_are_not_in_the_plateau_range():
    variants = table([3600, 4800, 9000], [9000] * 3)
    study = {"excluded_from_confirmatory": ["v2"], "findings": {}, "main_decoding": "beam"}
    text = answer(study, pd.DataFrame(), variants)
    assert (
        "2 of 3 variants trained until the plateau rule stopped them, at 3,600-4,800 updates"
        in text
    )
    assert "1 stopped at the step cap" in text


def test_design_notes_state_the_family_and_the_baseline_against_the_paper():
    from pipeline.report.findings import design_notes

    study = {
        "family": {"size": 5, "interval_level": 0.99, "correction": "Bonferroni"},
        "power_from": "an earlier run",
        "bootstrap": "clusters (chapters) within length strata",
        "baseline_ratio": {"measured": 0.42, "paper": 13.93 / 21.50},
    }
    notes = design_notes(study)
    assert "5 tests, each interval at 99.0% (Bonferroni)" in notes
    assert "42% of additive" in notes and "65% of RNNsearch-30" in notes
    assert design_notes({}) == ""
