"""The time-to-quality benchmark's statistics and time budget (the benchmark itself is not a
test)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from benchmarks.time_to_quality import (
    TimeBudget,
    _run_pair,
    crossing_bracket,
    render,
    speedup,
    summarize,
    time_to,
    trend_time_to,
)
from pipeline.config.grid import Variant
from pipeline.config.params import TrainConfig
from pipeline.train.trainer import train_variant


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


def test_speedup_brackets_the_true_crossings():
    peer = _curve([1.0, 5.0, 7.0, 9.0])  # reaches 8 at minute 4, after 3
    ours = [
        {"minutes": m, "dev_bleu": b} for m, b in [(0.5, 6.0), (1.0, 8.5), (1.5, 7.0), (2.0, 9.0)]
    ]
    ratio = speedup(peer, ours, 8.0)
    assert ratio["at_points"] == 4.0
    assert (ratio["low"], ratio["high"]) == (3.0, 8.0)
    assert ratio["trend"] == 2.0  # ours' 8.5 pools with the 7.0 after it (7.75): 8 at 2.0
    assert crossing_bracket(ours, 6.0) == (0.0, 0.5)
    assert speedup(peer, ours, 9.5) is None
    assert speedup(peer, ours, 6.0)["high"] == float("inf")


def test_the_time_budget_ends_training_with_one_final_evaluation(
    tiny_tok_dir, tiny_model_config, tmp_path
):
    """A spent budget stops training after the current step (the trainer's stop), then the
    trainer evaluates once more; the run counts as stopped by time, not plateaued."""
    model = tiny_model_config(scorer="dot", dropout=0.0)
    config = TrainConfig(batch_tokens=60, max_epochs=5, eval_every_steps=0, dev_bleu_sentences=4)
    variant = Variant("dot-fwd-h32-s1", model, config, {"scorer": "dot"})
    result = train_variant(variant, tiny_tok_dir, tmp_path, callbacks=[TimeBudget(0.0)])
    summary = result.summary
    assert (summary.steps, summary.stop_reason, summary.plateaued) == (1, "time_limit", False)
    assert [row.step for row in result.history] == [1]


class _Trainer:
    def __init__(self, step_seconds: float):
        self.progress = SimpleNamespace(total=SimpleNamespace(seconds=step_seconds))
        self.stopped: str | None = None

    def stop(self, reason: str) -> None:
        self.stopped = reason


def test_the_time_budget_counts_on_the_trainers_clock():
    """Before the first evaluation the clock starts at the first step's start; each
    evaluation's wall time (evaluations included) then sets it."""
    budget, trainer = TimeBudget(10.0), _Trainer(step_seconds=9.0)
    budget.on_step(trainer, 1)
    assert trainer.stopped is None  # 9 s of 10 spent
    budget.on_evaluation(trainer, {"wall_time": 10.5})
    budget.on_step(trainer, 2)
    assert trainer.stopped == "time_limit"
    late = _Trainer(step_seconds=11.0)
    TimeBudget(10.0).on_step(late, 1)
    assert late.stopped == "time_limit"


def test_a_failed_run_is_recorded_and_its_partner_kept(tmp_path):
    """A run without a curve (here the peer, exiting at once) is reported with its error;
    the run beside it keeps its curve, and the table shows both."""
    row = {"wall_time": 90.0, "epoch": 1, "step": 250, "dev_bleu": 18.5, "tokens_per_s": 6000.0}
    ours = {
        "name": "additive-defaults",
        "kind": "ours",
        "command": [sys.executable, "-c", f"print({json.dumps(json.dumps({'row': row}))})"],
    }
    peer = {
        "name": "joeynmt",
        "kind": "peer",
        "out": tmp_path / "joeynmt",
        "command": [sys.executable, "-c", "import sys; sys.exit('data/raw/train.tsv: missing')"],
    }
    _run_pair([ours, peer])
    assert ours["curve"] == [
        {"minutes": 1.5, "epoch": 1, "step": 250, "dev_bleu": 18.5, "tokens_per_s": 6000.0}
    ]
    assert "error" not in ours
    assert peer["curve"] == [] and "data/raw/train.tsv: missing" in peer["error"]
    runs = [ours, peer]
    summarize(runs, {"additive": 17.82, "none": 2.33})
    assert ours["minutes_to_target"] == 1.5 and "peer_speedup_bleu8" not in ours
    table = render(
        {"date": "d", "cpu": "c", "minutes_per_run": 1, "other_load_before": 0.0, "runs": runs}
    )
    assert "| additive-defaults | 17.82 | 1.5 |" in table
    assert "| joeynmt | failed: no dev evaluation (exit 1): data/raw/train.tsv: missing" in table
