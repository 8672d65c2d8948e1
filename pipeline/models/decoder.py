"""Decoders: the no-attention baseline and the Bahdanau and Luong attention wirings.

Every decoder maps teacher-forced inputs to output features ``(B, T, H)`` (the
vocabulary projection and the loss are applied once, after the recurrence, by
``Seq2Seq``) and offers ``step`` for search. Anything that does not depend on the
previous step (target embeddings, projected keys) is computed before the loop.

- No attention (``scorer: none``), chosen by ``ModelConfig.baseline`` (:data:`BASELINES`):

  - :class:`RNNEncDecDecoder` (``rnnencdec``, the default): Cho 2014's RNN Encoder-Decoder,
    the RNNencdec of Bahdanau 2014 (app. A: "RNN Encoder-Decoder if we fix c_i"). The
    encoder summary c enters every step: s_t = RNN([y_{t-1}; c], s_{t-1}) (Cho 2014
    sec. 2.2: h_t = f(h_{t-1}, y_{t-1}, c)) and o_t = tanh(W_o [s_t; y_{t-1}; c]) (Cho
    2014 sec. 2.2: P(y_t | ..) = g(h_t, y_{t-1}, c)). c is constant over time: one fused
    RNN call over the whole target.
  - :class:`PlainDecoder` (``init_only``): s_t = RNN(y_{t-1}, s_{t-1}), output s_t; the
    source reaches the decoder only through s_0 (Sutskever 2014 sec. 2). One fused call.
- :class:`BahdanauDecoder`: c_i attends with s_{i-1} and enters the RNN input; the output
  reads y_{i-1}, s_i, c_i (Bahdanau 2014 eqs. 4-6). Per-step cell loop.
- :class:`LuongDecoder`: h_t = RNN(y_{t-1}, h_{t-1}); c_t attends with h_t; output
  h~_t = tanh(W_c [c_t; h_t]) (Luong 2015 eq. 5). Without input feeding the RNN runs over
  the whole target in one call and attention is one batched product for all T steps;
  with input feeding (Luong 2015 sec. 3.3) h~_{t-1} joins the input: per-step loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pipeline.config.params import ModelConfig
from pipeline.data.dataset import PAD_ID
from pipeline.models.attention import Memory, Scorer, attend
from pipeline.models.bahdanau_loop import gru_attention_loop
from pipeline.models.dropout import Dropout
from pipeline.models.encoder import EncoderOutput
from pipeline.models.rnn import RNNS

CELLS: dict[str, type[nn.Module]] = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}
"""Registry: ``ModelConfig.cell`` -> single-step cell class (per-step wirings)."""


@dataclass(frozen=True)
class DecoderState:
    hidden: torch.Tensor  # (L, B, H)
    cell: torch.Tensor | None = None  # (L, B, H), LSTM only
    feed: torch.Tensor | None = None  # (B, H) h~_{t-1}, Luong input feeding only
    summary: torch.Tensor | None = None  # (B, H) encoder summary c, ``rnnencdec`` only

    def select(self, rows: torch.Tensor) -> DecoderState:
        """The states of batch rows ``rows`` (beam expansion and reordering; the constant
        summary c travels with its row like the recurrent state)."""
        return DecoderState(
            self.hidden[:, rows],
            None if self.cell is None else self.cell[:, rows],
            None if self.feed is None else self.feed[rows],
            None if self.summary is None else self.summary[rows],
        )

    def rnn_state(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.hidden if self.cell is None else (self.hidden, self.cell)


class Bridge(nn.Module):
    """s_0 = tanh(W_s h_S) per layer (Bahdanau 2014 app. A.2.2, with the last encoder
    state, as Cho 2014, since the encoder is unidirectional by default); LSTM cell:
    c_0 = W_c h_S (no squashing: a cell state is unbounded). The cell state starts from
    the encoder's final *hidden* state, as in JoeyNMT (whose bridge gives h_0 and c_0 the
    same projection of it), not from its final cell state: a padded encoder run
    (``encoder.Encoder``) gives each sentence's h_S but not its c_S."""

    def __init__(self, hidden_size: int, lstm: bool):
        super().__init__()
        self.hidden = nn.Linear(hidden_size, hidden_size)
        self.cell = nn.Linear(hidden_size, hidden_size) if lstm else None

    def forward(self, encoded: EncoderOutput) -> DecoderState:
        hidden = torch.tanh(self.hidden(encoded.hidden))  # (L, B, H)
        cell = None if self.cell is None else self.cell(encoded.hidden)  # (L, B, H)
        return DecoderState(hidden, cell)


