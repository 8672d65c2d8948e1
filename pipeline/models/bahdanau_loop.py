"""The Bahdanau wiring's teacher-forced loop for one GRU layer, with less work per step.

:func:`gru_attention_loop` computes Bahdanau 2014 eqs. 4-6 for every target step, equal
to looping ``BahdanauDecoder._recur`` over a ``StackedCell`` (tests/test_models.py):

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
or gradient buffer per step, the keys' gradient summed in one buffer, and the outputs
written time-major into buffers made once (the outputs are transposed views of them: not
for in-place edits). Other scorers run the same equations
through autograd, with :class:`~pipeline.models.step_linear.StepLinear` products and a
:class:`~pipeline.models.attention.StepReader` context.

Measured in docs/benchmarks.md ("Issue 13"); ``benchmarks.profile_step`` shows where the
rest of a step goes.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from pipeline.models import additive_energy as energy_blocks
from pipeline.models.attention import (
    AdditiveScorer,
    Memory,
    Scorer,
    StepReader,
    attention_weights,
)
from pipeline.models.step_linear import StepLinear


def gru_attention_loop(
    cell: nn.GRUCell, scorer: Scorer, embedded: torch.Tensor, memory: Memory, hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """embedded y_{i-1} (B, T, E), s_0 (B, H) -> s_i (B, T, H), c_i (B, T, H), a_i
    (B, T, S), with ``cell``'s weights and ``scorer`` scoring against s_{i-1}."""
    if isinstance(scorer, AdditiveScorer):
        return _additive_gru_loop(cell, scorer, embedded, memory, hidden)
    size, width = cell.hidden_size, embedded.size(-1)
    batch, steps = embedded.shape[:2]
    input_part = F.linear(embedded, cell.weight_ih[:, :width], cell.bias_ih)  # (B, T, 3H)
    context_weight = cell.weight_ih[:, width:]  # (3H, H)
    query_layer = scorer.query_layer()
    weight, bias = cell.weight_hh, cell.bias_hh  # (3H, H), (3H,)
    if query_layer is not None:  # [W_hh; W_a]: one product of s_{i-1} per step
        query_bias = query_layer.bias
        if query_bias is None:
            query_bias = bias.new_zeros(query_layer.out_features)
        weight = torch.cat([weight, query_layer.weight])  # (3H + A, H)
        bias = torch.cat([bias, query_bias])
    if torch.is_autocast_enabled(embedded.device.type):  # cast once, not at every step
        dtype = torch.get_autocast_dtype(embedded.device.type)
        weight, context_weight = weight.to(dtype), context_weight.to(dtype)
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
    width = embedded.size(-1)
    input_part = F.linear(embedded, cell.weight_ih[:, :width], cell.bias_ih)  # (B, T, 3H)
    query = scorer.query_layer()  # W_a (without a bias in AdditiveScorer)
    query_bias = (
        query.bias if query.bias is not None else query.weight.new_zeros(query.out_features)
    )
    weight = torch.cat([cell.weight_hh, query.weight])  # [W_hh; W_a], (3H + A, H)
    bias = torch.cat([cell.bias_hh, query_bias])
    context_weight, values = cell.weight_ih[:, width:], memory.values  # (3H, H), (B, S, H)
    device = embedded.device.type
    if torch.is_autocast_enabled(device):  # products in the autocast dtype, cast once
        dtype = torch.get_autocast_dtype(device)
        weight, context_weight, values = (t.to(dtype) for t in (weight, context_weight, values))
    hidden = hidden.to(torch.promote_types(hidden.dtype, torch.float32))  # the state's dtype
    with torch.autocast(device, enabled=False):
        return _AdditiveGRULoop.apply(
            input_part, hidden, weight, bias, context_weight, values, memory.keys,
            scorer.energy.weight.squeeze(0), memory.src_mask,
        )  # fmt: skip


