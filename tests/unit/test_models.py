"""Seq2Seq: shapes, padding, every scorer/wiring learns a toy task, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.data.batching import make_batch
from pipeline.data.dataset import (
    EOS_ID,
    PAD_ID,
    SubwordTokenizer,
    TokenizedData,
    TokenizedSplit,
)
from pipeline.models.checkpoint import VocabInfo, load_checkpoint, save_checkpoint
from pipeline.models.search import beam_search, greedy_search
from pipeline.models.seq2seq import Seq2Seq

VOCAB = 24

# Six pairs: the target is the source with every id shifted by +7 (ids 4..16 -> 11..23)
# and the last two tokens swapped, so the model has to use the source, not a language model.
SOURCES = [[4, 5, 6], [7, 8, 9, 10, 11], [12, 4], [5, 13, 14, 6], [15, 16, 8, 9, 10, 4], [9]]
TARGETS = [[*(s + 7 for s in src[:-2]), src[-1] + 7, src[-2] + 7] for src in SOURCES[:-1]]
TARGETS.append([SOURCES[-1][0] + 7])

# (scorer, wiring, extra config) - every scorer, both wirings, input feeding, LSTM,
# bidirectional/multi-layer encoders and source reversal are all made to overfit.
OVERFIT_CASES = [
    ("none", "luong", {}),  # baseline: rnnencdec (Cho 2014)
    ("none", "luong", {"baseline": "init_only", "reverse_source": True}),  # Sutskever 2014
    ("none", "luong", {"reverse_source": True, "cell": "lstm"}),
    ("dot", "luong", {}),
    ("scaled_dot", "luong", {}),
    ("general", "luong", {"input_feeding": True}),
    ("additive", "luong", {"cell": "lstm", "layers": 2}),
    ("location", "luong", {}),
    ("additive", "bahdanau", {"reverse_source": True}),
    ("dot", "bahdanau", {"bidirectional": True, "cell": "lstm"}),
]


def _toy_batch(reverse_source: bool = False):
    split = TokenizedSplit.from_sequences(SOURCES, TARGETS)
    return make_batch(split, np.arange(len(SOURCES)), reverse_source=reverse_source)


def _overfit(model: Seq2Seq, batch, max_steps: int = 400) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    for _ in range(max_steps):
        loss, tokens = model.loss(batch)
        optimizer.zero_grad()
        (loss / tokens).backward()
        optimizer.step()
        if loss.item() / tokens < 0.01:
            break
    return loss.item() / tokens


@pytest.mark.parametrize(("scorer", "wiring", "extra"), OVERFIT_CASES)
def test_overfits_and_greedy_reproduces_targets(scorer, wiring, extra, tiny_model_config):
    torch.manual_seed(0)
    config = tiny_model_config(scorer=scorer, wiring=wiring, **extra)
    model = Seq2Seq(config, VOCAB, VOCAB)
    batch = _toy_batch(config.reverse_source)
    assert _overfit(model, batch) < 0.05
    hypotheses, attentions = greedy_search(model, batch)
    assert hypotheses == TARGETS
    beam_hypotheses, _ = beam_search(model, batch, beam_size=3)
    assert beam_hypotheses == TARGETS
    for source, target, attention in zip(SOURCES, TARGETS, attentions):
        if scorer == "none":
            assert attention is None
        else:  # one row per target token + the EOS step, one column per source token + EOS
            assert attention.shape == (len(target) + 1, len(source) + 1)
            np.testing.assert_allclose(attention.sum(1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("wiring", ["luong", "bahdanau"])
def test_logits_shape_and_padding_never_leaks(wiring, tiny_model_config):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(scorer="additive", wiring=wiring), VOCAB, VOCAB).eval()
    batch = _toy_batch()
    logits = model(batch)
    assert logits.shape == (*batch.tgt_in.shape, VOCAB)
    # garbage in the padded source positions changes nothing
    noisy_src = batch.src.masked_fill(~batch.src_mask, 17)
    noisy = type(batch)(**{**batch.__dict__, "src": noisy_src})
    torch.testing.assert_close(model(noisy), logits, rtol=0, atol=0)
    # each sentence alone gives the same logits as inside the padded batch
    for row in range(len(SOURCES)):
        alone = make_batch(TokenizedSplit.from_sequences(SOURCES, TARGETS), np.array([row]))
        length = len(TARGETS[row]) + 1
        torch.testing.assert_close(model(alone)[0], logits[row, :length], rtol=1e-5, atol=1e-5)


# every decoder kind: both no-attention baselines, both wirings, input feeding, stacks
STEP_CASES = [
    {"scorer": "none"},
    {"scorer": "none", "baseline": "init_only"},
    {"scorer": "none", "cell": "lstm", "layers": 2, "bidirectional": True},
    {"scorer": "none", "baseline": "init_only", "cell": "lstm", "layers": 2},
    {"scorer": "dot"},
    {"scorer": "general", "input_feeding": True},
    {"scorer": "additive", "wiring": "bahdanau", "cell": "lstm", "layers": 2},
    # one GRU layer: teacher forcing takes bahdanau_loop.gru_attention_loop, search GRUCell
    {"scorer": "additive", "wiring": "bahdanau"},
    {"scorer": "location", "wiring": "bahdanau", "reverse_source": True},
    {"scorer": "general", "wiring": "bahdanau"},
]


@pytest.mark.parametrize("overrides", STEP_CASES, ids=lambda o: "-".join(map(str, o.values())))
def test_teacher_forcing_equals_step_by_step_decoding(overrides, tiny_model_config):
    """The fused teacher-forced pass and T calls of ``step`` (what search runs) compute
    the same log-probabilities and attention at every real target position."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(**overrides), VOCAB, VOCAB).eval()
    batch = _toy_batch()
    with torch.no_grad():
        logits, attention = model.teacher_forced(batch)  # (B, T, V)
        memory, state = model.encode(batch.src, batch.src_lengths, batch.src_mask)
        steps, weights = [], []
        for t in range(batch.tgt_in.size(1)):
            log_probs, state, weight = model.step(batch.tgt_in[:, t], memory, state)
            steps.append(log_probs)
            weights.append(weight)
    real = batch.tgt_out != PAD_ID  # (B, T)
    expected = torch.log_softmax(logits, dim=-1)[real]
    torch.testing.assert_close(torch.stack(steps, dim=1)[real], expected, rtol=1e-5, atol=1e-5)
    if overrides["scorer"] == "none":
        assert attention is None and all(w is None for w in weights)
    else:
        stepped = torch.stack(weights, dim=1)[real]
        torch.testing.assert_close(stepped, attention[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scorer", ["additive", "dot", "location"])
def test_fused_bahdanau_gru_loop_equals_the_cell_loop(scorer, tiny_model_config):
    """bahdanau_loop.gru_attention_loop (one product for the embeddings' gate inputs, W_hh and
    W_a fused, gates in float32) gives the loss and every gradient of the StackedCell
    loop, in training mode with dropout (the same masks: no mask is drawn past the last
    layer in either)."""
    torch.manual_seed(0)
    config = tiny_model_config(scorer=scorer, wiring="bahdanau", dropout=0.3)
    model = Seq2Seq(config, VOCAB, VOCAB).train()
    assert model.decoder.fused_gru
    batch = _toy_batch()
    results = []
    for fused in (True, False):
        model.decoder.fused_gru = fused
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same dropout masks
        loss, _ = model.loss(batch, label_smoothing=0.1)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (fused_loss, fused_grads), (loop_loss, loop_grads) = results
    torch.testing.assert_close(fused_loss, loop_loss, rtol=1e-6, atol=1e-6)
    assert fused_grads.keys() == loop_grads.keys()
    for name, grad in fused_grads.items():
        torch.testing.assert_close(grad, loop_grads[name], rtol=1e-5, atol=1e-6, msg=name)
    assert fused_grads["decoder.cell.cells.0.weight_ih"].abs().sum() > 0


def test_loss_counts_real_tokens_and_label_smoothing_raises_it(tiny_model_config):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_model_config(), VOCAB, VOCAB).eval()
    batch = _toy_batch()
    loss, tokens = model.loss(batch)
    assert tokens == sum(len(t) + 1 for t in TARGETS)
    logits = model(batch)
    mask = batch.tgt_out != PAD_ID
    expected = -torch.log_softmax(logits, -1).gather(-1, batch.tgt_out[..., None])[..., 0][mask]
    torch.testing.assert_close(loss, expected.sum())
    smoothed, _ = model.loss(batch, label_smoothing=0.1)
    assert smoothed.item() != loss.item()


def test_tied_embeddings_share_one_matrix(tiny_model_config):
    config = tiny_model_config(embedding_size=32, tie_embeddings=True)
    tied, untied = (
        Seq2Seq(config, VOCAB, VOCAB),
        Seq2Seq(tiny_model_config(embedding_size=32), VOCAB, VOCAB),
    )
    assert tied.generator.weight is tied.decoder.embedding.weight
    assert untied.num_parameters() - tied.num_parameters() == VOCAB * 32
    with pytest.raises(ValueError, match="tie_embeddings"):
        Seq2Seq(tiny_model_config(embedding_size=16, tie_embeddings=True), VOCAB, VOCAB)


def test_bidirectional_encoder_needs_even_hidden_size(tiny_model_config):
    with pytest.raises(ValueError, match="hidden_size"):
        Seq2Seq(tiny_model_config(hidden_size=33, bidirectional=True), VOCAB, VOCAB)


def _vocab(tok_dir) -> VocabInfo:
    return VocabInfo.from_data(TokenizedData.load(tok_dir))


@pytest.mark.parametrize("scorer", ["none", "additive"])
def test_checkpoint_round_trip_gives_identical_output(
    scorer, tmp_path, tiny_model_config, tiny_tok_dir
):
    torch.manual_seed(0)
    vocab = _vocab(tiny_tok_dir)
    config = tiny_model_config(scorer=scorer, reverse_source=True, cell="lstm")
    model = Seq2Seq(config, vocab.src_vocab_size, vocab.tgt_vocab_size)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model, vocab, "toy-variant", extra={"epoch": 3})
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary left
    loaded = load_checkpoint(path, expected_vocab=vocab)
    assert loaded.variant_id == "toy-variant" and loaded.config == config
    assert loaded.extra == {"epoch": 3} and loaded.vocab == vocab
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.model.state_dict()[key]), key
    split = TokenizedData.load(tiny_tok_dir).split("dev")
    batch = make_batch(split, np.arange(len(split)), reverse_source=True)
    assert greedy_search(model, batch)[0] == greedy_search(loaded.model, batch)[0]
    first, second = (
        beam_search(model, batch, beam_size=2),
        beam_search(loaded.model, batch, beam_size=2),
    )
    assert first[0] == second[0]


