"""Shared command-line plumbing of the stages: arguments, logging, one-line errors."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from pipeline.config import load_config
from pipeline.config.infra import Infra, load_infra
from pipeline.config.params import Config, ConfigError
from pipeline.errors import StageError
from pipeline.scorers.plugins import load_plugins

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


PROJECT_DIRS = (REPO_ROOT / "pipeline", REPO_ROOT / "stages")


def user_error(err: BaseException) -> bool:
    """A project error type, or a ValueError/OSError raised by the project's own code
    (the innermost frame is in pipeline/ or stages/; a file the user named), as opposed
    to one from deep inside a library, which is shown with its traceback."""
    if deliberate(err):
        return True
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    origin = Path(tb.tb_frame.f_code.co_filename).resolve()
    return any(origin.is_relative_to(folder) for folder in PROJECT_DIRS)


def deliberate(err: BaseException) -> bool:
    """An error raised on purpose to tell the user what to fix: a project error type, or
    an OSError that names its file. Its message is the whole story."""
    if isinstance(err, ConfigError | StageError) or type(err).__module__.startswith("pipeline"):
        return True
    return isinstance(err, OSError) and bool(err.filename)


def traceback_note(err: BaseException, stage: str) -> str:
    """For a one-line error that might still be a bug (a ValueError or OSError raised by
    the project's code, an MLflow error), its traceback goes to a file and the line names
    it: `` (traceback: /tmp/attention-study-train-....log)``. Empty for a deliberate error."""
    if deliberate(err):
        return ""
    try:
        with tempfile.NamedTemporaryFile(
            "w", prefix=f"attention-study-{stage}-", suffix=".log", delete=False
        ) as handle:
            handle.write("".join(traceback.format_exception(err)))
    except OSError:
        return " (run with --verbose for the traceback)"
    return f" (traceback: {handle.name})"


def run(
    main: Callable[[argparse.Namespace, Config], int | None],
    cli: argparse.ArgumentParser,
    private_network: bool = False,
) -> None:
    """Parse args, load params, call ``main``; errors the user can fix become one line.

    Errors the user can fix (bad params, corpora, URLs, checkpoints, a cluster that
    cannot run the work) are ``ConfigError``/``StageError``, or a ``ValueError`` or
    ``OSError`` raised by the project's own code: they print as ``error: <message>``
    (``--verbose`` adds the traceback; one that may still be a bug also writes it to a
    file the line names) and exit 1. Anything else is a bug until shown otherwise: it
    prints its traceback.

    ``private_network``: a stage that starts a private Ray re-runs itself, first of all,
    in a loopback-only network namespace where the study is local
    (:func:`pipeline.runtime.netns.isolate`).
    """
    args = cli.parse_args()
    stage = Path(sys.argv[0]).stem
    setup_logging(args.verbose)
    try:
        if private_network:
            from pipeline.runtime.netns import isolate

            isolate(infra(args))  # may re-exec this stage: before anything else runs
        config = load_config(args.params)
        load_plugins(list(config.plugin_sources))  # the stage trains/decodes/reports with them
        code = main(args, config)
    except (ConfigError, StageError, ValueError, OSError) as err:
        if not user_error(err):
            raise
        if args.verbose:
            logger.exception("failed")
        print(f"error: {err}{traceback_note(err, stage)}", file=sys.stderr)
        sys.exit(1)
    except Exception as err:
        if not type(err).__module__.startswith("mlflow"):
            raise
        if args.verbose:
            logger.exception("failed")
        message = (str(getattr(err, "message", err)).splitlines() or [type(err).__name__])[0]
        note = traceback_note(err, stage)
        print(f"error: MLflow tracking store: {message}{note}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)
