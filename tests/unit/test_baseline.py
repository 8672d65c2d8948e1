"""The no-attention baselines: RNNencdec (Cho 2014, the default) and init-only (Sutskever)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.data.batching import make_batch
from pipeline.data.dataset import EOS_ID, TokenizedData, TokenizedSplit
from pipeline.models.checkpoint import VocabInfo, load_checkpoint, save_checkpoint
from pipeline.models.decoder import PlainDecoder, RNNEncDecDecoder
from pipeline.models.search import beam_search, greedy_search
from pipeline.models.seq2seq import Seq2Seq

VOCAB = 30
BASELINES = ["rnnencdec", "init_only"]


def _model(tiny_model_config, **overrides) -> Seq2Seq:
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer="none", **overrides), VOCAB, VOCAB)
    with torch.no_grad():  # an untrained model that still stops now and then
        model.generator.bias[EOS_ID] += 2.0
    return model.eval()


def _random_split(count: int, seed: int) -> TokenizedSplit:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, VOCAB, rng.integers(1, 10)).tolist() for _ in range(count)]
    tgt = [rng.integers(4, VOCAB, rng.integers(2, 10)).tolist() for _ in range(count)]
    return TokenizedSplit.from_sequences(src, tgt)


def test_default_baseline_is_rnnencdec(tiny_model_config):
    assert isinstance(_model(tiny_model_config).decoder, RNNEncDecDecoder)
    assert isinstance(_model(tiny_model_config, baseline="init_only").decoder, PlainDecoder)
    # attention models ignore ``baseline``
    attention = Seq2Seq(tiny_model_config(scorer="dot", baseline="init_only"), VOCAB, VOCAB)
    plain = Seq2Seq(tiny_model_config(scorer="dot"), VOCAB, VOCAB)
    assert type(attention.decoder) is type(plain.decoder)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("baseline", BASELINES)
def test_only_rnnencdec_sees_the_source_after_the_initial_state(baseline, cell, tiny_model_config):
    """With the Bridge zeroed, s_0 is the same for every source: only the summary c that
    RNNencdec feeds into every step and the readout can tell the sources apart."""
    model = _model(tiny_model_config, baseline=baseline, cell=cell)
    with torch.no_grad():
        for parameter in model.decoder.bridge.parameters():
            parameter.zero_()
    sources = [[5, 6, 7, 8], [20, 21, 9, 4]]
    split = TokenizedSplit.from_sequences(sources, [[10, 11, 12]] * 2)
    batch = make_batch(split, np.arange(2))
    with torch.no_grad():
        memory, state = model.encode(batch.src, batch.src_lengths, batch.src_mask)
        assert torch.equal(state.hidden[:, 0], state.hidden[:, 1])  # s_0 held fixed
        features, attention = model.decoder(batch.tgt_in, memory, state)  # (2, 4, H)
    assert attention is None
    differs = (features[0] - features[1]).abs().amax(dim=-1)  # (T,)
    if baseline == "rnnencdec":
        assert bool((differs > 1e-4).all()), differs  # every step, t = 0 and t > 0
    else:
        assert torch.equal(features[0], features[1])  # init-only: blind to the source


@pytest.mark.parametrize("baseline", BASELINES)
def test_step_carries_the_summary_and_select_reorders_it(baseline, tiny_model_config):
    model = _model(tiny_model_config, baseline=baseline)
    split = _random_split(3, seed=5)
    batch = make_batch(split, np.arange(3))
    with torch.no_grad():
        memory, state = model.encode(batch.src, batch.src_lengths, batch.src_mask)
        _, stepped, _ = model.step(batch.tgt_in[:, 0], memory, state)
    if baseline == "init_only":
        assert state.summary is None and stepped.summary is None
        return
    assert state.summary.shape == (3, 32)
    assert stepped.summary is state.summary  # constant over time
    rows = torch.tensor([2, 0, 0, 1])
    picked = stepped.select(rows)
    assert torch.equal(picked.summary, state.summary[rows])
    assert torch.equal(picked.hidden, stepped.hidden[:, rows])


@pytest.mark.parametrize(
    "overrides",
    [{}, {"cell": "lstm", "layers": 2}, {"bidirectional": True, "reverse_source": True}],
    ids=["gru", "lstm2", "birnn"],
)
@pytest.mark.parametrize("baseline", BASELINES)
def test_greedy_and_beam_search_run_and_batching_changes_nothing(
    baseline, overrides, tiny_model_config
):
    """Batched beams (rows expanded and reordered by ``DecoderState.select``) give the
    same hypotheses as each sentence alone: each row keeps its own sentence's c."""
    model = _model(tiny_model_config, baseline=baseline, **overrides)
    split, reverse = _random_split(5, seed=1), model.config.reverse_source
    batch = make_batch(split, np.arange(len(split)), reverse_source=reverse)
    greedy = greedy_search(model, batch)
    assert greedy[1] == [None] * len(split)  # no attention, no heatmap
    assert beam_search(model, batch, beam_size=1)[0] == greedy[0]
    beams = beam_search(model, batch, beam_size=3)
    assert beams[1] == [None] * len(split)
    for row in range(len(split)):
        alone = make_batch(split, np.array([row]), reverse_source=reverse)
        assert greedy_search(model, alone)[0][0] == greedy[0][row]
        assert beam_search(model, alone, beam_size=3)[0][0] == beams[0][row]