def test_checkpoint_with_other_tokenizer_is_rejected(
    tmp_path, tiny_model_config, tiny_tok_dir, tiny_other_tokenizer
):
    vocab = _vocab(tiny_tok_dir)
    model = Seq2Seq(tiny_model_config(), vocab.src_vocab_size, vocab.tgt_vocab_size)
    path = tmp_path / "model.pt"
    save_checkpoint(path, model, vocab, "toy")
    other = SubwordTokenizer(tiny_other_tokenizer)
    data = TokenizedData.load(tiny_tok_dir)
    mismatched = VocabInfo.from_tokenizers(data.src_tokenizer, other)
    with pytest.raises(ValueError) as error:
        load_checkpoint(path, expected_vocab=mismatched)
    message = str(error.value)
    assert str(path) in message and "tgt_sha256" in message and "src_sha256" not in message
    if other.vocab_size != data.tgt_tokenizer.vocab_size:
        assert "tgt_vocab_size" in message


def test_load_checkpoint_rejects_other_files(tmp_path):
    path = tmp_path / "not_a_checkpoint.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match="not a model checkpoint"):
        load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")


def test_target_counts_count_every_output_and_one_end_of_sentence_each():
    split = TokenizedSplit.from_sequences(SOURCES, TARGETS)
    counts = split.target_counts(VOCAB)
    expected = np.zeros(VOCAB, dtype=np.int64)
    for target in TARGETS:
        for token in target:
            expected[token] += 1
    expected[EOS_ID] = len(TARGETS)
    assert counts.tolist() == expected.tolist()
    with pytest.raises(ValueError, match="target id 23 >= vocabulary size 20"):
        split.target_counts(20)


