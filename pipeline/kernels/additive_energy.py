"""The additive (Bahdanau) energy ``e_ts = v . tanh(q_t + k_s)`` for all T queries at once,
in cache-sized blocks and with a recomputing backward.

Written with autograd, ``tanh(q[:, :, None] + k[:, None]) @ v`` stores a (B, T, S, A)
tensor per batch (100 MB at B=108, T=29, S=31, A=256) and its backward makes five more
passes over tensors of that size; each pass runs at memory speed, and on CPU every fresh
multi-MB tensor also costs page faults. That made the additive scorer the slowest part of
a training step (``python -m benchmarks.profile_step``). Here forward and backward walk
blocks of about ``BLOCK_ELEMENTS`` elements through one reused buffer that stays in
cache, and backward recomputes ``tanh`` instead of storing it (the trick of
FlashAttention, for the additive score)::

    h = tanh(q_t + k_s)                  (block, A)
    e_ts = h . v
    dv  += sum_ts de_ts h
    dpre = de_ts (1 - h^2) v            -> dq_t = sum_s dpre,  dk_s = sum_t dpre

The work is float32 even under autocast: CPU bfloat16 ``tanh`` is 5x slower than float32.
And ``tanh`` itself is computed as ``tanh(x) = 2 sigmoid(2x) - 1``: torch 2.13's CPU
``tanh_`` costs 3.5 ns per float32 element against 0.56 for ``sigmoid_`` (one
thread), and the identity is exact up to rounding (at most 1.8e-7 apart on
262,144 normal values of sd 3). The
forward pass needs no ``2s - 1`` pass at all: ``h . v = 2 (s . v) - sum(v)``.

On a CPU, float32 work goes to the compiled kernel of :mod:`pipeline.kernels.native` when
it builds (one fused pass forward and one backward, 2.79x these blocks on real 1000-token
batches, ``benchmarks/energy_kernel.py`` of commit 968721a); these blocks are the fallback and the
path for every other device and dtype. The Bahdanau GRU loop's per-step
:class:`StepEnergy` always uses these blocks.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from pipeline.kernels import native

BLOCK_ELEMENTS = 2**18
"""Elements of one (b, t, S, A) block: 1 MB of float32, inside a core's L2 cache."""


def additive_energy(query: torch.Tensor, keys: torch.Tensor, energy: torch.Tensor) -> torch.Tensor:
    """query (B, T, A) = W_a s, keys (B, S, A) = U_a h, energy (A,) = v_a -> scores (B, T, S)
    in float32 (float64 for float64 inputs)."""
    return _AdditiveEnergy.apply(query, keys, energy)


