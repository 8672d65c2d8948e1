"""DVC stage ``fetch``: corpus source -> data/raw/{train,dev,test}.tsv + corpus.json,
and the dev and test pairs' group ids (chapters) in data/raw/{dev,test}.groups."""

from __future__ import annotations

import logging

from pipeline.data.fetch import fetch
from stages._cli import parser, run

logger = logging.getLogger("stages.fetch")


def main(args, config) -> None:
    summary = fetch(config.fetch, args.out, args.inputs)
    splits = ", ".join(f"{k} {v['pairs']}" for k, v in summary["splits"].items())
    logger.info("wrote %s: %d clean pairs (%s)", args.out, summary["counts"]["clean"], splits)


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--out", default="data/raw", help="output folder (default: data/raw)")
    cli.add_argument(
        "--inputs", default=None, help="the inputs stage's record to check the corpus against"
    )
    run(main, cli)
