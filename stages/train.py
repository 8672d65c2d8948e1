"""DVC stage ``train``: the Ray Tune grid sweep -> models/<variant>/ + models/sweep.json.

``python -m stages.train --only additive-rev-h256-s1`` trains one variant of the grid
(any number of ids may follow ``--only``); finished variants are never retrained.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from pipeline.artifacts import SWEEP_FILE
from pipeline.sweep import SweepFailedError, SweepPaths, run_sweep
from stages._cli import REPO_ROOT, parser, run

logger = logging.getLogger("stages.train")


def main(args, config) -> int:
    paths = SweepPaths.under(REPO_ROOT, config, Path(args.tok), Path(args.out))
    try:
        summary = run_sweep(config, paths, only=args.only)
    except SweepFailedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    counts: dict[str, int] = {}
    for variant in summary["variants"].values():
        counts[variant["status"]] = counts.get(variant["status"], 0) + 1
    logger.info("sweep done: %s; summary in %s", counts, paths.models_dir / SWEEP_FILE)
    return 0


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--tok", default="data/tok", help="tokenize output (default: data/tok)")
    cli.add_argument("--out", default="models", help="output folder (default: models)")
    cli.add_argument("--only", nargs="+", default=None, metavar="VARIANT", help="variant ids")
    run(main, cli)
