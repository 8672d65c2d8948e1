"""The no-attention baseline's gates, measured: each declared :class:`~pipeline.study.
declarations.Gate` read on the test sentences inside the training lengths, with its 95%
interval over seeds and sentences (:class:`~pipeline.study.statistics.ContrastEstimator`).

- **uses its source**: none's mean test BLEU over its seeds; passes when the interval's
  lower end is above the declared floor.
- **reaches a share of attention**: none's BLEU over additive's, estimated as a contrast
  on log BLEU (``log none - log additive``) and exponentiated, so its interval is the
  ratio's; passes when the interval's lower end reaches the declared share.

A gate passes only when its measure is *shown* at the threshold: a baseline whose
interval reaches below it has not shown that it is off the floor. A gate that cannot be
measured (the grid lacks plateaued variants of none or additive) is "not measured" and,
like a failed one, leaves the claims that need it untested. The gates are judged once per
decoding, from that decoding's scores; they are preconditions, not tests of the family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.study.declarations import Gate, baseline_gates
from pipeline.study.record import GateRecord, finite
from pipeline.study.statistics import ALPHA, Contrast, ContrastEstimator, Term

PASS, FAIL, NOT_MEASURED = "pass", "fail", "not measured"


@dataclass(frozen=True)
class GateResult:
    """One gate as measured: its declaration, the measure with its interval (``None``
    where it was not measured), the interval's level and the result."""

    gate: Gate
    estimate: float | None
    low: float | None
    high: float | None
    level: float
    result: str  # PASS | FAIL | NOT_MEASURED
    why: str = ""  # why it was not measured

    @property
    def passed(self) -> bool:
        return self.result == PASS

    def describe(self) -> str:
        """ "baseline reaches a share of attention: 0.300 [0.270, 0.330] at 95%, declared
        at least 0.324: fail"."""
        declared = _value(self.gate, self.gate.threshold)
        if self.estimate is None:
            return f"{self.gate.name}: not measured ({self.why}), declared at least {declared}"
        measured = (
            f"{_value(self.gate, self.estimate)} [{_value(self.gate, self.low)}, "
            f"{_value(self.gate, self.high)}] at {self.level:.0%}"
        )
        return f"{self.gate.name}: {measured}, declared at least {declared}: {self.result}"

    def record(self) -> GateRecord:
        """The gate as ``eval/findings.json`` holds it."""
        return GateRecord(
            name=self.gate.name,
            what=self.gate.what,
            unit="BLEU" if self.gate.measure == "bleu" else "share",
            threshold=self.gate.threshold,
            source=self.gate.source,
            estimate=finite(self.estimate),
            low=finite(self.low),
            high=finite(self.high),
            level=self.level,
            result=self.result,
        )


def _value(gate: Gate, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} BLEU" if gate.measure == "bleu" else f"{value:.3f}"


def measure_gates(
    estimator: ContrastEstimator,
    grid,
    train_cut: int | None = 30,
    subset: str = "inside",
    alpha: float = ALPHA,
) -> dict[str, GateResult]:
    """Every declared gate (:func:`~pipeline.study.declarations.baseline_gates`), by
    name, measured on ``subset`` for the grid's baseline (none, source forward, the
    findings' hidden size) and additive attention, plateaued variants only."""
    none, additive = grid.systems("none"), grid.systems("additive")
    results = {}
    for name, gate in baseline_gates(train_cut).items():
        needed = {"none": none} if gate.measure == "bleu" else {"none": none, "additive": additive}
        missing = [scorer for scorer, systems in needed.items() if not systems]
        if missing or subset not in estimator.subsets or not len(estimator.subsets[subset]):
            why = (
                f"the grid has no plateaued variant of {', '.join(missing)}"
                if missing
                else f"the test set has no sentences {subset}"
            )
            results[name] = GateResult(gate, None, None, None, 1 - alpha, NOT_MEASURED, why)
            continue
        if gate.measure == "bleu":
            e = estimator.estimate(Contrast("none", (Term(1, none, subset),)), alpha)
            low, estimate, high = e.low, e.estimate, e.high
        else:
            terms = (Term(1, none, subset), Term(-1, additive, subset))
            e = estimator.estimate(Contrast("none / additive", terms, "log_bleu"), alpha)
            low, estimate, high = (math.exp(v) for v in (e.low, e.estimate, e.high))
        result = PASS if low >= gate.threshold else FAIL
        results[name] = GateResult(gate, estimate, low, high, 1 - alpha, result)
    return results
