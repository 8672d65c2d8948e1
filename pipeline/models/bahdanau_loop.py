"""The Bahdanau wiring's teacher-forced loop for one GRU layer, with less work per step.

:func:`gru_attention_loop` computes Bahdanau 2014 eqs. 4-6 for every target step, equal
to looping ``BahdanauDecoder._recur`` over a ``StackedCell`` (tests/unit/test_models.py):

- the embeddings' share of the GRU input product, ``W_ih[:, :E] y_{i-1} + b_ih``, is one
  product for all steps before the loop;
- ``W_hh s_{i-1}`` and the scorer's query map ``W_a s_{i-1}`` (additive, location) are
  one product of ``s_{i-1}`` per step;
- the gates are torch's GRUCell equations in float32 (r, z, n order), so the state stays
  float32 under autocast; weights are cast to the autocast dtype once per batch;
- each weight's gradient is one product per batch after the loop (cuDNN's split of an
  RNN's backward), as is the attention values' gradient;
- no dropout mask is drawn past the only layer.

With the additive scorer (Bahdanau's own) the whole loop is one autograd function,
:class:`_AdditiveGRULoop`, with a hand-written backward through time: no autograd node
or gradient buffer per step, the keys' gradient summed in one buffer (and scaled by 4 v
once, :class:`~pipeline.kernels.additive_energy.StepEnergy`), and the outputs written
time-major into buffers made once (the outputs are transposed views of them: not for
in-place edits). Each step indexes per-step views made once, keeps every elementwise op
in one dtype (torch's mixed bf16 / float32 path is slower than a cast and an op), and
takes the softmax's backward from aten's kernel: about 300 operator calls per step,
forward and backward, from 550. Other scorers run the same equations through autograd,
with :class:`~pipeline.kernels.step_linear.StepLinear` products and a
:class:`~pipeline.models.attention.StepReader` context.

``benchmarks/step_overhead.py`` of commit 968721a measured this loop against the
generic one (``benchmarks/results/step_overhead/``); ``python -m benchmarks.profile_step``
shows where the rest of a step goes.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from pipeline.kernels import additive_energy as energy_blocks
from pipeline.kernels.step_linear import StepLinear
from pipeline.models.attention import (
    AdditiveScorer,
    Memory,
    Scorer,
    StepReader,
    attention_weights,
)


def gru_attention_loop(
    cell: nn.GRUCell, scorer: Scorer, embedded: torch.Tensor, memory: Memory, hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """embedded y_{i-1} (B, T, E), s_0 (B, H) -> s_i (B, T, H), c_i (B, T, H), a_i
    (B, T, S), with ``cell``'s weights and ``scorer`` scoring against s_{i-1}."""
    if isinstance(scorer, AdditiveScorer):
        return _additive_gru_loop(cell, scorer, embedded, memory, hidden)
    size, (batch, steps) = cell.hidden_size, embedded.shape[:2]
    input_part, weight, bias, context_weight = _loop_products(cell, scorer, embedded)
    query_layer = scorer.query_layer()
    hidden = hidden.float()
    recurrent_layer, recurrent_anchors = StepLinear.start(weight, bias, steps, batch)
    context_layer, context_anchors = StepLinear.start(context_weight, None, steps, batch)
    reader, read_anchors = StepReader.start(memory.values, steps)
    tops, contexts, weights = [], [], []
    # unbind/split, not [:, t] slices: a slice's backward writes its gradient into a
    # fresh zero tensor of the whole input, T times a (B, T, 3H) tensor per batch
    anchors = zip(recurrent_anchors, context_anchors, read_anchors)
    for step_inputs, (recurrent_anchor, context_anchor, read_anchor) in zip(
        input_part.unbind(1), anchors
    ):  # (B, 3H) each
        recurrent = recurrent_layer(hidden, recurrent_anchor)  # (B, 3H [+ A])
        recurrent, query = recurrent.split([3 * size, recurrent.size(1) - 3 * size], 1)
        query = hidden if query_layer is None else query
        scores = scorer.score_projected(query.unsqueeze(1), memory.keys)  # (B, 1, S)
        weight_t = attention_weights(scores, memory.src_mask).squeeze(1)  # a_i, (B, S)
        context = reader.read(weight_t, read_anchor)  # c_i, (B, H)
        gates = context_layer(context, context_anchor, addend=step_inputs)  # (B, 3H)
        hidden = gru_update(gates.float(), recurrent.float(), hidden)
        tops.append(hidden)
        contexts.append(context)
        weights.append(weight_t)
    stack = functools.partial(torch.stack, dim=1)
    return stack(tops), stack(contexts), stack(weights)


