"""StepLinear: per-step products whose weight gradient is one product per batch."""

import pytest
import torch
import torch.nn.functional as F

from pipeline.kernels.step_linear import StepLinear


@pytest.mark.parametrize("with_bias", [True, False])
def test_step_linear_equals_per_step_linear_through_autograd(with_bias):
    """Outputs and every gradient (inputs, addends, weight, bias, and through the
    recurrence the initial state) equal one ``F.linear`` per step ``F.linear`` calls, in float64."""
    torch.manual_seed(0)
    rows, inputs, outputs, steps = 3, 4, 5, 6
    dtype = torch.float64
    weight = torch.randn(outputs, inputs, dtype=dtype, requires_grad=True)
    bias = torch.randn(outputs, dtype=dtype, requires_grad=True) if with_bias else None
    mix = torch.randn(outputs, inputs, dtype=dtype)  # feeds each output back as the next input
    start = torch.randn(rows, inputs, dtype=dtype, requires_grad=True)
    addends = torch.randn(steps, rows, outputs, dtype=dtype, requires_grad=True)
    upstream = torch.randn(steps, rows, outputs, dtype=dtype)

    def run(linear):
        state, out = start, []
        for t in range(steps):  # a recurrence: step t's input depends on step t-1's output
            y = linear(state, t, addends[t] if t % 2 else None)
            out.append(y)
            state = torch.tanh(y @ mix)
        return torch.stack(out)

    layer, anchors = StepLinear.start(weight, bias, steps, rows)
    fast = run(lambda x, t, a: layer(x, anchors[t], a))

    def plain(x, t, a):
        y = F.linear(x, weight, bias)
        return y if a is None else y + a

    slow = run(plain)
    torch.testing.assert_close(fast, slow)
    leaves = [start, addends, weight] + ([bias] if with_bias else [])
    grads = [torch.autograd.grad((y * upstream).sum(), leaves) for y in (fast, slow)]
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)
    assert all(g.abs().sum() > 0 for g in grads[0])


def test_step_linear_computes_in_the_weight_dtype_and_returns_input_gradients_in_theirs():
    """Under bf16 weights (autocast casts them once before the loop) the product runs in
    bf16, the fp32 input's gradient comes back in fp32, and the fp32 bias's in fp32."""
    torch.manual_seed(0)
    weight32 = torch.randn(6, 4, requires_grad=True)
    bias = torch.randn(6, requires_grad=True)
    x = torch.randn(2, 4, requires_grad=True)
    layer, anchors = StepLinear.start(weight32.to(torch.bfloat16), bias, 1, 2)
    y = layer(x, anchors[0])
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and bias.grad.dtype == torch.float32
    assert weight32.grad.dtype == torch.float32
    expected = F.linear(x, weight32, bias)
    torch.testing.assert_close(y.float(), expected, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(bias.grad, torch.full((6,), 2.0))
