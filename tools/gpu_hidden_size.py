"""The GPU preset's hidden-size test on one GPU: how far its trainings get, and at what rate.

Britz et al.'s test in ``presets/gpu-cluster.yaml`` compares (additive - general) at the
largest hidden size with the same at 256. This tool trains those four configurations
(``--scorers`` x ``--hidden``, ``--seeds`` each, source forward) of a params file (the
preset written by ``python -m tools.preset gpu-cluster``), all at once in separate
processes on one device, with the params' own stopping rule and a wall-clock safety stop
(``--minutes``, stop reason ``time_limit``). It writes ``<out>/gpu_hidden_size.json`` and
``.md``: per variant its updates, updates/s, stop reason and best dev BLEU (greedy, the
trainer's own dev evaluation), and from the measured rates the hours the preset's grid
needs on one such GPU at this packing.

    python -m tools.preset gpu-cluster && dvc repro tokenize     # data/tok of the preset
    python -m tools.gpu_hidden_size --device cuda --minutes 5 --out /tmp/hs

Drives ``pipeline.train.trainer.train_variant`` directly (no Ray, MLflow or DVC), so it runs
on a machine that has only torch. Dev BLEU of a safety-stopped run is a point on its
curve, not the study's test. Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from benchmarks.time_to_quality import TimeBudget
from pipeline.config import load_config
from pipeline.config.grid import expand_grid
from tools.learning_curves import reseeded

logger = logging.getLogger("tools.gpu_hidden_size")


def _train(variant, tok: str, out: str, device: str, threads: int, seconds: float) -> dict:
    from pipeline.train.trainer import train_variant

    torch.set_num_threads(threads)
    start = time.perf_counter()
    result = train_variant(
        variant, Path(tok), Path(out), callbacks=[TimeBudget(seconds)], device=device, resume=False
    )
    wall = time.perf_counter() - start
    return {
        "id": variant.id,
        "scorer": variant.model.scorer,
        "hidden": variant.model.hidden_size,
        "seed": variant.train.seed,
        "steps": result.steps,
        "wall_s": round(wall, 1),
        "steps_per_s": round(result.steps / wall, 2),  # evaluations included
        "tokens_per_s": round(result.tokens_per_s),
        "stop_reason": result.stop_reason,
        "best_step": result.best_step,
        "best_dev_bleu": round(result.best_dev_bleu, 2),
        "precision": result.precision,
        "curve": [(r["step"], round(r.get("dev_bleu", float("nan")), 2)) for r in result.history],
    }


def _select(config, scorers: list[str], sizes: list[int], seeds: list[int]) -> list:
    chosen = []
    for v in expand_grid(config):
        if (
            v.model.scorer in scorers
            and v.model.hidden_size in sizes
            and not v.model.reverse_source
            and v.train.seed == seeds[0]
        ):
            chosen.extend(reseeded(v, seed) for seed in seeds)
    missing = {(s, h) for s in scorers for h in sizes} - {
        (v.model.scorer, v.model.hidden_size) for v in chosen
    }
    if missing:
        raise SystemExit(f"--scorers/--hidden: not in the params' grid: {sorted(missing)}")
    return chosen


def estimate(rows: list[dict], config, packing: int) -> dict:
    """Hours of one GPU for the params' whole grid, at ``packing`` trainings at a time and
    each size's measured updates/s; updates per variant: the measured plateau where every
    run of that size plateaued, else the step cap (an upper bound)."""
    grid = list(expand_grid(config))
    cap = config.train.max_steps
    per_size = {}
    for hidden in sorted({v.model.hidden_size for v in grid}):
        measured = [r for r in rows if r["hidden"] == hidden]
        if not measured:
            per_size[hidden] = None
            continue
        plateaued = all(r["stop_reason"] == "early_stopping" for r in measured)
        if not all(r["steps_per_s"] > 0 for r in measured):
            per_size[hidden] = None
            continue
        steps = max(r["steps"] for r in measured) if plateaued else cap
        rate = statistics.mean(r["steps_per_s"] for r in measured)
        count = sum(v.model.hidden_size == hidden for v in grid)
        per_size[hidden] = {
            "variants": count,
            "updates_per_variant": steps,
            "updates_are": "measured plateau" if plateaued else "the step cap (upper bound)",
            "updates_per_s": round(rate, 2),
            "gpu_hours": round(count * steps / rate / packing / 3600, 2),
        }
    return per_size


def render(summary: dict) -> str:
    lines = [
        f"# Hidden-size test on {summary['device_name']}",
        "",
        f"{summary['packing']} trainings at once, {summary['threads']} CPU threads each, "
        f"safety stop after {summary['minutes']} min; torch {summary['torch']}.",
        "",
        "| variant | updates | updates/s | target tokens/s | stop | best step | best dev BLEU |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(summary["variants"], key=lambda r: (r["hidden"], r["scorer"], r["seed"])):
        lines.append(
            f"| {r['id']} | {r['steps']:,} | {r['steps_per_s']} | {r['tokens_per_s']:,} | "
            f"{r['stop_reason']} | {r['best_step']:,} | {r['best_dev_bleu']:.2f} |"
        )
    lines += ["", "| hidden | variants in the grid | updates each | updates/s | GPU-hours |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for hidden, e in summary["estimate"].items():
        if e is None:
            lines.append(f"| {hidden} | | not measured | | |")
        else:
            lines.append(
                f"| {hidden} | {e['variants']} | {e['updates_per_variant']:,} "
                f"({e['updates_are']}) | {e['updates_per_s']} | {e['gpu_hours']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--tok", default="data/tok")
    parser.add_argument("--out", required=True)
    parser.add_argument("--scorers", nargs="+", default=["additive", "general"])
    parser.add_argument("--hidden", nargs="+", type=int, default=[256, 1024])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--minutes", type=float, required=True, help="safety stop per run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)

    config = load_config(args.params)
    chosen = _select(config, args.scorers, args.hidden, args.seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, start = [], time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(chosen), mp_context=context) as pool:
        futures = {
            pool.submit(
                _train, v, args.tok, str(out / v.id), args.device, args.threads, 60 * args.minutes
            ): v.id
            for v in chosen
        }
        for future in as_completed(futures):
            try:
                rows.append(future.result())
                logger.info("%s", {k: v for k, v in rows[-1].items() if k != "curve"})
            except Exception as err:  # one variant's failure does not end the others
                logger.error("%s failed: %s: %s", futures[future], type(err).__name__, err)
    summary = {
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "packing": len(chosen),
        "threads": args.threads,
        "minutes": args.minutes,
        "wall_s": round(time.perf_counter() - start, 1),
        "variants": rows,
        "estimate": estimate(rows, config, len(chosen)),
    }
    (out / "gpu_hidden_size.json").write_text(json.dumps(summary, indent=1))
    (out / "gpu_hidden_size.md").write_text(render(summary))
    print(render(summary))


if __name__ == "__main__":
    main()
