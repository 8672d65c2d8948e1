"""oneDNN's primitive cache at its default size against the size training sets, side by side.

    python -m benchmarks.primitive_cache --steps 1800 --out benchmarks/results/primitive-cache-DATE

Two worker processes start together, one thread each, and train the same model (additive
Luong h256 by default, bf16) on the same real training batches, in the order training
takes them (``epoch_batches`` of seed 1 with the default curriculum, epoch after epoch):
one with ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024`` (oneDNN's default), one with the
capacity ``pipeline.onednn`` sets. The cache changes no number (a primitive is rebuilt
bit for bit the same), so both make the same steps; only their speed and memory differ.
Each reports its seconds per window of ``--window`` steps, its real target tokens/s, its
total wall time and its peak RSS. ``--count-builds`` instead runs each setting once
with ``ONEDNN_VERBOSE=profile_create`` and counts the primitives oneDNN built (untimed:
the verbose output slows a run). Writes ``<out>/primitive_cache.json`` and ``.md``.
Not part of the tests (about 4 minutes at 1,800 steps).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.markdown import table
from benchmarks.trials import ROOT, LoadWindow, cpu_model
from pipeline.io import write_text
from pipeline.onednn import CAPACITY, ENV

logger = logging.getLogger(__name__)
DEFAULT_CAPACITY = 1024  # oneDNN's own default


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Train ``spec["steps"]`` steps; the environment already holds the cache capacity."""
    import torch

    from benchmarks import workloads
    from pipeline.allocator import tune_allocator
    from pipeline.config import ModelConfig, load_config
    from pipeline.data.batching import epoch_batches, make_batch
    from pipeline.data.tokenized import TokenizedSplit

    tune_allocator()
    torch.set_num_threads(1)
    split = TokenizedSplit.load(Path(spec["tok_dir"]) / "train.npz")
    train = load_config(ROOT / "params.yaml").train  # the study's batches and curriculum
    order: list = []
    epoch = 1
    while len(order) < spec["steps"]:
        order += epoch_batches(split, train.batch_tokens, seed=train.seed, epoch=epoch,
                               curriculum_steps=train.curriculum_steps)  # fmt: skip
        epoch += 1
    config = ModelConfig(scorer=spec["scorer"], wiring=spec["wiring"], hidden_size=256,
                         embedding_size=256)  # fmt: skip
    model = workloads.build_model("pipeline", config, workloads.VOCAB_SIZE)
    optimizer = workloads.make_optimizer("pipeline", model)
    windows, tokens, start = [], 0, time.perf_counter()
    first = start
    for step in range(spec["steps"]):
        tokens += workloads.training_step(model, optimizer, make_batch(split, order[step]), "bf16")
        if (step + 1) % spec["window"] == 0 or step + 1 == spec["steps"]:
            now = time.perf_counter()
            windows.append({"steps": step + 1, "seconds": now - start, "tokens": tokens})
            start, tokens = now, 0
    return {
        "capacity": os.environ.get(ENV),
        "seconds": time.perf_counter() - first,
        "windows": windows,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def spawn(spec: dict[str, Any], capacity: int, verbose: bool) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env[ENV] = str(capacity)
    if verbose:
        env["ONEDNN_VERBOSE"] = "profile_create"
    command = [sys.executable, "-m", "benchmarks.primitive_cache", "--worker", json.dumps(spec)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


def collect(process: subprocess.Popen) -> tuple[dict[str, Any], int]:
    """The worker's result and how many primitives oneDNN reported building."""
    builds, result = 0, None
    for line in process.stdout:
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif "create:cache_miss" in line:
            builds += 1
    if process.wait() != 0 or result is None:
        raise SystemExit(f"primitive_cache: worker exited with {process.returncode}")
    return result, builds


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
        "# oneDNN primitive cache: default capacity against the pipeline's", "",
        f"{results['date']}, {results['cpu']}; {results['setup']}; other load "
        f"{results['other_load']:.0%}.", "",
    ]  # fmt: skip
    if results["mode"] == "timing":
        base, sized = runs[str(DEFAULT_CAPACITY)], runs[str(CAPACITY)]
        rows = [[c, f"{r['seconds']:.1f}", f"{tokens_per_s(r):.0f}", f"{r['peak_rss_mib']:.0f}"]
                for c, r in runs.items()]  # fmt: skip
        lines += table("capacity|wall s|real target tokens/s|peak RSS MiB", rows)
        lines += ["", f"Speed-up of the sized cache: {base['seconds'] / sized['seconds']:.2f}x "
                  "(wall seconds of the same steps).", ""]  # fmt: skip
        per_step = [step_ms(base), step_ms(sized)]
        rows = [[w["steps"], f"{a:.1f}", f"{b:.1f}"]
                for w, a, b in zip(base["windows"], *per_step)]  # fmt: skip
        lines += table(f"up to step|ms/step at {DEFAULT_CAPACITY}|ms/step at {CAPACITY}", rows)
    else:
        lines += table("capacity|primitives built", [[c, r["builds"]] for c, r in runs.items()])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--worker", help=argparse.SUPPRESS)
    cli.add_argument("--steps", type=int, default=1800)
    cli.add_argument("--window", type=int, default=150, help="steps per reported window")
    cli.add_argument("--scorer", default="additive")
    cli.add_argument("--wiring", default="luong", choices=["luong", "bahdanau"])
    cli.add_argument("--tok-dir", type=Path, default=ROOT / "data" / "tok")
    cli.add_argument("--count-builds", action="store_true",
                     help="count the primitives built (verbose, untimed), do not time")  # fmt: skip
    cli.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "primitive-cache"
    )
    args = cli.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        return
    if args.steps < 1 or args.window < 1:
        cli.error("--steps and --window must be at least 1")
    if not (args.tok_dir / "train.npz").is_file():
        cli.error(f"{args.tok_dir / 'train.npz'}: missing (run `dvc repro tokenize` first)")
    spec = {"steps": args.steps, "window": args.window, "scorer": args.scorer,
            "wiring": args.wiring, "tok_dir": str(args.tok_dir)}  # fmt: skip
    window = LoadWindow.open()
    runs: dict[str, Any] = {}
    if args.count_builds:  # one at a time: the verbose output is large
        for capacity in (DEFAULT_CAPACITY, CAPACITY):
            result, builds = collect(spawn(spec, capacity, verbose=True))
            runs[str(capacity)] = {**result, "builds": builds}
            logger.info("capacity %d: %d primitives built", capacity, builds)
    else:
        processes = {c: spawn(spec, c, verbose=False) for c in (DEFAULT_CAPACITY, CAPACITY)}
        for capacity, process in processes.items():
            runs[str(capacity)] = collect(process)[0]
            logger.info("capacity %d: %.1f s", capacity, runs[str(capacity)]["seconds"])
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_model(),
        "mode": "builds" if args.count_builds else "timing",
        "setup": f"{args.scorer} {args.wiring} h256, bf16, {args.steps} training steps of "
        f"the default batches (1000 target tokens, curriculum), one thread each"
        + ("" if args.count_builds else ", both at once"),
        "other_load": window.shares()[0],
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "primitive_cache_builds" if args.count_builds else "primitive_cache"
    write_text(args.out / f"{name}.json", json.dumps(results, indent=2) + "\n")
    write_text(args.out / f"{name}.md", render(results))
    print(render(results))


if __name__ == "__main__":
    main()
