"""The bounded wait for a cluster too small for one trial or task."""

from __future__ import annotations

import logging

from pipeline.runtime.cluster import ResourceWatch, TaskResources


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_shortage_is_reported_once_it_lasts_the_bound_and_forgiven_when_it_ends(caplog):
    clock, shortage = Clock(), {"now": "CPU: 1 per trial, the cluster has 0"}
    watch = ResourceWatch(
        TaskResources(cpus=1),
        minutes=2,
        what="trial",
        clock=clock,
        probe=lambda resources: shortage["now"],
    )
    with caplog.at_level(logging.WARNING):
        assert watch.poll() is None  # the shortage starts: a warning, no verdict
        clock.now = 119
        assert watch.poll() is None
    assert len([r for r in caplog.records if "waiting at most 2 min" in r.getMessage()]) == 1
    clock.now = 121
    reason = watch.poll()
    assert reason.startswith("ray.pending_timeout_minutes: no trial could run for 2.0 min")
    assert "CPU: 1 per trial, the cluster has 0" in reason and "run the stage again" in reason
    shortage["now"] = None  # a node came back: the clock starts again at the next shortage
    assert watch.poll() is None
    shortage["now"] = "CPU: 1 per trial, the cluster has 0"
    clock.now = 200
    assert watch.poll() is None
    clock.now = 319
    assert watch.poll() is None
    clock.now = 321
    assert watch.poll() is not None
