"""Attention scorers (a registry) and the single :func:`attend` that every decoder uses.

A scorer differs from another only in ``score(query, keys) -> (B, T, S)``; masking,
softmax and the context vector are computed once, in :func:`attend`. Whatever a scorer
can compute from the encoder outputs alone (``U h_j``, ``W_a h_s``) it computes in
``precompute(keys)``, which the decoder calls once per batch, before its decoding loop.

Which names exist, with their papers and FLOPs, is the scorer catalogue's
(:mod:`pipeline.scorers`); a scorer of the user's own subclasses :class:`Scorer` in a file
of their project (:mod:`pipeline.scorers.plugins`).

``none`` maps to ``None``: the no-attention baseline has no scorer and no attention
parameters. Its decoder sees one fixed summary c of the source, at every step and in
the readout (``model.baseline: rnnencdec``, Cho 2014; ``decoder.RNNEncDecDecoder``) or
only through its initial state (``init_only``, Sutskever 2014; ``decoder.PlainDecoder``).

| name        | score(q = decoder state, k = encoder output)  | source                   |
|-------------|-----------------------------------------------|--------------------------|
| dot         | q . k                                         | Luong 2015 eq. 8         |
| scaled_dot  | q . k / sqrt(H)                               | Vaswani 2017 eq. 1       |
| general     | q W_a k                                       | Luong 2015 eq. 8         |
| additive    | v_a . tanh(W_a q + U_a k)                     | Bahdanau 2014 app. A.1.2 |
| location    | (W_a q)_j for source position j               | Luong 2015 eq. 8         |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.kernels.additive_energy import additive_energy
from pipeline.kernels.step_sink import step_anchors
from pipeline.scorers import catalogue
from pipeline.scorers.catalogue import LOCATION_MAX_POSITIONS


class Scorer(nn.Module):
    """Base class: ``score(query (B, T, H), keys) -> (B, T, S)`` unnormalised scores.

    A score is an optional linear map of the query (:meth:`query_layer`: additive's
    ``W_a``, location's ``W_a``) followed by :meth:`score_projected`; a per-step decoder
    can fold that map into a product it already makes with the same state
    (``decoder.BahdanauDecoder``).
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        """Per-batch key transform, called once before decoding. (B, S, H) -> (B, S, *)."""
        return keys

    def query_layer(self) -> nn.Linear | None:
        """The linear map applied to the query before :meth:`score_projected`, if any."""
        return None

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        layer = self.query_layer()
        return self.score_projected(query if layer is None else layer(query), keys)

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Scores (B, T, S) of a query that :meth:`query_layer` has already mapped."""
        raise NotImplementedError


def build_scorer(name: str, hidden_size: int) -> Scorer | None:
    """The scorer the catalogue (:mod:`pipeline.scorers`) lists as ``name`` (``None`` for
    ``none``); a plugin's scorer once its file is loaded."""
    entry = catalogue.get(name)
    if entry is None:
        known = ", ".join(sorted(catalogue.names()))
        raise ValueError(f"unknown scorer {name!r}; known: {known}")
    cls = entry.load()
    return None if cls is None else cls(hidden_size)


class DotScorer(Scorer):
    """Luong 2015 eq. 8 ``dot``: score(h_t, h_s) = h_t . h_s. No parameters."""

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, H) x (B, H, S) -> (B, T, S)


class ScaledDotScorer(DotScorer):
    """Vaswani 2017 eq. 1: q . k / sqrt(H), so score variance does not grow with H."""

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return super().score_projected(query, keys) / math.sqrt(self.hidden_size)


class GeneralScorer(Scorer):
    """Luong 2015 eq. 8 ``general``: h_t^T W_a h_s; ``W_a h_s`` is precomputed per batch."""

    def __init__(self, hidden_size: int):
        super().__init__(hidden_size)
        self.key_projection = nn.Linear(hidden_size, hidden_size, bias=False)

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_projection(keys)  # (B, S, H)

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


class AdditiveScorer(Scorer):
    """Bahdanau 2014 app. A.1.2: e_ij = v_a . tanh(W_a s_{i-1} + U_a h_j).

    ``U_a h_j`` does not depend on the decoder step and is precomputed per batch.
    """

    def __init__(self, hidden_size: int):
        super().__init__(hidden_size)
        self.query_projection = nn.Linear(hidden_size, hidden_size, bias=False)  # W_a
        self.key_projection = nn.Linear(hidden_size, hidden_size)  # U_a (+ bias)
        self.energy = nn.Linear(hidden_size, 1, bias=False)  # v_a

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        # float32 once per batch: the energy works in float32 (additive_energy), and a
        # per-step decoder would otherwise convert the keys at every step
        return self.key_projection(keys).float()  # (B, S, A)

    def query_layer(self) -> nn.Linear:
        return self.query_projection

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return additive_energy(query, keys, self.energy.weight.squeeze(0))  # (B, T, S)


