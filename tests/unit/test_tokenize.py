import hashlib
import json

import numpy as np
import pytest

from pipeline.config.params import FetchConfig, SplitConfig, TokenizeConfig
from pipeline.data.dataset import EOS_ID, TokenizedData, TokenizedDataError, TokenizedSplit
from pipeline.data.fetch import fetch
from pipeline.data.pairs import read_tsv_pairs
from pipeline.data.tokenize import TokenizeError, tokenize
from tests.support import synthetic_pairs, write_tsv

SPLIT = SplitConfig(dev_size=40, test_size=120, test_min_per_bucket=10, max_train_words=None)


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    pairs = synthetic_pairs(900, seed=5)
    pairs[3] = ("Ça coûte 5 € — “quoted” naïve café", "ÇA COÛTE 5 € — “QUOTED” NAÏVE CAFÉ")
    corpus = write_tsv(root / "corpus.tsv", pairs)
    fetch(FetchConfig(source="tsv", path=str(corpus), split=SPLIT), root / "raw")
    return root / "raw"


def test_fetch_outputs_and_corpus_json(raw_dir):
    summary = json.loads((raw_dir / "corpus.json").read_text())
    for name in ("train", "dev", "test"):
        data = (raw_dir / f"{name}.tsv").read_bytes()
        assert hashlib.sha256(data).hexdigest() == summary["splits"][name]["sha256"]
        assert summary["splits"][name]["pairs"] == len(read_tsv_pairs(raw_dir / f"{name}.tsv"))
    assert sum(summary["all_clean"]["source_length_buckets"].values()) == summary["counts"]["clean"]


@pytest.mark.parametrize("joint", [False, True])
def test_tokenize_round_trips_and_is_deterministic(raw_dir, tmp_path, joint):
    config = TokenizeConfig(vocab_size=120, joint=joint)
    stats = tokenize(config, raw_dir, tmp_path / "a")
    tokenize(config, raw_dir, tmp_path / "b")
    for name in ("src.model", "tgt.model", "train.npz", "test.npz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert stats["round_trip_failures"] == {"dev": 0, "test": 0}
    data = TokenizedData.load(tmp_path / "a")
    assert (data.src_tokenizer.sha256 == data.tgt_tokenizer.sha256) == joint
    for name in ("train", "test"):
        split = data.split(name)
        pairs = read_tsv_pairs(raw_dir / f"{name}.tsv")
        assert len(split) == len(pairs) == stats["splits"][name]["sentences"]
        decoded = data.tgt_tokenizer.decode(
            [split.target(i).tolist() + [EOS_ID, 7] for i in range(len(split))]
        )
        assert decoded == [t for _, t in pairs]
        assert data.src_tokenizer.decode([split.source(i).tolist() for i in range(len(split))]) == [
            s for s, _ in pairs
        ]
        assert split.src_ids.dtype == np.int32
    assert stats["splits"]["test"]["source"]["unknown_rate"] == 0.0


def test_tokenize_bad_input(tmp_path, raw_dir):
    with pytest.raises(TokenizeError, match=r"train.tsv: not found \(run `dvc repro fetch`\)"):
        tokenize(TokenizeConfig(vocab_size=100), tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("train", "dev", "test"):
        (broken / f"{name}.tsv").write_text((raw_dir / f"{name}.tsv").read_text())
    (broken / "dev.tsv").write_text("")
    with pytest.raises(TokenizeError, match="dev.tsv: empty split"):
        tokenize(TokenizeConfig(vocab_size=100), broken, tmp_path / "out")
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(TokenizedDataError, match="bad.npz: not a tokenized split"):
        TokenizedSplit.load(tmp_path / "bad.npz")


def test_a_vocab_size_the_corpus_cannot_reach_is_said_with_the_size_used(raw_dir, tmp_path, caplog):
    stats = tokenize(TokenizeConfig(vocab_size=10_000_000), raw_dir, tmp_path / "tok")
    used = stats["vocab_size"]
    assert max(used.values()) < 10_000_000
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(
        "tokenize.vocab_size: 10000000 requested" in w and str(used["source"]) in w
        for w in warnings
    ), warnings
