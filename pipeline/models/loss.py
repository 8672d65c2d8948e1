"""Vocabulary projection fused with the cross-entropy ("fused linear cross-entropy").

``projected_cross_entropy(features, weight, bias, targets, ...)`` equals
``F.cross_entropy(F.linear(features, weight, bias), targets, reduction="sum", ...)`` but
never materialises the ``(N, V)`` logits. The unfused version writes the logits, reads and
writes them again for ``log_softmax``, and does the same in backward (fills, adds, the
softmax gradient): many passes over an ``N x V`` float32 tensor (48 MB at N=3000,
V=4000), each at memory speed. Here, as in Liger Kernel's fused linear cross-entropy, rows
are taken ``chunk_rows`` at a time and each chunk's loss *and* gradients are computed in
one pass, while its logits are in cache:

    z = x_c W^T + b                                  (C, V)  matmul in ``compute_dtype``
    loss_i = lse(z_i) - (1-eps) z_iy - eps mean_v z_iv       float32; ignored rows: 0
    dz = softmax(z) - (1-eps) onehot(y) - eps/V              float32; ignored rows: 0
    dx_c = dz W,   dW += dz^T x_c,   db += sum_rows dz       dW, db accumulated in float32

The float32 work runs on row blocks of about 1 MB (a CPU core's L2 cache) inside each
chunk; the chunk itself is larger so the three matmuls stay efficient.

Shapes: features ``(..., H)``, weight ``(V, H)``, bias ``(V,)`` or None, targets ``(...)``
(flattened to ``N`` rows). The gradients are computed in forward and saved, so backward
only scales them by the incoming scalar gradient; double backward is not supported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_ROWS = 512
"""Rows per matmul chunk. Measured forward+backward (1 thread, N=3000, H=256, V=4000/8000,
fp32 and bf16 autocast): 512-1024 are within noise of each other and fastest; 128-256 and
N (one chunk) are 5-40% slower. 512 keeps the chunk buffer at 8-16 MB."""

BLOCK_ELEMENTS = 2**18
"""float32 elements per softmax block on CPU (1 MB); other devices use the whole chunk."""

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


@dataclass(frozen=True)
class _Options:
    ignore_index: int
    eps: float  # label smoothing
    chunk_rows: int
    compute_dtype: torch.dtype  # of the matmuls


def _fused_pass(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    options: _Options,
    needs: tuple[bool, bool, bool],
) -> tuple[torch.Tensor, Grads]:
    """Summed loss of ``(N, H)`` features and, for the inputs flagged in ``needs``,
    the gradients of that sum (features, weight, bias)."""
    ignore_index, eps = options.ignore_index, options.eps
    chunk_rows, compute_dtype = options.chunk_rows, options.compute_dtype
    (rows_total, _), vocab, device = features.shape, weight.shape[0], features.device
    acc_dtype = torch.promote_types(compute_dtype, torch.float32)  # float64 stays float64
    acc = {"dtype": acc_dtype, "device": device}
    x, w = features.to(compute_dtype), weight.to(compute_dtype)
    b = None if bias is None else bias.to(compute_dtype)
    valid = targets != ignore_index
    safe_targets = targets.masked_fill(~valid, 0).unsqueeze(1)  # (N, 1), ignored -> class 0
    row_weight = valid.to(acc_dtype).unsqueeze(1)  # (N, 1): 1 on counted rows, 0 on ignored
    # mean_v z_iv = x_i . mean_v(W_v) + mean(b), so label smoothing needs no pass over z.
    mean_logit = features.to(acc_dtype) @ weight.to(acc_dtype).mean(0)
    if bias is not None:
        mean_logit += bias.to(acc_dtype).mean()
    total = torch.zeros((), **acc)
    grad_x = torch.empty_like(features) if needs[0] else None
    grad_w = torch.zeros(weight.shape, **acc) if needs[1] else None
    grad_b = torch.zeros(vocab, **acc) if needs[2] else None
    # Buffers reused by every chunk (fresh multi-MB tensors cost page faults on CPU).
    chunk = max(1, min(chunk_rows, rows_total))
    block = max(1, BLOCK_ELEMENTS // vocab) if device.type == "cpu" else chunk
    logits_buf = torch.empty(chunk, vocab, dtype=compute_dtype, device=device)
    z_buf = None if compute_dtype == acc_dtype else torch.empty(min(block, chunk), vocab, **acc)
    narrow_w = torch.empty_like(w) if needs[1] and z_buf is not None else None
    logger.debug(
        "fused CE: N=%d V=%d %s chunk=%d block=%d grads=%s",
        rows_total,
        vocab,
        compute_dtype,
        chunk,
        block,
        needs,
    )
    for start in range(0, rows_total, chunk):
        rows = slice(start, min(start + chunk, rows_total))
        logits = logits_buf[: rows.stop - start]
        if b is None:
            torch.mm(x[rows], w.T, out=logits)
        else:
            torch.addmm(b, x[rows], w.T, out=logits)
        for first in range(0, len(logits), block):  # logits -> dz, block by block
            block_rows = slice(start + first, min(start + first + block, rows.stop))
            part = logits[first : first + block]
            z = part if z_buf is None else z_buf[: len(part)].copy_(part)
            row_max = z.amax(1, keepdim=True)
            target_z = z.sub_(row_max).gather(1, safe_targets[block_rows])
            p = z.exp_()  # unnormalised softmax, in place
            sum_exp = p.sum(1, keepdim=True)
            # -log p_y = log sum_exp - (z_y - max);  mean_v -log p_v = log sum_exp - (mean - max)
            row_loss = sum_exp.log() - (1 - eps) * target_z
            row_loss -= eps * (mean_logit[block_rows].unsqueeze(1) - row_max)
            total += (row_loss * row_weight[block_rows]).sum()
            if not any(needs):
                continue
            # dz = w_i ((p - (1 - eps) sum_exp onehot) / sum_exp - eps / V), w_i in {0, 1}
            weight_i = row_weight[block_rows]
            p.scatter_add_(1, safe_targets[block_rows], sum_exp * -(1 - eps))
            p.mul_(weight_i / sum_exp).sub_(weight_i * (eps / vocab))
            if grad_b is not None:
                grad_b += p.sum(0)
            part.copy_(p)  # no-op in float32
        if grad_x is not None:
            grad_x[rows] = logits @ w
        if narrow_w is not None:  # narrow matmul, float32 accumulator
            grad_w += torch.mm(logits.T, x[rows], out=narrow_w)
        elif grad_w is not None:
            grad_w.addmm_(logits.T, x[rows])
    return total, (grad_x, grad_w, grad_b)


class _ProjectedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        features: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        options: _Options,
    ) -> torch.Tensor:
        needs = tuple(ctx.needs_input_grad[:3])
        with torch.autocast(features.device.type, enabled=False):
            total, grads = _fused_pass(features, weight, bias, targets, options, needs)
        ctx.dtypes = (features.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.save_for_backward(*grads)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        scaled = [
            None if g is None else (g * grad_output).to(dtype)
            for g, dtype in zip(ctx.saved_tensors, ctx.dtypes)
        ]
        return (*scaled, None, None)


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
    options = _Options(ignore_index, float(label_smoothing), chunk_rows, compute_dtype)
    args = (features, weight, bias, targets, options)
    inputs = (features, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        return _ProjectedCrossEntropy.apply(*args)
    with torch.no_grad(), torch.autocast(device_type, enabled=False):
        return _fused_pass(*args, needs=(False, False, False))[0]
