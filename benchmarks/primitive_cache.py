"""oneDNN's primitive cache at its default size against the size training sets, side by side.

    python -m benchmarks.primitive_cache --steps 1800 --out benchmarks/results/primitive_cache

Two trials start together (``benchmarks.trials.run_trials``: one worker process each,
one thread, a start barrier) and train the same model (additive Luong h256 by default,
bf16) on the same real training batches, in the order training takes them
(params.yaml's batches and curriculum, epoch after epoch; the worker's ``train_order``
kind): one with ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024`` (oneDNN's default), one with the
capacity ``pipeline.runtime.onednn`` sets. The cache changes no number (a primitive is rebuilt
bit for bit the same), so both make the same steps; only their speed and memory differ.
Each reports its seconds per window of ``--window`` steps, its real target tokens/s, its
total wall time and its peak RSS. To count the primitives each builds, run a worker
with ``ONEDNN_VERBOSE=profile_create`` and count ``create:cache_miss`` lines.
Writes ``<out>/primitive_cache.json`` and ``.md``. Not part of the tests (about 4
minutes at 1,800 steps).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from benchmarks.markdown import table
from benchmarks.trials import ROOT, cpu_model, run_trials
from pipeline.config import load_config
from pipeline.io import write_text
from pipeline.runtime.onednn import CAPACITY, ENV

logger = logging.getLogger(__name__)
DEFAULT_CAPACITY = 1024  # oneDNN's own default


def tokens_per_s(run: dict[str, Any]) -> float:
    return sum(w["tokens"] for w in run["windows"]) / run["seconds"]


def step_ms(run: dict[str, Any]) -> list[float]:
    """Milliseconds per step of each window."""
    ends = [w["steps"] for w in run["windows"]]
    counts = [b - a for a, b in zip([0, *ends[:-1]], ends)]
    return [w["seconds"] / n * 1e3 for w, n in zip(run["windows"], counts)]


def render(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [
        "# oneDNN primitive cache: default capacity against the pipeline's",
        "",
        f"{results['date']}, {results['cpu']}; {results['setup']}; other load "
        f"{results['other_load']:.0%}.",
        "",
    ]
    base, sized = runs[str(DEFAULT_CAPACITY)], runs[str(CAPACITY)]
    rows = [
        [c, f"{r['seconds']:.1f}", f"{tokens_per_s(r):.0f}", f"{r['peak_rss_mib']:.0f}"]
        for c, r in runs.items()
    ]
    lines += table("capacity|wall s|real target tokens/s|peak RSS MiB", rows)
    lines += [
        "",
        f"Speed-up of the sized cache: {base['seconds'] / sized['seconds']:.2f}x "
        "(wall seconds of the same steps).",
        "",
    ]
    rows = [
        [w["steps"], f"{a:.1f}", f"{b:.1f}"]
        for w, a, b in zip(base["windows"], step_ms(base), step_ms(sized))
    ]
    lines += table(f"up to step|ms/step at {DEFAULT_CAPACITY}|ms/step at {CAPACITY}", rows)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--steps", type=int, default=1800)
    cli.add_argument("--window", type=int, default=150, help="steps per reported window")
    cli.add_argument("--scorer", default="additive")
    cli.add_argument("--wiring", default="luong", choices=["luong", "bahdanau"])
    cli.add_argument("--tok-dir", type=Path, default=ROOT / "data" / "tok")
    cli.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "primitive_cache"
    )
    args = cli.parse_args(argv)
    if args.steps < 1 or args.window < 1:
        cli.error("--steps and --window must be at least 1")
    if not (args.tok_dir / "train.npz").is_file():
        cli.error(f"{args.tok_dir / 'train.npz'}: missing (run `dvc repro tokenize` first)")
    train = load_config(ROOT / "params.yaml").train
    spec = {
        "kind": "train_order",
        "steps": args.steps,
        "window": args.window,
        "scorer": args.scorer,
        "wiring": args.wiring,
        "hidden_size": 256,
        "embedding_size": 256,
        "precision": "bf16",
        "tok_dir": str(args.tok_dir),
    }
    trials = run_trials([{**spec, "env": {ENV: str(c)}} for c in (DEFAULT_CAPACITY, CAPACITY)])
    runs = {trial["env"][ENV]: trial for trial in trials}
    for capacity, run in runs.items():
        logger.info("capacity %s: %.1f s", capacity, run["seconds"])
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_model(),
        "setup": f"{args.scorer} {args.wiring} h256, bf16, {args.steps} training steps of "
        f"the study's batches ({train.batch_tokens} target tokens, curriculum "
        f"{train.curriculum_steps} steps), one thread each, both at once",
        "other_load": trials[0]["other_load"],
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "primitive_cache.json", json.dumps(results, indent=2) + "\n")
    write_text(args.out / "primitive_cache.md", render(results))
    print(render(results))


if __name__ == "__main__":
    main()
