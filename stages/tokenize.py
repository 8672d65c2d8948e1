"""DVC stage ``tokenize``: data/raw -> subword models + encoded ids in data/tok."""

from __future__ import annotations

import logging

from pipeline.data.tokenize import tokenize
from stages._cli import parser, run

logger = logging.getLogger("stages.tokenize")


def main(args, config) -> None:
    stats = tokenize(config.tokenize, args.raw, args.out)
    logger.info("wrote %s: vocab %s", args.out, stats["vocab_size"])


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--raw", default="data/raw", help="fetch output (default: data/raw)")
    cli.add_argument("--out", default="data/tok", help="output folder (default: data/tok)")
    run(main, cli)