class StepEnergy:
    """One decoder step's energies and their backward, for a loop with its own backward
    (:mod:`pipeline.models.bahdanau_loop`), in blocks of batch rows (:func:`step_block_rows`)
    through one scratch buffer. The blocks' views are made once, here, not at every step.

    ``keys2`` = 2 k (B, S, A) and ``energy`` = v (A,); a step's query q (B, A) may be a
    strided view (a column block of the loop's recurrent product). With s = sigmoid(2 q +
    2 k) = (tanh(q + k) + 1) / 2, the backward uses 1 - tanh^2 = 4 s (1 - s): per block
    sigmoid, s - s^2, times de, and two sums, instead of forming tanh and 1 - tanh^2.
    """

    def __init__(self, keys2: torch.Tensor, energy: torch.Tensor):
        batch, sources, size = keys2.shape
        rows = step_block_rows(batch, sources, size, keys2.device)
        self.buffer = keys2.new_empty(rows * sources * size)
        self.energy2, self.energy4 = energy * 2, energy * 4
        self.blocks = []  # (first row, last row + 1, keys2's rows, scratch block)
        for b0 in range(0, batch, rows):
            b1 = min(b0 + rows, batch)
            block = self.buffer[: (b1 - b0) * sources * size].view(b1 - b0, sources, size)
            self.blocks.append((b0, b1, keys2[b0:b1], block))

    def _sigmoid(self, query: torch.Tensor, b0: int, b1: int, keys2, block) -> torch.Tensor:
        return torch.add(keys2, query[b0:b1].unsqueeze(1), alpha=2, out=block).sigmoid_()

    def scores(self, query: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out (B, S, contiguous) = 2 s . v = v . tanh(q + k) + sum(v): the energies up to
        a constant per row, which a softmax ignores."""
        size = self.energy2.size(0)
        for b0, b1, keys2, block in self.blocks:
            block = self._sigmoid(query, b0, b1, keys2, block)
            torch.mv(block.view(-1, size), self.energy2, out=out[b0:b1].view(-1))
        return out

    def backward(
        self,
        grad_scores: torch.Tensor,
        query: torch.Tensor,
        grad_query: torch.Tensor,
        grad_keys: torch.Tensor,
        grad_energy: torch.Tensor,
        first: bool,
    ) -> torch.Tensor:
        """The backward of :meth:`scores` for ``grad_scores`` (B, S, contiguous), whose rows
        sum to zero (a softmax's backward; so sum de h = 2 sum de s, with no -sum(de) term):
        writes dq (B, A) into ``grad_query`` and returns it, adds dv into ``grad_energy``
        (A,), and adds sum_t de s (1 - s) into ``grad_keys`` (B, S, A; overwritten when
        ``first``): the keys' gradient is that sum times 4 v (:meth:`finish_keys`), once
        for all steps."""
        size = self.energy2.size(0)
        for b0, b1, keys2, block in self.blocks:
            block = self._sigmoid(query, b0, b1, keys2, block)
            grad = grad_scores[b0:b1]  # (b, S)
            grad_energy.addmv_(block.view(-1, size).t(), grad.view(-1), alpha=2)
            block.addcmul_(block, block, value=-1).mul_(grad.unsqueeze(-1))  # de s (1 - s)
            torch.sum(block, 1, out=grad_query[b0:b1])
            if first:
                grad_keys[b0:b1].copy_(block)
            else:
                grad_keys[b0:b1].add_(block)
        return grad_query.mul_(self.energy4)

    def finish_keys(self, grad_keys: torch.Tensor) -> torch.Tensor:
        """The keys' gradient k -> dk from :meth:`backward`'s sum, in place."""
        return grad_keys.mul_(self.energy4)


def step_block_rows(batch: int, sources: int, size: int, device: torch.device) -> int:
    """Batch rows of one step's block: about BLOCK_ELEMENTS elements on a CPU, every row
    elsewhere (:func:`_block_shape` of one query step)."""
    return _block_shape(batch, 1, sources, size, device)[0]


def _scores_blocks(query2, keys, energy2, buffer, out) -> None:
    """out (B, T, S) = s . 2v, s = sigmoid(2 q_t + 2 k_s), block by block (``query2`` = 2 q
    (B, T, A), ``energy2`` = 2 v); ``buffer`` holds one block."""
    (B, T, A), S = query2.shape, keys.size(1)
    b_size, t_size = _block_shape(B, T, S, A, query2.device)
    for b0, b1, t0, t1 in _blocks(B, T, b_size, t_size):
        block = _sigmoid_block(buffer, query2, keys, b0, b1, t0, t1)
        out[b0:b1, t0:t1] = (block.view(-1, A) @ energy2).view(block.shape[:3])


def _backward_blocks(grad_scores, query2, keys, energy, buffer, grad_query, grad_keys, grad_energy):
    """The backward of :func:`_scores_blocks` for ``grad_scores`` (B, T, S): dq into
    ``grad_query`` (B, T, A) and dk into ``grad_keys`` (B, S, A), each written by its rows'
    first block (no zero-fill); dv added into ``grad_energy`` (A,). ``tanh`` is recomputed
    from the sigmoid, not stored. With s = sigmoid(2 q + 2 k), h = 2 s - 1 and
    1 - h^2 = 4 s (1 - s), so a block needs the sigmoid, s - s^2 and de, and the factor
    4 v is applied once to the summed dq and dk::

        dv = sum de h = 2 sum de s - sum de
        dq_t = 4 v * sum_s de s (1 - s),   dk_s = 4 v * sum_t de s (1 - s)
    """
    (B, T, A), S = query2.shape, keys.size(1)
    b_size, t_size = _block_shape(B, T, S, A, query2.device)
    for b0, b1, t0, t1 in _blocks(B, T, b_size, t_size):
        block = _sigmoid_block(buffer, query2, keys, b0, b1, t0, t1)  # s, (b, t, S, A)
        grad = grad_scores[b0:b1, t0:t1]  # (b, t, S)
        grad_energy.addmv_(block.view(-1, A).t(), grad.reshape(-1), alpha=2)
        block.addcmul_(block, block, value=-1).mul_(grad.unsqueeze(-1))  # de s (1 - s)
        torch.sum(block, 2, out=grad_query[b0:b1, t0:t1])
        rows = block[:, 0] if block.size(1) == 1 else block.sum(1)  # (b, S, A)
        if t0:
            grad_keys[b0:b1] += rows
        else:
            grad_keys[b0:b1] = rows
    grad_energy -= grad_scores.sum()
    energy4 = energy * 4
    grad_query.mul_(energy4)
    grad_keys.mul_(energy4)


def _block_shape(
    batch: int, steps: int, sources: int, size: int, device: torch.device
) -> tuple[int, int]:
    """(b, t): batch rows and query steps per block, about BLOCK_ELEMENTS in all on a CPU;
    elsewhere one block (a GPU wants few, large kernels, and has the memory)."""
    if device.type != "cpu":
        return batch, steps
    row = sources * size  # elements per (batch row, query step)
    t_size = min(steps, max(1, BLOCK_ELEMENTS // row))
    return min(batch, max(1, BLOCK_ELEMENTS // (t_size * row))), t_size


def _blocks(batch: int, steps: int, b_size: int, t_size: int):
    for b0 in range(0, batch, b_size):
        for t0 in range(0, steps, t_size):
            yield b0, min(b0 + b_size, batch), t0, min(t0 + t_size, steps)


def _sigmoid_block(buffer, query2, keys, b0, b1, t0, t1) -> torch.Tensor:
    """s = sigmoid(2 q_t + 2 k_s) of one block (``query2 = 2 q``), written into ``buffer``;
    (b, t, S, A). tanh(q_t + k_s) = 2 s - 1."""
    shape = (b1 - b0, t1 - t0, keys.size(1), keys.size(2))
    block = buffer[: shape[0] * shape[1] * shape[2] * shape[3]].view(shape)
    torch.add(query2[b0:b1, t0:t1].unsqueeze(2), keys[b0:b1].unsqueeze(1), alpha=2, out=block)
    return block.sigmoid_()


class _AdditiveEnergy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, keys, energy):
        ctx.dtypes = (query.dtype, keys.dtype, energy.dtype)
        ctx.kernel = _native_kernel(query, keys)
        if ctx.kernel is not None:
            with torch.autocast("cpu", enabled=False):
                query, keys, energy = (t.float().contiguous() for t in (query, keys, energy))
                ctx.save_for_backward(query, keys, energy)
                return ctx.kernel.forward(query, keys, energy)
        with torch.autocast(query.device.type, enabled=False):
            dtype = torch.promote_types(query.dtype, torch.float32)  # float64 stays
            # keys are not copied: AdditiveScorer.precompute makes them float32 once, and a
            # per-step decoder calls this T times with the same keys
            query2, keys, energy = query.to(dtype) * 2, keys.to(dtype), energy.to(dtype)
            (B, T, A), S = query.shape, keys.size(1)
            scores = query2.new_empty((B, T, S))
            b_size, t_size = _block_shape(B, T, S, A, query.device)
            buffer = query2.new_empty(b_size * t_size * S * A)
            energy2, offset = energy * 2, energy.sum()  # h . v = s . 2v - sum(v)
            _scores_blocks(query2, keys, energy2, buffer, scores)
            scores -= offset
        ctx.save_for_backward(query2, keys, energy)
        return scores

    @staticmethod
    @once_differentiable  # backward works in place on a scratch buffer
    def backward(ctx, grad_scores):
        if ctx.kernel is not None:
            query, keys, energy = ctx.saved_tensors
            grads = ctx.kernel.backward(grad_scores.float().contiguous(), query, keys, energy)
            return tuple(g.to(dtype) for g, dtype in zip(grads, ctx.dtypes))
        query2, keys, energy = ctx.saved_tensors
        with torch.autocast(query2.device.type, enabled=False):
            grad_scores = grad_scores.to(query2.dtype)
            (B, T, A), S = query2.shape, keys.size(1)
            # each row's first block writes its rows: no zero-fill
            grad_keys = torch.empty_like(keys) if B and T else torch.zeros_like(keys)
            grad_query = torch.empty_like(query2)
            grad_energy = torch.zeros_like(energy)
            b_size, t_size = _block_shape(B, T, S, A, query2.device)
            buffer = query2.new_empty(b_size * t_size * S * A)
            _backward_blocks(
                grad_scores, query2, keys, energy, buffer, grad_query, grad_keys, grad_energy
            )
        dtypes = ctx.dtypes
        return grad_query.to(dtypes[0]), grad_keys.to(dtypes[1]), grad_energy.to(dtypes[2])


def _native_kernel(query: torch.Tensor, keys: torch.Tensor):
    """The compiled kernel for float32 (or narrower, computed in float32) CPU inputs, if
    it builds here; None for other devices, float64, or without it."""
    if query.device.type != "cpu" or torch.float64 in (query.dtype, keys.dtype):
        return None
    return native.additive_energy_kernel()
