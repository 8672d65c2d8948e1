"""The CPU GRU layer with its backward through time by hand (pipeline.models.gru_layer)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeline.models.gru_layer import gru_layer
from pipeline.models.rnn import GRU


def _twins(dtype, width=5, size=6):
    """torch's GRU and ours with the same weights; an input width unlike the hidden size,
    so a mixed-up W_ih / W_hh fails."""
    torch.manual_seed(0)
    reference = nn.GRU(width, size, batch_first=True).to(dtype)
    ours = GRU(width, size, batch_first=True).to(dtype)
    ours.load_state_dict(reference.state_dict())
    return reference, ours


@pytest.mark.parametrize("steps", [1, 4])
@pytest.mark.parametrize("outputs", ["both", "states", "last"])
def test_gradients_pass_gradcheck(steps, outputs):
    """Float64 gradcheck of every input and weight, through the states, the last state or
    both (a loss that uses one leaves the other's gradient None)."""
    _, ours = _twins(torch.float64)
    inputs = torch.randn(3, steps, 5, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    weights = [p.detach().clone().requires_grad_() for p in ours.parameters()]

    def run(inputs, hidden, *weights):
        states, last = gru_layer(inputs, hidden, *weights)
        return {"both": (states, last), "states": states, "last": last}[outputs]

    assert torch.autograd.gradcheck(run, (inputs, hidden, *weights))


def test_equals_torch_gru_in_float64_forward_and_backward():
    reference, ours = _twins(torch.float64)
    inputs = torch.randn(4, 7, 5, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(1, 4, 6, dtype=torch.float64, requires_grad=True)
    grads = []
    for model in (reference, ours):
        states, last = model(inputs, hidden)
        loss = (states * torch.linspace(-1, 1, 6, dtype=torch.float64)).sum() + last.pow(2).sum()
        grads.append(torch.autograd.grad(loss, [inputs, hidden, *model.parameters()]))
        assert states.shape == (4, 7, 6) and last.shape == (1, 4, 6)
    for expected, got in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_module_takes_the_layer_on_cpu_and_torch_elsewhere(monkeypatch):
    """One-layer unidirectional batch-first GRUs go by hand; others keep torch's code."""
    calls = []
    import pipeline.models.rnn as rnn

    def counting(*args):
        calls.append(1)
        return gru_layer(*args)

    monkeypatch.setattr(rnn, "gru_layer", counting)
    _, ours = _twins(torch.float32)
    ours(torch.randn(2, 3, 5))
    assert len(calls) == 1
    two_layers = GRU(5, 6, num_layers=2, batch_first=True)
    both_ways = GRU(5, 6, bidirectional=True, batch_first=True)
    for model in (two_layers, both_ways):
        states, _ = model(torch.randn(2, 3, 5))
        assert states.shape[:2] == (2, 3)
    assert len(calls) == 1


def test_bf16_autocast_keeps_a_float32_state_close_to_float32():
    """Under bf16 autocast the products are bf16 and the state float32: the outputs stay
    within bf16 rounding of the float32 layer, and so do the weights' gradients."""
    reference, ours = _twins(torch.float32, width=16, size=32)
    inputs = torch.randn(8, 12, 16)
    hidden = torch.randn(1, 8, 32)
    expected, _ = reference(inputs, hidden)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        states, last = ours(inputs, hidden)
    assert states.dtype == torch.float32 and last.dtype == torch.float32
    torch.testing.assert_close(states, expected, rtol=0, atol=2e-2)
    expected.sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        states, _ = ours(inputs, hidden)
    states.sum().backward()
    for theirs, mine in zip(reference.parameters(), ours.parameters()):
        assert mine.grad.dtype == torch.float32
        scale = theirs.grad.abs().max()
        assert (mine.grad - theirs.grad).abs().max() < 0.03 * scale