class StackedCell(nn.Module):
    """``layers`` GRU/LSTM cells for one time step, with dropout between layers."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, layers: int, dropout: float):
        super().__init__()
        sizes = [input_size] + [hidden_size] * (layers - 1)
        self.cells = nn.ModuleList(CELLS[cell](size, hidden_size) for size in sizes)
        self.dropout = Dropout(dropout)

    def forward(
        self, inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """inputs (B, I), hidden/cell (L, B, H) -> new hidden, cell (L, B, H)."""
        hiddens, cells = [], []
        for layer, rnn in enumerate(self.cells):
            if cell is None:
                h = rnn(inputs, hidden[layer])  # (B, H)
            else:
                h, c = rnn(inputs, (hidden[layer], cell[layer]))
                cells.append(c)
            hiddens.append(h)
            if layer + 1 < len(self.cells):  # between layers only
                inputs = self.dropout(h)
        return torch.stack(hiddens), (torch.stack(cells) if cells else None)


class Decoder(nn.Module):
    """Shared parts: target embedding, encoder-to-decoder bridge, memory preparation."""

    def __init__(self, config: ModelConfig, vocab_size: int, scorer: Scorer | None):
        super().__init__()
        self.scorer = scorer
        self.hidden_size = config.hidden_size
        self.embedding = nn.Embedding(vocab_size, config.embedding_size, padding_idx=PAD_ID)
        self.bridge = Bridge(config.hidden_size, lstm=config.cell == "lstm")
        self.dropout = Dropout(config.dropout)

    def prepare(
        self, encoded: EncoderOutput, src_mask: torch.Tensor
    ) -> tuple[Memory, DecoderState]:
        """Memory (keys projected once per batch) and the initial decoder state."""
        keys = None if self.scorer is None else self.scorer.precompute(encoded.outputs)
        return Memory(encoded.outputs, keys, src_mask), self.bridge(encoded)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(tokens))  # (B, T, E) or (B, E)

    def forward(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tgt_in (B, T) -> output features (B, T, H), attention (B, T, S) or None."""
        raise NotImplementedError

    def step(
        self, tokens: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """tokens (B,) -> output features (B, H), new state, attention (B, S) or None."""
        raise NotImplementedError


class PlainDecoder(Decoder):
    """``baseline: init_only`` (Sutskever 2014 sec. 2): s_0 = tanh(W_s h_S) (``Bridge``),
    s_t = RNN(y_{t-1}, s_{t-1}), output s_t. No context after the first state."""

    def __init__(self, config: ModelConfig, vocab_size: int, scorer: None = None):
        super().__init__(config, vocab_size, None)
        self.rnn = _fused_rnn(config, config.embedding_size)

    def forward(self, tgt_in, memory, state):
        outputs, _ = self.rnn(self.embed(tgt_in), state.rnn_state())  # (B, T, H)
        return self.dropout(outputs), None

    def step(self, tokens, memory, state):
        outputs, final = self.rnn(self.embed(tokens).unsqueeze(1), state.rnn_state())
        return self.dropout(outputs[:, 0]), _state_from_rnn(final), None


class RNNEncDecDecoder(Decoder):
    """``baseline: rnnencdec``: Cho 2014 sec. 2.2, the RNNencdec of Bahdanau 2014 (app. A:
    "the model becomes RNN Encoder-Decoder if we fix c_i").

    - c = the encoder summary, the top layer's final hidden state (B, H) (Bahdanau 2014
      app. A fixes c_i to h_{T_x}; a bidirectional encoder's state has both directions
      concatenated, the same vector the ``Bridge`` reads), with dropout as the encoder
      outputs the attention decoders read.
    - s_0 = tanh(W_s h_S) per layer (``Bridge``, Cho 2014 app. A.1.1 / Bahdanau app. A.2.2).
    - s_t = RNN([E y_{t-1}; c], s_{t-1}): Cho 2014 sec. 2.2, h_t = f(h_{t-1}, y_{t-1}, c)
      (app. A.1.2: c enters the gates and the candidate state); Bahdanau 2014 eq. 4 /
      app. A.2.2 with c_i = c. c joins every input of the first layer; it is constant
      over time, so teacher forcing is still one fused RNN call over the whole target.
    - o_t = tanh(W_o [s_t; E y_{t-1}; c]) (B, T, H): Cho 2014 sec. 2.2, P(y_t | ...) =
      g(h_t, y_{t-1}, c); Bahdanau 2014 eq. 3 / app. A.2.2 with c_i = c; a tanh layer in
      place of the maxout, as ``BahdanauDecoder``. ``Seq2Seq`` projects o_t to the
      vocabulary.

    c lives in ``DecoderState.summary``, so ``DecoderState.select`` carries it through
    beam expansion and reordering.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, scorer: None = None):
        super().__init__(config, vocab_size, None)
        size = config.hidden_size
        self.rnn = _fused_rnn(config, config.embedding_size + size)
        self.readout = nn.Linear(2 * size + config.embedding_size, size)  # W_o

    def prepare(self, encoded, src_mask):
        memory, state = super().prepare(encoded, src_mask)
        summary = self.dropout(encoded.hidden[-1])  # c, (B, H)
        return memory, DecoderState(state.hidden, state.cell, summary=summary)

    def _readout(self, top, embedded, summary):
        """o_t = tanh(W_o [s_t; E y_{t-1}; c]) for (B, T, *) inputs, tanh in fp32."""
        features = torch.cat([top, embedded, summary], dim=-1)
        return self.dropout(torch.tanh(self.readout(features).float()))

    def _run(self, embedded: torch.Tensor, state: DecoderState):
        """embedded (B, T, E) -> o_t (B, T, H), final RNN state; one fused call."""
        summary = state.summary.unsqueeze(1).expand(-1, embedded.size(1), -1)  # (B, T, H)
        outputs, final = self.rnn(torch.cat([embedded, summary], dim=-1), state.rnn_state())
        return self._readout(outputs, embedded, summary), final

    def forward(self, tgt_in, memory, state):
        output, _ = self._run(self.embed(tgt_in), state)  # (B, T, H)
        return output, None

    def step(self, tokens, memory, state):
        output, final = self._run(self.embed(tokens).unsqueeze(1), state)  # (B, 1, H)
        new = _state_from_rnn(final)
        return output[:, 0], DecoderState(new.hidden, new.cell, summary=state.summary), None


class LuongDecoder(Decoder):
    """Luong 2015 sec. 3: score against the current h_t; h~_t = tanh(W_c [c_t; h_t]) (eq. 5).

    Input feeding (sec. 3.3) makes the RNN input [y_{t-1}; h~_{t-1}]; h~_0 = 0.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, scorer: Scorer):
        super().__init__(config, vocab_size, scorer)
        self.input_feeding = config.input_feeding
        size, layers = config.hidden_size, config.layers
        if self.input_feeding:
            inputs = config.embedding_size + size
            self.cell = StackedCell(config.cell, inputs, size, layers, config.dropout)
        else:
            self.rnn = _fused_rnn(config, config.embedding_size)
        self.combine = nn.Linear(2 * size, size, bias=False)  # W_c

    def prepare(self, encoded, src_mask):
        memory, state = super().prepare(encoded, src_mask)
        if self.input_feeding:
            feed = encoded.outputs.new_zeros(encoded.outputs.size(0), self.hidden_size)
            state = DecoderState(state.hidden, state.cell, feed)
        return memory, state

    def _attentional(self, hidden: torch.Tensor, memory: Memory):
        """h_t (B, T, H) -> h~_t (B, T, H), weights (B, T, S): eq. 5 with c_t from eq. 7."""
        context, weights = attend(self.scorer, hidden, memory.keys, memory.values, memory.src_mask)
        combined = self.combine(torch.cat([context, hidden], dim=-1)).float()  # fp32 tanh
        return torch.tanh(combined), weights

    def forward(self, tgt_in, memory, state):
        embedded = self.embed(tgt_in)  # (B, T, E)
        if not self.input_feeding:
            hidden, _ = self.rnn(embedded, state.rnn_state())  # (B, T, H), one fused call
            output, weights = self._attentional(hidden, memory)  # (B,T,H)x(B,H,S) at once
            return self.dropout(output), weights
        outputs, weights = [], []
        for t in range(embedded.size(1)):
            output, state, weight = self._feed_step(embedded[:, t], memory, state)
            outputs.append(output)
            weights.append(weight)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)

    def _feed_step(self, embedded: torch.Tensor, memory: Memory, state: DecoderState):
        inputs = torch.cat([embedded, state.feed], dim=-1)  # (B, E + H)
        hidden, cell = self.cell(inputs, state.hidden, state.cell)  # (L, B, H)
        output, weights = self._attentional(hidden[-1].unsqueeze(1), memory)  # (B, 1, H)
        output = output.squeeze(1)
        return self.dropout(output), DecoderState(hidden, cell, output), weights.squeeze(1)

    def step(self, tokens, memory, state):
        if self.input_feeding:
            return self._feed_step(self.embed(tokens), memory, state)
        hidden, final = self.rnn(self.embed(tokens).unsqueeze(1), state.rnn_state())
        output, weights = self._attentional(hidden, memory)  # (B, 1, H), (B, 1, S)
        return self.dropout(output[:, 0]), _state_from_rnn(final), weights[:, 0]


