"""One GRU layer over a whole sequence on the CPU, forward and backward through time by hand.

torch's CPU ``nn.GRU`` runs each time step as a composite of small operators (two
products and the gates' elementwise ops), and autograd records every one of them: at the
study's batches (about 35 sentences x 30 positions, hidden 256) its forward and backward
issue over a thousand operator calls, and under bf16 autocast on an AMX CPU they take
several times the layer's products (docs/benchmarks.md, "A GRU layer by hand"). This
layer computes the same equations (torch's GRU, gates r, z, n) with:

- the input's product ``W_ih x_t + b_ih`` for all steps as one product before the loop;
- one product per step, ``W_hh h_{t-1} + b_hh``, in the products' dtype (bf16 under
  autocast), and the gates and the state in float32 (float64 for float64 inputs);
- a hand-written backward through time: one product per step (``dR W_hh``), and each
  weight's gradient as one product over all steps after the loop (cuDNN's split of an
  RNN's backward), as ``bahdanau_loop`` does for the Bahdanau decoder;
- every per-step tensor a view of a time-major buffer made once.

Per step t, with h = h_{t-1}:

    X_t = W_ih x_t + b_ih,  R_t = W_hh h + b_hh                      (B, 3H): r | z | n
    r, z = sigma(X_rz + R_rz);  n = tanh(X_n + r R_n);  h_t = n + z (h - n)

Outputs are every h_t (B, T, H; a transposed view of a time-major buffer, not for
in-place edits) and the last one (B, H), in the state's dtype (float32 under autocast).
Padding must follow each sequence's real positions (it never reaches them: the encoder
and the teacher-forced decoders read what they need before it).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def gru_layer(
    inputs: torch.Tensor,
    hidden: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, T, I), h_0 (B, H) and one layer's weights -> h_1..h_T (B, T, H), h_T (B, H).

    Under autocast the products run in the autocast dtype; the state in float32."""
    device = inputs.device.type
    dtype = inputs.dtype
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
    state = torch.promote_types(hidden.dtype, torch.float32)  # float64 stays
    with torch.autocast(device, enabled=False):
        return _GRULayer.apply(
            inputs.to(dtype), hidden.to(state), weight_ih, weight_hh, bias_ih, bias_hh, dtype
        )


