"""The time-to-quality benchmark's statistics (the benchmark itself is not a test)."""

from __future__ import annotations

from benchmarks.time_to_quality import time_to, trend_time_to


def _curve(values: list[float]) -> list[dict[str, float]]:
    return [{"minutes": float(i + 1), "dev_bleu": v} for i, v in enumerate(values)]


def test_first_crossing_takes_the_first_lucky_peak():
    curve = _curve([2.0, 9.0, 4.0, 6.0, 8.5, 10.0])
    assert time_to(curve, 8.0) == 2.0
    assert time_to(curve, 11.0) is None


def test_trend_pools_a_peak_with_the_lower_evaluations_after_it():
    curve = _curve([2.0, 9.0, 4.0, 6.0, 8.5, 10.0])
    # isotonic fit: 2, then (9 + 4 + 6) / 3 = 6.33 for minutes 2-4, then 8.5, 10
    assert trend_time_to(curve, 6.0) == 2.0
    assert trend_time_to(curve, 8.0) == 5.0
    assert time_to(curve, 8.0) == 2.0
    assert trend_time_to(curve, 11.0) is None


def test_trend_equals_first_crossing_on_a_rising_curve():
    curve = _curve([1.0, 3.0, 3.5, 7.0, 9.0])
    for target in (0.5, 3.0, 5.0, 9.0):
        assert trend_time_to(curve, target) == time_to(curve, target)
    assert trend_time_to([], 1.0) is None
