"""Vocabulary projection fused with the cross-entropy ("fused linear cross-entropy").

``projected_cross_entropy(features, weight, bias, targets, ...)`` equals
``F.cross_entropy(F.linear(features, weight, bias), targets, reduction="sum", ...)`` but
never materialises the ``(N, V)`` logits. The unfused version writes the logits, reads and
writes them again for ``log_softmax``, and does the same in backward (fills, adds, the
softmax gradient): many passes over an ``N x V`` float32 tensor (48 MB at N=3000,
V=4000). Here the rows are taken ``chunk_rows`` at a time; each chunk's logits stay in
cache while its loss *and* its gradients are computed in the same pass (the trick of
Liger Kernel's fused linear cross-entropy):

    z = x_c W^T + b                          (C, V)  matmul in ``compute_dtype``
    loss_i = lse(z_i) - (1-eps) z_iy - eps mean_v z_iv   float32, ignored rows -> 0
    dz = softmax(z) - (1-eps) onehot(y) - eps/V          float32, ignored rows -> 0
    dx_c = dz W,  dW += dz^T x_c,  db += sum_rows dz     dW, db accumulated in float32

Shapes: features ``(..., H)``, weight ``(V, H)``, bias ``(V,)`` or None, targets ``(...)``
(flattened to ``N`` rows). The gradients are saved in forward, so backward only scales them
by the incoming (scalar) gradient; double backward is not supported.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx, once_differentiable

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_ROWS = 256
"""Rows per chunk. Measured fwd+bwd, 1 thread, N=3000, H=256, V in {4000, 8000}, fp32 and
bf16 autocast: 128-512 are all within a few per cent of each other (see module report)."""

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def _fused_pass(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    ignore_index: int,
    eps: float,
    chunk_rows: int,
    compute_dtype: torch.dtype,
    needs: tuple[bool, bool, bool],
) -> tuple[torch.Tensor, Grads]:
    """Summed loss of ``(N, H)`` features and, for the inputs flagged in ``needs``,
    the gradients of that sum (features, weight, bias)."""
    rows_total, vocab = features.shape[0], weight.shape[0]
    acc_dtype = torch.promote_types(compute_dtype, torch.float32)  # float64 stays float64
    x, w = features.to(compute_dtype), weight.to(compute_dtype)
    b = None if bias is None else bias.to(compute_dtype)
    valid = targets != ignore_index
    safe_targets = targets.masked_fill(~valid, 0).unsqueeze(1)  # (N, 1), ignored -> class 0
    weights = valid.to(acc_dtype).unsqueeze(1)  # (N, 1), 1 on counted rows, 0 on ignored
    acc = {"dtype": acc_dtype, "device": features.device}
    total = torch.zeros((), **acc)
    grad_x = torch.empty_like(features) if needs[0] else None
    grad_w = torch.zeros(weight.shape, **acc) if needs[1] else None
    grad_b = torch.zeros(vocab, **acc) if needs[2] else None
    if eps:  # mean_v z_iv = x_i . mean_v(w_v) + mean(b): no pass over the chunk needed
        w_mean = weight.to(acc_dtype).mean(0)
        b_mean = 0.0 if bias is None else bias.to(acc_dtype).mean()
    for start in range(0, rows_total, chunk_rows):
        rows = slice(start, start + chunk_rows)
        z = F.linear(x[rows], w, b).to(acc_dtype)  # (C, V) logits, matmul in compute_dtype
        row_max = z.amax(1, keepdim=True)
        z -= row_max
        row_loss = -(1 - eps) * z.gather(1, safe_targets[rows]).squeeze(1)
        if eps:
            mean_z = features[rows].to(acc_dtype) @ w_mean + b_mean - row_max.squeeze(1)
            row_loss -= eps * mean_z
        p = z.exp_()  # unnormalised softmax, in place
        sum_exp = p.sum(1, keepdim=True)
        row_loss += sum_exp.squeeze(1).log()
        total += (row_loss * weights[rows].squeeze(1)).sum()
        if not any(needs):
            continue
        # dz = w_i * ((p - (1 - eps) sum_exp onehot) / sum_exp - eps / V), w_i = 0 on ignored
        # rows; written in compute_dtype directly (one pass fewer than converting afterwards).
        p.scatter_add_(1, safe_targets[rows], sum_exp * -(1 - eps))
        dz = torch.empty(p.shape, dtype=compute_dtype, device=p.device)
        torch.addcmul(weights[rows] * (-eps / vocab), p, weights[rows] / sum_exp, out=dz)
        if grad_x is not None:
            grad_x[rows] = dz @ w
        if grad_w is not None:
            if dz.dtype == acc_dtype:
                grad_w.addmm_(dz.T, x[rows])
            else:
                grad_w += dz.T @ x[rows]
        if grad_b is not None:
            grad_b += dz.sum(0)
    return total, (grad_x, grad_w, grad_b)


class _ProjectedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx,
        features: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        ignore_index: int,
        eps: float,
        chunk_rows: int,
        compute_dtype: torch.dtype,
    ) -> torch.Tensor:
        needs = tuple(ctx.needs_input_grad[:3])
        with torch.autocast(features.device.type, enabled=False):
            total, grads = _fused_pass(
                features, weight, bias, targets, ignore_index, eps, chunk_rows,
                compute_dtype, needs,  # type: ignore[arg-type]
            )  # fmt: skip
        ctx.dtypes = (features.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.save_for_backward(*grads)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        scaled = [
            None if g is None else (g * grad_output).to(dtype)
            for g, dtype in zip(ctx.saved_tensors, ctx.dtypes)  # type: ignore[attr-defined]
        ]
        return (*scaled, None, None, None, None, None)


def projected_cross_entropy(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    ignore_index: int,
    label_smoothing: float = 0.0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``F.cross_entropy(F.linear(features, weight, bias), targets, reduction="sum",
    ignore_index=ignore_index, label_smoothing=label_smoothing)`` without the logits.

    features ``(..., H)``, weight ``(V, H)``, bias ``(V,)`` or None, targets ``(...)`` long.
    Returns the float32 scalar sum of the per-token losses over targets != ignore_index
    (0 when all are ignored). ``compute_dtype`` is the dtype of the matmuls; None follows
    autocast (its dtype when enabled on the features' device), else the features' dtype.
    Softmax, loss and the weight/bias gradient accumulators are float32 (float64 inputs:
    float64). Gradient work is done only when grad mode is on and an input requires grad.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    device_type = features.device.type
    if compute_dtype is None:
        autocast = torch.is_autocast_enabled(device_type)
        compute_dtype = torch.get_autocast_dtype(device_type) if autocast else features.dtype
    features = features.reshape(-1, features.shape[-1])
    targets = targets.reshape(-1)
    args = (features, weight, bias, targets, ignore_index, float(label_smoothing), chunk_rows,
            compute_dtype)  # fmt: skip
    inputs = (features, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        return _ProjectedCrossEntropy.apply(*args)
    with torch.no_grad(), torch.autocast(device_type, enabled=False):
        return _fused_pass(*args, needs=(False, False, False))[0]