class _GRULayer(torch.autograd.Function):
    """:func:`gru_layer` as one autograd node (module docstring for the equations)."""

    @staticmethod
    def forward(ctx, inputs, hidden, weight_ih, weight_hh, bias_ih, bias_hh, dtype):
        ctx.set_materialize_grads(False)
        batch, steps, width = inputs.shape
        size, state = hidden.size(1), hidden.dtype
        w_ih, w_hh = weight_ih.to(dtype), weight_hh.to(dtype)  # cast once per batch
        b_hh, w_hh_t = bias_hh.to(dtype), w_hh.t()
        time_major = inputs.transpose(0, 1).reshape(steps * batch, width)  # (T B, I)
        gate_inputs = torch.addmm(bias_ih.to(dtype), time_major, w_ih.t()).to(state)
        gate_inputs = gate_inputs.view(steps, batch, 3 * size)  # X_t, float32
        tops = hidden.new_empty(steps, batch, size)  # h_t
        previous = w_hh.new_empty(steps, batch, size)  # h_{t-1} in the products' dtype
        recurrents = hidden.new_empty(steps, batch, 3 * size)  # R_t
        gates = hidden.new_empty(steps, batch, 3 * size)  # r | z | n
        previous_views = previous.unbind(0)
        per_step = zip(
            *(t.unbind(0) for t in gate_inputs.split([2 * size, size], 2)),
            previous_views, (*previous_views[1:], None), recurrents.unbind(0),
            *(t.unbind(0) for t in recurrents.split([2 * size, size], 2)),
            gates[..., : 2 * size].unbind(0), *(t.unbind(0) for t in gates.split(size, 2)),
            tops.unbind(0),
        )  # fmt: skip
        previous_views[0].copy_(hidden)
        for (inputs_rz, inputs_n, previous_t, next_t, recurrent, recurrent_rz, recurrent_n,
             reset_update, reset, update, candidate, top) in per_step:  # fmt: skip
            recurrent.copy_(torch.addmm(b_hh, previous_t, w_hh_t))  # R_t in float32
            torch.add(inputs_rz, recurrent_rz, out=reset_update).sigmoid_()
            torch.addcmul(inputs_n, reset, recurrent_n, out=candidate).tanh_()
            hidden = torch.lerp(candidate, hidden, update, out=top)  # n + z (h - n)
            if next_t is not None:
                next_t.copy_(hidden)  # h_t in the products' dtype, for step t + 1
        ctx.save_for_backward(inputs, previous, recurrents, gates, tops, w_ih, w_hh)
        ctx.bias_dtypes = bias_ih.dtype, bias_hh.dtype
        ctx.weight_dtypes = weight_ih.dtype, weight_hh.dtype
        ctx.device_type = inputs.device.type
        return tops.transpose(0, 1), hidden

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_outputs, grad_last):
        # products in the saved weights' dtype even if backward runs inside autocast
        with torch.autocast(ctx.device_type, enabled=False):
            return _GRULayer._backward(ctx, grad_outputs, grad_last)

    @staticmethod
    def _backward(ctx, grad_outputs, grad_last):
        inputs, previous, recurrents, gates, tops, w_ih, w_hh = ctx.saved_tensors
        steps, batch, size = previous.shape
        reset, update, candidate = gates.split(size, 2)  # (T, B, H) each
        # every step's local derivatives at once (whole-sequence elementwise ops):
        #   d n_pre = dh (1 - z) (1 - n^2);  d z_pre = dh (h_{t-1} - n) z (1 - z)
        #   d r_pre = d n_pre R_n r (1 - r);  dR_n = d n_pre r
        hidden_0 = previous[0].to(tops.dtype).unsqueeze(0)
        earlier = torch.cat([hidden_0, tops[:-1]]) if steps > 1 else hidden_0  # h_{t-1}
        slope_n = (1 - update) * (1 - candidate * candidate)
        slope_z = (earlier - candidate) * update * (1 - update)
        slope_r = recurrents[..., 2 * size :] * reset * (1 - reset)
        grad_candidate = torch.empty_like(candidate)  # d n_pre, (T, B, H)
        grad_recurrent = torch.empty_like(gates)  # dR_t = d r | d z | d n r, float32
        grad_hidden = gates.new_zeros(batch, size)  # dh, carried back through the steps
        if grad_last is not None:
            grad_hidden += grad_last
        tops_grad = [None] * steps if grad_outputs is None else grad_outputs.transpose(0, 1)
        per_step = zip(
            slope_n.unbind(0), slope_z.unbind(0), slope_r.unbind(0), reset.unbind(0),
            update.unbind(0), grad_candidate.unbind(0), grad_recurrent.unbind(0),
            *(t.unbind(0) for t in grad_recurrent.split(size, 2)), tops_grad,
        )  # fmt: skip
        for (slope_n_t, slope_z_t, slope_r_t, reset_t, update_t, grad_n, grad_row, grad_r,
             grad_z, grad_rn, grad_top) in reversed(list(per_step)):  # fmt: skip
            if grad_top is not None:
                grad_hidden = grad_hidden + grad_top
            torch.mul(grad_hidden, slope_n_t, out=grad_n)
            torch.mul(grad_hidden, slope_z_t, out=grad_z)
            torch.mul(grad_n, slope_r_t, out=grad_r)
            torch.mul(grad_n, reset_t, out=grad_rn)
            carried = torch.mm(grad_row.to(w_hh.dtype), w_hh).to(grad_hidden.dtype)
            grad_hidden = carried.addcmul_(grad_hidden, update_t)  # dh_{t-1}
        flat = steps * batch
        grad_gates = torch.cat([grad_recurrent[..., : 2 * size], grad_candidate], 2)  # dX_t
        grad_gates = grad_gates.view(flat, 3 * size)
        grad_rec = grad_recurrent.view(flat, 3 * size)
        time_major = inputs.transpose(0, 1).reshape(flat, inputs.size(2))  # (T B, I)
        grad_gates_p = grad_gates.to(w_ih.dtype)
        grad_inputs = (grad_gates_p @ w_ih).view(steps, batch, -1).transpose(0, 1)
        grad_w_ih = grad_gates_p.t() @ time_major
        grad_w_hh = grad_rec.to(w_hh.dtype).t() @ previous.view(flat, size)
        (bias_ih_dtype, bias_hh_dtype), (w_ih_dtype, w_hh_dtype) = (
            ctx.bias_dtypes, ctx.weight_dtypes
        )  # fmt: skip
        return (grad_inputs, grad_hidden, grad_w_ih.to(w_ih_dtype), grad_w_hh.to(w_hh_dtype),
                grad_gates.sum(0).to(bias_ih_dtype), grad_rec.sum(0).to(bias_hh_dtype),
                None)  # fmt: skip