class BahdanauDecoder(Decoder):
    """Bahdanau 2014 eqs. 4-6: c_i = sum_j a_ij h_j with a_ij scored against s_{i-1};
    s_i = f(s_{i-1}, [y_{i-1}; c_i]); output t_i = tanh(W_o [y_{i-1}; s_i; c_i]) (a tanh
    layer in place of the paper's maxout, app. A.2.2), computed for all steps at once.

    Teacher forcing with one GRU layer (the default) takes
    :func:`pipeline.models.bahdanau_loop.gru_attention_loop`, the same function with less
    work inside the loop; other cells and stacks loop over :class:`StackedCell`, as search
    does.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, scorer: Scorer):
        super().__init__(config, vocab_size, scorer)
        size = config.hidden_size
        inputs = config.embedding_size + size
        self.cell = StackedCell(config.cell, inputs, size, config.layers, config.dropout)
        self.readout = nn.Linear(config.embedding_size + 2 * size, size)  # W_o
        self.fused_gru = config.cell == "gru" and config.layers == 1

    def _recur(self, embedded: torch.Tensor, memory: Memory, state: DecoderState):
        """One step of eqs. 5-6: embedded (B, E) -> new state, c_i (B, H), a_i (B, S)."""
        query = state.hidden[-1].unsqueeze(1)  # s_{i-1}, (B, 1, H)
        context, weights = attend(self.scorer, query, memory.keys, memory.values, memory.src_mask)
        context = context.squeeze(1)  # (B, H)
        inputs = torch.cat([embedded, context], dim=-1)  # (B, E + H)
        hidden, cell = self.cell(inputs, state.hidden, state.cell)
        return DecoderState(hidden, cell), context, weights.squeeze(1)

    def _readout(self, embedded, top_hidden, context):
        features = torch.cat([embedded, top_hidden, context], dim=-1)
        return self.dropout(torch.tanh(self.readout(features).float()))  # fp32 tanh

    def forward(self, tgt_in, memory, state):
        embedded = self.embed(tgt_in)  # (B, T, E)
        if self.fused_gru:  # the same equations, less work per step (bahdanau_loop)
            top, context, weights = gru_attention_loop(
                self.cell.cells[0], self.scorer, embedded, memory, state.hidden[0]
            )
            return self._readout(embedded, top, context), weights
        tops, contexts, weights = [], [], []
        for t in range(embedded.size(1)):
            state, context, weight = self._recur(embedded[:, t], memory, state)
            tops.append(state.hidden[-1])
            contexts.append(context)
            weights.append(weight)
        top, context = torch.stack(tops, dim=1), torch.stack(contexts, dim=1)  # (B, T, H)
        return self._readout(embedded, top, context), torch.stack(weights, dim=1)

    def step(self, tokens, memory, state):
        embedded = self.embed(tokens)  # (B, E)
        state, context, weights = self._recur(embedded, memory, state)
        return self._readout(embedded, state.hidden[-1], context), state, weights


WIRINGS: dict[str, type[Decoder]] = {"bahdanau": BahdanauDecoder, "luong": LuongDecoder}
"""Registry: ``ModelConfig.wiring`` -> attention decoder class."""

BASELINES: dict[str, type[Decoder]] = {"rnnencdec": RNNEncDecDecoder, "init_only": PlainDecoder}
"""Registry: ``ModelConfig.baseline`` -> no-attention decoder class (``scorer: none``)."""


def _fused_rnn(config: ModelConfig, input_size: int) -> nn.RNNBase:
    return RNNS[config.cell](
        input_size,
        config.hidden_size,
        num_layers=config.layers,
        batch_first=True,
        dropout=config.dropout if config.layers > 1 else 0.0,
    )


def _state_from_rnn(final) -> DecoderState:
    return DecoderState(*final) if isinstance(final, tuple) else DecoderState(final)
