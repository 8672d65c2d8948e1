"""The additive Bahdanau loop's hand-written backward through time (bahdanau_loop)."""

from __future__ import annotations

import pytest
import torch

from pipeline.kernels import additive_energy
from pipeline.models.attention import Memory, build_scorer
from pipeline.models.bahdanau_loop import gru_attention_loop


def _inputs(dtype, batch=3, steps=4, sources=5, size=6):
    """An embedding width unlike the hidden size, so a mixed-up split of W_ih fails."""
    torch.manual_seed(0)
    width = size + 3
    cell = torch.nn.GRUCell(width + size, size).to(dtype)
    scorer = build_scorer("additive", size).to(dtype)
    values = torch.randn(batch, sources, size, dtype=dtype, requires_grad=True)
    embedded = torch.randn(batch, steps, width, dtype=dtype, requires_grad=True)
    hidden = torch.randn(batch, size, dtype=dtype, requires_grad=True)
    mask = torch.ones(batch, sources, dtype=torch.bool)
    mask[1, 3:] = False  # a padded source
    return cell, scorer, values, embedded, hidden, mask


class _Loop(torch.nn.Module):
    def __init__(self, cell, scorer, mask):
        super().__init__()
        self.cell, self.scorer, self.mask = cell, scorer, mask

    def forward(self, values, keys, embedded, hidden):
        memory = Memory(values, keys, self.mask)
        return gru_attention_loop(self.cell, self.scorer, embedded, memory, hidden)


@pytest.mark.parametrize(
    ("block", "query_bias", "fast"),
    [
        (2**18, False, False),  # one block a step
        (12, False, True),  # one batch row a block
        (2**18, True, True),  # a W_a with a bias (AdditiveScorer has none; the loop takes one)
    ],
)
def test_gradients_of_all_three_outputs_pass_gradcheck(block, query_bias, fast, monkeypatch):
    """Float64 gradcheck of states, contexts and attention weights with respect to the
    embeddings, the initial state, the keys, the values and every weight the loop reads,
    with a padded source position. (The keys are a float64 leaf here: the scorer's
    ``precompute`` makes float32 keys, too coarse for finite differences.) The first case
    checks every Jacobian entry; the variants of it check random projections of the
    Jacobian (``fast_mode``), which a wrong entry fails as well, in a fraction of the
    time."""
    monkeypatch.setattr(additive_energy, "BLOCK_ELEMENTS", block)
    cell, scorer, values, embedded, hidden, mask = _inputs(torch.float64)
    if query_bias:
        size = scorer.query_projection.in_features
        scorer.query_projection = torch.nn.Linear(size, size).double()
    keys = torch.randn(values.shape, dtype=torch.float64, requires_grad=True)
    loop = _Loop(cell, scorer, mask)
    names = [
        "cell.weight_ih",
        "cell.weight_hh",
        "cell.bias_ih",
        "cell.bias_hh",
        "scorer.query_projection.weight",
        "scorer.energy.weight",
    ]
    names += ["scorer.query_projection.bias"] if query_bias else []
    params = dict(loop.named_parameters())
    weights = [params[n].detach().clone().requires_grad_() for n in names]

    def run(values, keys, embedded, hidden, *weights):
        state = dict(zip(names, weights))
        return torch.func.functional_call(loop, state, (values, keys, embedded, hidden))

    inputs = (values, keys, embedded, hidden, *weights)
    assert torch.autograd.gradcheck(run, inputs, atol=1e-7, fast_mode=fast)
    tops, _, attention = run(*inputs)
    assert attention[1, :, 3:].abs().max() == 0  # the padded positions are never read
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    assert tops.requires_grad


def test_bf16_autocast_gradients_match_the_autograd_loop():
    """Under bf16 autocast the hand-written loop gives the forward values and gradients of
    the same equations run through autograd (the loop other scorers take), to bf16
    rounding."""
    results = []
    for by_hand in (True, False):
        cell, scorer, values, embedded, hidden, mask = _inputs(torch.float32, 8, 7, 9, 32)
        if not by_hand:  # the same scorer, seen as a generic one: the autograd loop
            scorer.__class__ = type(
                "Generic",
                (type(scorer).__bases__[0],),
                {
                    "precompute": type(scorer).precompute,
                    "query_layer": type(scorer).query_layer,
                    "score_projected": type(scorer).score_projected,
                },
            )
        with torch.autocast("cpu", dtype=torch.bfloat16):
            memory = Memory(values, scorer.precompute(values), mask)
            tops, contexts, weights = gru_attention_loop(cell, scorer, embedded, memory, hidden)
        torch.manual_seed(1)
        loss = (tops * torch.randn(tops.shape)).sum() + (contexts.float() ** 2).sum()
        loss = loss + (weights * torch.randn(weights.shape)).sum()  # each output's gradient
        loss.backward()
        grads = [t.grad for t in (values, embedded, hidden)]
        grads += [p.grad for p in (*cell.parameters(), *scorer.parameters())]
        results.append(([tops, contexts.float(), weights], grads))
    for found, expected in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        scale = expected.abs().max()
        assert scale > 0
        torch.testing.assert_close(found / scale, expected / scale, rtol=0, atol=2e-2)


@pytest.mark.parametrize("scorer_name", ["additive", "general"])
def test_time_major_values_are_copied_once_not_at_every_step(scorer_name):
    """The encoder's outputs reach the loop as a (B, S, H) view of time-major memory
    (``nn.GRU(batch_first=True)``). Under bf16 autocast each step's batched product
    copies a non-contiguous operand (at sizes above bmm's small-product path); both loops
    (the additive one and the generic one of other scorers) make the values contiguous
    once, so the copies do not grow with the steps."""
    steps, batch, sources, size = 9, 8, 16, 64
    cell, _, _, embedded, hidden, mask = _inputs(torch.float32, batch, steps, sources, size)
    scorer = build_scorer(scorer_name, size)
    values = torch.randn(sources, batch, size).transpose(0, 1).requires_grad_()
    assert not values.is_contiguous()
    with torch.profiler.profile() as prof, torch.autocast("cpu", dtype=torch.bfloat16):
        memory = Memory(values, scorer.precompute(values), mask)
        tops, contexts, weights = gru_attention_loop(cell, scorer, embedded, memory, hidden)
        (tops.sum() + contexts.float().sum() + weights.sum()).backward()
    copies = sum(e.count for e in prof.key_averages() if e.key == "aten::contiguous")
    assert values.grad is not None and copies < steps