def test_unigram_output_bias_starts_from_the_training_distribution(tiny_model_config):
    split = TokenizedSplit.from_sequences(SOURCES, TARGETS)
    counts = torch.from_numpy(split.target_counts(VOCAB))
    model = Seq2Seq(tiny_model_config(scorer="additive"), VOCAB, VOCAB)
    model.init_output_bias(counts)
    smoothed = (counts + 1).double() / (counts + 1).sum()
    probabilities = torch.softmax(model.generator(torch.zeros(1, 32)), dim=-1)[0]
    torch.testing.assert_close(probabilities.double(), smoothed, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="output bias"):
        model.init_output_bias(counts[:-1])


def test_unigram_output_bias_lowers_the_untrained_loss(tiny_model_config):
    """The point of the unigram bias: before any update, the loss is near the unigram
    entropy instead of the uniform distribution's log V."""
    split = TokenizedSplit.from_sequences(SOURCES, TARGETS)
    batch = _toy_batch()
    losses = {}
    for bias in ("uniform", "unigram"):
        torch.manual_seed(0)
        model = Seq2Seq(tiny_model_config(scorer="dot"), VOCAB, VOCAB)
        if bias == "unigram":
            model.init_output_bias(torch.from_numpy(split.target_counts(VOCAB)))
        with torch.no_grad():
            total, tokens = model.loss(batch)
        losses[bias] = total.item() / tokens
    assert losses["uniform"] == pytest.approx(np.log(VOCAB), abs=0.2)
    assert losses["unigram"] < losses["uniform"] - 0.2


def test_fp32_cast_keeps_a_packed_sequence_packed():
    """The cast the recurrences take under CUDA autocast (pipeline/models/rnn.py) keeps a
    PackedSequence a PackedSequence with integer batch sizes (a GPU run of an LSTM or
    bidirectional encoder under bf16 crashed before: tests/unit/test_cuda.py)."""
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

    from pipeline.models.rnn import _fp32

    padded = torch.randn(3, 4, 2, dtype=torch.bfloat16)
    packed = pack_padded_sequence(
        padded, torch.tensor([4, 2, 3]), batch_first=True, enforce_sorted=False
    )
    cast = _fp32(packed)
    assert isinstance(cast, PackedSequence) and cast.data.dtype == torch.float32
    assert cast.batch_sizes.dtype == torch.int64
    assert torch.equal(cast.batch_sizes, packed.batch_sizes)
    assert torch.equal(cast.sorted_indices, packed.sorted_indices)
    hidden = (torch.zeros(1, 3, 2, dtype=torch.bfloat16),) * 2
    assert [h.dtype for h in _fp32(hidden)] == [torch.float32, torch.float32]
