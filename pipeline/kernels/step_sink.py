"""Per-batch gradients for the tensors a per-step decoder loop reads at every step.

Through autograd, a tensor used at each of T steps (the attention values, a weight)
gets T gradient pieces in backward, each its own small product plus one addition into
the running total. The per-step helpers (:class:`pipeline.models.attention.StepReader`,
:class:`pipeline.kernels.step_linear.StepLinear`) instead let each step's backward pass
its output gradient to one sink node, whose backward makes every gradient of the shared
tensors from all steps' output gradients at once.

:func:`step_anchors` makes that sink: zeros of the steps' stacked output shape, split
into one anchor per step. A step's autograd function takes its anchor as an input and
returns the step's output gradient as the anchor's gradient; autograd stacks them into
the sink's gradient, and the sink calls ``owner.gradients(grad)``.

The anchors are the caller's to keep: an owner holding them would form a cycle through
autograd nodes, which Python's garbage collector cannot see.
"""

from __future__ import annotations

from typing import Protocol

import torch


class SinkOwner(Protocol):
    def gradients(self, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """The gradients of the sink's tensors, in order, from the stacked step gradients."""


def step_anchors(
    owner: SinkOwner, shape: tuple[int, ...], dim: int, *tensors: torch.Tensor | None
) -> tuple[torch.Tensor, ...]:
    """Zeros of ``shape`` (dtype and device of ``tensors[0]``) split along ``dim`` into one
    anchor per step; in backward, ``owner.gradients(grad of shape)`` gives ``tensors``'
    gradients."""
    return _Sink.apply(owner, shape, *tensors).unbind(dim)


class _Sink(torch.autograd.Function):
    @staticmethod
    def forward(ctx, owner, shape, *tensors):
        ctx.owner = owner
        return tensors[0].new_zeros(shape)

    @staticmethod
    def backward(ctx, grad):
        return None, None, *ctx.owner.gradients(grad)
