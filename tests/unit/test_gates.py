"""The no-attention baseline's gates, declared before the run: a claim about how the
baseline behaves (Length, Reversal) is not testable with a baseline at the floor, whatever
its interval; Attention keeps its direction, but its size is not compared with the
paper's. The gates' values and results reach ``eval/findings.json``."""

from __future__ import annotations

import json

import pytest

from pipeline.study.declarations import (
    GATES,
    PAPER_BASELINE_RATIO,
    REACHES_SHARE,
    USES_SOURCE,
    baseline_gates,
)
from pipeline.study.labels import DIRECTION, NOT_TESTABLE, SIZE_VERDICTS
from pipeline.study.record import FindingRecord
from tests.unit.test_findings_rules import _study, good


def floor(none: float):
    """``good`` with the baseline at ``none`` inside the training lengths (half of it
    beyond), reversal still helping it by 6 and attention at 20."""

    def quality(scorer, reverse, bucket, hidden=256):
        value = good(scorer, reverse, bucket)
        if scorer != "none":
            return value
        beyond = bucket not in ("1-10", "11-20", "21-30")
        return (none + (6.0 if reverse else 0.0)) * (0.5 if beyond else 1.0)

    return quality


def test_the_gates_and_their_thresholds_are_declared_with_their_sources():
    gates = baseline_gates(30)
    share = gates[REACHES_SHARE]
    assert share.threshold == pytest.approx(0.5 * PAPER_BASELINE_RATIO, abs=1e-3)  # 0.324
    assert "13.93 / 21.50" in share.source
    assert "shuffled sources" in gates[USES_SOURCE].source  # no control in the grid
    assert baseline_gates(50)[REACHES_SHARE].threshold == pytest.approx(0.333, abs=1e-3)
    assert GATES["Length"].applies == GATES["Reversal"].applies == "claim"
    assert GATES["Attention"].applies == "size"
    assert "Scorer" not in GATES and "Hidden size" not in GATES


def test_a_working_baseline_passes_and_every_claim_is_judged():
    findings, _ = _study(good)  # none at 10 of additive's 20: a share of 0.5
    gates = {g.gate.name: g for g in findings["Length"].gates}
    assert {g.result for g in gates.values()} == {"pass"}
    assert gates[REACHES_SHARE].estimate == pytest.approx(0.5, abs=0.02)
    assert gates[REACHES_SHARE].low >= gates[REACHES_SHARE].gate.threshold
    assert findings["Length"].verdict in SIZE_VERDICTS
    assert findings["Reversal"].verdict in SIZE_VERDICTS


def test_a_baseline_below_the_share_makes_its_claims_not_testable():
    findings, _ = _study(floor(4.0))  # 4 of 20: a share of 0.2, above the BLEU floor
    for title in ("Length", "Reversal"):
        finding = findings[title]
        gates = {g.gate.name: g.result for g in finding.gates}
        assert gates == {USES_SOURCE: "pass", REACHES_SHARE: "fail"}
        assert finding.verdict == NOT_TESTABLE
        assert finding.label == "not testable (the baseline is at the floor)"
        assert "0.2" in finding.why and "declared at least 0.324" in finding.why
        assert finding.main.estimate is not None  # the numbers are still shown
    attention = findings["Attention"]  # +16: the direction is shown, its size not compared
    assert attention.verdict == DIRECTION
    assert "the baseline is at the floor" in attention.label
    assert "As a ratio only" in attention.answer
    # the Scorer finding needs no gate
    assert findings["Scorer"].verdict == "equivalent" and not findings["Scorer"].gates


def test_a_baseline_that_does_not_use_its_source_fails_the_floor():
    findings, _ = _study(floor(1.0))
    gates = {g.gate.name: g for g in findings["Reversal"].gates}
    assert gates[USES_SOURCE].result == "fail"
    assert gates[USES_SOURCE].high < gates[USES_SOURCE].gate.threshold
    assert findings["Reversal"].verdict == NOT_TESTABLE


def test_no_gated_claim_reads_as_a_size_verdict_while_its_gate_fails():
    for none in (1.0, 4.0, 10.0):
        findings, _ = _study(floor(none))
        for finding in findings.values():
            if finding.failed_gates():
                assert finding.verdict not in SIZE_VERDICTS


def test_the_gates_reach_the_record_with_their_values_and_result():
    findings, _ = _study(floor(4.0))
    record = findings["Length"].record()
    data = json.loads(json.dumps(record.to_json()))
    assert FindingRecord.from_json(data) == record
    share = next(g for g in record.gates if g.name == REACHES_SHARE)
    assert share.result == "fail" and share.unit == "share"
    assert share.threshold == pytest.approx(0.324) and share.low < share.threshold
    assert share.level == pytest.approx(0.95)
    assert record.gated == "claim"
