"""Training throughput (target tokens/s) of every scorer and decoder wiring.

Random token ids with realistic lengths (source ~30, target ~35 subwords), the study's
default sizes (embedding 256, hidden 256, vocab 4000, batch_tokens 3000), token-bucketed
batches, full training steps (forward, loss, backward, clipping, Adam). Not part of the
test run. Prints a Markdown table and, with ``--json``, writes the numbers.

    python -m benchmarks.train_throughput --threads 1 --steps 8   # from the repo root
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from pipeline.config import ModelConfig
from pipeline.data.batching import make_batch, padding_fraction, token_batches
from pipeline.data.tokenized import TokenizedSplit
from pipeline.models.seq2seq import Seq2Seq

CASES = [
    ("none", "luong", False),
    *((s, w, False) for w in ("luong", "bahdanau") for s in ("dot", "scaled_dot", "general")),
    *((s, w, False) for w in ("luong", "bahdanau") for s in ("additive", "location")),
    ("additive", "luong", True),
]


def random_corpus(sentences: int, vocab: int, seed: int) -> TokenizedSplit:
    """Random ids; source lengths ~N(30, 9), target ~1.2 x source (mean ~35)."""
    rng = np.random.default_rng(seed)
    src_lengths = np.clip(rng.normal(30, 9, sentences), 3, 80).astype(int)
    tgt_lengths = np.clip(src_lengths * 1.2 + rng.normal(0, 3, sentences), 3, 95).astype(int)
    src = [rng.integers(4, vocab, n) for n in src_lengths]
    tgt = [rng.integers(4, vocab, n) for n in tgt_lengths]
    return TokenizedSplit.from_sequences(src, tgt)


def measure(config: ModelConfig, split, batches, vocab: int, warmup: int, steps: int) -> dict:
    torch.manual_seed(0)
    model = Seq2Seq(config, vocab, vocab).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens, seconds = 0, 0.0
    for index in range(warmup + steps):
        batch = make_batch(split, batches[index % len(batches)], reverse_source=True)
        start = time.perf_counter()
        loss, count = model.loss(batch, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        (loss / count).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if index >= warmup:
            tokens, seconds = tokens + count, seconds + time.perf_counter() - start
    return {
        "scorer": config.scorer,
        "wiring": "-" if config.scorer == "none" else config.wiring,
        "input_feeding": config.input_feeding,
        "parameters": model.num_parameters(),
        "tokens_per_s": tokens / seconds,
        "seconds_per_step": seconds / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per case")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--embedding-size", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--batch-tokens", type=int, default=3000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    split = random_corpus(3000, args.vocab, seed=0)
    batches = token_batches(
        split.src_lengths, split.tgt_lengths, args.batch_tokens, np.random.default_rng(0)
    )
    padding = padding_fraction(split, batches)
    rows = []
    for scorer, wiring, feeding in CASES:
        config = ModelConfig(
            scorer=scorer,
            wiring=wiring,
            input_feeding=feeding,
            hidden_size=args.hidden_size,
            embedding_size=args.embedding_size,
        )
        rows.append(measure(config, split, batches, args.vocab, args.warmup, args.steps))
        print(
            f"  {scorer:10s} {wiring:8s} feed={feeding!s:5s} {rows[-1]['tokens_per_s']:8.0f} tok/s"
        )
    setup = {**vars(args), "json": None, "torch": torch.__version__, "cpu": platform.processor()}
    setup.update(
        mean_src=float(split.src_lengths.mean()),
        mean_tgt=float(split.tgt_lengths.mean()),
        padding_src=padding["src"],
        padding_tgt=padding["tgt"],
    )
    print(f"\n{json.dumps(setup)}\n")
    print("| scorer | wiring | input feeding | parameters | target tokens/s | s/step |")
    print("|---|---|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['scorer']} | {row['wiring']} | {'yes' if row['input_feeding'] else 'no'} "
            f"| {row['parameters']:,} | {row['tokens_per_s']:.0f} | {row['seconds_per_step']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"setup": setup, "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
