"""The split files between the fetch stage and its readers (tokenize, evaluate, report).

``data/raw/{train,dev,test}.tsv``: UTF-8, one pair per line, ``source<TAB>target``, no
header and no quoting (cleaning guarantees neither side holds a tab or newline).

``data/raw/{dev,test}.groups``: UTF-8, one group id per line, line *i* that of pair *i*
of the ``.tsv`` beside it: ``book:chapter`` where the split took whole chapters (the
Bible), else the index of the pair's source sentence among the corpus's distinct source
sentences. Pairs of one group are correlated; a bootstrap resamples groups, not pairs.
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


def read_groups(path: str | Path) -> list[str]:
    """The group id of each pair of a split file, from its ``.groups`` file (``path``)."""
    return Path(path).read_text(encoding="utf-8").splitlines()


def groups_text(groups: list[str]) -> str:
    """``groups`` as the text of a ``.groups`` file."""
    return "".join(f"{g}\n" for g in groups)
