"""The study's numerics on different machines: one variant of the default grid trained for
a few hundred steps on this machine, its dev loss and greedy dev BLEU at every evaluation.

    python -m benchmarks.numerics --label avx2 --steps 1000 --hidden 128  # this CPU, 1 thread
    ONEDNN_MAX_CPU_ISA=AVX2 python -m benchmarks.numerics --label capped
    python -m benchmarks.numerics --label h100 --device cuda             # a GPU
    python -m benchmarks.numerics --compare benchmarks/results/numerics/*.json
    python -m benchmarks.numerics --study-time --label amd-epyc-avx2   # the default study here

Each run writes ``benchmarks/results/numerics/<label>.json`` (the history, the machine,
torch's version, seconds per step); ``--compare`` prints a Markdown table of the runs side
by side, step by step. Same params and data give the same steps and learning-rate
schedule on every machine; what may differ is the rounding of the products. Drives
``train_variant`` directly (no Ray, MLflow or DVC), so it runs on a bare GPU machine too.
``--study-time`` forecasts the default study's training on this machine: the train
stage's preflight (every model family's seconds per step, one thread per trial), times
the steps each variant of the committed study took to its plateau
(``reports/summary.csv``), plus the evaluations' share, on one trial per core; written
to ``<label>-study-time.json``. Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from pipeline.config import load_config
from pipeline.config.grid import expand_grid
from pipeline.data.dataset import TokenizedData
from pipeline.io import write_json
from pipeline.runtime.precision import cpuinfo_fields
from pipeline.runtime.process import prepare_process
from pipeline.train.trainer import train_variant

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "numerics"


def machine(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return cpuinfo_fields().get("model name", platform.processor() or "unknown CPU")


def run(args: argparse.Namespace) -> dict:
    prepare_process()
    torch.set_num_threads(args.threads)
    config = load_config(args.params)
    variants = {v.id: v for v in expand_grid(config)}
    variant = variants[args.variant]
    train = variant.train.model_copy(
        update={"max_steps": args.steps, "precision": args.precision, "eval_every_steps": 200}
    )
    variant = replace(variant, train=train)
    if args.hidden:  # another size of the same variant (embedding and hidden)
        size = {"hidden_size": args.hidden, "embedding_size": args.hidden}
        name = variant.id.replace(f"-h{variant.model.hidden_size}-", f"-h{args.hidden}-")
        variant = replace(variant, id=name, model=variant.model.model_copy(update=size))
    data = TokenizedData.load(ROOT / args.tok)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        result = train_variant(variant, data, Path(scratch), device=args.device, resume=False)
    seconds = time.perf_counter() - start
    return {
        "label": args.label,
        "variant": variant.id,
        "device": args.device,
        "machine": machine(args.device),
        "torch": torch.__version__,
        "precision": result.precision,
        "threads": args.threads,
        "steps": result.steps,
        "seconds": round(seconds, 1),
        "history": [
            {
                "step": int(r["step"]),
                "dev_loss": r["dev_loss"],
                "dev_bleu": r["dev_bleu"],
                "learning_rate": r["learning_rate"],
            }
            for r in result.history
        ],
    }


def study_time(args: argparse.Namespace) -> dict:
    import csv
    import os

    from pipeline.train.preflight import EVALUATION_OVERHEAD, check_training

    prepare_process()
    config = load_config(args.params)
    variants = expand_grid(config)
    data = TokenizedData.load(ROOT / args.tok)
    start = time.perf_counter()
    checks = check_training(variants, data, "cpu", threads=1)
    seconds = time.perf_counter() - start
    per_step = {v: c.seconds_per_step for c in checks for v in c.variants}
    with (ROOT / "reports" / "summary.csv").open(newline="") as handle:
        measured = {row["variant"]: int(float(row["steps"])) for row in csv.DictReader(handle)}
    # a variant the committed study did not train: the median steps its configuration's
    # seeds took there, else its scorer's (another size), else the forecast's rule
    by_scorer: dict[str, list[int]] = {}
    for vid, count in measured.items():
        by_scorer.setdefault(vid.split("-")[0], []).append(count)
    steps = {}
    for v in variants:
        same = [
            n for vid, n in measured.items() if vid.rsplit("-s", 1)[0] == v.id.rsplit("-s", 1)[0]
        ]
        fallback = by_scorer.get(v.model.scorer) or [int(v.train.max_steps * 0.5)]
        steps[v.id] = measured.get(v.id) or int(statistics.median(same or fallback))
    cores = os.cpu_count() or 1
    total = sum(steps[v.id] * per_step[v.id] for v in variants) * (1 + EVALUATION_OVERHEAD)
    return {
        "label": args.label,
        "machine": machine("cpu"),
        "cores": cores,
        "torch": torch.__version__,
        "preflight_seconds": round(seconds, 1),
        "ms_per_step": {c.name.rsplit("-s", 1)[0]: round(c.seconds_per_step * 1e3) for c in checks},
        "steps": sum(steps[v.id] for v in variants),
        "evaluation_overhead": EVALUATION_OVERHEAD,
        "train_hours": round(total / min(cores, len(variants)) / 3600, 2),
    }


def compare(paths: list[Path]) -> str:
    runs = [json.loads(p.read_text()) for p in paths]
    head = "| step | " + " | ".join(f"dev loss, {r['label']}" for r in runs)
    head += " | dev BLEU (greedy, 300 sentences), " + " / ".join(r["label"] for r in runs) + " |"
    lines = [head, "|---" * (len(runs) + 2) + "|"]
    steps = sorted({row["step"] for r in runs for row in r["history"]})
    for step in steps:
        rows = [next((h for h in r["history"] if h["step"] == step), None) for r in runs]
        loss = " | ".join(f"{h['dev_loss']:.4f}" if h else "-" for h in rows)
        bleu = " / ".join(f"{h['dev_bleu']:.2f}" if h else "-" for h in rows)
        lines.append(f"| {step} | {loss} | {bleu} |")
    lines.append("")
    for r in runs:
        lines.append(
            f"- {r['label']}: {r['machine']}, {r['device']}, torch {r['torch']}, "
            f"{r['precision']}, {r['threads']} thread(s), {r['steps']} steps in "
            f"{r['seconds']:.0f} s"
        )
    return "\n".join(lines)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--label", default="this-machine")
    cli.add_argument("--params", default=str(ROOT / "params.yaml"))
    cli.add_argument("--tok", default="data/tok")
    cli.add_argument("--variant", default="additive-fwd-h256-s1", help="a variant of the grid")
    cli.add_argument("--hidden", type=int, default=0, help="train it at this size instead")
    cli.add_argument("--steps", type=int, default=1000)
    cli.add_argument("--device", default="cpu")
    cli.add_argument("--precision", default="fp32")
    cli.add_argument("--threads", type=int, default=1, help="torch threads (a trial has 1)")
    cli.add_argument("--out", default=str(RESULTS))
    cli.add_argument("--compare", nargs="+", type=Path, help="result files to tabulate")
    cli.add_argument("--study-time", action="store_true", help="forecast the default study")
    args = cli.parse_args()
    if args.compare:
        print(compare(args.compare))
        return
    if args.study_time:
        record = study_time(args)
        write_json(Path(args.out) / f"{args.label}-study-time.json", record)
        print(json.dumps(record))
        return
    record = run(args)
    write_json(Path(args.out) / f"{args.label}.json", record)
    print(json.dumps({k: v for k, v in record.items() if k != "history"}))


if __name__ == "__main__":
    main()
