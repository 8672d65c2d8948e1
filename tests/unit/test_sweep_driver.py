"""The sweep driver's own logic, without Ray: what an interrupted sweep says."""

import pytest


def test_interruption_names_unfinished_and_not_started_trials():
    """Ctrl-C while trials are still pending: Tune reports those without a config."""
    from types import SimpleNamespace as Result

    from pipeline.sweep.driver import FINAL, SweepInterruptedError, _raise_if_interrupted

    grid = [
        Result(config={"variant": "a"}, error=None, metrics={"step": 3}),
        Result(config=None, error=FileNotFoundError("no result.json"), metrics=None),
        Result(config={"variant": "b"}, error=None, metrics={FINAL: True}),
        Result(config={"variant": "c"}, error=RuntimeError("boom"), metrics={}),
    ]
    with pytest.raises(SweepInterruptedError, match=r"1 variants unfinished \(a\) and 1 not st"):
        _raise_if_interrupted(grid, Result(finished={"b"}))
    _raise_if_interrupted(grid[1:], Result(finished={"b"}))  # nothing interrupted: no error
