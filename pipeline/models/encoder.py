"""The source encoder: embeddings + a (bi)directional GRU/LSTM.

Padding never enters a recurrent state: the final state of each sentence is read after
its own last token (the appended EOS), and outputs at padded positions are exactly zero.
A one-layer unidirectional encoder (the default) runs over the padded batch (padding
follows the real tokens, so it cannot reach them) and gathers each sentence's final state
from its outputs; other encoders pack the batch (``pack_padded_sequence``), which is slower
on CPU. Only final hidden states leave the encoder: an LSTM's final cell states are not
outputs, and the decoder's bridge does not read them (``decoder.Bridge``).

A bidirectional encoder uses ``hidden_size // 2`` units per direction (as OpenNMT's
``brnn``), so its outputs and final state have ``hidden_size`` features like the
unidirectional one: every scorer and the decoder see the same sizes, and dot-product
scorers work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pipeline.data.dataset import PAD_ID
from pipeline.models.dropout import Dropout
from pipeline.models.rnn import RNNS

"""Registry: ``ModelConfig.cell`` -> fused multi-layer RNN class."""


@dataclass(frozen=True)
class EncoderOutput:
    outputs: torch.Tensor  # (B, S, H) top-layer outputs, zero at padded positions
    hidden: torch.Tensor  # (L, B, H) final hidden state per layer, directions concatenated


class Encoder(nn.Module):
    """x -> h_1..h_S (Sutskever 2014 sec. 2; Bahdanau 2014 sec. 3.2 when bidirectional)."""

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        hidden_size: int,
        *,
        layers: int = 1,
        cell: str = "gru",
        bidirectional: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        if bidirectional and hidden_size % 2:
            raise ValueError(
                f"model.hidden_size: a bidirectional encoder needs an even size, got {hidden_size}"
            )
        self.layers = layers
        self.directions = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=PAD_ID)
        self.rnn = RNNS[cell](
            embedding_size,
            hidden_size // self.directions,
            num_layers=layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.dropout = Dropout(dropout)
        # Packing costs: on CPU its backward zero-fills an input-sized buffer once per
        # time step (a fifth of a training step), and a packed LSTM
        # misses oneDNN's fused LSTM (3.3x slower). The padded run
        # gives identical results whenever the final state is the top layer's output.
        self.padded = layers == 1 and not bidirectional

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        """src (B, S) long, src_lengths (B,) -> outputs (B, S, H) and final states."""
        embedded = self.dropout(self.embedding(src))  # (B, S, E)
        if self.padded:
            outputs, hidden = self._run_padded(embedded, src_lengths)
        else:
            packed = pack_padded_sequence(
                embedded, src_lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            outputs, final = self.rnn(packed)
            outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
            hidden = final[0] if isinstance(final, tuple) else final  # an LSTM's (h, c): h
        return EncoderOutput(
            outputs=self.dropout(outputs),  # (B, S, H)
            hidden=self._merge_directions(hidden),
        )

    def _run_padded(self, embedded: torch.Tensor, lengths: torch.Tensor):
        """(B, S, E) -> outputs (B, S, H) zero after each sentence, final state (1, B, H)
        read at the sentence's own last token. Padding follows the real tokens, so a
        one-layer unidirectional RNN never carries it into them."""
        outputs, _ = self.rnn(embedded)  # (B, S, H)
        batch, steps = embedded.shape[:2]
        last = (lengths.to(outputs.device) - 1).clamp(min=0)  # (B,)
        real = torch.arange(steps, device=outputs.device) <= last.unsqueeze(1)  # (B, S)
        hidden = outputs[torch.arange(batch, device=outputs.device), last].unsqueeze(0)
        return outputs * real.unsqueeze(-1).to(outputs.dtype), hidden

    def _merge_directions(self, state: torch.Tensor) -> torch.Tensor:
        """(L * D, B, H / D) -> (L, B, H): concatenate the directions of each layer."""
        _, batch, size = state.shape
        state = state.view(self.layers, self.directions, batch, size)
        return state.transpose(1, 2).reshape(self.layers, batch, self.directions * size)
