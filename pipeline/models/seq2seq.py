"""The encoder-decoder model: encoder, decoder (chosen by registry), vocabulary projection.

The decoder is ``WIRINGS[config.wiring]`` with an attention scorer, and
``BASELINES[config.baseline]`` (RNNencdec or init-only) with ``scorer: none``.

``loss`` runs the teacher-forced decoder over the whole target and then applies the
vocabulary projection and the cross-entropy to all ``(B, T)`` positions in one fused,
chunked pass (``pipeline.models.loss``).
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.config.params import ModelConfig
from pipeline.data.batching import Batch
from pipeline.data.dataset import PAD_ID
from pipeline.models.attention import Memory, build_scorer
from pipeline.models.decoder import BASELINES, WIRINGS, DecoderState
from pipeline.models.encoder import Encoder
from pipeline.models.loss import projected_cross_entropy


class Seq2Seq(nn.Module):
    """RNN encoder-decoder with the attention scorer and wiring named in ``config``."""

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        if config.tie_embeddings and config.embedding_size != config.hidden_size:
            raise ValueError(
                "model.tie_embeddings: needs embedding_size == hidden_size, got "
                f"{config.embedding_size} and {config.hidden_size}"
            )
        self.config = config
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.encoder = Encoder(
            src_vocab_size,
            config.embedding_size,
            config.hidden_size,
            layers=config.layers,
            cell=config.cell,
            bidirectional=config.bidirectional,
            dropout=config.dropout,
        )
        scorer = build_scorer(config.scorer, config.hidden_size)
        # no attention: the ``baseline`` decoder (RNNencdec or init-only); else the wiring
        decoder_class = BASELINES[config.baseline] if scorer is None else WIRINGS[config.wiring]
        self.decoder = decoder_class(config, tgt_vocab_size, scorer)
        self.generator = nn.Linear(config.hidden_size, tgt_vocab_size)  # W_s (Luong eq. 6)
        if config.tie_embeddings:
            self.generator.weight = self.decoder.embedding.weight

    def init_output_bias(self, counts: torch.Tensor) -> None:
        """Set the vocabulary projection's bias to the log unigram distribution of the
        target ``counts`` (V,), add-one smoothed: at the first step the model predicts
        the corpus's subword frequencies (``model.output_bias: unigram``)."""
        if counts.shape != self.generator.bias.shape:
            raise ValueError(
                f"output bias: {tuple(counts.shape)} counts for {self.tgt_vocab_size} targets"
            )
        smoothed = counts.double() + 1
        with torch.no_grad():
            self.generator.bias.copy_((smoothed / smoothed.sum()).log())

    @property
    def has_attention(self) -> bool:
        return self.decoder.scorer is not None

    def num_parameters(self) -> int:
        """Trainable parameters, a tied matrix counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def encode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[Memory, DecoderState]:
        """Run the encoder; return the prepared memory and the decoder's initial state."""
        return self.decoder.prepare(self.encoder(src, src_lengths), src_mask)

    def teacher_forced(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, V) for ``batch.tgt_out`` given ``batch.tgt_in``, and attention
        (B, T, S) in batch (possibly reversed) source order, or None without attention."""
        memory, state = self.encode(batch.src, batch.src_lengths, batch.src_mask)
        features, attention = self.decoder(batch.tgt_in, memory, state)  # (B, T, H)
        return self.generator(features), attention  # (B, T, V)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.teacher_forced(batch)[0]

    def loss(self, batch: Batch, label_smoothing: float = 0.0) -> tuple[torch.Tensor, int]:
        """Summed (label-smoothed) cross-entropy over real target tokens, and their count.

        The vocabulary projection and the loss run fused, chunk by chunk
        (:func:`projected_cross_entropy`): the (B, T, V) logits are never stored."""
        memory, state = self.encode(batch.src, batch.src_lengths, batch.src_mask)
        features, _ = self.decoder(batch.tgt_in, memory, state)  # (B, T, H)
        total = projected_cross_entropy(
            features,
            self.generator.weight,
            self.generator.bias,
            batch.tgt_out,
            ignore_index=PAD_ID,
            label_smoothing=label_smoothing,
        )
        return total, batch.n_tokens

    def step(
        self, tokens: torch.Tensor, memory: Memory, state: DecoderState, *, normalize: bool = True
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """One search step: tokens (B,) -> log-probs (B, V), new state, attention (B, S).
        ``normalize=False`` returns the float32 logits instead (the same ranking per row:
        greedy search needs no softmax)."""
        features, state, attention = self.decoder.step(tokens, memory, state)
        logits = self.generator(features).float()  # fp32 scores under autocast too
        return torch.log_softmax(logits, dim=-1) if normalize else logits, state, attention
