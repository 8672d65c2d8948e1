"""DVC stage ``evaluate``: decode the test set with every variant -> eval/ (metrics, plots)."""

from __future__ import annotations

import logging

from stages._cli import REPO_ROOT, infra, parser, run

logger = logging.getLogger("stages.evaluate")


def main(args, config) -> None:
    from pipeline.evaluate.data import EvaluatePaths  # here: `--help` loads no torch or Ray
    from pipeline.evaluate.stage import evaluate
    from pipeline.io import space_for
    from pipeline.runtime.console import library_logs_to_file

    settings = infra(args)
    run_log = library_logs_to_file(settings.cache_dir / "logs", "evaluate")
    if run_log is not None:
        logger.info("Ray, Tune and MLflow log to %s", run_log)
    names = (args.tok, args.raw, args.models, args.out, args.metrics)
    paths = EvaluatePaths(*((REPO_ROOT / p).resolve() for p in names))
    with space_for(settings.root):  # a write on a full disk (eval/, metrics/): one line
        summary = evaluate(config, settings, paths)
    words, numbers = summary["headline"], summary["numbers"]
    logger.info(
        "evaluated %d variants; best scorer (chosen on dev): %s, test BLEU %s inside the "
        "training lengths; verdicts: %s",
        len(summary["variants"]),
        words["best_scorer"],
        numbers["best_bleu_inside"],
        words["verdicts"],
    )


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--tok", default="data/tok")
    cli.add_argument("--raw", default="data/raw")
    cli.add_argument("--models", default="models")
    cli.add_argument("--out", default="eval")
    cli.add_argument("--metrics", default="metrics", help="DVC metrics/plots folder")
    run(main, cli, private_network=True)  # its Ray: loopback only (pipeline.runtime.netns)
