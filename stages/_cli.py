"""Shared command-line plumbing of the stages: arguments, logging, one-line errors."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.config import Config, ConfigError, load_config
from pipeline.errors import StageError
from pipeline.infra import Infra, load_infra

logger = logging.getLogger("stages")

REPO_ROOT = Path(__file__).resolve().parent.parent


def parser(description: str) -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(description=description)
    cli.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    cli.add_argument(
        "--infra",
        default=None,
        help="infrastructure settings: Ray, MLflow (default: $STUDY_INFRA, else infra.yaml "
        "beside the params file; docs/infra.md)",
    )
    cli.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return cli


def infra(args: argparse.Namespace) -> Infra:
    """The stage's infrastructure settings (Ray, MLflow, caches), with env overrides."""
    return load_infra(args.params, args.infra)


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def run(
    main: Callable[[argparse.Namespace, Config], int | None], cli: argparse.ArgumentParser
) -> None:
    """Parse args, load params, call ``main``; expected errors become one line + exit 1.

    Errors the user can fix (bad params, corpora, URLs, checkpoints, a cluster that
    cannot run the work) are ``ValueError`` or ``StageError`` subclasses or ``OSError``;
    they print as ``error: <message>`` without a traceback.
    """
    args = cli.parse_args()
    setup_logging(args.verbose)
    try:
        config = load_config(args.params)
        code = main(args, config)
    except (ConfigError, StageError, ValueError, OSError) as err:
        if args.verbose:
            logger.exception("failed")
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except Exception as err:
        if not type(err).__module__.startswith("mlflow"):
            raise
        if args.verbose:
            logger.exception("failed")
        message = str(getattr(err, "message", err)).splitlines()[0]
        print(f"error: MLflow tracking store: {message}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)
