"""The GRU layer by hand against torch's ``nn.GRU``, side by side in one process.

    python -m benchmarks.gru_layer                       # layer alone + training steps
    python -m benchmarks.gru_layer --sizes 1000 --rounds 30 --wirings luong

Two measurements, each alternating the two implementations (the order swapped every
round), so both see the same machine load:

1. **The layer alone** at the study's shape (``--layer-shape``: sentences, positions,
   hidden; embeddings as wide as the hidden size), forward and backward under the
   training precision (``auto``: bf16 where the CPU's bf16 products are fast).
2. **A whole training step** (``benchmarks.workloads.training_step``: loss, backward,
   clipping, Adam) of the study's model per wiring, at each batch size (``--sizes``,
   target tokens), two models with the same weights and batches, one of them with every
   GRU switched to torch's own (``GRU.hand_written = False``). Each step's FLOPs
   (``benchmarks.flops``) give the fraction of the 1-thread matmul ceiling of the
   products' dtype that each implementation reaches.
3. **Decoding** (``--decode-sentences`` dev sentences, greedy and beam 5, fp32 as the
   evaluate stage decodes) of the Luong model with the same untrained weights: untrained
   hypotheses run to the length limit, so this times the decoder's per-step cost, not
   a trained model's sentences/s.

Writes ``<out>/gru_layer.json`` and ``<out>/gru_layer.md``. Not part of the tests.
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
from pipeline.allocator import tune_allocator
from pipeline.config import ModelConfig
from pipeline.io import write_text
from pipeline.models.precision import autocast, resolve
from pipeline.models.rnn import GRU

logger = logging.getLogger(__name__)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
KINDS = ("torch", "by hand")


def set_hand_written(model: torch.nn.Module, value: bool) -> int:
    """Switch every GRU of ``model`` to the layer by hand (True) or torch's; how many."""
    layers = [m for m in model.modules() if isinstance(m, GRU)]
    for layer in layers:
        layer.hand_written = value
    return len(layers)


