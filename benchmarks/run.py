"""Speed and memory benchmarks of the study, side by side in one run (``make bench``).

    python -m benchmarks.run                                # ~10 minutes on an idle machine
    python -m benchmarks.run --quick --out /tmp/bench       # tiny sizes: checks the script only

Measures, each trial in its own process (``benchmarks.worker``):

1. ceiling: fp32 2048x2048 matmul FLOP/s with 1 thread, 2 threads, and 2 one-thread
   processes at once; bf16 with 1 and 2 threads for comparison;
2. training: target tokens/s and achieved model FLOP/s (``benchmarks.flops``) of every
   scorer x wiring at hidden 128 and 256, 1 thread, on the first batches of epoch 1 of
   ``data/tok/train.npz`` (random ids if absent); a fraction of the 1-thread ceiling;
   in the pipeline's precision (``--precision``, default ``auto``: bf16 on AMX CPUs);
3. the pipeline vs ``benchmarks.reference`` (a per-step tutorial implementation of the
   same model in fp32 with plain Adam, checked to compute the same loss): additive and
   dot, both wirings; the pipeline in its precision and in fp32;
4. decoding: sentences/s of greedy and beam-5 search (``pipeline.evaluate.decode`` batch sizes)
   on 300 test sentences, with the study's trained checkpoints when ``models/`` has them;
5. peak RSS of every trial;
6. threads: 2 concurrent 1-thread trials vs 1 trial with 2 threads; 2 concurrent trials
   (additive and none) as a fraction of the 2-thread ceiling.

Training trials time ``--steps`` steps (default 8) after ``--warmup`` (default 8);
concurrent trials start together (a barrier) and time ``--window-seconds``. Every trial
records ``other_load``, the share of the cores other processes used meanwhile; trials
wait for a quiet machine and are repeated when disturbed (``--max-other-load``). Writes
``<out>/latest.json`` (every number) and ``<out>/latest.md`` (tables); see
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.markdown import render
from benchmarks.trials import ROOT, TrialRunner, cpu_model, other_load
from pipeline.config.params import EvaluateConfig
from pipeline.io import write_text
from pipeline.runtime.precision import PRECISIONS, resolve
from pipeline.scorers import catalogue

logger = logging.getLogger("benchmarks.run")
MAIN_VARIANT = {"scorer": "additive", "wiring": "luong"}
"""The variant of the thread and concurrency comparisons (the study's default model)."""


def train_spec(args, scorer: str, wiring: str, hidden: int, **extra) -> dict[str, Any]:
    return {
        "kind": "train",
        "implementation": "pipeline",
        "scorer": scorer,
        "wiring": wiring,
        "hidden_size": hidden,
        "embedding_size": args.embedding_size,
        "batch_tokens": args.batch_tokens,
        "warmup": args.warmup,
        "steps": args.steps,
        "tok_dir": str(args.tok_dir),
        "seed": 1,
        "threads": 1,
        "precision": args.precision,
        **extra,
    }


def measure_ceiling(args, runner: TrialRunner) -> dict[str, Any]:
    spec = {"kind": "matmul", "size": args.matmul_size, "seconds": args.matmul_seconds}
    one = runner.one({**spec, "threads": 1})
    logger.info("matmul 1 thread: %.1f GFLOP/s", one["flops_per_s"] / 1e9)
    two = runner.one({**spec, "threads": 2})
    logger.info("matmul 2 threads: %.1f GFLOP/s", two["flops_per_s"] / 1e9)
    pair = runner.run([{**spec, "threads": 1}, {**spec, "threads": 1}])
    total = sum(r["flops_per_s"] for r in pair)
    logger.info("matmul 2 processes x 1 thread: %.1f GFLOP/s in all", total / 1e9)
    bf16 = {n: runner.one({**spec, "threads": n, "dtype": "bf16"}) for n in (1, 2)}
    logger.info(
        "bf16 matmul 1 / 2 threads: %.1f / %.1f GFLOP/s",
        *(bf16[n]["flops_per_s"] / 1e9 for n in (1, 2)),
    )
    return {
        "one_thread": one,
        "two_threads": two,
        "two_processes": pair,
        "two_processes_flops_per_s": total,
        "bf16_one_thread": bf16[1],
        "bf16_two_threads": bf16[2],
    }


def training_cases(hidden_sizes: list[int]) -> list[tuple[str, str, int]]:
    """Every scorer x wiring x hidden size (``none`` has one decoder whatever the wiring)."""
    return [
        (scorer, wiring, hidden)
        for hidden in hidden_sizes
        for scorer in catalogue.BUILTIN
        for wiring in (("luong",) if scorer == "none" else ("luong", "bahdanau"))
    ]


def measure_training(args, runner: TrialRunner, ceiling: dict[str, Any]) -> list[dict[str, Any]]:
    rows, cases = [], training_cases(args.hidden_sizes)
    for number, (scorer, wiring, hidden) in enumerate(cases, 1):
        row = runner.one(train_spec(args, scorer, wiring, hidden))
        row["ceiling_fraction"] = row["flops_per_s"] / ceiling["one_thread"]["flops_per_s"]
        rows.append(row)
        logger.info(
            "training %d/%d %s %s h%d: %.0f tok/s, %.0f%% of the ceiling",
            *(number, len(cases), scorer, wiring, hidden),
            *(row["tokens_per_s"], 100 * row["ceiling_fraction"]),
        )
    return rows


def measure_reference(args, runner: TrialRunner) -> list[dict[str, Any]]:
    """The pipeline against the per-step reference, side by side: each row times the
    pipeline right before and right after its reference trial (the speed-up takes their
    mean), so a drift of the machine's speed between sections cannot enter the ratio."""
    hidden, rows = max(args.hidden_sizes), []
    for scorer in ("additive", "dot"):
        for wiring in ("luong", "bahdanau"):
            spec = train_spec(args, scorer, wiring, hidden)
            before = runner.one(spec)
            reference_spec = train_spec(args, scorer, wiring, hidden, precision="fp32")
            reference = runner.one({**reference_spec, "implementation": "reference", "check": True})
            # in fp32 the bracketing trials are this very spec: not timed a third time
            fp32_trial = None if args.precision == "fp32" else runner.one(reference_spec)
            after = runner.one(spec)
            pipeline = (before["tokens_per_s"] + after["tokens_per_s"]) / 2
            pipeline_fp32 = fp32_trial or {"tokens_per_s": pipeline}
            speedup = pipeline / reference["tokens_per_s"]
            rows.append(
                {
                    "scorer": scorer,
                    "wiring": wiring,
                    "hidden_size": hidden,
                    "pipeline": {"tokens_per_s": pipeline, "before": before, "after": after},
                    "pipeline_fp32": pipeline_fp32,
                    "reference": reference,
                    "speedup": speedup,
                    "speedup_fp32": pipeline_fp32["tokens_per_s"] / reference["tokens_per_s"],
                }
            )
            logger.info(
                "reference %s %s h%d: pipeline %.2fx, in fp32 %.2fx (loss difference %.1e)",
                *(scorer, wiring, hidden, speedup, rows[-1]["speedup_fp32"]),
                reference["loss_relative_difference"],
            )
    return rows


def measure_threads(args, runner: TrialRunner, ceiling: dict[str, Any]) -> dict[str, Any]:
    """Concurrent 1-thread trials vs a 2-thread trial, on timed windows of equal length."""
    hidden = max(args.hidden_sizes)
    window = {"window_seconds": args.window_seconds}
    main = train_spec(args, hidden=hidden, **MAIN_VARIANT, **window)
    plain = train_spec(args, "none", "luong", hidden, **window)
    mixed = runner.run([main, plain])
    mixed_flops = sum(r["flops_per_s"] for r in mixed)
    logger.info("concurrent additive + none: %.1f GFLOP/s in all", mixed_flops / 1e9)
    alone = runner.one(main)
    pair = runner.run([main, main])
    two_threads = runner.one({**main, "threads": 2})
    pair_tokens = sum(r["tokens_per_s"] for r in pair)
    logger.info(
        "additive h%d: alone %.0f, 2 x 1 thread %.0f, 1 x 2 threads %.0f tok/s",
        *(hidden, alone["tokens_per_s"], pair_tokens, two_threads["tokens_per_s"]),
    )
    return {
        "mixed_pair": mixed,
        "mixed_pair_flops_per_s": mixed_flops,
        "mixed_pair_ceiling_fraction": mixed_flops / ceiling["two_threads"]["flops_per_s"],
        "alone_one_thread": alone,
        "pair_one_thread": pair,
        "pair_tokens_per_s": pair_tokens,
        "one_process_two_threads": two_threads,
        "pair_over_two_threads": pair_tokens / two_threads["tokens_per_s"],
    }


def measure_decoding(args, runner: TrialRunner) -> list[dict[str, Any]]:
    hidden, rows = max(args.hidden_sizes), []
    for scorer in ("additive", "none"):
        checkpoint = args.models / f"{scorer}-fwd-h{hidden}-s1" / "checkpoint.pt"
        spec = {
            "kind": "decode",
            "scorer": scorer,
            "hidden_size": hidden,
            "embedding_size": args.embedding_size,
            "tok_dir": str(args.tok_dir),
            "checkpoint": str(checkpoint),
            "sentences": args.decode_sentences,
            "beam_sizes": [1, 5],
            "precision": resolve(EvaluateConfig().precision, "cpu"),  # as the evaluate stage
            "seed": 0,
            "threads": 1,
        }
        row = runner.one(spec)
        rows.append(row)
        for search in row["searches"]:
            logger.info(
                "decoding %s h%d beam %d: %.1f sentences/s (%s)",
                *(scorer, hidden, search["beam_size"], search["sentences_per_s"], row["model"]),
            )
    return rows


def setup_summary(args) -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "hidden_sizes": args.hidden_sizes,
        "embedding_size": args.embedding_size,
        "vocab_size": 4000,
        "batch_tokens": args.batch_tokens,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "window_seconds": args.window_seconds,
        "quick": args.quick,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "max_other_load": args.max_other_load,
        "precision": args.precision,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "run")
    parser.add_argument("--tok-dir", type=Path, default=ROOT / "data" / "tok")
    parser.add_argument("--models", type=Path, default=ROOT / "models")
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--embedding-size", type=int, default=256)
    parser.add_argument("--batch-tokens", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps per trial")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per trial")
    parser.add_argument("--window-seconds", type=float, default=12.0)
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--matmul-seconds", type=float, default=3.0)
    parser.add_argument("--decode-sentences", type=int, default=300)
    parser.add_argument(
        "--max-other-load",
        type=float,
        default=0.05,
        help="wait for / repeat trials while other processes use more",
    )
    parser.add_argument(
        "--busy-budget-seconds",
        type=float,
        default=900.0,
        help="most seconds spent waiting for and repeating trials",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="the pipeline's train/evaluate.precision (the reference always runs fp32)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script")
    args = parser.parse_args(argv)
    args.precision = resolve(args.precision, "cpu")
    if args.quick:
        args.hidden_sizes, args.embedding_size, args.batch_tokens = [16, 32], 32, 600
        args.warmup, args.steps, args.window_seconds = 1, 1, 1.0
        args.matmul_size, args.matmul_seconds, args.decode_sentences = 256, 0.2, 20
        args.models = Path("/nonexistent")  # the study's models are hidden 128/256
        args.busy_budget_seconds = 0.0
    args.tok_dir, args.models = args.tok_dir.resolve(), args.models.resolve()
    return args


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {"setup": setup_summary(args)}
    results["setup"]["other_load_at_start"] = other_load()
    runner = TrialRunner(args.max_other_load, budget_seconds=args.busy_budget_seconds)
    results["ceiling"] = ceiling = measure_ceiling(args, runner)
    results["training"] = measure_training(args, runner, ceiling)
    results["reference"] = measure_reference(args, runner)
    results["threads"] = measure_threads(args, runner, ceiling)
    results["decoding"] = measure_decoding(args, runner)
    results["setup"]["run_seconds"] = time.perf_counter() - started
    results["setup"]["busy_seconds_spent"] = runner.spent_seconds
    write_text(args.out / "latest.json", json.dumps(results, indent=1) + "\n")  # atomic
    write_text(args.out / "latest.md", render(results))
    logger.info("wrote %s/latest.{json,md} in %.0f s", args.out, results["setup"]["run_seconds"])


if __name__ == "__main__":
    main()
