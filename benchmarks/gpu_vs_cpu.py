"""The GPU's converged variants (``benchmarks.gpu_study --converge``) beside the committed
CPU study's variants of the same scorer, seed and settings: the updates until the
plateau rule stopped each, the best step, and test BLEU (beam search, sacreBLEU on the
whole test split).

    python -m benchmarks.gpu_vs_cpu benchmarks/results/gpu_study/converged/converged.json \\
        benchmarks/results/gpu_study/converged_repeat/converged.json

A scorer found in several GPU files takes its first. CPU rows: ``models/sweep.json`` and
``metrics/test_bleu.csv`` (``<scorer>-fwd-h256-s1``). Writes ``gpu_vs_cpu.md`` beside the
first file. Not part of the tests.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from pipeline.evaluate.stage import load_sweep
from pipeline.io import write_text

ROOT = Path(__file__).resolve().parent.parent


def cpu_rows(root: Path) -> dict[str, dict[str, Any]]:
    variants = load_sweep(root / "models")["variants"]
    with (root / "metrics" / "test_bleu.csv").open(newline="") as handle:
        bleu = {row["variant"]: float(row["bleu"]) for row in csv.DictReader(handle)}
    return {i: dict(v, test_bleu=bleu.get(i)) for i, v in variants.items()}


def compare(gpu_files: list[Path], root: Path = ROOT) -> str:
    gpu: dict[str, dict[str, Any]] = {}
    env: dict[str, Any] = {}
    for path in gpu_files:
        results = json.loads(path.read_text())
        if not results.get("converge") or results.get("hidden") != 256:
            raise SystemExit(f"error: {path}: not a --converge run at hidden 256")
        env = env or results["environment"]
        for row in results["rows"]:
            gpu.setdefault(row["scorer"], row)
    cpu = cpu_rows(root)
    lines = [
        "# Converged on a GPU against the committed CPU study",
        "",
        f"GPU: {env['device_name']}, torch {env['torch']} (`benchmarks.gpu_study --converge`). "
        "CPU: the committed study (`models/sweep.json`, `metrics/test_bleu.csv`). Same "
        "params, seed 1, source forward, hidden 256, bf16 training, beam 5.",
        "",
        "| scorer | GPU updates | CPU updates | GPU best step | CPU best step "
        "| GPU test BLEU | CPU test BLEU | GPU - CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    bleu: dict[str, tuple[float, float]] = {}
    for scorer, g in gpu.items():
        c = cpu.get(f"{scorer}-fwd-h256-s1")
        if c is None or c["test_bleu"] is None or g["precision"] != c["precision"]:
            continue  # no CPU twin of the same settings
        bleu[scorer] = (g["test_bleu"], c["test_bleu"])
        lines.append(
            f"| {scorer} | {g['steps']:,} ({g['stop_reason']}) | {c['steps']:,} "
            f"({c['stop_reason']}) | {g['best_step']:,} | {c['best_step']:,} "
            f"| {g['test_bleu']:.2f} | {c['test_bleu']:.2f} "
            f"| {g['test_bleu'] - c['test_bleu']:+.2f} |"
        )
    by_gpu = sorted(bleu, key=lambda s: -bleu[s][0])
    by_cpu = sorted(bleu, key=lambda s: -bleu[s][1])
    same = "the same" if by_gpu == by_cpu else "a different"
    lines += [
        "",
        f"Ranking by test BLEU: GPU {' > '.join(by_gpu)}; CPU {' > '.join(by_cpu)} ({same} order).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("gpu", type=Path, nargs="+", help="gpu_study.json files (--converge)")
    args = cli.parse_args(argv)
    text = compare(args.gpu)
    write_text(args.gpu[0].parent / "gpu_vs_cpu.md", text)
    print(text)


if __name__ == "__main__":
    main()
