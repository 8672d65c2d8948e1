"""The fused (cuDNN on GPUs) recurrent layers, safe under bf16 autocast.

PyTorch's autocast casts a cuDNN RNN to float16 whatever dtype the autocast region asks
for (``aten/src/ATen/cudnn/AutocastRNN.cpp`` hard-codes ``kHalf``), so a bf16 run would
train its recurrences in fp16 without loss scaling. On CUDA under autocast these layers
therefore run in float32 (TF32 tensor cores where cuDNN allows them); everything else in
the model keeps bf16 products. On the CPU autocast keeps RNNs as they are and nothing
changes. Parameter names equal ``nn.GRU``/``nn.LSTM``'s, so checkpoints are unaffected.

On the CPU a one-layer unidirectional GRU over a padded batch runs through
:func:`~pipeline.models.gru_layer.gru_layer` (the same equations with the backward
through time written by hand, far fewer operator calls); other shapes keep torch's.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from pipeline.models.gru_layer import gru_layer


def runs_outside_autocast(inputs: torch.Tensor | PackedSequence) -> bool:
    """True where the layer leaves autocast: CUDA tensors inside a CUDA autocast region."""
    data = inputs.data if isinstance(inputs, PackedSequence) else inputs
    return data.is_cuda and torch.is_autocast_enabled("cuda")


def _fp32(value):
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(v.float() for v in value)
    return value.float()


class _Fp32UnderCudaAutocast:
    def forward(self, inputs, hx=None):
        if runs_outside_autocast(inputs):
            with torch.autocast("cuda", enabled=False):
                return super().forward(_fp32(inputs), _fp32(hx))
        return super().forward(inputs, hx)


class GRU(_Fp32UnderCudaAutocast, nn.GRU):
    """``nn.GRU`` that never runs in fp16 under CUDA autocast, and takes
    :func:`~pipeline.models.gru_layer.gru_layer` on the CPU where it can (module docstring)."""

    hand_written = True
    """False sends an instance through torch's own GRU (``benchmarks.gru_layer`` times both)."""

    def forward(self, inputs, hx=None):
        if not self._by_hand(inputs):
            return super().forward(inputs, hx)
        if hx is None:
            hx = inputs.new_zeros(1, inputs.size(0), self.hidden_size, dtype=torch.float32)
        outputs, last = gru_layer(
            inputs, hx[0], self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0
        )
        return outputs, last.unsqueeze(0)  # (B, T, H), (1, B, H)

    def _by_hand(self, inputs) -> bool:
        """One CPU layer, one direction, batch first, biases, a padded (unpacked) batch."""
        return (
            self.hand_written
            and isinstance(inputs, torch.Tensor)
            and inputs.device.type == "cpu"
            and inputs.dim() == 3
            and inputs.size(1) > 0
            and self.num_layers == 1
            and not self.bidirectional
            and self.batch_first
            and self.bias
            and self.proj_size == 0
        )


class LSTM(_Fp32UnderCudaAutocast, nn.LSTM):
    """``nn.LSTM`` that never runs in fp16 under CUDA autocast (module docstring)."""


RNNS: dict[str, type[nn.RNNBase]] = {"gru": GRU, "lstm": LSTM}
"""``model.cell`` -> fused recurrent layer."""
