"""Build the two derived data folders of the baseline exploration, on the CPU, from the
tokenize stage's data/tok (default params, the committed study's data):

- data/tok_shuf: train sources permuted across pairs (seed 1); dev and test unchanged.
  A model trained on it cannot use its source: its dev BLEU is the floor of a target LM.
- data/tok_kjv: train = the original train pairs + the same verses' King James Version
  English paired with the same Reina-Valera target (more source-side data); dev and test
  unchanged. A KJV verse is added only if it passes the study's train filters on the
  source side (1..30 words, target/source word ratio 0.5..2.0).

    PYTHONPATH=explore/baseline/snap python explore/baseline/prepare_data.py \
        --tok explore/baseline/data/tok --raw /tmp/gpu-base/data/raw --out explore/baseline/data
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np

from pipeline.data.dataset import SubwordTokenizer, TokenizedSplit
from pipeline.data.sources import TRANSLATIONS, bible_db_path, fix_bible_verse


def copy_tok(tok: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for f in tok.iterdir():
        if f.is_file():
            shutil.copy2(f, out / f.name)


def shuffled(tok: Path, out: Path, seed: int = 1) -> dict:
    copy_tok(tok, out)
    train = TokenizedSplit.load(tok / "train.npz")
    n = len(train)
    perm = np.random.default_rng(seed).permutation(n)
    src = [train.source(int(perm[i])) for i in range(n)]
    tgt = [train.target(i) for i in range(n)]
    TokenizedSplit.from_sequences(src, tgt).save(out / "train.npz")
    (out / "stats.json").unlink(missing_ok=True)
    return {"train_pairs": n, "fixed_points": int((perm == np.arange(n)).sum())}


def kjv_extra(tok: Path, raw: Path, out: Path) -> dict:
    copy_tok(tok, out)
    train_pairs = [
        tuple(line.split("\t")) for line in (raw / "train.tsv").read_text().splitlines() if line
    ]
    web, kjv, rv = (TRANSLATIONS[k].code for k in ("web", "kjv", "reina_valera_1909"))
    query = (
        "SELECT w.bNumber, w.vText, k.vText, t.vText FROM bible w"
        " JOIN bible k ON w.bNumber = k.bNumber AND w.cNumber = k.cNumber AND w.vNumber = k.vNumber"
        " JOIN bible t ON w.bNumber = t.bNumber AND w.cNumber = t.cNumber AND w.vNumber = t.vNumber"
        " WHERE w.bbName = ? AND k.bbName = ? AND t.bbName = ?"
    )
    with sqlite3.connect(f"file:{bible_db_path()}?mode=ro", uri=True) as db:
        rows = db.execute(query, (web, kjv, rv)).fetchall()
    fixes: Counter = Counter()
    by_pair: dict[tuple[str, str], str | None] = {}
    for book, w, k, t in rows:
        w, k, t = (fix_bible_verse(x, book, fixes) for x in (w, k, t))
        if w is None or k is None or t is None:
            continue
        key = (" ".join(w.split()), " ".join(t.split()))
        by_pair[key] = None if key in by_pair else " ".join(k.split())  # ambiguous: none
    counts: Counter = Counter()
    extra_src, extra_tgt_index = [], []
    for i, (s, t) in enumerate(train_pairs):
        k = by_pair.get((" ".join(s.split()), " ".join(t.split())))
        if k is None:
            counts["no_kjv_match"] += 1
            continue
        ks, tw = len(k.split()), len(t.split())
        if not 1 <= ks <= 30:
            counts["kjv_over_30_words"] += 1
            continue
        if not 0.5 <= tw / ks <= 2.0:
            counts["kjv_length_ratio"] += 1
            continue
        if k == s:
            counts["kjv_same_as_web"] += 1
        extra_src.append(k)
        extra_tgt_index.append(i)
    train = TokenizedSplit.load(tok / "train.npz")
    assert len(train) == len(train_pairs), (len(train), len(train_pairs))
    sp = SubwordTokenizer(tok / "src.model")
    extra_ids = sp.encode(extra_src)
    src = [train.source(i) for i in range(len(train))] + extra_ids
    tgt = [train.target(i) for i in range(len(train))] + [train.target(i) for i in extra_tgt_index]
    TokenizedSplit.from_sequences(src, tgt).save(out / "train.npz")
    (out / "stats.json").unlink(missing_ok=True)
    return {
        "train_pairs_web": len(train),
        "train_pairs_kjv_added": len(extra_src),
        "train_pairs_total": len(src),
        "skipped": dict(counts),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", type=Path, required=True)
    ap.add_argument("--raw", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    info = {
        "tok_shuf": shuffled(args.tok, args.out / "tok_shuf"),
        "tok_kjv": kjv_extra(args.tok, args.raw, args.out / "tok_kjv"),
    }
    (args.out / "derived.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
