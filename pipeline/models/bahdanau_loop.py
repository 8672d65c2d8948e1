"""The Bahdanau wiring's teacher-forced loop for one GRU layer, with less work per step.

:func:`gru_attention_loop` computes Bahdanau 2014 eqs. 4-6 for every target step, equal
to looping ``BahdanauDecoder._recur`` over a ``StackedCell`` (tests/test_models.py):

- the embeddings' share of the GRU input product, ``W_ih[:, :E] y_{i-1} + b_ih``, is one
  product for all steps before the loop;
- ``W_hh s_{i-1}`` and the scorer's query map ``W_a s_{i-1}`` (additive, location) are
  one product of ``s_{i-1}`` per step;
- the gates are torch's GRUCell equations in float32 (r, z, n order), so the state stays
  float32 under autocast; weights are cast to the autocast dtype once per batch;
- the context reads the values through a :class:`~pipeline.models.attention.StepReader`
  (their gradient in one product per batch), the scorer scores through its
  ``step_scorer`` (additive: the keys' gradient summed in one buffer,
  :class:`~pipeline.models.additive_energy.StepEnergy`), and both per-step products are
  :class:`~pipeline.models.step_linear.StepLinear` (their weights' gradients in one
  product per batch);
- no dropout mask is drawn past the only layer.

Measured in docs/benchmarks.md ("Issue 13"); ``benchmarks.profile_step`` shows where the
rest of a step goes.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.models.attention import Memory, Scorer, StepReader, attention_weights
from pipeline.models.step_linear import StepLinear


def gru_attention_loop(
    cell: nn.GRUCell, scorer: Scorer, embedded: torch.Tensor, memory: Memory, hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """embedded y_{i-1} (B, T, E), s_0 (B, H) -> s_i (B, T, H), c_i (B, T, H), a_i
    (B, T, S), with ``cell``'s weights and ``scorer`` scoring against s_{i-1}."""
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
    score, score_anchors = scorer.step_scorer(memory.keys, steps)
    tops, contexts, weights = [], [], []
    # unbind/split, not [:, t] slices: a slice's backward writes its gradient into a
    # fresh zero tensor of the whole input, T times a (B, T, 3H) tensor per batch
    anchors = zip(recurrent_anchors, context_anchors, read_anchors, score_anchors)
    for step_inputs, (recurrent_anchor, context_anchor, read_anchor, score_anchor) in zip(
        input_part.unbind(1), anchors
    ):  # (B, 3H) each
        recurrent = recurrent_layer(hidden, recurrent_anchor)  # (B, 3H [+ A])
        recurrent, query = recurrent.split([3 * size, recurrent.size(1) - 3 * size], 1)
        query = hidden if query_layer is None else query
        scores = score(query.unsqueeze(1), score_anchor)  # (B, 1, S)
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
