"""The train stage of two git revisions side by side: did a change cost speed?

Checks each revision out into a temporary git worktree, then runs its real train stage
(``python -m stages.train``: Ray Tune, MLflow on a scratch SQLite file) on the same
tokenized data and the same small grid, alternating the revisions ``--rounds`` times so
that a drift of the machine hits both. Reports wall seconds, summed trial seconds and
tokens/s per variant for each run. Not part of the tests.

    python -m tools.revisions 316b64f HEAD --rounds 2     # about 10 minutes here
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from pipeline.records.sweep import SweepRecord

logger = logging.getLogger("tools.revisions")
ROOT = Path(__file__).resolve().parents[1]
GRID = {"scorer": ["additive", "none", "dot", "general"], "hidden_size": [256]}


@contextlib.contextmanager
def worktree(revision: str, path: Path) -> Iterator[Path]:
    """A detached git worktree of ``revision`` at ``path``, removed again on exit; a
    revision git cannot check out exits with a one-line error."""
    try:
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(path), revision],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as error:
        sys.exit(f"error: {revision}: git worktree add failed: {error.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )


def params_for(tree: Path, scratch: Path, steps: int) -> Path:
    """The revision's own params.yaml with a small grid, a step budget, scratch stores."""
    params = yaml.safe_load((tree / "params.yaml").read_text())
    params["train"].update(grid=GRID, max_steps=steps)
    tracking = {"uri": f"sqlite:///{scratch / 'mlflow.db'}", "experiment": "bench"}
    if "ray" in params["train"]:  # a revision from before infra.yaml
        params["train"]["ray"].update(storage_path=str(scratch / "tune"), address=None)
        params["tracking"] = tracking
    else:  # infra.yaml beside the params file
        infra = yaml.safe_load((tree / "infra.yaml").read_text())
        infra["ray"].update(storage_path=str(scratch / "tune"), address=None)
        infra["tracking"] = {**infra["tracking"], **tracking}
        (scratch / "infra.yaml").write_text(yaml.safe_dump(infra))
    path = scratch / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def run_once(tree: Path, tok_dir: Path, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="revisions-") as folder:
        scratch = Path(folder)
        params = params_for(tree, scratch, steps)
        ignored = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "STUDY_INFRA", "DVC_ROOT")
        env = {k: v for k, v in os.environ.items() if k not in ignored}
        env["PYTHONPATH"] = str(tree)
        command = [
            sys.executable,
            "-m",
            "stages.train",
            "--params",
            str(params),
            "--tok",
            str(tok_dir),
            "--out",
            str(scratch / "models"),
        ]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(f"{tree}: train stage failed: {done.stderr.strip()[-500:]}")
        trained = {i: v.summary for i, v in SweepRecord.load(scratch / "models").finished.items()}
    return {
        "wall_s": round(seconds, 1),
        "trial_s": round(sum(s.wall_time_s for s in trained.values()), 1),
        "tokens_per_s": {k: round(s.tokens_per_s) for k, s in trained.items()},
    }


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("before", help="git revision to compare against (e.g. a commit id)")
    cli.add_argument("after", nargs="?", default="HEAD", help="git revision (default: HEAD)")
    cli.add_argument("--rounds", type=int, default=2)
    cli.add_argument("--steps", type=int, default=400, help="optimizer steps per variant")
    cli.add_argument("--tok", type=Path, default=ROOT / "data" / "tok")
    args = cli.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not (args.tok / "train.npz").is_file():
        sys.exit(f"error: {args.tok}: no tokenized corpus (run `dvc repro tokenize`)")
    results: dict[str, list[dict]] = {args.before: [], args.after: []}
    with (
        tempfile.TemporaryDirectory(prefix="revisions-trees-") as folder,
        contextlib.ExitStack() as stack,
    ):
        trees = {
            revision: stack.enter_context(
                worktree(revision, Path(folder) / revision.replace("/", "_"))
            )
            for revision in results
        }
        for round_ in range(1, args.rounds + 1):
            for revision, tree in trees.items():
                result = run_once(tree, args.tok.resolve(), args.steps)
                results[revision].append(result)
                logger.info("round %d %s: %s", round_, revision, json.dumps(result))
    for revision, runs in results.items():
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
        trials = ", ".join(f"{r['trial_s']:.1f}" for r in runs)
        print(f"{revision}: wall {walls} s; summed trial time {trials} s")


if __name__ == "__main__":
    main()
