"""A linear layer applied once per step of a decoder loop, with its weight gradient
computed once per batch.

Through autograd, each of the T steps' ``x_i W^T + b`` produces, in backward, its own
weight gradient ``dy_i^T x_i``, a small ``(out, B) x (B, in)`` product, its bias
gradient (a sum over the batch), and one addition of each into the running gradient of
the weight and the bias. Here each step's backward computes only the gradient of its
input, ``dy_i W``, and hands ``dy_i`` to one sink (:mod:`pipeline.kernels.step_sink`),
whose backward computes the weight's gradient for every step in one product,
dW = dY^T X with dY (T B, out) and X (T B, in), and the bias's in one sum. This is
cuDNN's split of an RNN's backward, applied to the products of a loop autograd runs.

    layer, anchors = StepLinear.start(weight, bias, steps=T, batch=B)
    for i in range(T):
        y_i = layer(x_i, anchors[i])             # x_i W^T + b, (B, out)
        y_i = layer(x_i, anchors[i], addend=a_i)  # a_i + x_i W^T (a layer without bias)

The anchors (zeros that carry the graph edge to the weight) are the caller's to keep
(:mod:`pipeline.kernels.step_sink` says why).

Products run in the weight's dtype (under autocast, cast the weight once before
``start``); each step's input gradient returns in its input's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.kernels.step_sink import step_anchors


class StepLinear:
    """``x_i W^T + b`` for every step ``i`` of a loop; see the module docstring."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight = weight.detach()  # (out, in)
        self.bias = None if bias is None else bias.detach().to(weight.dtype)  # (out,)
        self.inputs: list[torch.Tensor] = []  # x_i in the weight's dtype, filled by calls
        self.bias_dtype = None if bias is None else bias.dtype

    @classmethod
    def start(
        cls, weight: torch.Tensor, bias: torch.Tensor | None, steps: int, batch: int
    ) -> tuple[StepLinear, tuple[torch.Tensor, ...]]:
        """A layer of ``weight`` (out, in) and ``bias`` (out,) or None, and one anchor per
        step for ``steps`` steps of ``batch`` rows."""
        layer = cls(weight, bias)
        return layer, step_anchors(layer, (steps, batch, weight.size(0)), 0, weight, bias)

    def __call__(
        self, inputs: torch.Tensor, anchor: torch.Tensor, addend: torch.Tensor | None = None
    ) -> torch.Tensor:
        """inputs x_i (B, in) of the next step (steps are called in order), its anchor and
        an optional addend a_i (B, out) -> a_i + x_i W^T + b (B, out)."""
        return _StepLinear.apply(inputs, anchor, addend, self)

    def gradients(self, grad_outputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """dW = dY^T X and db = sum dY (or None) from every step's dy_i (T, B, out)."""
        inputs = torch.stack(self.inputs)  # (T, B, in)
        self.inputs = []  # no longer needed: free them before the rest of backward
        grad = grad_outputs.reshape(-1, grad_outputs.size(-1))  # (T B, out)
        grad_weight = grad.to(inputs.dtype).t() @ inputs.reshape(-1, inputs.size(-1))
        grad_bias = None
        if self.bias_dtype is not None:  # summed in at least float32
            wide = torch.promote_types(grad.dtype, torch.float32)
            grad_bias = grad.sum(0, dtype=wide).to(self.bias_dtype)
        return grad_weight, grad_bias


class _StepLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, anchor, addend, layer):
        weight = layer.weight
        x = inputs.to(weight.dtype)
        layer.inputs.append(x)
        ctx.layer, ctx.input_dtype, ctx.has_addend = layer, inputs.dtype, addend is not None
        if addend is not None:
            out = torch.addmm(addend.to(weight.dtype), x, weight.t())
            return out if layer.bias is None else out + layer.bias
        return F.linear(x, weight, layer.bias)

    @staticmethod
    def backward(ctx, grad):
        weight, grad_inputs = ctx.layer.weight, None
        if ctx.needs_input_grad[0]:
            grad_inputs = (grad.to(weight.dtype) @ weight).to(ctx.input_dtype)  # dy_i W
        # the anchor's gradient is dy_i itself: the sink makes the weight's from all of them
        return grad_inputs, grad, grad if ctx.has_addend else None, None