@pytest.mark.parametrize(("cell", "gates"), [("gru", 3), ("lstm", 4)])
@pytest.mark.parametrize("layers", [1, 2])
def test_rnnencdec_adds_the_context_inputs_and_the_readout(cell, gates, layers, tiny_model_config):
    E, H = 16, 32
    rnnencdec, init_only = (
        Seq2Seq(tiny_model_config(scorer="none", cell=cell, layers=layers, baseline=b), 20, 20)
        for b in BASELINES
    )
    # c adds H input columns to every gate of the first decoder layer only, plus the
    # readout W_o (H x (H + E + H)) and its bias
    expected = gates * H * H + H * (2 * H + E) + H
    assert rnnencdec.num_parameters() - init_only.num_parameters() == expected


def _vocab(tok_dir) -> VocabInfo:
    return VocabInfo.from_data(TokenizedData.load(tok_dir))


def test_checkpoint_without_baseline_loads_as_init_only(tmp_path, tiny_model_config, tiny_tok_dir):
    """A checkpoint written before ``baseline`` existed holds an init-only decoder."""
    torch.manual_seed(0)
    vocab = _vocab(tiny_tok_dir)
    config = tiny_model_config(scorer="none", baseline="init_only")
    model = Seq2Seq(config, vocab.src_vocab_size, vocab.tgt_vocab_size).eval()
    path = tmp_path / "old.pt"
    save_checkpoint(path, model, vocab, "old-variant")
    payload = torch.load(path, weights_only=True)
    del payload["model_config"]["baseline"]  # as written before the field existed
    torch.save(payload, path)
    loaded = load_checkpoint(path, expected_vocab=vocab)
    assert loaded.config.baseline == "init_only" and loaded.config == config
    assert isinstance(loaded.model.decoder, PlainDecoder)
    split = TokenizedData.load(tiny_tok_dir).split("dev")
    batch = make_batch(split, np.arange(len(split)))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(batch), model(batch), rtol=0, atol=0)
    # a checkpoint that names its baseline keeps it
    new = Seq2Seq(tiny_model_config(scorer="none"), vocab.src_vocab_size, vocab.tgt_vocab_size)
    save_checkpoint(tmp_path / "new.pt", new, vocab, "new-variant")
    reloaded = load_checkpoint(tmp_path / "new.pt")
    assert reloaded.config.baseline == "rnnencdec"
    assert isinstance(reloaded.model.decoder, RNNEncDecDecoder)