class LocationScorer(Scorer):
    """Luong 2015 eq. 8 ``location``: a_t = softmax(W_a h_t), a score per source position.

    The scores ignore the keys' content; only their number ``S`` matters. ``W_a`` has
    :data:`LOCATION_MAX_POSITIONS` rows; the first ``S`` are used, so the scorer works for
    any source length, and the shared mask zeroes positions past each sentence's end.
    """

    def __init__(self, hidden_size: int, max_positions: int = LOCATION_MAX_POSITIONS):
        super().__init__(hidden_size)
        self.position_projection = nn.Linear(hidden_size, max_positions)

    def query_layer(self) -> nn.Linear:
        return self.position_projection

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        source_length = keys.size(1)
        scores = query  # (B, T, P): W_a h_t
        extra = source_length - scores.size(-1)
        if extra > 0:
            return F.pad(scores, (0, extra), value=float("-inf"))
        return scores[..., :source_length]  # (B, T, S)


def attend(
    scorer: Scorer,
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    src_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax attention for all ``T`` queries at once.

    Args:
        query: (B, T, H) decoder states (T = 1 inside a step loop).
        keys: ``scorer.precompute(encoder outputs)``, (B, S, *).
        values: (B, S, H) encoder outputs.
        src_mask: (B, S) bool, True on real source positions.

    Returns:
        context (B, T, H) = sum_j a_tj h_j and weights (B, T, S); padded positions get
        exactly zero weight (their score is -inf before the softmax).
    """
    weights = attention_weights(scorer.score(query, keys), src_mask)  # (B, T, S)
    return weights @ values, weights  # (B, T, H), (B, T, S)


def attention_weights(scores: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
    """Masked softmax over source positions: scores (B, T, S), src_mask (B, S) -> weights
    (B, T, S) in float32 (under autocast too); padded positions get exactly zero."""
    scores = scores.float().masked_fill(~src_mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


@dataclass(frozen=True)
class Memory:
    """The encoder side of a batch, prepared once for the decoder (and its beams)."""

    values: torch.Tensor  # (B, S, H) encoder outputs
    keys: torch.Tensor | None  # scorer.precompute(values); None without attention
    src_mask: torch.Tensor  # (B, S) bool

    def select(self, rows: torch.Tensor) -> Memory:
        """Rows ``rows`` of every tensor (beam expansion)."""
        picked = {
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[rows]
            for f in fields(self)
        }
        return Memory(**picked)


class StepReader:
    """Context vectors c_i = a_i . values for a per-step decoder loop, with the values'
    gradient computed once per batch instead of once per step.

    Through autograd, each of the T steps' ``weights @ values`` would produce, in
    backward, its own (B, S, H) gradient for the values (T allocations and T additions)
    and transpose-copy the values; ``torch.autocast`` would also cast the values at every
    step. Here the values are cast and transposed once; each step's backward computes only
    the gradient of its weights and hands its context gradient to one sink
    (:mod:`pipeline.kernels.step_sink`), whose backward computes the values' gradient for
    all steps in one product: dV = sum_i a_i^T dc_i = A^T dC with A (B, T, S), dC (B, T, H).

        reader, anchors = StepReader.start(values, steps=T)
        for i in range(T):
            context_i = reader.read(weights_i, anchors[i])  # (B, H)
    """

    def __init__(self, values: torch.Tensor):
        self.values = values.detach()  # (B, S, H), contiguous (start)
        self.values_t = self.values.transpose(1, 2).contiguous()  # (B, H, S)
        self.weights: list[torch.Tensor] = []  # a_i, filled by read()

    @classmethod
    def start(cls, values: torch.Tensor, steps: int) -> tuple[StepReader, tuple[torch.Tensor]]:
        """A reader of ``values`` (B, S, H) and one anchor per step (the caller keeps them)."""
        device = values.device.type
        autocast = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if autocast else values.dtype
        # cast and made contiguous in one pass: the encoder's outputs are time-major
        # underneath, and each step's bmm would otherwise copy them again
        values = values.to(dtype, memory_format=torch.contiguous_format)
        reader = cls(values)
        shape = (values.size(0), steps, values.size(2))  # (B, T, H)
        return reader, step_anchors(reader, shape, 1, values)

    def read(self, weights: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """weights a_i (B, S) of the next step (steps are read in order) and its anchor ->
        context c_i (B, H)."""
        return _StepRead.apply(weights, anchor, self)

    def gradients(self, grad_contexts: torch.Tensor) -> tuple[torch.Tensor]:
        """The values' gradient A^T dC (B, S, H) from every step's dc_i (B, T, H)."""
        weights = torch.stack(self.weights, dim=1)  # (B, T, S)
        return (weights.transpose(1, 2) @ grad_contexts.to(weights.dtype),)


class _StepRead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weights, anchor, reader):
        weights = weights.to(reader.values.dtype)
        reader.weights.append(weights.detach())
        ctx.reader, ctx.dtype = reader, weights.dtype
        return torch.bmm(weights.unsqueeze(1), reader.values).squeeze(1)  # (B, H)

    @staticmethod
    def backward(ctx, grad_context):
        grad = grad_context.to(ctx.dtype).unsqueeze(1)  # (B, 1, H)
        grad_weights = torch.bmm(grad, ctx.reader.values_t).squeeze(1)  # (B, S)
        return grad_weights, grad_context, None  # the anchor's gradient: dc_i, for the sink
