"""DVC stage ``train``: the Ray Tune grid sweep -> models/<variant>/ + models/sweep.json.

``python -m stages.train --only additive-rev-h256-s1`` trains one variant of the grid
(any number of ids may follow ``--only``); finished variants are never retrained.
"""

from __future__ import annotations

import logging
import sys
import time

from stages._cli import REPO_ROOT, infra, parser, run

logger = logging.getLogger("stages.train")


def main(args, config) -> int:
    # imported here, not at the top: `--help` and argument errors answer without loading
    # torch, Ray Tune and MLflow (seconds)
    from pipeline.io import space_for
    from pipeline.runtime.console import library_logs_to_file
    from pipeline.study.design import keep_lock, lock_design
    from pipeline.study.plan import log_plan
    from pipeline.sweep.driver import SweepFailedError, SweepPaths, run_sweep

    settings = infra(args)
    run_log = library_logs_to_file(settings.cache_dir / "logs", "train")
    if run_log is not None:
        logger.info("Ray, Tune and MLflow log to %s", run_log)
    paths = SweepPaths.under(settings, REPO_ROOT / args.tok, REPO_ROOT / args.out)
    log_plan(config)
    try:  # the sweep logs its summary line itself, also before raising
        with space_for(settings.root):  # any other write on a full disk: one line too
            # the design is locked as training starts (kept while the grid is the same);
            # a run that trains nothing keeps the lock of the one that trained
            def lock() -> None:
                lock_design(
                    config, paths.models_dir, time.time(), settings.cache_dir, root=REPO_ROOT
                )

            run_sweep(config, settings, paths, only=args.only, on_training_start=lock)
            keep_lock(config, paths.models_dir, settings.cache_dir)
    except SweepFailedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--tok", default="data/tok", help="tokenize output (default: data/tok)")
    cli.add_argument("--out", default="models", help="output folder (default: models)")
    cli.add_argument("--only", nargs="+", default=None, metavar="VARIANT", help="variant ids")
    run(main, cli, private_network=True)  # its Ray: loopback only (pipeline.runtime.netns)
