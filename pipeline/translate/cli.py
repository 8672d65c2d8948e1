"""``python -m pipeline.translate``: translate text with a trained variant.

    python -m pipeline.translate additive-fwd-h256-s1 < sentences.txt > translations.txt
    echo "In the beginning God created the heavens and the earth." | \\
        python -m pipeline.translate models/additive-fwd-h256-s1 --greedy
    python -m pipeline.translate additive-fwd-h256-s1 -i dev.en --json --attention > out.jsonl
    python -m pipeline.translate additive-fwd-h256-s1 --export exported/additive

MODEL is a variant's folder, its ``checkpoint.pt``, or a variant id under ``--models``
(default ``models``). Text comes from ``--input`` or standard input, one sentence per
line; translations go to ``--output`` or standard output, one per line, in order. Typed
at a terminal, each line is translated as soon as it is entered. Lines longer than the
variant's training sentences are translated too, and counted in one warning at the end.
Errors are one line (``error: ...``) and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from typing import TextIO

from tqdm import tqdm

from pipeline.io import atomic_path
from pipeline.translate import (
    DEFAULT_BEAM_SIZE,
    TranslateError,
    Translator,
    export,
    resolve_model,
)

logger = logging.getLogger("pipeline.translate")

CHUNK_LINES = 256
"""Lines read and translated together from a file or pipe (length-sorted into batches
inside); at a terminal each line goes alone."""


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="python -m pipeline.translate",
        description="Translate text with a trained variant (beam or greedy search).",
    )
    cli.add_argument("model", help="variant folder, its checkpoint.pt, or a variant id")
    cli.add_argument("--models", default="models", help="where variant ids are looked up")
    cli.add_argument(
        "--tok",
        default=None,
        help="subword models' folder (e.g. data/tok) for a folder that lacks src.model/tgt.model",
    )
    cli.add_argument("-i", "--input", default=None, help="input file (default: stdin)")
    cli.add_argument("-o", "--output", default=None, help="output file (default: stdout)")
    search = cli.add_mutually_exclusive_group()
    search.add_argument(
        "--beam",
        type=int,
        default=DEFAULT_BEAM_SIZE,
        help=f"beam size (default {DEFAULT_BEAM_SIZE}, as evaluated)",
    )
    search.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    cli.add_argument("--length-penalty", type=float, default=1.0, help="beam length penalty")
    cli.add_argument("--json", action="store_true", help="JSON lines: source and translation")
    cli.add_argument(
        "--attention", action="store_true", help="with --json: subword pieces and attention weights"
    )
    cli.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1)")
    cli.add_argument(
        "--export",
        metavar="DIR",
        default=None,
        help="write a self-contained copy of the variant to DIR and exit",
    )
    cli.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return cli


def _chunks(stream: TextIO, interactive: bool, where: str) -> Iterator[list[str]]:
    size = 1 if interactive else CHUNK_LINES
    chunk: list[str] = []
    try:
        for line in stream:
            chunk.append(line.rstrip("\r\n"))
            if len(chunk) >= size:
                yield chunk
                chunk = []
    except UnicodeDecodeError as err:
        raise TranslateError(f"{where}: not UTF-8 text ({err.reason})") from None
    if chunk:
        yield chunk


def _count_lines(path: str | None) -> int | None:
    if path is None:
        return None
    with open(path, "rb") as handle:  # bytes: a decoding error is reported when read
        return sum(1 for _ in handle)


def run(args: argparse.Namespace) -> None:
    folder = resolve_model(args.model, args.models)
    if args.export:
        out = export(folder, args.export, args.tok)
        print(f"exported {folder} to {out}", file=sys.stderr)
        return
    if args.attention and not args.json:
        raise TranslateError("--attention: add --json (attention is written as JSON lines)")
    translator = Translator.load(folder, args.tok, device=args.device)
    if args.attention and not translator.has_attention:
        logger.warning(
            "%s has no attention (scorer none): no weights are written", translator.variant_id
        )
    beam = 1 if args.greedy else args.beam
    with ExitStack() as stack:
        source, where = sys.stdin, "standard input"
        if args.input is not None:
            source, where = stack.enter_context(open(args.input, encoding="utf-8")), args.input
        else:
            sys.stdin.reconfigure(encoding="utf-8", errors="strict")
        interactive = args.input is None and sys.stdin.isatty()
        if args.output is not None:  # written whole or not at all
            tmp = stack.enter_context(atomic_path(args.output))
            sink = stack.enter_context(open(tmp, "w", encoding="utf-8"))
        else:
            sink = sys.stdout
        bar = tqdm(
            total=_count_lines(args.input),
            unit="sent",
            desc="translate",
            disable=interactive or None,
            file=sys.stderr,
        )
        lines = longer = 0
        for chunk in _chunks(source, interactive, where):
            lines, longer = lines + len(chunk), longer + translator.beyond_cut(chunk)
            found = translator.translate(
                chunk,
                beam_size=beam,
                length_penalty=args.length_penalty,
                attention=args.attention,
            )
            for item in found:
                if args.json:
                    sink.write(json.dumps(item.as_json(), ensure_ascii=False) + "\n")
                else:
                    sink.write(item.translation.replace("\n", " ") + "\n")
            sink.flush()
            bar.update(len(chunk))
        bar.close()
    if longer:
        logger.warning(
            "%d of %d input lines have more than %d words, the most %s was trained on "
            "(fetch.split.max_train_words): their translations are extrapolation",
            longer,
            lines,
            translator.train_cut,
            translator.variant_id,
        )


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,  # stdout: translations
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        run(args)
    except BrokenPipeError:  # e.g. `| head`: the reader has what it wanted
        sys.exit(0)
    except (TranslateError, OSError) as err:
        if args.verbose:
            logger.exception("failed")
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
