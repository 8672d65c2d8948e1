"""A straightforward reference implementation of the study's model, written the way
tutorials write it, to measure what the pipeline's design choices buy.

Same model as ``pipeline.models.seq2seq.Seq2Seq`` (1-layer unidirectional GRU, the same
parameters, dropout and label-smoothed loss), computed naively:

- the encoder is a Python loop over source positions with ``nn.GRUCell`` (a finished
  sentence keeps its state: ``h = where(mask_t, cell(x_t, h), h)``);
- the decoder is a Python loop over target positions with ``nn.GRUCell``, for both
  wirings (the pipeline runs the Luong decoder RNN as one fused ``nn.GRU`` call);
- ``general`` and ``additive`` re-project the keys (``W_a h_s``, ``U_a h_j``) inside
  every decoder step (the pipeline projects them once per batch);
- the vocabulary projection and the cross-entropy are computed inside every step (the
  pipeline applies them once to all ``B x T`` positions).

:meth:`ReferenceSeq2Seq.load_pipeline_weights` copies a pipeline model's weights, so a
benchmark can check that both compute the same loss before timing them.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.config.params import ModelConfig
from pipeline.data.batching import Batch
from pipeline.data.dataset import PAD_ID

REFERENCE_SCORERS = ("dot", "scaled_dot", "general", "additive")
"""Scorers the reference implements."""

PIPELINE_NAME_RULES = (
    (r"^encoder\.embedding\.", "encoder_embedding."),
    (r"^encoder\.rnn\.(\w+)_l0$", r"encoder_cell.\1"),
    (r"^decoder\.embedding\.", "decoder_embedding."),
    (r"^decoder\.bridge\.hidden\.", "bridge."),
    (r"^decoder\.rnn\.(\w+)_l0$", r"decoder_cell.\1"),
    (r"^decoder\.cell\.cells\.0\.", "decoder_cell."),
    (r"^decoder\.scorer\.", ""),
    (r"^decoder\.", ""),
)
"""Pipeline parameter name -> reference name (applied in order, first match wins)."""


class ReferenceSeq2Seq(nn.Module):
    """Per-step encoder-decoder with the scorer and wiring named in ``config``."""

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        if config.scorer not in REFERENCE_SCORERS:
            raise ValueError(f"reference scorer must be one of {REFERENCE_SCORERS}")
        if config.layers != 1 or config.bidirectional or config.cell != "gru":
            raise ValueError("the reference is a 1-layer unidirectional GRU model")
        if config.input_feeding:
            raise ValueError("the reference has no input feeding")
        E, H = config.embedding_size, config.hidden_size
        self.config = config
        self.encoder_embedding = nn.Embedding(src_vocab_size, E, padding_idx=PAD_ID)
        self.encoder_cell = nn.GRUCell(E, H)
        self.decoder_embedding = nn.Embedding(tgt_vocab_size, E, padding_idx=PAD_ID)
        self.bridge = nn.Linear(H, H)
        bahdanau = config.wiring == "bahdanau"
        self.decoder_cell = nn.GRUCell(E + H if bahdanau else E, H)
        if config.scorer == "general":
            self.key_projection = nn.Linear(H, H, bias=False)
        if config.scorer == "additive":
            self.query_projection = nn.Linear(H, H, bias=False)
            self.key_projection = nn.Linear(H, H)
            self.energy = nn.Linear(H, 1, bias=False)
        if bahdanau:
            self.readout = nn.Linear(E + 2 * H, H)
        else:
            self.combine = nn.Linear(2 * H, H, bias=False)
        self.generator = nn.Linear(H, tgt_vocab_size)
        self.dropout = nn.Dropout(config.dropout)

    def load_pipeline_weights(self, model: nn.Module) -> None:
        """Copy the weights of a ``Seq2Seq`` with the same config (every name must map)."""
        renamed = {}
        for name, value in model.state_dict().items():
            for pattern, replacement in PIPELINE_NAME_RULES:
                if re.search(pattern, name):
                    name = re.sub(pattern, replacement, name)
                    break
            renamed[name] = value
        self.load_state_dict(renamed, strict=True)

    def encode(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder outputs (B, S, H), zero on padding, and the final state (B, H)."""
        embedded = self.dropout(self.encoder_embedding(batch.src))  # (B, S, E)
        hidden = embedded.new_zeros(len(batch), self.config.hidden_size)
        outputs = []
        for t in range(embedded.size(1)):
            mask = batch.src_mask[:, t : t + 1]  # (B, 1)
            hidden = torch.where(mask, self.encoder_cell(embedded[:, t], hidden), hidden)
            outputs.append(hidden * mask)
        return self.dropout(torch.stack(outputs, dim=1)), hidden

    def score(self, query: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
        """query (B, H), encoder outputs (B, S, H) -> scores (B, S); keys projected here."""
        scorer = self.config.scorer
        if scorer == "additive":
            keys = self.key_projection(encoded)  # (B, S, H), re-projected every step
            hidden = torch.tanh(self.query_projection(query).unsqueeze(1) + keys)
            return self.energy(hidden).squeeze(-1)
        keys = self.key_projection(encoded) if scorer == "general" else encoded
        scores = torch.bmm(keys, query.unsqueeze(2)).squeeze(2)  # (B, S)
        return scores / math.sqrt(query.size(-1)) if scorer == "scaled_dot" else scores

    def attend(self, query, encoded, src_mask) -> torch.Tensor:
        """Context (B, H) of query (B, H) over the real source positions."""
        scores = self.score(query, encoded).masked_fill(~src_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, S)
        return torch.bmm(weights.unsqueeze(1), encoded).squeeze(1)

    def loss(self, batch: Batch, label_smoothing: float = 0.0) -> tuple[torch.Tensor, int]:
        """Summed (label-smoothed) cross-entropy over real target tokens, and their count."""
        encoded, final = self.encode(batch)
        hidden = torch.tanh(self.bridge(final))  # s_0, (B, H)
        embedded = self.dropout(self.decoder_embedding(batch.tgt_in))  # (B, T, E)
        total = embedded.new_zeros(())
        for t in range(embedded.size(1)):
            word = embedded[:, t]
            if self.config.wiring == "bahdanau":
                context = self.attend(hidden, encoded, batch.src_mask)  # scored with s_{t-1}
                hidden = self.decoder_cell(torch.cat([word, context], dim=-1), hidden)
                output = torch.tanh(self.readout(torch.cat([word, hidden, context], dim=-1)))
            else:
                hidden = self.decoder_cell(word, hidden)
                context = self.attend(hidden, encoded, batch.src_mask)  # scored with h_t
                output = torch.tanh(self.combine(torch.cat([context, hidden], dim=-1)))
            logits = self.generator(self.dropout(output))  # (B, V), every step
            total = total + F.cross_entropy(
                logits,
                batch.tgt_out[:, t],
                ignore_index=PAD_ID,
                reduction="sum",
                label_smoothing=label_smoothing,
            )
        return total, batch.n_tokens
