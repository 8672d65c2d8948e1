"""DVC stage ``inputs``: a record of the files the corpus is read from -> data/inputs.json.

Always run (``always_changed``), in well under a second: when a local corpus named in
params changes, its record changes and DVC reruns fetch (pipeline/data/inputs.py).
"""

from __future__ import annotations

import logging

from pipeline.data.inputs import write_inputs
from stages._cli import parser, run

logger = logging.getLogger("stages.inputs")


def main(args, config) -> None:
    record = write_inputs(config.fetch, args.out)
    logger.info("wrote %s: %s", args.out, ", ".join(record.get("files", {})) or record["source"])


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--out", default="data/inputs.json", help="output (default: data/inputs.json)")
    run(main, cli)
