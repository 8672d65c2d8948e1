"""Shared test helpers for the data stages (no fakes: real files, real HTTP server)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent

_WORDS = (
    "the a of and to in he she it was his her they them said lord god king people land "
    "house son day city went came made gave saw took heard spoke water bread hand"
).split()


def synthetic_pairs(count: int, seed: int = 0, max_words: int = 70) -> list[tuple[str, str]]:
    """Parallel-looking pairs with a wide spread of lengths (target = reversed words)."""
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        length = 1 + int(rng.random() ** 2 * max_words)
        words = [rng.choice(_WORDS) for _ in range(length)] + [f"w{index}"]
        pairs.append((" ".join(words), " ".join(reversed(words)).upper()))
    return pairs


def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


def write_params(path: Path, sections: dict) -> Path:
    path.write_text(yaml.safe_dump(sections, sort_keys=False), encoding="utf-8")
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output clean
        pass


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (random port); stops on exit."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