def _loop_products(cell: nn.GRUCell, scorer: Scorer, embedded: torch.Tensor):
    """What both loops multiply: the embeddings' share of the GRU input for all steps,
    ``W_ih[:, :E] y + b_ih`` (B, T, 3H); the per-step recurrent weight and bias, [W_hh; W_a]
    and [b_hh; b_a] when the scorer has a query layer (one product of s_{i-1} per step,
    a missing b_a as zeros), else W_hh and b_hh; and the context's weight W_ih[:, E:]
    (3H, H). Under autocast the two per-step weights are cast once, not at every step."""
    width = embedded.size(-1)
    input_part = F.linear(embedded, cell.weight_ih[:, :width], cell.bias_ih)
    context_weight = cell.weight_ih[:, width:]
    weight, bias = cell.weight_hh, cell.bias_hh
    query_layer = scorer.query_layer()
    if query_layer is not None:
        query_bias = query_layer.bias
        if query_bias is None:
            query_bias = bias.new_zeros(query_layer.out_features)
        weight = torch.cat([weight, query_layer.weight])
        bias = torch.cat([bias, query_bias])
    device = embedded.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        weight, context_weight = weight.to(dtype), context_weight.to(dtype)
    return input_part, weight, bias, context_weight


def gru_update(inputs: torch.Tensor, recurrent: torch.Tensor, hidden: torch.Tensor):
    """torch.nn.GRUCell's update from its two products: inputs = W_ih x + b_ih, recurrent =
    W_hh h + b_hh (B, 3H, gates r, z, n), hidden h (B, H) -> h' (B, H).

    r = sigma(i_r + h_r), z = sigma(i_z + h_z), n = tanh(i_n + r * h_n), h' = (1 - z) n + z h.
    """
    size = hidden.size(-1)
    inputs_rz, inputs_n = inputs.split([2 * size, size], 1)
    recurrent_rz, recurrent_n = recurrent.split([2 * size, size], 1)
    reset, update = torch.sigmoid(inputs_rz + recurrent_rz).chunk(2, 1)
    candidate = torch.tanh(inputs_n + reset * recurrent_n)
    return candidate + update * (hidden - candidate)


