"""Learning curves to (and past) the plateau: the measurement behind the step cap and the
plateau rule (docs/budget.md, "Calibration").

Trains study variants of ``params.yaml`` (grid points by id, or every default variant) for
a fixed number of optimizer steps with early stopping switched off, evaluating on dev every
``--eval-every`` steps, several variants at once in separate processes. Each variant's
``history.csv`` lands in ``<out>/<variant>/``; ``tools.plateau_calibration`` replays
the plateau rule on them.

    python -m tools.learning_curves --steps 12000 --jobs 2 --out /tmp/curves
    python -m tools.learning_curves --device cuda --jobs 12 --ids additive-fwd-h256-s1 ...

Drives ``pipeline.train.trainer.train_variant`` directly (no Ray, MLflow or DVC), so it also
runs on a machine that has only torch. Not part of the tests.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

import torch

from pipeline.config import load_config
from pipeline.config.grid import expand_grid, variant_id

logger = logging.getLogger("tools.learning_curves")


def _train(variant, tok_dir: str, out_dir: str, device: str, threads: int) -> tuple[str, float]:
    from pipeline.train.trainer import train_variant

    torch.set_num_threads(threads)
    start = time.perf_counter()
    result = train_variant(variant, Path(tok_dir), Path(out_dir), device=device, resume=False)
    summary = result.summary
    return f"{variant.id}: {summary.steps} steps, best dev BLEU {summary.best_dev_bleu:.2f}", (
        time.perf_counter() - start
    )


def _variant(variants: dict, variant_id: str):
    """A grid variant by id; ``<id of a grid variant>-s<N>`` names it with seed N."""
    if variant_id in variants:
        return variants[variant_id]
    stem, _, seed = variant_id.rpartition("-s")
    base = next((v for i, v in variants.items() if i.rpartition("-s")[0] == stem), None)
    if base is None or not seed.isdigit():
        raise SystemExit(f"--ids: {variant_id}: not a grid variant (or one with another seed)")
    return reseeded(base, int(seed))


def reseeded(variant, seed: int):
    """``variant`` with another seed, its id and seed axis made as the grid makes them."""
    train = variant.train.model_copy(update={"seed": seed})
    axes = {**variant.axes, "seed": seed}
    return replace(variant, id=variant_id(variant.model, train, axes), train=train, axes=axes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--tok", default="data/tok")
    parser.add_argument("--out", required=True)
    parser.add_argument("--ids", nargs="*", default=[], help="variant ids (default: all)")
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps per variant")
    parser.add_argument("--eval-every", type=int, default=0, help="0: params.yaml's")
    parser.add_argument("--dev-bleu-sentences", type=int, default=0, help="0: params.yaml's")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per job")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)

    config = load_config(args.params)
    variants = {v.id: v for v in expand_grid(config)}
    chosen = [_variant(variants, i) for i in args.ids] if args.ids else list(variants.values())
    overrides = {
        "max_steps": args.steps,
        "patience": 10**6,
        "max_epochs": 10**4,
        "min_learning_rate": 0,
    }
    if args.dev_bleu_sentences:
        overrides["dev_bleu_sentences"] = args.dev_bleu_sentences
    if args.eval_every:
        overrides["eval_every_steps"] = args.eval_every
    # only the fields a run must not stop on; the learning-rate schedule is the study's
    chosen = [replace(v, train=v.train.model_copy(update=overrides)) for v in chosen]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = {
            pool.submit(
                _train, v, args.tok, str(Path(args.out) / v.id), args.device, args.threads
            ): v.id
            for v in chosen
        }
        for future in as_completed(futures):
            try:
                line, seconds = future.result()
                logger.info("%s (%.0f s)", line, seconds)
            except Exception as err:  # one variant's failure does not end the others
                logger.error("%s failed: %s: %s", futures[future], type(err).__name__, err)


if __name__ == "__main__":
    main()