def alternate(run: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Seconds of ``run[kind](index)`` for each kind, ``rounds`` times, order swapped."""
    seconds: dict[str, list[float]] = {kind: [] for kind in run}
    for index in range(rounds):
        order = list(run) if index % 2 == 0 else list(reversed(run))
        for kind in order:
            start = time.perf_counter()
            run[kind](index)
            seconds[kind].append(time.perf_counter() - start)
    return seconds


def measure_layer(shape: list[int], precision: str, rounds: int) -> dict[str, Any]:
    """Forward + backward of one layer, torch's against ours, same weights and inputs."""
    batch, steps, size = shape
    torch.manual_seed(0)
    layers = {kind: GRU(size, size, batch_first=True) for kind in KINDS}
    layers["by hand"].load_state_dict(layers["torch"].state_dict())
    layers["torch"].hand_written = False
    inputs = torch.randn(batch, steps, size, requires_grad=True)
    hidden = torch.randn(1, batch, size)

    def step(layer):
        def run(_index):
            with autocast(precision, "cpu"):
                states, last = layer(inputs, hidden)
            (states.float().sum() + last.float().sum()).backward()

        return run

    runs = {kind: step(layer) for kind, layer in layers.items()}
    alternate(runs, 4)  # warm-up
    window = LoadWindow.open()
    seconds = alternate(runs, rounds)
    return {"shape": shape, "other_load": window.shares()[0], **summary(seconds)}


def measure_steps(args, wiring: str, size: int, ceiling: float) -> dict[str, Any]:
    """Training steps of one wiring and batch size, torch's GRUs against ours."""
    vocab = workloads.VOCAB_SIZE
    split, source = workloads.load_split(args.tok_dir, "train", vocab)
    config = ModelConfig(scorer=args.scorer, wiring=wiring, hidden_size=args.hidden_size,
                         embedding_size=256)  # fmt: skip
    models = {kind: workloads.build_model("pipeline", config, vocab) for kind in KINDS}
    switched = set_hand_written(models["torch"], False)
    optimizers = {kind: workloads.make_optimizer("pipeline", m) for kind, m in models.items()}
    batches = workloads.sample_batches(split, size, args.warmup + args.rounds, seed=1)
    tokens: dict[str, int] = {}

    def step(kind):
        def run(index):
            tokens[kind] = workloads.training_step(
                models[kind], optimizers[kind], batches[index], args.precision
            )

        return run

    runs = {kind: step(kind) for kind in KINDS}
    for index in range(args.warmup):
        for kind in KINDS:
            runs[kind](index)
    timed = batches[args.warmup :]
    window = LoadWindow.open()
    seconds = alternate({k: (lambda i, r=r: r(i + args.warmup)) for k, r in runs.items()},
                        args.rounds)  # fmt: skip
    all_tokens = sum(b.n_tokens for b in timed)
    flops = sum(training_flops(config, vocab, BatchShape.of(b)) for b in timed)
    result = {"wiring": wiring, "size": size, "data": source, "gru_layers": switched,
              "other_load": window.shares()[0], **summary(seconds)}  # fmt: skip
    for kind in KINDS:
        total = sum(seconds[kind])
        result[kind]["tokens_per_s"] = all_tokens / total
        result[kind]["ceiling_share"] = flops / total / ceiling
    logger.info("%s %d tokens: %.2fx", wiring, size, result["speedup"])
    return result


def measure_decoding(args) -> dict[str, Any]:
    """Greedy and beam decoding of dev sentences, torch's GRUs against ours."""
    vocab = workloads.VOCAB_SIZE
    split, _ = workloads.load_split(args.tok_dir, "dev", vocab)
    split = split.subset(np.arange(min(args.decode_sentences, len(split))))
    config = ModelConfig(scorer=args.scorer, wiring="luong", hidden_size=args.hidden_size,
                         embedding_size=256)  # fmt: skip
    models = {kind: workloads.build_model("pipeline", config, vocab).eval() for kind in KINDS}
    set_hand_written(models["torch"], False)
    results = {}
    for beam in (1, 5):
        runs = {
            kind: (lambda _i, m=model, b=beam: workloads.time_decoding(m, split, b))
            for kind, model in models.items()
        }
        results[f"beam {beam}"] = summary(alternate(runs, 3))
    return {"sentences": len(split), **results}


def summary(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """Median ms per kind and the ratio of the medians (torch / by hand), with the
    ratio's spread over the rounds (each round's two steps side by side)."""
    ratios = [a / b for a, b in zip(seconds["torch"], seconds["by hand"])]
    return {
        **{kind: {"median_ms": statistics.median(s) * 1e3} for kind, s in seconds.items()},
        "speedup": statistics.median(seconds["torch"]) / statistics.median(seconds["by hand"]),
        "round_ratios": [min(ratios), statistics.median(ratios), max(ratios)],
        "seconds": seconds,
    }


def render(results: dict[str, Any]) -> str:
    layer = results["layer"]
    low, mid, high = layer["round_ratios"]
    lines = [
        "# The GRU layer by hand against torch's nn.GRU",
        "",
        f"{results['date']}, {results['cpu']}, torch {results['torch']}; {results['precision']}, "
        f"1 thread, {results['rounds']} rounds alternating the two; 1-thread "
        f"{results['precision']} matmul ceiling {results['ceiling_gflops']:.1f} GFLOP/s. "
        f"`{results['command']}`.",
        "",
        f"## One layer, forward + backward, {'x'.join(map(str, layer['shape']))} "
        "(sentences x positions x hidden)",
        "",
        f"torch {layer['torch']['median_ms']:.2f} ms, by hand "
        f"{layer['by hand']['median_ms']:.2f} ms: **{layer['speedup']:.2f}x** (per round "
        f"{low:.2f}-{high:.2f}x, median {mid:.2f}x); other processes' load "
        f"{layer['other_load']:.0%}.",
        "",
        f"## Training steps ({results['scorer']} h{results['hidden_size']})",
        "",
    ]
    decoding = results.get("decoding")
    rows = []
    for run in results["steps"]:
        torch_, ours = run["torch"], run["by hand"]
        low, _, high = run["round_ratios"]
        rows.append([
            run["wiring"], run["size"], f"{torch_['median_ms']:.1f}", f"{ours['median_ms']:.1f}",
            f"**{run['speedup']:.2f}x** ({low:.2f}-{high:.2f})",
            f"{torch_['tokens_per_s']:.0f} / {ours['tokens_per_s']:.0f}",
            f"{torch_['ceiling_share']:.1%} / {ours['ceiling_share']:.1%}",
            f"{run['other_load']:.0%}",
        ])  # fmt: skip
    lines += table(
        "wiring|batch tokens|torch's GRU, ms|by hand, ms|speed-up (per round)|"
        "tokens/s torch / by hand|share of the matmul ceiling|other load",
        rows,
    )
    if decoding:
        lines += ["", f"## Decoding {decoding['sentences']} dev sentences (fp32, untrained "
                  "Luong model: hypotheses at the length limit)", ""]  # fmt: skip
        lines += table(
            "search|torch's GRU, s|by hand, s|speed-up",
            [[name, f"{run['torch']['median_ms'] / 1e3:.2f}",
              f"{run['by hand']['median_ms'] / 1e3:.2f}", f"{run['speedup']:.2f}x"]
             for name, run in decoding.items() if name.startswith("beam")],
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    tune_allocator()  # as training does
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--scorer", default="additive")
    cli.add_argument("--wirings", nargs="+", default=["luong", "bahdanau"],
                     choices=["luong", "bahdanau"])  # fmt: skip
    cli.add_argument("--hidden-size", type=int, default=256)
    cli.add_argument("--sizes", nargs="+", type=int, default=[1000, 3000])
    cli.add_argument("--layer-shape", nargs=3, type=int, default=[35, 30, 256],
                     metavar=("SENTENCES", "POSITIONS", "HIDDEN"))  # fmt: skip
    cli.add_argument("--rounds", type=int, default=20)
    cli.add_argument("--decode-sentences", type=int, default=100, help="0: no decoding")
    cli.add_argument("--warmup", type=int, default=2)
    cli.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    cli.add_argument("--tok-dir", type=Path, default=Path("data/tok"))
    cli.add_argument("--out", type=Path, default=Path("benchmarks/results/gru-layer"))
    cli.add_argument("--ceiling-seconds", type=float, default=3.0)
    command = sys.argv[1:] if argv is None else argv
    args = cli.parse_args(command)
    if min(args.sizes) < 1 or min(args.layer_shape) < 1:
        cli.error("--sizes and --layer-shape take positive numbers")
    if 0 < args.decode_sentences < 16:
        cli.error("--decode-sentences: 0 (none) or at least 16 (the decoder's warm-up)")
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
        "date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(), "torch": torch.__version__,
        "command": " ".join(["python -m benchmarks.gru_layer", *command]),
        "scorer": args.scorer, "hidden_size": args.hidden_size, "precision": args.precision,
        "rounds": args.rounds, "ceiling_gflops": ceiling / 1e9,
        "layer": measure_layer(args.layer_shape, args.precision, args.rounds),
        "steps": [measure_steps(args, w, s, ceiling) for w in args.wirings for s in args.sizes],
        "decoding": measure_decoding(args) if args.decode_sentences else None,
    }  # fmt: skip
    write_text(args.out / "gru_layer.json", json.dumps(results, indent=1) + "\n")
    write_text(args.out / "gru_layer.md", render(results))
    print(render(results))


if __name__ == "__main__":
    main()
