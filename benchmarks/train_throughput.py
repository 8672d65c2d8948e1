"""Quick in-process training throughput table (target tokens/s) of every scorer and wiring.

The full, side-by-side benchmark is ``python -m benchmarks.run`` (it runs each trial in
its own process and also reports model FLOP/s, memory, decoding and threads); this is
the one-table version for trying one setting, e.g. another thread count or hidden size.
It uses the same workloads (``benchmarks.workloads``): the first batches of epoch 1 of
``data/tok/train.npz`` (random ids with realistic lengths if it is absent), full training
steps (forward, loss, backward, clipping, Adam) of freshly initialised models.

    python -m benchmarks.train_throughput --threads 1 --steps 8   # from the repo root
    python -m benchmarks.train_throughput --scorers additive none --precision fp32
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from benchmarks import workloads
from pipeline.config.params import ModelConfig
from pipeline.runtime.precision import PRECISIONS, resolve
from pipeline.runtime.process import prepare_process

CASES = [
    ("none", "luong", False),
    *((s, w, False) for w in ("luong", "bahdanau") for s in ("dot", "scaled_dot", "general")),
    *((s, w, False) for w in ("luong", "bahdanau") for s in ("additive", "location")),
    ("additive", "luong", True),
]


def main() -> None:
    prepare_process()  # as a trial does (pipeline.runtime.process)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per case")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--embedding-size", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=workloads.VOCAB_SIZE)
    parser.add_argument("--batch-tokens", type=int, default=3000)
    parser.add_argument("--tok-dir", type=Path, default=Path("data/tok"))
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--scorers", nargs="+", help="only these scorers")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.precision = resolve(args.precision, "cpu")
    torch.set_num_threads(args.threads)
    split, source = workloads.load_split(args.tok_dir, "train", args.vocab)
    batches = workloads.sample_batches(split, args.batch_tokens, args.warmup + args.steps, seed=1)
    rows = []
    for scorer, wiring, feeding in CASES:
        if args.scorers and scorer not in args.scorers:
            continue
        config = ModelConfig(
            scorer=scorer,
            wiring=wiring,
            input_feeding=feeding,
            hidden_size=args.hidden_size,
            embedding_size=args.embedding_size,
        )
        model = workloads.build_model("pipeline", config, args.vocab)
        timing = workloads.time_training(
            model,
            config,
            batches,
            warmup=args.warmup,
            steps=args.steps,
            vocab=args.vocab,
            precision=args.precision,
        )
        rows.append(
            {
                "scorer": scorer,
                "wiring": "-" if scorer == "none" else wiring,
                "input_feeding": feeding,
                "parameters": model.num_parameters(),
                **timing,
            }
        )
        print(f"  {scorer:10s} {wiring:8s} feed={feeding!s:5s} {timing['tokens_per_s']:8.0f} tok/s")
    setup = {
        **vars(args),
        "json": None,
        "tok_dir": str(args.tok_dir),
        "data": source,
        "torch": torch.__version__,
        "cpu": platform.processor(),
        **workloads.batch_statistics(batches[args.warmup :]),
    }
    print(f"\n{json.dumps(setup)}\n")
    print("| scorer | wiring | input feeding | parameters | target tokens/s | GFLOP/s | s/step |")
    print("|---|---|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['scorer']} | {row['wiring']} | {'yes' if row['input_feeding'] else 'no'} "
            f"| {row['parameters']:,} | {row['tokens_per_s']:.0f} | {row['flops_per_s'] / 1e9:.1f} "
            f"| {row['seconds_per_step']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"setup": setup, "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
