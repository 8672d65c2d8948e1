"""A tiny but real study project for end-to-end tests: corpus -> fetch -> tokenize.

Only sizes shrink: the stages, Ray, MLflow (SQLite) and DVC are the real ones.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.config import load_config
from pipeline.data.fetch import fetch
from pipeline.data.tokenize import tokenize
from tests.helpers import REPO_ROOT, synthetic_pairs, write_params, write_tsv


def tiny_params(root: Path, **train) -> dict:
    grid = train.pop(
        "grid",
        {"scorer": ["none", "additive"], "reverse_source": [False, True], "hidden_size": [16]},
    )
    return {
        "fetch": {
            "source": "tsv",
            "path": str(root / "corpus.tsv"),
            "split": {
                "dev_size": 30,
                "test_size": 60,
                "test_min_per_bucket": 5,
                "num_buckets": 3,
                "bucket_width": 5,
            },
        },
        "tokenize": {"vocab_size": 80},
        "model": {"embedding_size": 16, "hidden_size": 16, "dropout": 0.0},
        "train": {
            "max_epochs": 2,
            "batch_tokens": 400,
            "dev_bleu_sentences": 10,
            "grid": grid,
            "ray": {"storage_path": str(root / "ray_results"), "max_failures": 1},
            **train,
        },
        "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "test"},
        "evaluate": {"beam_size": 2, "bootstrap_samples": 50, "attention_examples": 3},
        "report": {"title": "Tiny study"},
    }


def make_project(root: Path, **train) -> Path:
    """Write corpus + params under ``root`` and run fetch and tokenize; returns params."""
    root.mkdir(parents=True, exist_ok=True)
    write_tsv(root / "corpus.tsv", synthetic_pairs(400, seed=11, max_words=14))
    params = write_params(root / "params.yaml", tiny_params(root, **train))
    config = load_config(params)
    fetch(config.fetch, root / "data" / "raw")
    tokenize(config.tokenize, root / "data" / "raw", root / "data" / "tok")
    return params


def stage(
    module: str, params: Path, root: Path, *args: str, timeout: int = 600, extra_env=None, **kw
):
    """Run a stage CLI the way DVC does (a subprocess), with paths under ``root``."""
    env = dict(os.environ, **(extra_env or {}))
    env.update(PYTHONPATH=str(REPO_ROOT), RAY_DEDUP_LOGS="0")
    env.pop("RAY_ADDRESS", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", module, "--params", str(params), *args]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, **kw
    )


def train_args(root: Path) -> list[str]:
    return ["--tok", str(root / "data" / "tok"), "--out", str(root / "models")]


def sweep_state(root: Path) -> dict:
    """The driver's ``models/.sweep_state.json`` (empty while it does not exist yet)."""
    try:
        return json.loads((root / "models" / ".sweep_state.json").read_text())
    except (OSError, ValueError):
        return {}


def kill_train_when_resumable(
    params: Path, root: Path, extra_env=None, timeout: float = 300, interrupt: dict | None = None
) -> tuple[list[Path], set[str]]:
    """Run the train stage and SIGKILL its whole process group as soon as one variant
    has finished and another has reported a Tune checkpoint. Returns the finished
    variants' folders and the ids of the checkpointed, unfinished ones. With
    ``interrupt`` (a dict), send the driver one SIGINT (Ctrl-C) instead, let it end by
    itself, and store its ``returncode`` and ``stderr`` in that dict."""
    env = dict(os.environ, **(extra_env or {}))
    env.update(PYTHONPATH=str(REPO_ROOT))
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "stages.train", "--params", str(params), *train_args(root)]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE if interrupt is not None else subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + timeout
    finished, resumable = [], set()
    try:
        while time.time() < deadline and not (finished and resumable):
            finished = [p.parent for p in (root / "models").glob("*/result.json")]
            done = {folder.name for folder in finished}
            variants = sweep_state(root).get("variants", {})
            resumable = {k for k, v in variants.items() if v.get("checkpoint") and k not in done}
            time.sleep(0.05)
        if interrupt is not None:
            process.send_signal(signal.SIGINT)
            _, interrupt["stderr"] = process.communicate(timeout=120)
            interrupt["returncode"] = process.returncode
    finally:
        try:  # the whole session: the driver and the local Ray it started
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # all of it ended by itself
            pass
        process.wait()
    return finished, resumable
