"""train_variant on a tiny real tokenized corpus: outputs, determinism, resume, stops."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from pipeline.config.grid import Variant
from pipeline.data.dataset import TokenizedData
from pipeline.kernels import native
from pipeline.models.checkpoint import VocabInfo, load_checkpoint
from pipeline.models.seq2seq import Seq2Seq
from pipeline.records.train import HISTORY_FIELDS, HistoryRow
from pipeline.train import dev as training_dev
from pipeline.train import state as training_state
from pipeline.train import trainer as training
from pipeline.train.callbacks import OnEvaluation, OnStep, TrainCallback
from pipeline.train.stopping import Plateau, TrainingDivergedError
from pipeline.train.trainer import train_variant
from tests.support import InterruptAtEpoch, Interrupted


def _weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def _rows(history: tuple[HistoryRow, ...]) -> list[dict]:
    return [row.to_json() for row in history]


def _same_history(first: tuple[HistoryRow, ...], second: tuple[HistoryRow, ...]) -> None:
    timing = {"tokens_per_s", "wall_time"}
    strip = [
        [{k: v for k, v in row.items() if k not in timing} for row in _rows(h)]
        for h in (first, second)
    ]
    assert strip[0] == strip[1]


def _same_weights(first, second) -> None:
    a, b = _weights(first), _weights(second)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_outputs_and_result(make_variant, tiny_tok_dir, tmp_path):
    rows = []
    trained = train_variant(
        make_variant(), tiny_tok_dir, tmp_path, callbacks=[OnEvaluation(rows.append)]
    )
    result = trained.summary
    assert result.stop_reason == "max_epochs" and result.epochs_run == 3
    assert [row["epoch"] for row in rows] == [1, 2, 3] and _rows(trained.history) == rows
    assert rows[-1]["dev_loss"] < rows[0]["dev_loss"]  # it learns
    assert result.best_dev_loss == min(row["dev_loss"] for row in rows)
    assert result.best_epoch == 1 + [r["dev_loss"] for r in rows].index(result.best_dev_loss)
    assert result.steps == rows[-1]["step"] > 0 and result.tokens_per_s > 0
    assert result.parameter_count > 0 and result.wall_time_s > 0
    with open(tmp_path / "history.csv") as handle:
        history = list(csv.DictReader(handle))
    assert tuple(history[0]) == HISTORY_FIELDS and len(history) == 3
    assert float(history[1]["dev_loss"]) == pytest.approx(rows[1]["dev_loss"])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["variant"] == result.variant_id and config["params"]["model.scorer"] == "additive"
    loaded = load_checkpoint(
        tmp_path / "checkpoint.pt",
        expected_vocab=VocabInfo.from_data(TokenizedData.load(tiny_tok_dir)),
    )
    assert loaded.extra["epoch"] == result.best_epoch and loaded.variant_id == result.variant_id
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.pt",
        "config.json",
        "history.csv",
        "last.pt",
    ]


def test_same_seed_gives_identical_history_and_weights(make_variant, tiny_tok_dir, tmp_path):
    variant = make_variant("location", max_epochs=2)
    first = train_variant(variant, tiny_tok_dir, tmp_path / "a")
    second = train_variant(variant, tiny_tok_dir, tmp_path / "b")
    _same_history(first.history, second.history)
    _same_weights(tmp_path / "a" / "checkpoint.pt", tmp_path / "b" / "checkpoint.pt")
    other = train_variant(
        make_variant("location", max_epochs=2, seed=2), tiny_tok_dir, tmp_path / "c"
    )
    assert other.history[0].train_loss != first.history[0].train_loss


@pytest.mark.parametrize("eval_every_steps", [0, 3])
def test_resume_after_interruption_matches_uninterrupted_run(
    make_variant, tiny_tok_dir, tmp_path, eval_every_steps
):
    variant = make_variant("general", eval_every_steps=eval_every_steps, lr_patience=0)
    reference = train_variant(variant, tiny_tok_dir, tmp_path / "reference")
    crash = InterruptAtEpoch(2)  # at the first row of epoch 2: mid-epoch with eval_every_steps
    with pytest.raises(Interrupted):
        train_variant(variant, tiny_tok_dir, tmp_path / "run", callbacks=[crash])
    seen = crash.seen
    assert seen[-1]["end_of_epoch"] == (eval_every_steps == 0)
    rows = []
    resumed = train_variant(
        variant, tiny_tok_dir, tmp_path / "run", callbacks=[OnEvaluation(rows.append)]
    )
    assert resumed.summary.resumed_at_step == seen[-1]["step"]
    # only the missing evaluations were run
    assert [r["step"] for r in rows] == [r.step for r in reference.history[len(seen) :]]
    _same_history(resumed.history, reference.history)
    assert resumed.summary.steps == reference.summary.steps
    assert resumed.summary.best_epoch == reference.summary.best_epoch
    for name in ("checkpoint.pt", "last.pt"):
        reference_state = torch.load(tmp_path / "reference" / name, weights_only=True)
        resumed_state = torch.load(tmp_path / "run" / name, weights_only=True)
        key = "state_dict" if name == "checkpoint.pt" else "model"
        for parameter in reference_state[key]:
            assert torch.equal(reference_state[key][parameter], resumed_state[key][parameter])
    assert resumed_state["scheduler"] == reference_state["scheduler"]
    assert resumed_state["plateau"] == reference_state["plateau"]
    # a finished run resumes to the same result without training again
    count = len(rows)
    again = train_variant(
        variant, tiny_tok_dir, tmp_path / "run", callbacks=[OnEvaluation(rows.append)]
    )
    assert len(rows) == count and again.summary.steps == resumed.summary.steps


def test_resume_state_of_an_older_format_is_ignored(make_variant, tiny_tok_dir, tmp_path, caplog):
    variant = make_variant("dot", max_epochs=1)
    first = train_variant(variant, tiny_tok_dir, tmp_path)
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    torch.save({**state, "format": training_state.LAST_FORMAT - 1}, tmp_path / "last.pt")
    again = train_variant(variant, tiny_tok_dir, tmp_path).summary
    assert again.resumed_at_step == 0 and again.steps == first.summary.steps
    assert "starting dot-rev-h32-s1 afresh" in caplog.text


def test_resume_false_starts_over(make_variant, tiny_tok_dir, tmp_path):
    variant = make_variant("dot", max_epochs=1)
    first = train_variant(variant, tiny_tok_dir, tmp_path)
    again = train_variant(variant, tiny_tok_dir, tmp_path, resume=False)
    assert again.summary.steps == first.summary.steps and len(again.history) == 1


def test_nan_loss_raises_and_writes_no_checkpoint(
    make_variant, tiny_tok_dir, tmp_path, monkeypatch
):
    original = Seq2Seq.loss

    def nan_after_two_steps(self, batch, label_smoothing=0.0):
        total, tokens = original(self, batch, label_smoothing)
        nan_after_two_steps.calls += 1
        return (total * math.nan if nan_after_two_steps.calls > 2 else total), tokens

    nan_after_two_steps.calls = 0
    monkeypatch.setattr(Seq2Seq, "loss", nan_after_two_steps)
    with pytest.raises(
        TrainingDivergedError, match=r"variant none-rev-h32-s1: loss is nan at epoch 1 step 3"
    ):
        train_variant(make_variant("none"), tiny_tok_dir, tmp_path)
    assert not (tmp_path / "checkpoint.pt").exists() and not (tmp_path / "last.pt").exists()


def test_nan_gradient_raises(make_variant, tiny_tok_dir, tmp_path, monkeypatch):
    original = Seq2Seq.loss

    def finite_loss_nan_gradient(self, batch, label_smoothing=0.0):
        total, tokens = original(self, batch, label_smoothing)
        weight = self.generator.weight
        return total + torch.sqrt(weight.sum() * 0.0), tokens  # value + 0, gradient 0 * inf

    monkeypatch.setattr(Seq2Seq, "loss", finite_loss_nan_gradient)
    with pytest.raises(
        TrainingDivergedError, match="dot-rev-h32-s1: gradient norm is nan at epoch 1 step 1"
    ):
        train_variant(make_variant("dot"), tiny_tok_dir, tmp_path)
    assert not (tmp_path / "checkpoint.pt").exists()


def test_step_budget_stops_cleanly(make_variant, tiny_tok_dir, tmp_path):
    result = train_variant(make_variant("scaled_dot", max_steps=3), tiny_tok_dir, tmp_path)
    assert result.summary.stop_reason == "max_steps" and result.summary.steps == 3
    assert len(result.history) == 1 and result.history[0].step == 3
    assert load_checkpoint(tmp_path / "checkpoint.pt").extra["step"] == 3


def test_result_names_the_energy_implementation_that_trained(
    make_variant, tiny_tok_dir, tmp_path, monkeypatch
):
    """The compiled kernel where it builds (as on CI), the torch blocks when switched off,
    and nothing for scorers that have no additive energy."""
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    built = train_variant(make_variant(max_steps=2), tiny_tok_dir, tmp_path / "on")
    assert built.summary.energy_kernel == "native"
    monkeypatch.setenv(native.ENV_SWITCH, "off")
    fallback = train_variant(make_variant(max_steps=2), tiny_tok_dir, tmp_path / "off")
    assert fallback.summary.energy_kernel == "torch"
    other = train_variant(make_variant("dot", max_steps=2), tiny_tok_dir, tmp_path / "dot")
    assert other.summary.energy_kernel == "unused"


def test_safety_time_limit_fails_the_variant(make_variant, tiny_tok_dir, tmp_path):
    """The study's wall-clock limit is a safety net: past it the variant fails (its steps
    are never a budget), with a message naming the variant and the infra key."""
    from pipeline.sweep.trial import SafetyTimeout, TrainingTimeoutError

    limit = SafetyTimeout("additive-rev-h32-s1", minutes=1e-9)
    with pytest.raises(TrainingTimeoutError, match="additive-rev-h32-s1: .*safety"):
        train_variant(make_variant(), tiny_tok_dir, tmp_path, callbacks=[limit])


def test_a_callback_stops_training_with_its_own_reason(make_variant, tiny_tok_dir, tmp_path):
    """A callback's budget (a benchmark's time limit) ends training after the step it
    stops at, with one final evaluation and its own stop reason, not plateaued."""

    class StopAtThree(TrainCallback):
        def on_step(self, trainer, step):
            if step == 3:
                trainer.stop("time_limit")

    stopper = StopAtThree()
    result = train_variant(make_variant(), tiny_tok_dir, tmp_path, callbacks=[stopper])
    summary = result.summary
    assert summary.stop_reason == "time_limit" and summary.steps == 3 and not summary.plateaued
    assert result.history[-1].step == 3 and (tmp_path / "checkpoint.pt").exists()


def test_a_slow_machine_trains_the_same_steps_and_weights(make_variant, tiny_tok_dir, tmp_path):
    """Budgets count steps and evaluations: a trial slowed down on purpose (a sleep after
    every step) stops at the same step, by the same rule, with the same weights."""
    import time

    variant = make_variant(
        "general", max_epochs=50, eval_every_steps=2, patience=2, min_delta=0.05, max_steps=40
    )
    slept = []

    def slow_down(step: int) -> None:
        time.sleep(0.02)
        slept.append(step)

    fast = train_variant(variant, tiny_tok_dir, tmp_path / "fast")
    slow = train_variant(variant, tiny_tok_dir, tmp_path / "slow", callbacks=[OnStep(slow_down)])
    assert slept == list(range(1, slow.summary.steps + 1))  # every step of the slow run slept
    stops = [(run.summary.steps, run.summary.stop_reason) for run in (slow, fast)]
    assert stops[0] == stops[1]
    _same_history(fast.history, slow.history)
    _same_weights(tmp_path / "fast" / "checkpoint.pt", tmp_path / "slow" / "checkpoint.pt")


def test_learning_rate_floor_counts_as_a_plateau(make_variant, tiny_tok_dir, tmp_path, monkeypatch):
    """min_learning_rate: once the decays take the rate below it, the variant has
    plateaued, before ``patience`` runs out."""
    losses = iter([2.0, 1.0, 1.5, 1.4, 1.3, 1.2, 1.1, 0.5])
    monkeypatch.setattr(training_dev, "dev_loss", lambda *args, **kwargs: next(losses))
    variant = make_variant(
        max_epochs=10, patience=5, lr_patience=0, lr_decay=0.5, min_learning_rate=0.003
    )
    result = train_variant(variant, tiny_tok_dir, tmp_path).summary
    # lr 0.01 -> 0.005 (epoch 3 bad) -> 0.0025 (epoch 4 bad) < 0.003: stop after epoch 4
    assert result.stop_reason == "early_stopping" and result.plateaued
    assert result.epochs_run == 4 and result.best_epoch == 2


def test_plateau_decays_learning_rate_then_stops_early(
    make_variant, tiny_tok_dir, tmp_path, monkeypatch
):
    losses = iter([2.0, 1.0, 1.5, 1.4, 1.2, 1.1, 0.5])
    monkeypatch.setattr(training_dev, "dev_loss", lambda *args, **kwargs: next(losses))
    variant = make_variant(max_epochs=10, patience=3, lr_patience=1, lr_decay=0.5)
    result = train_variant(variant, tiny_tok_dir, tmp_path)
    summary = result.summary
    assert summary.stop_reason == "early_stopping" and summary.epochs_run == 5
    assert summary.best_epoch == 2 and summary.best_dev_loss == 1.0
    # epochs 3, 4 bad -> decay after epoch 4 (lr_patience 1); epoch 5 bad -> stop (patience 3)
    assert [row.learning_rate for row in result.history] == [0.01, 0.01, 0.01, 0.01, 0.005]


def test_plateau_counts_only_improvements_above_min_delta():
    plateau = Plateau(patience=2, min_delta=0.5, mode="max")
    assert plateau.update(10.0) and plateau.bad == 0  # the first value sets the baseline
    assert not plateau.update(10.4) and plateau.bad == 1 and plateau.best == 10.0
    assert not plateau.update(10.5) and plateau.bad == 2  # not *more than* min_delta
    assert plateau.exhausted
    assert plateau.update(10.6) and plateau.bad == 0 and not plateau.exhausted


def test_plateau_is_exhausted_after_patience_bad_evaluations():
    plateau = Plateau(patience=3)
    plateau.update(1.0)
    for bad in (1, 2, 3):
        assert not plateau.exhausted
        assert not plateau.update(1.0) and plateau.bad == bad  # equal is no improvement
    assert plateau.exhausted
    restored = Plateau(patience=3)
    restored.load_state_dict(plateau.state_dict())
    assert restored.exhausted and restored.best == 1.0


@pytest.mark.parametrize(
    ("mode", "values", "improved"),
    [
        ("max", [1.0, 2.0, 1.5, 2.5], [True, True, False, True]),
        ("min", [1.0, 2.0, 0.5, 0.7], [True, False, True, False]),
    ],
)
def test_plateau_mode(mode, values, improved):
    plateau = Plateau(patience=5, mode=mode)
    assert [plateau.update(v) for v in values] == improved


@pytest.mark.parametrize(
    ("train", "learning_rates"),
    [  # values: 1 improves, 2 improves, 2 bad, 2.05 bad (min_delta 0.1), 3 improves, 3 bad
        ({"lr_patience": 0}, [0.01, 0.01, 0.005, 0.0025, 0.0025, 0.00125]),
        ({"lr_patience": 1}, [0.01, 0.01, 0.01, 0.005, 0.005, 0.005]),
        ({"lr_patience": 0, "lr_decay": 1.0}, [0.01] * 6),
    ],
)
def test_learning_rate_decays_after_evaluations_without_improvement(
    make_variant, tiny_tok_dir, tmp_path, train, learning_rates
):
    variant = make_variant(min_delta=0.1, patience=10, **train)
    trainer = training.Trainer(variant, TokenizedData.load(tiny_tok_dir), tmp_path, (), "cpu")
    seen = []
    for value in (1.0, 2.0, 2.0, 2.05, 3.0, 3.0):  # the early-stopping metric, higher is better
        trainer._after_evaluation(value, end_of_epoch=False)
        seen.append(trainer.optimizer.param_groups[0]["lr"])
    assert seen == pytest.approx(learning_rates)
    assert trainer.plateau.bad == 1 and not trainer.progress.stop_reason


def test_history_has_a_row_per_evaluation(make_variant, tiny_tok_dir, tmp_path, monkeypatch):
    losses = iter([2.0, 1.0, 1.5, 0.9, 0.8, 0.7])
    monkeypatch.setattr(training_dev, "dev_loss", lambda *args, **kwargs: next(losses))
    rows = []
    variant = make_variant(max_epochs=2, eval_every_steps=2, lr_patience=0)
    trained = train_variant(variant, tiny_tok_dir, tmp_path, callbacks=[OnEvaluation(rows.append)])
    result = trained.summary
    # 5 batches per epoch: steps 2, 4, 5 (epoch end), 6, 8, 10 (epoch end)
    assert [r["step"] for r in rows] == [2, 4, 5, 6, 8, 10] and _rows(trained.history) == rows
    assert [r["epoch"] for r in rows] == [1, 1, 1, 2, 2, 2] and result.epochs_run == 2
    assert [r["epochs"] for r in rows] == [0.4, 0.8, 1.0, 1.2, 1.6, 2.0]
    assert [r["end_of_epoch"] for r in rows] == [0, 0, 1, 0, 0, 1]
    # lr_patience 0: the third evaluation did not improve, so the steps after it use half
    assert [r["learning_rate"] for r in rows] == [0.01, 0.01, 0.01, 0.005, 0.005, 0.005]
    assert result.evaluations == 6 and result.stop_reason == "max_epochs"
    assert not result.plateaued and result.best_step == 10
    with open(tmp_path / "history.csv") as handle:
        history = list(csv.DictReader(handle))
    assert [float(r["epochs"]) for r in history] == [r["epochs"] for r in rows]
    assert [int(r["end_of_epoch"]) for r in history] == [0, 0, 1, 0, 0, 1]


def test_early_stopping_counts_evaluations_and_min_delta(
    make_variant, tiny_tok_dir, tmp_path, monkeypatch
):
    losses = iter([2.0, 1.999, 1.998, 1.0])
    monkeypatch.setattr(training_dev, "dev_loss", lambda *args, **kwargs: next(losses))
    variant = make_variant(max_epochs=10, eval_every_steps=1, patience=2, min_delta=0.01)
    trained = train_variant(variant, tiny_tok_dir, tmp_path)
    result = trained.summary
    # improvements of 0.001 are below min_delta: two bad evaluations, stopped mid-epoch 1
    assert result.stop_reason == "early_stopping" and result.plateaued
    assert result.evaluations == 3 and result.steps == 3 and result.epochs_run == 1
    assert [r.end_of_epoch for r in trained.history] == [0, 0, 0]
    # the best checkpoint still follows the best value, by any margin
    assert result.best_dev_loss == 1.998 and result.best_step == 3
    assert load_checkpoint(tmp_path / "checkpoint.pt").extra["step"] == 3


@pytest.mark.parametrize("bleu_delta, evaluations", [(None, 3), (0.5, 6)])
def test_a_rising_dev_bleu_keeps_a_flat_loss_variant_training(
    bleu_delta, evaluations, make_variant, tiny_tok_dir, tmp_path, monkeypatch
):
    """Dev loss flat after the first evaluation, dev BLEU rising until the fourth: the
    loss-only rule stops after patience (2) flat evaluations; with bleu_progress_delta
    the variant trains until neither has moved for 2, and keeps the last model that
    made progress."""
    losses = iter([2.0] * 10)
    scores = iter([1.0, 3.0, 5.0, 7.0, 7.2, 7.1, 7.3, 7.0])
    monkeypatch.setattr(training_dev, "dev_loss", lambda *args, **kwargs: next(losses))
    monkeypatch.setattr(training_dev, "dev_bleu", lambda *args, **kwargs: next(scores))
    variant = make_variant(
        max_epochs=10,
        eval_every_steps=1,
        patience=2,
        min_delta=0.01,
        lr_decay=1.0,
        bleu_progress_delta=bleu_delta,
    )
    result = train_variant(variant, tiny_tok_dir, tmp_path).summary
    assert result.plateaued and result.evaluations == evaluations
    if bleu_delta is not None:  # the fourth evaluation (BLEU 7.0) was the last gain
        assert result.best_step == 4
        assert load_checkpoint(tmp_path / "checkpoint.pt").extra["dev_bleu"] == 7.0


def test_bleu_selects_the_best_epoch(make_variant, tiny_tok_dir, tmp_path, monkeypatch):
    scores = iter([5.0, 9.0, 7.0])
    monkeypatch.setattr(training_dev, "dev_bleu", lambda *args, **kwargs: next(scores))
    variant = make_variant(early_stopping_metric="bleu")
    result = train_variant(variant, tiny_tok_dir, tmp_path).summary
    assert result.best_epoch == 2 and result.best_dev_bleu == 9.0
    assert load_checkpoint(tmp_path / "checkpoint.pt").extra["dev_bleu"] == 9.0


def test_dev_bleu_scores_detokenized_greedy_output(tiny_tok_dir, tiny_model_config, monkeypatch):
    data = TokenizedData.load(tiny_tok_dir)
    dev = data.split("dev")
    vocab = VocabInfo.from_data(data)
    model = Seq2Seq(tiny_model_config(), vocab.src_vocab_size, vocab.tgt_vocab_size)
    references = [dev.target(i).tolist() for i in range(len(dev))]
    monkeypatch.setattr(training_dev, "translate", lambda *args, **kwargs: (references, None))
    assert training_dev.dev_bleu(
        model, dev, data.tgt_tokenizer, max_ratio=2.0, device="cpu"
    ) == pytest.approx(100.0)
    half = [ids[: len(ids) // 2] for ids in references]
    monkeypatch.setattr(training_dev, "translate", lambda *args, **kwargs: (half, None))
    assert (
        training_dev.dev_bleu(model, dev, data.tgt_tokenizer, max_ratio=2.0, device="cpu") < 100.0
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_each_precision_trains_and_is_recorded(precision, make_variant, tiny_tok_dir, tmp_path):
    result = train_variant(
        make_variant("general", max_epochs=2, precision=precision), tiny_tok_dir, tmp_path
    )
    assert result.summary.precision == precision
    losses = [row.train_loss for row in result.history]
    assert all(math.isfinite(x) for x in losses) and losses[1] < losses[0]


def test_weight_average_is_evaluated_checkpointed_and_resumed(make_variant, tiny_tok_dir, tmp_path):
    variant = make_variant("general", ema_decay=0.9, eval_every_steps=3)
    folder, states = tmp_path / "reference", {}

    def snapshot(row):  # last.pt is written before the callback
        states[row["step"]] = torch.load(folder / "last.pt", weights_only=True)

    reference = train_variant(variant, tiny_tok_dir, folder, callbacks=[OnEvaluation(snapshot)])
    last = states[reference.summary.steps]
    assert int(last["ema"]["n_averaged"]) == reference.summary.steps  # updated after every step
    best = states[reference.summary.best_step]
    average = {k.removeprefix("module."): v for k, v in best["ema"].items() if k != "n_averaged"}
    checkpoint = _weights(folder / "checkpoint.pt")
    assert all(torch.equal(checkpoint[k], average[k]) for k in checkpoint)  # the average...
    assert any(not torch.equal(checkpoint[k], best["model"][k]) for k in checkpoint)  # not SGD's

    with pytest.raises(Interrupted):
        train_variant(variant, tiny_tok_dir, tmp_path / "run", callbacks=[InterruptAtEpoch(2)])
    resumed = train_variant(variant, tiny_tok_dir, tmp_path / "run")
    _same_history(resumed.history, reference.history)
    again = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert all(torch.equal(again["ema"][k], last["ema"][k]) for k in last["ema"])


@pytest.mark.parametrize("output_bias", ["unigram", "uniform"])
def test_output_bias_initialisation_follows_the_config(
    output_bias, make_variant, tiny_tok_dir, tmp_path
):
    variant = make_variant()
    variant = Variant(
        variant.id,
        variant.model.model_copy(update={"output_bias": output_bias}),
        variant.train,
        variant.axes,
    )
    data = TokenizedData.load(tiny_tok_dir)
    trainer = training.Trainer(variant, data, tmp_path, (), "cpu")
    bias = trainer.model.generator.bias.detach().double()
    counts = torch.from_numpy(data.split("train").target_counts(bias.numel())).double() + 1
    unigram = (counts / counts.sum()).log()
    assert torch.allclose(bias, unigram, atol=1e-6) == (output_bias == "unigram")


def test_the_slope_rule_measures_bleu_per_thousand_updates():
    from pipeline.train.stopping import SlopeRule

    rule = SlopeRule(max_slope=0.5, window=4)
    steps = [1, 2, 3, 4, 5, 6]
    assert rule.slope(steps[:3], [0, 1, 2]) is None  # the history spans less than the window
    assert rule.slope(steps, [0, 1, 2, 3, 4, 5]) == pytest.approx(1000.0)
    assert rule.slope(steps, [5, 5, 5, 5, 5, 5]) == 0.0
    assert rule.rising(steps, [0, 1, 2, 3, 4, 5]) and not rule.rising(steps, [5] * 6)
    assert rule.rising(steps[:3], [5, 5, 5])  # not yet shown flat: not converged
    assert not SlopeRule(None, 4).rising(steps[:2], [0, 9])  # off: the plateau alone decides


def test_a_variant_whose_dev_bleu_still_rises_trains_past_the_plateau_rule(
    make_variant, tiny_tok_dir, tmp_path, monkeypatch
):
    """Dev loss flat from the start (the plateau rule fires after 2 evaluations), dev
    BLEU rising by 1 per evaluation (1,000 per 1,000 updates) for 6 evaluations, then
    flat: the variant stops only once the slope over the last 3 updates is at most 0.5
    per 1,000."""
    losses = iter([2.0] * 30)
    scores = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0] + [6.0] * 24)
    monkeypatch.setattr(training_dev, "dev_loss", lambda *args, **kwargs: next(losses))
    monkeypatch.setattr(training_dev, "dev_bleu", lambda *args, **kwargs: next(scores))
    plateau = dict(max_epochs=10, eval_every_steps=1, patience=2, min_delta=0.01, lr_decay=1.0)
    alone = train_variant(make_variant(**plateau), tiny_tok_dir, tmp_path / "a").summary
    assert alone.plateaued and alone.evaluations == 3
    scores = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0] + [6.0] * 24)
    losses = iter([2.0] * 30)
    ruled = make_variant(**plateau, converged_slope=0.5, converged_window=3)
    result = train_variant(ruled, tiny_tok_dir, tmp_path / "b").summary
    # steps 6..9 flat: the fit over steps 6-9 has slope 0; steps 4-7 still rose
    assert result.plateaued and result.stop_reason == "early_stopping"
    assert result.evaluations == 9 and result.peak_dev_bleu == 6.0
