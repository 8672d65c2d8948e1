"""The report as data: a :class:`Report` of :class:`Section`\\ s, each a heading and its
blocks (paragraphs, tables, figures, lists, code). :mod:`pipeline.report.pages` builds it
once; :mod:`pipeline.report.writers` only formats it, as a web page and as Markdown.

A block meant for one format only says so (``only``: ``"html"`` or ``"markdown"``): the
web page's table of contents and resolved params, the Markdown's pointer to the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Format = Literal["html", "markdown"]


@dataclass(frozen=True)
class Heading:
    """A heading (``level`` 2: a section, with its ``anchor`` for the table of contents;
    3: a sub-heading). ``verdict``: a verdict word after the text, coloured by it."""

    text: str
    level: int = 2
    anchor: str | None = None
    verdict: str | None = None


@dataclass(frozen=True)
class Paragraph:
    """A paragraph. ``style``: ``plain``, ``caption`` (under a table or figure; plain
    text in Markdown) or ``strong``. ``lead``: an emphasised word before the text
    ("Answer."). ``escaped``: the web page escapes the text (``False`` for a fixed note
    whose text is written as it stands)."""

    text: str
    style: Literal["plain", "caption", "strong"] = "plain"
    lead: str | None = None
    escaped: bool = True
    only: Format | None = None


@dataclass(frozen=True)
class Table:
    """A table of strings. ``row_classes``: a style class per row (web page);
    ``verdict_columns``: columns whose cells are verdict words, coloured by them (a
    table of findings); ``text``: left-aligned cells (running text); ``collapsed``: on
    the web page, the table is folded under this summary."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    row_classes: tuple[str, ...] | None = None
    verdict_columns: tuple[int, ...] = ()
    text: bool = False
    collapsed: str | None = None


@dataclass(frozen=True)
class Figure:
    """A figure written as ``<path>.svg`` (the web page) and ``<path>.png`` (Markdown)."""

    path: str
    alt: str


@dataclass(frozen=True)
class Bullets:
    """A list of sentences (``style``: the web page's class for it)."""

    items: tuple[str, ...]
    style: str = ""


@dataclass(frozen=True)
class Code:
    """Preformatted text (``language``: Markdown's fence); ``collapsed``: on the web page,
    folded under this summary."""

    text: str
    language: str = ""
    collapsed: str | None = None
    only: Format | None = None


@dataclass(frozen=True)
class Contents:
    """Where the web page lists its sections (:meth:`Report.contents`)."""

    only: Format | None = "html"


Block = Heading | Paragraph | Table | Figure | Bullets | Code | Contents


@dataclass(frozen=True)
class Section:
    """A heading (none for the opening and for blocks that continue a section) and its
    blocks."""

    heading: Heading | None
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Report:
    """The whole report: its title and sections, in order."""

    title: str
    sections: tuple[Section, ...]

    def contents(self) -> tuple[tuple[str, str], ...]:
        """``(anchor, title)`` of each section with an anchor, in order."""
        return tuple(
            (s.heading.anchor, s.heading.text)
            for s in self.sections
            if s.heading is not None and s.heading.anchor
        )
