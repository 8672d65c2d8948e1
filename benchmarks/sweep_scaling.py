"""The grid's scaling with Ray workers: the same small sweep with 1 and with 2 trials at once.

Runs the real train stage (``python -m stages.train``: Ray Tune, MLflow on a throw-away
SQLite file) on the study's tokenized data, in a temporary folder, once with
``ray.max_concurrent_trials: 1`` (infra.yaml) and once with 2, and reports the wall times and
their ratio. Every variant trains ``--sweep-steps`` steps of the study's batches and is
evaluated once (dev loss and greedy dev BLEU), so a trial is a miniature of a study
trial, Ray start-up and MLflow logging included.

    python -m benchmarks.sweep_scaling --steps 150          # about 3 minutes here
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.trials import ROOT, other_load

logger = logging.getLogger("benchmarks.sweep_scaling")
GRID = {"scorer": ["none", "dot", "additive", "general"], "hidden_size": [128]}
"""Four variants: two rounds of two trials, or four rounds of one."""
IGNORED_ENVIRONMENT = (  # a local Ray, a scratch store and variant cache
    "RAY_ADDRESS",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "STUDY_INFRA",
    "DVC_ROOT",
)


def sweep_params(root: Path, concurrent: int, steps: int, quick: bool) -> dict[str, Any]:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["train"].update(
        grid={**GRID, "hidden_size": [16]} if quick else GRID,
        max_steps=steps,
        dev_bleu_sentences=50 if quick else 300,
    )
    if quick:
        params["model"].update(embedding_size=16)
    return params


def sweep_infra(root: Path, concurrent: int) -> dict[str, Any]:
    """infra.yaml beside the params: the repo's Ray settings, everything else in ``root``."""
    infra = yaml.safe_load((ROOT / "infra.yaml").read_text())
    infra["ray"].update(max_concurrent_trials=concurrent, storage_path="tune", address=None)
    infra["tracking"] = {"uri": "sqlite:///mlflow.db", "experiment": "bench"}
    return infra


def time_sweep(tok_dir: Path, concurrent: int, steps: int, quick: bool) -> dict[str, Any]:
    """Wall time of one ``stages.train`` run with ``concurrent`` trials at a time."""
    with tempfile.TemporaryDirectory(prefix="sweep-scaling-") as folder:
        root = Path(folder)
        params = root / "params.yaml"
        params.write_text(yaml.safe_dump(sweep_params(root, concurrent, steps, quick)))
        (root / "infra.yaml").write_text(yaml.safe_dump(sweep_infra(root, concurrent)))
        env = {k: v for k, v in os.environ.items() if k not in IGNORED_ENVIRONMENT}
        command = [
            sys.executable,
            "-m",
            "stages.train",
            "--params",
            str(params),
            "--tok",
            str(tok_dir),
            "--out",
            str(root / "models"),
        ]
        load = other_load(0.5)
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise RuntimeError(f"sweep with {concurrent} concurrent trials failed: {tail}")
        summary = json.loads((root / "models" / "sweep.json").read_text())
    variants = summary["variants"].values()
    return {
        "concurrent_trials": concurrent,
        "variants": len(summary["variants"]),
        "steps_per_variant": steps,
        "seconds": seconds,
        "trial_seconds": sum(v.get("wall_time_s", 0.0) for v in variants),
        "tokens_per_s_per_trial": [v.get("tokens_per_s", 0.0) for v in variants],
        "other_load_before": load,
    }


def ensure_tokenized(tok_dir: Path, scratch: Path) -> Path:
    """``tok_dir`` if it holds the tokenized corpus; else fetch + tokenize the default
    corpus into ``scratch`` with the real stages (seconds; a fresh clone has no data/)."""
    if (tok_dir / "train.npz").is_file():
        return tok_dir
    logger.info("%s has no train.npz: running fetch and tokenize into %s", tok_dir, scratch)
    raw, tok = scratch / "raw", scratch / "tok"
    for command in (
        ["stages.fetch", "--out", str(raw)],
        ["stages.tokenize", "--raw", str(raw), "--out", str(tok)],
    ):
        subprocess.run([sys.executable, "-m", *command], cwd=ROOT, check=True, capture_output=True)
    return tok


def measure(tok_dir: Path, steps: int, quick: bool = False) -> dict[str, Any]:
    """Both arrangements, one after the other, and the speed-up of 2 over 1."""
    with tempfile.TemporaryDirectory(prefix="sweep-data-") as scratch:
        return _measure(ensure_tokenized(tok_dir, Path(scratch)), steps, quick)


def _measure(tok_dir: Path, steps: int, quick: bool) -> dict[str, Any]:
    runs = {}
    for concurrent in (1, 2):
        runs[concurrent] = time_sweep(tok_dir, concurrent, steps, quick)
        logger.info(
            "sweep, %d trial(s) at a time: %.0f s for %d variants",
            concurrent,
            runs[concurrent]["seconds"],
            runs[concurrent]["variants"],
        )
    return {"one": runs[1], "two": runs[2], "speedup": runs[1]["seconds"] / runs[2]["seconds"]}


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--tok-dir", type=Path, default=ROOT / "data" / "tok")
    cli.add_argument("--steps", type=int, default=150)
    cli.add_argument("--quick", action="store_true")
    args = cli.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    print(json.dumps(measure(args.tok_dir.resolve(), args.steps, args.quick), indent=1))


if __name__ == "__main__":
    main()
