"""Analytic matmul FLOPs of one training step of ``pipeline.models.seq2seq.Seq2Seq``.

A multiply-add counts 2 FLOPs. Only matrix products are counted (element-wise work:
tanh, softmax, the loss, masking, Adam, is left out). Per batch of ``B`` sentences with
``S`` padded source positions, ``T`` padded target positions, ``N_src`` real source
tokens (the encoder's useful work: the default one-layer encoder runs unpacked over all
``B * S`` positions, and its padding is not counted), embedding ``E``, hidden ``H``,
vocabulary ``V`` and ``Q = B * T`` decoder positions, the forward pass costs:

| component | FLOPs (forward) |
|---|---|
| encoder RNN | ``N_src * 2 * G H * (E + H)``, ``G`` gates: 3 (GRU), 4 (LSTM) |
| bridge s_0 = tanh(W h_S) | ``B * 2 * H * H``; twice for an LSTM (c_0 = W_c h_S) |
| decoder RNN | ``Q * 2 * G H * (I + H)``, ``I = E``; ``E + H`` (bahdanau, input feed, rnnencdec) |
| key projection (general, additive) | ``B * S * 2 * H * H``, once per batch |
| scoring, dot / scaled_dot / general | ``Q * 2 * S * H`` |
| scoring, additive | ``Q * (2 * H * H + 2 * S * H)`` (W_a q, then v_a . tanh(...)) |
| scoring, location | ``Q * 2 * H * P``, ``P = LOCATION_MAX_POSITIONS`` (all rows computed) |
| context sum_j a_j h_j | ``Q * 2 * S * H`` |
| attentional layer | luong ``Q * 2 * 2H * H``; bahdanau, rnnencdec ``Q * 2 * (E + 2H) * H`` |
| vocabulary projection | ``Q * 2 * H * V`` |

A training step (forward + backward) is counted as 3x the forward: the backward pass
computes two products (gradient of the input and of the weight) for every forward one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.params import ModelConfig
from pipeline.data.batching import Batch
from pipeline.scorers import catalogue

BACKWARD_FACTOR = 3
"""Forward + backward = 3 x forward (one product forward, two backward)."""


@dataclass(frozen=True)
class BatchShape:
    """The sizes of one batch that its FLOPs depend on."""

    sentences: int  # B
    source_positions: int  # S, padded (source EOS included)
    target_positions: int  # T, padded (BOS/EOS included)
    source_tokens: int  # N_src, real source tokens with their EOS

    @staticmethod
    def of(batch: Batch) -> BatchShape:
        return BatchShape(
            sentences=len(batch),
            source_positions=int(batch.src.size(1)),
            target_positions=int(batch.tgt_in.size(1)),
            source_tokens=int(batch.src_lengths.sum()),
        )


GATES = {"gru": 3, "lstm": 4}
"""``ModelConfig.cell`` -> gates, each an input and a recurrent product per position."""


def rnn_flops(tokens: int, input_size: int, hidden_size: int, cell: str = "gru") -> int:
    """Input and recurrent products of a one-layer RNN over ``tokens`` positions."""
    return tokens * 2 * GATES[cell] * hidden_size * (input_size + hidden_size)


def forward_flops(config: ModelConfig, vocab_size: int, shape: BatchShape) -> dict[str, int]:
    """Forward matmul FLOPs of one batch, per component (see the module docstring)."""
    E, H, V = config.embedding_size, config.hidden_size, vocab_size
    B, S = shape.sentences, shape.source_positions
    Q = B * shape.target_positions
    attention = config.scorer != "none"
    bahdanau = attention and config.wiring == "bahdanau"
    rnnencdec = not attention and config.baseline == "rnnencdec"
    wide_input = bahdanau or rnnencdec or (attention and config.input_feeding)
    decoder_input = E + H if wide_input else E
    counts = {
        "encoder_rnn": rnn_flops(shape.source_tokens, E, H, config.cell),
        "bridge": B * 2 * H * H * (2 if config.cell == "lstm" else 1),
        "decoder_rnn": rnn_flops(Q, decoder_input, H, config.cell),
        "key_projection": 0,
        "scoring": 0,
        "context": Q * 2 * S * H if attention else 0,
        "attentional_layer": 0,
        "vocabulary_projection": Q * 2 * H * V,
    }
    entry = catalogue.get(config.scorer)
    if attention and entry is not None and entry.flops is not None:  # the catalogue's formula
        per_key, per_query = entry.flops(H, S)
        counts["key_projection"], counts["scoring"] = B * S * per_key, Q * per_query
    if bahdanau or rnnencdec:
        counts["attentional_layer"] = Q * 2 * (E + 2 * H) * H
    elif attention:
        counts["attentional_layer"] = Q * 2 * 2 * H * H
    return counts


def training_flops(config: ModelConfig, vocab_size: int, shape: BatchShape) -> int:
    """Forward + backward matmul FLOPs of one training step on a batch of ``shape``."""
    return BACKWARD_FACTOR * sum(forward_flops(config, vocab_size, shape).values())
