"""Every registered scorer through the shared attend(): masking, normalisation, gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.data.batching import make_batch
from pipeline.data.dataset import TokenizedSplit
from pipeline.models import attention as attention_module
from pipeline.models.attention import (
    LOCATION_MAX_POSITIONS,
    LocationScorer,
    attend,
    build_scorer,
)
from pipeline.models.search import greedy_search
from pipeline.models.seq2seq import Seq2Seq
from pipeline.scorers import catalogue

HIDDEN = 8
ATTENTION_SCORERS = [name for name in catalogue.BUILTIN if name != "none"]


def _inputs(seed: int = 0, source_length: int = 5, lengths=(5, 3, 1)):
    generator = torch.Generator().manual_seed(seed)
    B, T = len(lengths), 4
    values = torch.randn(B, source_length, HIDDEN, generator=generator)
    query = torch.randn(B, T, HIDDEN, generator=generator)
    src_mask = torch.arange(source_length)[None, :] < torch.tensor(lengths)[:, None]
    return query, values, src_mask


def _case(name: str):
    """A freshly built scorer (seeded weights) and the shared inputs."""
    torch.manual_seed(0)
    return build_scorer(name, HIDDEN), *_inputs()


def _attend(scorer, query, values, src_mask):
    return attend(scorer, query, scorer.precompute(values), values, src_mask)


def test_every_catalogued_scorer_builds_and_none_has_no_attention():
    for name in ATTENTION_SCORERS:
        scorer = build_scorer(name, HIDDEN)
        assert isinstance(scorer, catalogue.get(name).load())
        assert catalogue.get(name).flops(HIDDEN, 5)[1] > 0  # the benchmarks count it
    assert catalogue.get("none").load() is None and build_scorer("none", HIDDEN) is None
    with pytest.raises(ValueError, match="unknown scorer 'dott'"):
        build_scorer("dott", HIDDEN)


@pytest.mark.parametrize("name", ATTENTION_SCORERS)
def test_weights_are_a_masked_distribution(name):
    scorer, query, values, src_mask = _case(name)
    context, weights = _attend(scorer, query, values, src_mask)
    assert context.shape == (3, 4, HIDDEN) and weights.shape == (3, 4, 5)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))
    padded = ~src_mask.unsqueeze(1).expand_as(weights)
    assert torch.all(weights[padded] == 0.0)  # exactly zero, not just small
    # the single real position of the last sentence gets all the weight
    assert torch.all(weights[2, :, 0] == 1.0)


@pytest.mark.parametrize("name", ATTENTION_SCORERS)
def test_padding_content_changes_nothing(name):
    scorer, query, values, src_mask = _case(name)
    noisy = values.clone()
    noisy[~src_mask] = torch.randn(int((~src_mask).sum()), HIDDEN) * 100
    context, weights = _attend(scorer, query, values, src_mask)
    noisy_context, noisy_weights = _attend(scorer, query, noisy, src_mask)
    assert torch.equal(weights, noisy_weights)
    assert torch.equal(context, noisy_context)


@pytest.mark.parametrize("name", ATTENTION_SCORERS)
def test_gradients_reach_every_scorer_parameter(name):
    scorer, query, values, src_mask = _case(name)
    query.requires_grad_(True)
    context, _ = _attend(scorer, query, values, src_mask)
    (context * torch.randn_like(context)).sum().backward()
    assert query.grad is not None and query.grad.abs().sum() > 0
    for parameter_name, parameter in scorer.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert parameter.grad.abs().sum() > 0, parameter_name


@pytest.mark.parametrize("name", ATTENTION_SCORERS)
def test_single_step_equals_all_steps(name):
    """A (B, 1, H) query per step gives the rows of the all-steps (B, T, H) call."""
    scorer, query, values, src_mask = _case(name)
    _, weights = _attend(scorer, query, values, src_mask)
    for t in range(query.size(1)):
        _, step = _attend(scorer, query[:, t : t + 1], values, src_mask)
        torch.testing.assert_close(step[:, 0], weights[:, t])


def test_location_works_for_any_source_length():
    torch.manual_seed(0)
    scorer = build_scorer("location", HIDDEN)
    for source_length, lengths in ((4, (4, 2)), (9, (9, 7)), (2, (1, 2))):
        query, values, src_mask = _inputs(source_length=source_length, lengths=lengths)
        _, weights = _attend(scorer, query, values, src_mask)
        assert weights.shape == (2, 4, source_length)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))
    # longer than the position table: later positions are never attended
    long = LOCATION_MAX_POSITIONS + 3
    query, values, src_mask = _inputs(source_length=long, lengths=(long,))
    _, weights = _attend(LocationScorer(HIDDEN), query, values, src_mask)
    assert torch.all(weights[..., LOCATION_MAX_POSITIONS:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 4))


def test_location_model_decodes_batches_of_different_source_lengths(tiny_model_config):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer="location"), 20, 20)
    short = TokenizedSplit.from_sequences([[5, 6], [7]], [[5], [6]])
    long = TokenizedSplit.from_sequences([[5] * 30, [6] * 12], [[5], [6]])
    for split in (short, long):
        batch = make_batch(split, np.arange(2))
        _, attentions = greedy_search(model, batch)
        assert [a.shape[1] for a in attentions] == [len(split.source(i)) + 1 for i in range(2)]
        loss, _ = model.loss(batch)
        assert torch.isfinite(loss)


def test_none_model_has_no_attention_parameters_or_path(tiny_model_config, monkeypatch):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer="none"), 20, 20)
    # RNNencdec vs RNNsearch (Bahdanau 2014): the same wiring with a learnt c_i
    rnnsearch = Seq2Seq(tiny_model_config(scorer="additive", wiring="bahdanau"), 20, 20)
    assert not model.has_attention and model.decoder.scorer is None
    names = {name for name, _ in model.named_parameters()}
    assert not any("scorer" in n or "combine" in n for n in names)
    assert model.num_parameters() < rnnsearch.num_parameters()

    def forbidden(*args, **kwargs):
        raise AssertionError("the no-attention model must not call attend()")

    monkeypatch.setattr(attention_module, "attend", forbidden)
    monkeypatch.setattr("pipeline.models.decoder.attend", forbidden)
    split = TokenizedSplit.from_sequences([[5, 6, 7], [8]], [[9, 10], [11]])
    batch = make_batch(split, np.arange(2))
    assert model(batch).shape == (2, 3, 20)
    _, attentions = greedy_search(model, batch)
    assert attentions == [None, None]


@pytest.mark.parametrize("name", ATTENTION_SCORERS)
def test_keys_are_projected_once_per_batch(name, tiny_model_config, monkeypatch):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer=name), 20, 20)
    calls = []
    original = model.decoder.scorer.precompute
    monkeypatch.setattr(
        model.decoder.scorer, "precompute", lambda keys: calls.append(1) or original(keys)
    )
    split = TokenizedSplit.from_sequences([[5, 6, 7], [8]], [[9, 10, 11, 12], [11]])
    batch = make_batch(split, np.arange(2))
    model(batch)
    assert len(calls) == 1
    hypotheses, _ = greedy_search(model, batch)
    assert len(calls) == 2 and max(map(len, hypotheses)) > 1  # many steps, one projection


def test_additive_scores_follow_bahdanau_formula():
    """The blocked kernel (tests/unit/test_additive_energy.py) computes v . tanh(W q + U k)."""
    torch.manual_seed(0)
    scorer = build_scorer("additive", HIDDEN)
    query, values, _ = _inputs()
    keys = scorer.precompute(values)
    projected = query @ scorer.query_projection.weight.t()  # (B, T, A)
    hidden = torch.tanh(projected.unsqueeze(2) + keys.unsqueeze(1))  # (B, T, S, A)
    expected = hidden @ scorer.energy.weight.squeeze(0)
    torch.testing.assert_close(scorer.score(query, keys), expected)


def test_step_reader_equals_per_step_bmm_with_one_values_gradient():
    """StepReader's contexts and gradients (values: one product per batch; weights: per
    step) equal T separate ``weights @ values`` products through autograd."""
    from pipeline.models.attention import StepReader

    torch.manual_seed(0)
    B, S, H, T = 3, 5, 4, 6
    values = torch.randn(B, S, H, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(B, T, S, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(B, T, H, dtype=torch.float64)

    def contexts(read):
        state, out = torch.zeros(B, H, dtype=torch.float64), []
        for t in range(T):  # the next step's weights depend on the last context, as in a decoder
            weights = torch.softmax(logits[:, t] + state.sum(-1, keepdim=True), dim=-1)
            state = read(weights, t)
            out.append(state)
        return torch.stack(out, dim=1)

    reader, anchors = StepReader.start(values, T)
    fast = contexts(lambda w, t: reader.read(w, anchors[t]))
    plain = contexts(lambda w, t: (w.unsqueeze(1) @ values).squeeze(1))
    torch.testing.assert_close(fast, plain)
    grads = [torch.autograd.grad((x * upstream).sum(), (values, logits)) for x in (fast, plain)]
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)
    assert grads[0][0].abs().sum() > 0