def _additive_gru_loop(
    cell: nn.GRUCell,
    scorer: AdditiveScorer,
    embedded: torch.Tensor,
    memory: Memory,
    hidden: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`gru_attention_loop` for the additive scorer, through :class:`_AdditiveGRULoop`."""
    input_part, weight, bias, context_weight = _loop_products(cell, scorer, embedded)
    device = embedded.device.type
    state = torch.promote_types(hidden.dtype, torch.float32)  # float64 stays
    # the contexts' products, as the others; contiguous once: the encoder's outputs are
    # time-major underneath, and each step's bmm would otherwise copy them again
    values = memory.values.to(weight.dtype, memory_format=torch.contiguous_format)
    with torch.autocast(device, enabled=False):
        return _AdditiveGRULoop.apply(
            input_part,
            hidden.to(state),
            weight,
            bias,
            context_weight,
            values,
            memory.keys,
            scorer.energy.weight.squeeze(0),
            memory.src_mask,
        )


class _AdditiveGRULoop(torch.autograd.Function):
    """The teacher-forced Bahdanau loop with the additive scorer, forward and backward by
    hand. The products (the two per step, and the context's batched product with the
    values) run in the dtype of ``weight`` (bf16 under autocast); the state, gates,
    energies and softmax in float32 (float64 for float64 inputs). Per step i, with
    s = s_{i-1}:

        R = s [W_hh; W_a]^T + [b_hh; 0]        (B, 3H + A): gates' recurrent part, query q
        a = softmax(v . tanh(q + k_j), masked)  (B, S)        (additive_energy.StepEnergy)
        c = a V                                 (B, H)
        G = X_i + c W_c^T                       (B, 3H): X_i = W_ih[:, :E] y_{i-1} + b_ih
        r, z = sigma(G_rz + R_rz); n = tanh(G_n + r R_n); s' = n + z (s - n)

    Every per-step tensor lives in a time-major buffer made once (:class:`_LoopBuffers`,
    :class:`_LoopGrads`), and the loops (:func:`_forward_steps`, :func:`_backward_steps`)
    index lists of its per-step views (``unbind``), so a step issues few operator calls.
    Backward walks the steps in reverse, carrying ds; each step's dR, dG and dc are kept
    (T, B, *) for the weights' and the values' gradients, one product each after the loop.
    """

    @staticmethod
    def forward(ctx, input_part, hidden, weight, bias, context_weight, values, keys, energy, mask):
        ctx.set_materialize_grads(False)
        batch, sources = mask.shape
        state = hidden.dtype
        keys_dtype, keys2, energy_f = keys.dtype, keys.to(state) * 2, energy.to(state)
        step_energy = energy_blocks.StepEnergy(keys2, energy_f)
        # -sum(v) (the tanh-through-sigmoid identity) and the mask, added in one pass
        offset = keys2.new_zeros(batch, sources).masked_fill_(~mask, float("-inf"))
        offset -= energy_f.sum()
        buffers = _LoopBuffers.empty(input_part, hidden, weight, values, sources)
        bias_dtype, bias = bias.dtype, bias.to(weight.dtype)
        _forward_steps(
            buffers, input_part, hidden, weight, bias, context_weight, values, step_energy, offset
        )
        ctx.save_for_backward(*buffers, weight, context_weight, values, keys2, energy_f)
        ctx.dtypes, ctx.device_type = (bias_dtype, keys_dtype, energy.dtype), keys.device.type
        outputs = buffers.tops, buffers.contexts.squeeze(2), buffers.weights.squeeze(2)
        return tuple(t.transpose(0, 1) for t in outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_tops, grad_contexts, grad_weights):
        # products in the saved weights' dtype even if backward runs inside autocast
        with torch.autocast(ctx.device_type, enabled=False):
            return _AdditiveGRULoop._backward(ctx, grad_tops, grad_contexts, grad_weights)

    @staticmethod
    def _backward(ctx, grad_tops, grad_contexts, grad_weights):
        *saved, weight, context_weight, values, keys2, energy = ctx.saved_tensors
        buffers = _LoopBuffers(*saved)
        steps, batch, size = buffers.previous.shape
        step_energy = energy_blocks.StepEnergy(keys2, energy)
        grad_keys, grad_energy = torch.empty_like(keys2), torch.zeros_like(energy)
        grads = _LoopGrads(
            recurrent=weight.new_empty(steps, batch, weight.size(0)),  # dR_i, products' dtype
            inputs=weight.new_empty(steps, batch, 3 * size),  # dG_i = dX_i
            context=values.new_empty(steps, batch, 1, size),  # dc_i
        )
        incoming = [  # the outputs' gradients, per step (None: that output had none)
            grad.transpose(0, 1) if grad is not None else [None] * steps
            for grad in (grad_tops, grad_contexts, grad_weights)
        ]
        grad_hidden, bias_sum = _backward_steps(
            buffers,
            grads,
            incoming,
            weight,
            context_weight,
            values,
            step_energy,
            grad_keys,
            grad_energy,
        )
        flat = steps * batch
        grad_weight = grads.recurrent.view(flat, -1).t() @ buffers.previous.view(flat, size)
        grad_context_weight = grads.inputs.view(flat, -1).t() @ buffers.contexts.view(flat, size)
        read = buffers.weights.squeeze(2).to(values.dtype).permute(1, 2, 0)  # (B, S, T)
        grad_values = read @ grads.context.squeeze(2).transpose(0, 1)  # (B, S, H)
        bias_dtype, keys_dtype, energy_dtype = ctx.dtypes
        return (
            grads.inputs.transpose(0, 1),
            grad_hidden,
            grad_weight,
            bias_sum.sum(0).to(bias_dtype),
            grad_context_weight,
            grad_values,
            step_energy.finish_keys(grad_keys).to(keys_dtype),
            grad_energy.to(energy_dtype),
            None,
        )


class _LoopBuffers(NamedTuple):
    """The forward's per-step tensors, time-major, made once and saved for backward."""

    tops: torch.Tensor  # s_i (T, B, H)
    previous: torch.Tensor  # s_{i-1} in the products' dtype (T, B, H)
    recurrents: torch.Tensor  # R_i: r | z | n parts, q_i (T, B, 3H + A)
    gates: torch.Tensor  # r | z | n (T, B, 3H)
    differences: torch.Tensor  # s_{i-1} - n (T, B, H)
    weights: torch.Tensor  # a_i (T, B, 1, S)
    contexts: torch.Tensor  # c_i (T, B, 1, H), in the values' dtype

    @classmethod
    def empty(cls, input_part, hidden, weight, values, sources: int) -> _LoopBuffers:
        """Buffers for the inputs X (B, T, 3H), s_0 (B, H), [W_hh; W_a] and V (B, S, H):
        the state's dtype except where noted."""
        (batch, steps), size, width = input_part.shape[:2], hidden.size(1), weight.size(0)
        return cls(
            tops=hidden.new_empty(steps, batch, size),
            previous=weight.new_empty(steps, batch, size),
            recurrents=hidden.new_empty(steps, batch, width),
            gates=hidden.new_empty(steps, batch, 3 * size),
            differences=hidden.new_empty(steps, batch, size),
            weights=hidden.new_empty(steps, batch, 1, sources),
            contexts=values.new_empty(steps, batch, 1, size),
        )


class _LoopGrads(NamedTuple):
    """The backward's per-step gradients, time-major: each is read by one product after
    the loop (the weights', the values')."""

    recurrent: torch.Tensor  # dR_i (T, B, 3H + A), in the products' dtype
    inputs: torch.Tensor  # dG_i = dX_i (T, B, 3H), in the products' dtype
    context: torch.Tensor  # dc_i (T, B, 1, H), in the values' dtype


def _forward_steps(
    buffers: _LoopBuffers,
    input_part: torch.Tensor,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    context_weight: torch.Tensor,
    values: torch.Tensor,
    step_energy: energy_blocks.StepEnergy,
    offset: torch.Tensor,
) -> None:
    """:class:`_AdditiveGRULoop`'s forward through the steps, into ``buffers``: X (B, T, 3H),
    s_0 (B, H), [W_hh; W_a], [b_hh; 0] in its dtype, W_c, V, the energies' blocks and
    their additive offset (B, S: -sum(v) and the mask)."""
    size, steps, width = context_weight.size(1), input_part.size(1), weight.size(0)
    state, b = hidden.dtype, buffers
    inputs = input_part.transpose(0, 1).contiguous().unbind(0)  # X_i, (B, 3H) each
    scores = torch.empty_like(offset)
    weight_t, context_t = weight.t(), context_weight.t()
    per_step = zip(
        inputs,
        b.previous.unbind(0),
        b.recurrents.unbind(0),
        *(t.unbind(0) for t in b.recurrents.split([2 * size, size, width - 3 * size], 2)),
        b.weights.unbind(0),
        b.contexts.unbind(0),
        b.gates[..., : 2 * size].unbind(0),
        *(t.unbind(0) for t in b.gates.split(size, 2)),
        b.differences.unbind(0),
        b.tops.unbind(0),
    )
    b.previous[0] = hidden
    for i, (
        inputs_i,
        previous_i,
        recurrent,
        recurrent_rz,
        recurrent_n,
        query,
        weight_i,
        context,
        reset_update,
        reset,
        update,
        candidate,
        difference,
        top,
    ) in enumerate(per_step):
        recurrent.copy_(torch.addmm(bias, previous_i, weight_t))  # R, in the state's dtype
        step_energy.scores(query, scores).add_(offset)
        torch.softmax(scores, -1, out=weight_i.squeeze(1))
        torch.bmm(weight_i.to(values.dtype), values, out=context)  # c_i, (B, 1, H)
        # G (B, 3H) in float32: an op with mixed bf16 / float32 inputs takes torch's
        # slower path
        gate_inputs = torch.addmm(inputs_i, context.squeeze(1), context_t).to(state)
        inputs_rz, inputs_n = gate_inputs.split([2 * size, size], 1)
        torch.add(inputs_rz, recurrent_rz, out=reset_update).sigmoid_()  # float32 sums
        torch.addcmul(inputs_n, reset, recurrent_n, out=candidate).tanh_()
        torch.sub(hidden, candidate, out=difference)
        hidden = torch.addcmul(candidate, update, difference, out=top)
        if i + 1 < steps:
            b.previous[i + 1] = hidden


def _backward_steps(
    buffers: _LoopBuffers,
    grads: _LoopGrads,
    incoming: list,
    weight: torch.Tensor,
    context_weight: torch.Tensor,
    values: torch.Tensor,
    step_energy: energy_blocks.StepEnergy,
    grad_keys: torch.Tensor,
    grad_energy: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:class:`_AdditiveGRULoop`'s backward through the steps, in reverse, carrying ds:
    fills ``grads``, sums the keys' and v's gradients into ``grad_keys`` and
    ``grad_energy``; ``incoming``: the three outputs' gradients per step. Returns ds_0
    (B, H) and dR summed over the steps (B, 3H + A)."""
    steps, batch, size = buffers.previous.shape
    gates, width = buffers.gates, weight.size(0)
    values_t = values.transpose(1, 2).contiguous()  # (B, H, S)
    grad_a = values.new_empty(batch, 1, values.size(1))  # da_i
    grad_row = gates.new_empty(batch, width)  # dR in float32: d r | d z | d n r | dq
    grad_pre, grad_query = grad_row.split([3 * size, width - 3 * size], 1)
    grad_r, grad_z, grad_n = grad_pre.split(size, 1)  # d(pre-activations) r | z | n
    bias_sum = gates.new_zeros(batch, width)  # dR summed over the steps
    grad_hidden = gates.new_zeros(batch, size)  # ds, carried back through the steps
    spare = torch.empty_like(grad_hidden)  # ds ping-pongs between these two
    per_step = zip(
        *(t.unbind(0) for t in gates.split(size, 2)),
        buffers.recurrents[..., 2 * size : 3 * size].unbind(0),
        buffers.recurrents[..., 3 * size :].unbind(0),
        buffers.differences.unbind(0),
        buffers.weights.squeeze(2).unbind(0),
        grads.inputs.unbind(0),
        grads.context.unbind(0),
        grads.recurrent.unbind(0),
        *incoming,
    )
    for i, (
        reset,
        update,
        candidate,
        recurrent_n,
        query,
        difference,
        a,
        grad_inputs_i,
        grad_c,
        grad_recurrent_i,
        grad_top,
        grad_c_out,
        grad_w_out,
    ) in reversed(list(enumerate(per_step))):
        if grad_top is not None:
            grad_hidden += grad_top
        _gru_backward(
            grad_hidden, reset, update, candidate, recurrent_n, difference, grad_r, grad_z, grad_n
        )
        grad_inputs_i.copy_(grad_pre)  # dG = dX_i
        if grad_c_out is None:  # dc_i, (B, 1, H)
            torch.mm(grad_inputs_i, context_weight, out=grad_c.squeeze(1))
        else:
            torch.addmm(grad_c_out, grad_inputs_i, context_weight, out=grad_c.squeeze(1))
        torch.bmm(grad_c, values_t, out=grad_a)
        grad_a_state = grad_a.squeeze(1).to(gates.dtype)  # da_i, (B, S)
        if grad_w_out is not None:
            grad_a_state += grad_w_out
        grad_scores = torch.ops.aten._softmax_backward_data(grad_a_state, a, -1, gates.dtype)
        step_energy.backward(
            grad_scores, query, grad_query, grad_keys, grad_energy, first=i == steps - 1
        )
        grad_n.mul_(reset)  # d(r R_n) -> dR_n; done with d n_pre (in dX_i above)
        grad_recurrent_i.copy_(grad_row)  # dR = [d r | d z | d n * r | dq]
        bias_sum += grad_row
        spare.copy_(torch.mm(grad_recurrent_i, weight)).addcmul_(grad_hidden, update)
        grad_hidden, spare = spare, grad_hidden
    return grad_hidden, bias_sum


def _gru_backward(
    grad_hidden, reset, update, candidate, recurrent_n, difference, grad_r, grad_z, grad_n
) -> None:
    """The GRU update's backward for one step: ds (B, H) -> the gradients of the gates'
    pre-activations, written into ``grad_r``, ``grad_z`` and ``grad_n`` (B, H) each."""
    # d n_pre = ds (1 - z) (1 - n^2); d z_pre = ds (s - n) z (1 - z)
    torch.addcmul(grad_hidden, grad_hidden, update, value=-1, out=grad_n)
    torch.addcmul(grad_n, grad_n * candidate, candidate, value=-1, out=grad_n)
    torch.mul(grad_hidden, difference, out=grad_z)
    grad_z.mul_(torch.addcmul(update, update, update, value=-1))
    # d r_pre = d n_pre R_n r (1 - r)
    torch.mul(grad_n, recurrent_n, out=grad_r)
    grad_r.mul_(torch.addcmul(reset, reset, reset, value=-1))
