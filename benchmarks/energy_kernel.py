"""The compiled additive-energy kernel against the torch blocks, side by side in one process.

    python -m benchmarks.energy_kernel --out benchmarks/results/energy_kernel

Two readings, each alternating the two implementations (``ATTENTION_STUDY_NATIVE`` on and
off, which ``pipeline.kernels.native`` reads at every call) round by round, one thread:

1. **The op**: forward and backward of ``additive_energy`` through a masked softmax, as
   Luong training runs it, on the (B, T, S) shapes of real 1000-token training batches
   (attention size 256, float32 queries and keys); median milliseconds per batch and the
   largest difference of the scores and gradients between the two.
2. **The training step**: additive Luong h256 with the study's cell (``params.yaml``),
   bf16 products, the same batches for both, each shape's oneDNN primitives built before
   timing; median milliseconds per step.

Writes ``<out>/energy_kernel.json`` and ``.md``. Not part of the tests (about a minute
after the kernel is built).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import workloads
from benchmarks.markdown import table
from benchmarks.trials import ROOT, cpu_model, other_load
from pipeline.config import load_config
from pipeline.config.params import ModelConfig
from pipeline.io import write_text
from pipeline.kernels import native
from pipeline.kernels.additive_energy import additive_energy
from pipeline.runtime.process import prepare_process

MODES = ("torch", "native")


def _switch(mode: str) -> None:
    os.environ[native.ENV_SWITCH] = "on" if mode == "native" else "off"


def _alternating_ms(items: list, run: Callable[[Any], Any], rounds: int) -> dict[str, list]:
    """Per mode, the mean ms of ``run(item)`` over ``items`` in each round; the two
    implementations alternate round by round."""
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            _switch(mode)
            start = time.perf_counter()
            for item in items:
                run(item)
            times[mode].append((time.perf_counter() - start) / len(items) * 1e3)
    return times


def op_reading(batches, size: int, rounds: int) -> dict[str, Any]:
    """Forward + backward of the energy on each batch's (B, T, S), both implementations."""
    torch.manual_seed(0)
    cases = []
    for batch in batches:
        B, S, T = batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1)
        query, keys = torch.randn(B, T, size), torch.randn(B, S, size)
        energy = torch.randn(size) * 0.1
        leaves = [t.requires_grad_() for t in (query, keys, energy)]
        cases.append((*leaves, batch.src_mask, torch.randn(B, T, S)))

    def run(case):
        query, keys, energy, mask, upstream = case
        scores = additive_energy(query, keys, energy)
        weights = torch.softmax(scores.masked_fill(~mask.unsqueeze(1), float("-inf")), -1)
        (weights * upstream).sum().backward()
        grads = [t.grad for t in (query, keys, energy)]
        for t in (query, keys, energy):
            t.grad = None
        return [scores.detach(), *grads]

    differences = []
    for case in cases:
        outputs = {}
        for mode in MODES:
            _switch(mode)
            outputs[mode] = run(case)
        differences.append(
            max(
                ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
                for a, b in zip(outputs["native"], outputs["torch"])
            )
        )
    return {
        "ms": _alternating_ms(cases, run, rounds),
        "max_relative_difference": max(differences),
        "shapes": [list(c[4].shape) for c in cases],
    }


def step_reading(batches, rounds: int) -> dict[str, Any]:
    """ms per training step of additive Luong h256, bf16, both implementations."""
    params = load_config(ROOT / "params.yaml").model
    config = ModelConfig(
        scorer="additive", wiring="luong", cell=params.cell, hidden_size=256, embedding_size=256
    )
    model = workloads.build_model("pipeline", config, workloads.VOCAB_SIZE)
    optimizer = workloads.make_optimizer("pipeline", model)
    for mode in MODES:
        _switch(mode)
        workloads.prebuild(model, optimizer, batches, "bf16")

    def step(batch):
        workloads.training_step(model, optimizer, batch, "bf16")

    return {"ms": _alternating_ms(batches, step, rounds), "cell": params.cell}


def render(results: dict[str, Any]) -> str:
    lines = [
        "# The compiled additive-energy kernel against the torch blocks",
        "",
        f"{results['date']}, {results['cpu']}, one thread; {results['batches']} real "
        f"{results['batch_tokens']}-token training batches; other load "
        f"{results['other_load']:.0%} before the run.",
        "",
    ]
    rows = []
    for name, reading in (
        ("energy forward + backward, ms per batch", results["op"]),
        (f"training step ({results['step']['cell']}, bf16), ms", results["step"]),
    ):
        torch_ms, native_ms = (statistics.median(reading["ms"][m]) for m in MODES)
        spread = [f"{min(reading['ms'][m]):.2f}-{max(reading['ms'][m]):.2f}" for m in MODES]
        rows.append(
            [
                name,
                f"{torch_ms:.2f} ({spread[0]})",
                f"{native_ms:.2f} ({spread[1]})",
                f"{torch_ms / native_ms:.2f}x",
            ]
        )
    lines += table("median over rounds (range)|torch blocks|compiled kernel|speed-up", rows)
    lines += [
        "",
        f"Largest relative difference of scores or gradients between the two, over "
        f"the batches: {results['op']['max_relative_difference']:.1e}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--batches", type=int, default=20)
    cli.add_argument("--batch-tokens", type=int, default=1000)
    cli.add_argument("--rounds", type=int, default=5)
    cli.add_argument("--out", type=Path, required=True)
    args = cli.parse_args(argv)
    prepare_process()  # as a trial does (pipeline.runtime.process)
    torch.set_num_threads(1)
    if native.additive_energy_kernel() is None:
        raise SystemExit("error: the compiled kernel did not build here (see the warning above)")
    load = other_load()
    split, _ = workloads.load_split(ROOT / "data" / "tok", "train", workloads.VOCAB_SIZE)
    batches = workloads.sample_batches(split, args.batch_tokens, args.batches, seed=1)
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_model(),
        "other_load": load,
        "batches": args.batches,
        "batch_tokens": args.batch_tokens,
        "op": op_reading(batches, 256, args.rounds),
        "step": step_reading(batches, args.rounds),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "energy_kernel.json", json.dumps(results, indent=1))
    markdown = render(results)
    write_text(args.out / "energy_kernel.md", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
