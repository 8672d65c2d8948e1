"""The split files between the fetch stage and its readers (tokenize, evaluate, report).

``data/raw/{train,dev,test}.tsv``: UTF-8, one pair per line, ``source<TAB>target``, no
header and no quoting (cleaning guarantees neither side holds a tab or newline).
"""

from __future__ import annotations

from pathlib import Path


def read_tsv_pairs(path: str | Path) -> list[tuple[str, str]]:
    """The ``(source, target)`` pairs of a split file."""
    return parse_tsv_pairs(Path(path).read_text(encoding="utf-8"))


def parse_tsv_pairs(text: str) -> list[tuple[str, str]]:
    """The ``(source, target)`` pairs of a split file's text."""
    return [tuple(line.split("\t", 1)) for line in text.splitlines()]  # type: ignore[misc]


def tsv_text(pairs: list[tuple[str, str]]) -> str:
    """``pairs`` as the text of a split file."""
    return "".join(f"{s}\t{t}\n" for s, t in pairs)
