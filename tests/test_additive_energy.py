"""The blocked, recomputing additive energy equals autograd's tanh(q + k) @ v."""

from __future__ import annotations

import pytest
import torch

from pipeline.models import additive_energy as module
from pipeline.models.additive_energy import StepEnergy, additive_energy


def _reference(query, keys, energy):
    return torch.tanh(query.unsqueeze(2) + keys.unsqueeze(1)) @ energy


@pytest.mark.parametrize(("batch", "steps", "sources", "block"), [
    (3, 5, 4, 2**18),  # one block
    (7, 6, 5, 40),  # several batch rows per block, ragged last block
    (2, 9, 3, 20),  # one row's steps split over blocks
])  # fmt: skip
def test_matches_autograd_values_and_gradients(batch, steps, sources, block, monkeypatch):
    monkeypatch.setattr(module, "BLOCK_ELEMENTS", block)
    torch.manual_seed(0)
    size = 8
    inputs = [torch.randn(batch, steps, size), torch.randn(batch, sources, size),
              torch.randn(size)]  # fmt: skip
    grad = torch.randn(batch, steps, sources)
    results = []
    for function in (_reference, additive_energy):
        leaves = [t.clone().requires_grad_() for t in inputs]
        scores = function(*leaves)
        scores.backward(grad)
        results.append([scores.detach(), *(leaf.grad for leaf in leaves)])
    for expected, found in zip(*results):
        torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-5)


def test_gradcheck_float64(monkeypatch):
    monkeypatch.setattr(module, "BLOCK_ELEMENTS", 30)
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(4, dtype=torch.float64, requires_grad=True))  # fmt: skip
    assert torch.autograd.gradcheck(additive_energy, inputs)


def test_bf16_inputs_give_fp32_scores_and_input_dtype_gradients():
    torch.manual_seed(0)
    query = torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True)
    keys = torch.randn(2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    energy = torch.randn(8, requires_grad=True)
    scores = additive_energy(query, keys, energy)
    assert scores.dtype == torch.float32
    scores.sum().backward()
    assert query.grad.dtype == keys.grad.dtype == torch.bfloat16
    assert energy.grad.dtype == torch.float32
    expected = _reference(query.detach().float(), keys.detach().float(), energy.detach())
    torch.testing.assert_close(scores.detach(), expected)


@pytest.mark.parametrize(("block", "per_call"), [
    (2**18, 1),  # one block per step
    (24, 1),  # 2 rows a block, ragged
    (2**18, 2),  # two steps a call, one block
    (24, 2),  # two steps a call: one row's two steps a block
    (8, 2),  # two steps a call: a row's steps split over blocks
])  # fmt: skip
def test_step_energy_sums_the_keys_gradient_over_steps(block, per_call, monkeypatch):
    """A decoder loop scoring its queries through StepEnergy (one or two steps a call) gets
    the same scores and gradients as separate additive_energy calls, the keys' gradient
    included, also where one call's steps are split over blocks."""
    monkeypatch.setattr(module, "BLOCK_ELEMENTS", block)
    torch.manual_seed(0)
    batch, steps, sources, size = 5, 4, 3, 4
    inputs = [torch.randn(batch, steps, size, dtype=torch.float64),
              torch.randn(batch, sources, size, dtype=torch.float64),
              torch.randn(size, dtype=torch.float64)]  # fmt: skip
    calls = steps // per_call
    grads = torch.randn(calls, batch, per_call, sources, dtype=torch.float64)
    results = []
    for stepped in (False, True):
        query, keys, energy = [t.clone().requires_grad_() for t in inputs]
        parts = [query[:, i * per_call : (i + 1) * per_call] for i in range(calls)]
        if stepped:
            owner, anchors = StepEnergy.start(keys, calls)
            scores = [owner(part, energy, anchor) for part, anchor in zip(parts, anchors)]
        else:
            scores = [additive_energy(part, keys, energy) for part in parts]
        torch.autograd.backward(scores, list(grads))
        results.append([torch.cat(scores, 1).detach(), query.grad, keys.grad, energy.grad])
    for expected, found in zip(*results):
        torch.testing.assert_close(found, expected, rtol=1e-12, atol=1e-12)
    assert results[1][2].abs().sum() > 0
