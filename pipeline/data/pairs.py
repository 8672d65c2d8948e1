"""The split files between the fetch stage and its readers (tokenize, evaluate, report).

``data/raw/{train,dev,test}.tsv``: UTF-8, one pair per line, ``source<TAB>target``, no
header and no quoting (cleaning guarantees neither side holds a tab or newline).
"""

from __future__ import annotations

from pathlib import Path


def read_tsv_pairs(path: str | Path) -> list[tuple[str, str]]:
    """The ``(source, target)`` pairs of a split file."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t", 1)) for line in lines]  # type: ignore[misc]


def tsv_text(pairs: list[tuple[str, str]]) -> str:
    """``pairs`` as the text of a split file."""
    return "".join(f"{s}\t{t}\n" for s, t in pairs)
