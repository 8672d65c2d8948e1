"""Pilot behind ``train.batch_tokens``: dev loss/BLEU after a fixed number of epochs, or
a fixed training time, for several batch sizes, on the real tokenized data (run
``dvc repro tokenize`` first).

    python -m benchmarks.batch_size_pilot --scorer none --hidden-size 256 \\
        --batch-tokens 500 1000 3000 --epochs 1
    python -m benchmarks.batch_size_pilot --scorer additive --batch-tokens 3000 --minutes 5
    python -m benchmarks.batch_size_pilot --scorer additive --epochs 2 --precision fp32

Each batch size trains one variant from the same seed, one after the other, with one
thread; the table compares them after the same number of epochs (same tokens seen) or,
with ``--minutes``, the same wall time (run one batch size per process to use all cores).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import torch

from pipeline.config import load_config
from pipeline.config.grid import Variant
from pipeline.train.trainer import TimeLimit, train_variant

logger = logging.getLogger("benchmarks.batch_size_pilot")


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--params", default="params.yaml")
    cli.add_argument("--tok", default="data/tok")
    cli.add_argument("--scorer", default="none")
    cli.add_argument("--hidden-size", type=int, default=256)
    cli.add_argument("--batch-tokens", type=int, nargs="+", default=[1000, 3000])
    cli.add_argument("--epochs", type=int, default=1)
    cli.add_argument("--minutes", type=float, default=0, help="time budget (0: epochs only)")
    cli.add_argument("--precision", default=None, help="train.precision (default: params)")
    args = cli.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    config = load_config(args.params)
    model = config.model.model_copy(update={"scorer": args.scorer, "hidden_size": args.hidden_size})
    rows = []
    for batch_tokens in args.batch_tokens:
        train = config.train.model_copy(
            update={
                "batch_tokens": batch_tokens,
                "max_epochs": args.epochs,
                "patience": 99,
                "max_steps": 0,
                "min_learning_rate": 0,
                "precision": args.precision or config.train.precision,
            }
        )
        variant = Variant(f"pilot-bt{batch_tokens}", model, train, {})
        with tempfile.TemporaryDirectory() as out_dir:
            limit = TimeLimit(60 * args.minutes, fail=False) if args.minutes else None
            result = train_variant(
                variant, Path(args.tok), Path(out_dir), resume=False, time_limit=limit
            )
        last = result.history[-1]
        rows.append(
            (batch_tokens, result.steps, last["dev_loss"], last["dev_bleu"], last["tokens_per_s"])
        )
    print("| batch_tokens | steps | dev loss | dev BLEU | tokens/s |")
    print("|---|---|---|---|---|")
    for batch_tokens, steps, loss, bleu, speed in rows:
        print(f"| {batch_tokens} | {steps} | {loss:.3f} | {bleu:.2f} | {speed:,.0f} |")


if __name__ == "__main__":
    main()
