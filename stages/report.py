"""DVC stage ``report``: eval/ + models/ -> reports/ (index.html, README.md, figures)."""

from __future__ import annotations

import logging

from stages._cli import REPO_ROOT, infra, parser, run

logger = logging.getLogger("stages.report")


def main(args, config) -> None:
    from pipeline.report.data import ReportPaths  # here: `--help` loads no pandas or matplotlib
    from pipeline.report.render import build_report

    folders = [(REPO_ROOT / p).resolve() for p in (args.models, args.eval, args.raw, args.out)]
    summary = build_report(config, infra(args), ReportPaths(REPO_ROOT, *folders))
    logger.info("wrote %s: %s", args.out, summary)


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--models", default="models")
    cli.add_argument("--eval", default="eval")
    cli.add_argument("--raw", default="data/raw")
    cli.add_argument("--out", default="reports")
    run(main, cli)
