"""The report's answer states the updates the variants trained, never more than the
numbers show: capped variants are left out of the range, and the cap is named only
when every variant shares it."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from pipeline.report.findings import _updates, answer
from pipeline.study.record import BaselineRatio, Family, StudyRecord
from tests.support import study_record


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


def study(**changes) -> StudyRecord:
    """A study record without findings (what the answer and the design notes read)."""
    base = study_record(
        reference=None,
        reference_dev_bleu={},
        family=Family(5, "Bonferroni", 0.05, 0.99),
        power_from="",
        bootstrap="",
        findings={},
    )
    return replace(base, **changes)


def test_capped_variants_are_not_in_the_plateau_range():
    variants = table([3600, 4800, 9000], [9000] * 3)
    text = answer(study(excluded_from_confirmatory=("v2",)), variants)
    assert (
        "2 of 3 variants trained until the plateau rule stopped them, at 3,600-4,800 updates"
        in text
    )
    assert "1 stopped at the step cap" in text


def test_design_notes_state_the_family_and_the_baseline_against_the_paper():
    from pipeline.report.findings import design_notes

    ratio = BaselineRatio(0.42, 13.93 / 21.50, "none over additive")
    notes = design_notes(
        study(
            power_from="an earlier run",
            bootstrap="clusters (chapters) within length strata",
            baseline_ratio=ratio,
        )
    )
    assert "5 tests, each interval at 99.0% (Bonferroni)" in notes
    assert "A-priori power from an earlier run." in notes
    assert "42% of additive" in notes and "65% of RNNsearch-30" in notes
    plain = design_notes(study())  # no power source, bootstrap, baseline or lock named
    assert plain == (
        "Primary family: 5 tests, each interval at 99.0% (Bonferroni). "
        "This findings.json records no design lock."
    )


def test_design_notes_state_the_lock_and_whether_it_preceded_training():
    from pipeline.report.findings import design_notes, lock_provenance
    from pipeline.study.record import LockRecord

    lock = LockRecord(
        True, "a" * 64, "a" * 64, "c" * 40, False, "2025-01-01T00:00:00+00:00",
        "the commit time of cccc", "2025-03-01T12:00:00+00:00", True, (),
        "locked before training; every declaration unchanged since",
    )  # fmt: skip
    notes = design_notes(study(design_lock=lock))
    assert "Design aaaaaaaaaaaa locked at commit cccccccccccc; declared 2025-01-01" in notes
    assert "before training started (2025-03-01T12:00:00+00:00)" in notes
    shown = lock_provenance(study(design_lock=lock))
    assert shown["declared before training started"] == "yes"
    assert shown["hash (sha256 of the design's canonical JSON)"] == "a" * 64
    family = Family(4, "Bonferroni", 0.05, 1 - 0.05 / 4, 1, 0.99)
    notes = design_notes(study(family=family))
    assert "Left out of it as exploratory: 1 primary part(s), each interval at 99.0%" in notes