class _AdditiveGRULoop(torch.autograd.Function):
    """The teacher-forced Bahdanau loop with the additive scorer, forward and backward by
    hand. Products run in the dtype of ``weight`` (bf16 under autocast); the state, gates,
    energies and softmax in float32 (float64 for float64 inputs). Per step i, with
    s = s_{i-1}:

        R = s [W_hh; W_a]^T + [b_hh; 0]        (B, 3H + A): gates' recurrent part, query q
        a = softmax(v . tanh(q + k_j), masked)  (B, S)        (additive_energy.step_scores)
        c = a V                                 (B, H)
        G = X_i + c W_c^T                       (B, 3H): X_i = W_ih[:, :E] y_{i-1} + b_ih
        r, z = sigma(G_rz + R_rz); n = tanh(G_n + r R_n); s' = n + z (s - n)

    Backward walks the steps in reverse, carrying ds; each step's dR, dG and dc are kept
    (T, B, *) for the weights' and the values' gradients, one product each after the loop.
    """

    @staticmethod
    def forward(ctx, input_part, hidden, weight, bias, context_weight, values, keys, energy, mask):
        ctx.set_materialize_grads(False)
        size, (batch, steps) = context_weight.size(1), input_part.shape[:2]
        sources, attention = keys.shape[1:]
        state, first = hidden.dtype, hidden
        keys_dtype, keys, energy_f = keys.dtype, keys.to(state), energy.to(state)
        energy2 = energy_f * 2
        # -sum(v) (the tanh-through-sigmoid identity) and the mask, added in one pass
        offset = keys.new_zeros(batch, sources).masked_fill_(~mask, float("-inf"))
        offset -= energy_f.sum()
        buffer = energy_blocks.step_buffer(keys)
        inputs = input_part.transpose(0, 1).contiguous()  # X_i, (T, B, 3H)
        tops = hidden.new_empty(steps, batch, size)  # s_i, time-major
        contexts = values.new_empty(steps, batch, size)  # c_i
        weights = hidden.new_empty(steps, batch, sources)  # a_i
        previous = weight.new_empty(steps, batch, size)  # s_{i-1} in the products' dtype
        queries2 = keys.new_empty(steps, batch, attention)  # 2 q_i
        gates = hidden.new_empty(steps, batch, 4 * size)  # r | z | n | R_n
        scores = keys.new_empty(batch, sources)
        bias_dtype, bias = bias.dtype, bias.to(weight.dtype)
        previous[0] = hidden
        for i in range(steps):
            recurrent = torch.addmm(bias, previous[i], weight.t()).to(state)  # (B, 3H + A)
            torch.mul(recurrent[:, 3 * size :], 2, out=queries2[i])
            energy_blocks.step_scores(queries2[i], keys, energy2, offset, buffer, scores)
            torch.softmax(scores, -1, out=weights[i])
            read = weights[i].to(values.dtype).unsqueeze(1)  # (B, 1, S)
            torch.bmm(read, values, out=contexts[i].unsqueeze(1))  # c_i
            inputs_i = torch.addmm(inputs[i], contexts[i], context_weight.t()).to(state)  # G
            saved = gates[i]
            rz = saved[:, : 2 * size]
            torch.add(inputs_i[:, : 2 * size], recurrent[:, : 2 * size], out=rz).sigmoid_()
            reset, update = rz[:, :size], rz[:, size:]
            recurrent_n = saved[:, 3 * size :]
            recurrent_n.copy_(recurrent[:, 2 * size : 3 * size])
            candidate = saved[:, 2 * size : 3 * size]
            torch.addcmul(inputs_i[:, 2 * size :], reset, recurrent_n, out=candidate).tanh_()
            hidden = torch.addcmul(candidate, update, hidden - candidate, out=tops[i])
            if i + 1 < steps:
                previous[i + 1] = hidden
        ctx.save_for_backward(first, tops, previous, queries2, gates, weights, contexts,
                              weight, context_weight, values, keys, energy_f)  # fmt: skip
        ctx.dtypes, ctx.device_type = (bias_dtype, keys_dtype, energy.dtype), keys.device.type
        return tops.transpose(0, 1), contexts.transpose(0, 1), weights.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_tops, grad_contexts, grad_weights):
        # products in the saved weights' dtype even if backward runs inside autocast
        with torch.autocast(ctx.device_type, enabled=False):
            return _AdditiveGRULoop._backward(ctx, grad_tops, grad_contexts, grad_weights)

    @staticmethod
    def _backward(ctx, grad_tops, grad_contexts, grad_weights):
        (first, tops, previous, queries2, gates, weights, contexts,
         weight, context_weight, values, keys, energy) = ctx.saved_tensors  # fmt: skip
        steps, batch, size = previous.shape
        state = gates.dtype
        values_t = values.transpose(1, 2).contiguous()  # (B, H, S)
        buffer = energy_blocks.step_buffer(keys)
        grad_keys, grad_energy = torch.empty_like(keys), torch.zeros_like(energy)
        grad_query = keys.new_empty(batch, keys.size(2))
        grad_recurrent = weight.new_empty(steps, batch, weight.size(0))  # dR_i
        grad_inputs = weight.new_empty(steps, batch, 3 * size)  # dG_i = dX_i
        grad_context = values.new_empty(steps, batch, size)  # dc_i
        grad_bias = gates.new_zeros(weight.size(0))
        grad_pre = gates.new_empty(batch, 3 * size)  # d(pre-activations): r | z | n
        grad_hidden = gates.new_zeros(batch, size)  # ds, carried back through the steps
        grad_tops = None if grad_tops is None else grad_tops.transpose(0, 1)
        grad_contexts = None if grad_contexts is None else grad_contexts.transpose(0, 1)
        grad_weights = None if grad_weights is None else grad_weights.transpose(0, 1)
        for i in reversed(range(steps)):
            if grad_tops is not None:
                grad_hidden += grad_tops[i]
            saved = gates[i]
            reset, update = saved[:, :size], saved[:, size : 2 * size]
            candidate, recurrent_n = saved[:, 2 * size : 3 * size], saved[:, 3 * size :]
            hidden = tops[i - 1] if i else first  # s_{i-1}
            grad_n = grad_pre[:, 2 * size :]
            torch.mul(grad_hidden, 1 - update, out=grad_n).mul_(1 - candidate * candidate)
            torch.mul(grad_n, recurrent_n, out=grad_pre[:, :size]).mul_(reset - reset * reset)
            torch.mul(grad_hidden, hidden - candidate, out=grad_pre[:, size : 2 * size])
            grad_pre[:, size : 2 * size].mul_(update - update * update)
            grad_inputs[i] = grad_pre  # dG = dX_i
            if grad_contexts is None:
                torch.mm(grad_inputs[i], context_weight, out=grad_context[i])
            else:
                torch.addmm(grad_contexts[i], grad_inputs[i], context_weight, out=grad_context[i])
            grad_a = torch.bmm(grad_context[i].unsqueeze(1), values_t).squeeze(1).to(state)
            if grad_weights is not None:
                grad_a += grad_weights[i]
            a = weights[i]  # softmax backward: a (da - sum(a da)); masked positions: a = 0
            grad_scores = grad_a.sub_((a * grad_a).sum(-1, keepdim=True)).mul_(a)
            energy_blocks.step_backward(
                grad_scores, queries2[i], keys, energy, buffer, grad_query, grad_keys,
                grad_energy, first=i == steps - 1,
            )  # fmt: skip
            grad_n.mul_(reset)  # d(r R_n) -> dR_n; done with d pre_n (in dX_i above)
            row = grad_recurrent[i]  # dR = [d r | d z | d n * r | dq]
            row[:, : 3 * size] = grad_pre
            row[:, 3 * size :] = grad_query
            grad_bias[: 3 * size] += grad_pre.sum(0)  # in the state's dtype
            grad_bias[3 * size :] += grad_query.sum(0)  # W_a's bias, if the scorer has one
            grad_hidden = torch.mm(row, weight).to(state).addcmul_(grad_hidden, update)
        flat = steps * batch
        recurrent = grad_recurrent.view(flat, -1)
        grad_weight = recurrent.t() @ previous.view(flat, size)
        grad_context_weight = grad_inputs.view(flat, -1).t() @ contexts.view(flat, size)
        grad_values = weights.to(values.dtype).permute(1, 2, 0) @ grad_context.transpose(0, 1)
        bias_dtype, keys_dtype, energy_dtype = ctx.dtypes
        return (grad_inputs.transpose(0, 1), grad_hidden, grad_weight, grad_bias.to(bias_dtype),
                grad_context_weight, grad_values, grad_keys.to(keys_dtype),
                grad_energy.to(energy_dtype), None)  # fmt: skip
