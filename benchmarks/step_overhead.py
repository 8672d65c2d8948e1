"""Per-step overhead: how much of a training step's time does not shrink with the batch.

    python -m benchmarks.step_overhead                      # additive h256, both wirings
    python -m benchmarks.step_overhead --sizes 500 1000 3000 --rounds 16 --wirings luong

Trains one model per wiring and cell (``--cells``: LSTM, the study's, and GRU) at one
thread on real training batches of several sizes (``--sizes``, target tokens per batch), a
step of every size per round in a rotated order, so that all sizes are timed side by side
under the same machine load. Each timed batch has had one untimed step first
(``workloads.prebuild``), so that a step's time holds no oneDNN primitive building, which
training does once per shape. Every timed step gives (seconds, target tokens, padded
source + target positions); two least-squares fits split the time:

- ``t = a + b * tokens``: ``a`` is what a step costs whatever its size (the optimizer, the
  per-batch fills and casts, and the per-position loop work of a typical batch), ``b``
  the cost that grows with the tokens;
- ``t = a' + b' * tokens + c * positions``: the loop work per time step (``c``, the
  GRU encoder's and decoder's recurrences issue a few dozen small operator calls per
  position, whatever the batch's width) separated from the per-batch part ``a'``.

Beside them, each size's floor: its matrix-product FLOPs (``benchmarks.flops``) at the
1-thread matmul ceiling of the products' dtype (2048 x 2048, measured first), the time
the step would take if everything but the products were free.

Writes ``<out>/step_overhead.json`` and ``<out>/step_overhead.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import workloads
from benchmarks.flops import BatchShape, training_flops
from benchmarks.markdown import table
from benchmarks.trials import LoadWindow, cpu_model
from pipeline.config.params import ModelConfig
from pipeline.io import write_text
from pipeline.runtime.precision import resolve
from pipeline.runtime.process import prepare_process

logger = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def fit(samples: list[dict[str, float]], columns: list[str]) -> dict[str, float]:
    """Least squares of step seconds on an intercept and ``columns``: coefficients (ms,
    and ms per unit of each column) and R^2."""
    x = np.array([[1.0] + [s[c] for c in columns] for s in samples])
    y = np.array([s["seconds"] for s in samples]) * 1e3
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coefficients
    r2 = 1 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
    return {
        "intercept_ms": float(coefficients[0]),
        "r2": r2,
        **{f"ms_per_{c}": float(v) for c, v in zip(columns, coefficients[1:])},
    }


def measure(args: argparse.Namespace, wiring: str, cell: str, ceiling: float) -> dict[str, Any]:
    """Time ``args.rounds`` steps of every size for one wiring and cell, rotating the order."""
    vocab = workloads.VOCAB_SIZE
    split, source = workloads.load_split(args.tok_dir, "train", vocab)
    config = ModelConfig(
        scorer=args.scorer,
        wiring=wiring,
        cell=cell,
        hidden_size=args.hidden_size,
        embedding_size=256,
    )
    model = workloads.build_model("pipeline", config, vocab)
    optimizer = workloads.make_optimizer("pipeline", model)
    count = args.warmup + args.rounds
    batches = {size: workloads.sample_batches(split, size, count, seed=1) for size in args.sizes}
    for index in range(args.warmup):
        for size in args.sizes:
            workloads.training_step(model, optimizer, batches[size][index], args.precision)
    for size in args.sizes:  # the timed batches' oneDNN primitives, built untimed
        workloads.prebuild(model, optimizer, batches[size][args.warmup :], args.precision)
    samples = []
    window = LoadWindow.open()
    for round_ in range(args.rounds):
        shift = round_ % len(args.sizes)
        for size in args.sizes[shift:] + args.sizes[:shift]:
            batch = batches[size][args.warmup + round_]
            start = time.perf_counter()
            tokens = workloads.training_step(model, optimizer, batch, args.precision)
            seconds = time.perf_counter() - start
            shape = BatchShape.of(batch)
            samples.append(
                {
                    "size": size,
                    "seconds": seconds,
                    "tokens": tokens,
                    "positions": shape.source_positions + shape.target_positions,
                    "flops": training_flops(config, vocab, shape),
                }
            )
    other_load = window.shares()[0]
    rows = []
    for size in args.sizes:
        mine = [s for s in samples if s["size"] == size]
        ms = statistics.median(s["seconds"] for s in mine) * 1e3
        tokens = statistics.mean(s["tokens"] for s in mine)
        flops = statistics.mean(s["flops"] for s in mine)
        rows.append(
            {
                "size": size,
                "tokens": tokens,
                "step_ms": ms,
                "tokens_per_s": sum(s["tokens"] for s in mine) / sum(s["seconds"] for s in mine),
                "positions": statistics.mean(s["positions"] for s in mine),
                "gflop": flops / 1e9,
                "products_at_ceiling_ms": flops / ceiling * 1e3,
            }
        )
        logger.info("%s %s %d tokens: %.1f ms per step", wiring, cell, size, ms)
    return {
        "wiring": wiring,
        "cell": cell,
        "data": source,
        "other_load": other_load,
        "rows": rows,
        "samples": samples,
        "fit_tokens": fit(samples, ["tokens"]),
        "fit_tokens_positions": fit(samples, ["tokens", "positions"]),
    }


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Per-step overhead",
        "",
        f"{results['date']}, {results['cpu']}, torch {results['torch']}; {results['scorer']} "
        f"h{results['hidden_size']}, {results['precision']}, 1 thread; {results['rounds']} "
        f"timed steps per size, sizes rotated each round; 1-thread {results['precision']} "
        f"matmul ceiling {results['ceiling_gflops']:.1f} GFLOP/s. "
        f"`{results['command']}`.",
    ]
    for run in results["runs"]:
        one, two = run["fit_tokens"], run["fit_tokens_positions"]
        cell = run.get("cell", "gru")  # results written before the cell was recorded: GRU
        lines += ["", f"## {run['wiring']} wiring, {cell.upper()}; data: {run['data']}", ""]
        if "other_load" in run:
            load = f"{run['other_load']:.0%}"
            lines += [
                f"Other processes' load while timing: {load} of all cores (above a few "
                "percent, read the times as upper bounds).",
                "",
            ]
        lines += table(
            "batch tokens|target tokens|positions (src + tgt)|step ms (median)|"
            "tokens/s (all timed steps)|"
            "GFLOP/step|products at the ceiling, ms|step / that floor|share of the ceiling",
            [
                [
                    r["size"],
                    f"{r['tokens']:.0f}",
                    f"{r['positions']:.0f}",
                    f"{r['step_ms']:.1f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['gflop']:.1f}",
                    f"{r['products_at_ceiling_ms']:.1f}",
                    f"{r['step_ms'] / r['products_at_ceiling_ms']:.2f}x",
                    f"{r['products_at_ceiling_ms'] / r['step_ms']:.1%}",
                ]
                for r in run["rows"]
            ],
        )
        at = {r["size"]: r for r in run["rows"]}
        share = ""
        if 1000 in at:
            share = (
                f"; at 1000-token batches that part is "
                f"{one['intercept_ms'] / at[1000]['step_ms']:.0%} of the step"
            )
        lines += [
            "",
            f"- t = a + b tokens: a = **{one['intercept_ms']:.1f} ms** per step whatever its "
            f"size, b = {one['ms_per_tokens'] * 1000:.1f} ms per 1000 target tokens "
            f"(R^2 {one['r2']:.3f}){share}.",
            f"- t = a' + b' tokens + c positions: a' = {two['intercept_ms']:.1f} ms per batch, "
            f"b' = {two['ms_per_tokens'] * 1000:.1f} ms per 1000 target tokens, "
            f"c = {two['ms_per_positions']:.2f} ms per padded position (R^2 {two['r2']:.3f}).",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    prepare_process()  # as a trial does (pipeline.runtime.process)
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--scorer", default="additive")
    cli.add_argument(
        "--wirings", nargs="+", default=["luong", "bahdanau"], choices=["luong", "bahdanau"]
    )
    cli.add_argument(
        "--cells",
        nargs="+",
        default=["lstm", "gru"],
        choices=["lstm", "gru"],
        help="each wiring with each cell (params.yaml's is lstm)",
    )
    cli.add_argument("--hidden-size", type=int, default=256)
    cli.add_argument("--sizes", nargs="+", type=int, default=[250, 500, 1000, 2000, 3000])
    cli.add_argument("--rounds", type=int, default=12, help="timed steps per size")
    cli.add_argument("--warmup", type=int, default=2, help="untimed steps per size")
    cli.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    cli.add_argument("--tok-dir", type=Path, default=Path("data/tok"))
    cli.add_argument("--out", type=Path, default=Path("benchmarks/results/step_overhead"))
    cli.add_argument("--ceiling-seconds", type=float, default=5.0)
    command = sys.argv[1:] if argv is None else argv
    args = cli.parse_args(command)
    if min(args.sizes) < 1 or len(set(args.sizes)) != len(args.sizes) or len(args.sizes) < 2:
        cli.error("--sizes: at least two different positive sizes")
    if args.rounds < 2 or args.warmup < 0:
        cli.error("--rounds must be at least 2 and --warmup at least 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    args.precision = resolve(args.precision, "cpu")
    ceiling = workloads.time_matmul(2048, args.ceiling_seconds, dtype=DTYPES[args.precision])[
        "flops_per_s"
    ]
    logger.info("1-thread %s matmul ceiling: %.1f GFLOP/s", args.precision, ceiling / 1e9)
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "command": " ".join(["python -m benchmarks.step_overhead", *command]),
        "scorer": args.scorer,
        "hidden_size": args.hidden_size,
        "precision": args.precision,
        "rounds": args.rounds,
        "ceiling_gflops": ceiling / 1e9,
        "runs": [
            measure(args, wiring, cell, ceiling) for wiring in args.wirings for cell in args.cells
        ],
    }
    write_text(args.out / "step_overhead.json", json.dumps(results, indent=1) + "\n")
    write_text(args.out / "step_overhead.md", render(results))
    print(render(results))


if __name__ == "__main__":
    main()
