"""The report is built once as data and written twice: both formats show the same sections
in the same order, the web page's contents list exactly the sections it shows, and the
writers only format (each block kind, in each format)."""

from __future__ import annotations

import re

from pipeline.report.blocks import (
    Bullets,
    Code,
    Contents,
    Figure,
    Heading,
    Paragraph,
    Report,
    Section,
    Table,
)
from pipeline.report.pages import Figures, report_model
from pipeline.report.writers import to_html, to_markdown
from tests.unit.test_report_pages import context

TINY = Report(
    "A <study>",
    (
        Section(
            None,
            (
                Bullets(("one", "two"), style="answers"),
                Contents(),
                Paragraph("Only here.", only="markdown"),
            ),
        ),
        Section(
            Heading("Verdicts", anchor="verdicts"),
            (
                Heading("Attention", level=3, verdict="agrees"),
                Paragraph("it helps", lead="Answer."),
                Table(("finding", "verdict"), (("Attention", "agrees"),), verdict_columns=(1,)),
                Paragraph("a | b < c", style="caption"),
            ),
        ),
        Section(
            Heading("Numbers", anchor="numbers"),
            (
                Figure("figures/x", "an x"),
                Table(("a",), (("1",), ("2",)), row_classes=("", "failed"), collapsed="More"),
                Paragraph("Loud.", style="strong"),
                Code('{"a": 1}', language="json"),
                Code("{}", collapsed="params", only="html"),
            ),
        ),
    ),
)


def test_the_web_page_formats_each_block():
    page = to_html(TINY)
    assert "<title>A &lt;study&gt;</title>" in page and "<h1>A &lt;study&gt;</h1>" in page
    assert "<ul class='answers'><li>one</li><li>two</li></ul>" in page
    contents = "<a href='#verdicts'>Verdicts</a> · <a href='#numbers'>Numbers</a>"
    assert f"<nav class='toc'>{contents}</nav>" in page
    assert "Only here." not in page
    assert "<h3>Attention: <span class='v-agrees'>agrees</span></h3>" in page
    assert "<p><em>Answer.</em> it helps</p>" in page
    assert "<table class='findings'>" in page and "<td class='v-agrees'>agrees</td>" in page
    assert "<p class='caption'>a | b &lt; c</p>" in page
    assert "<img src='figures/x.svg' alt='an x'>" in page
    assert "<details><summary>More</summary>\n<table>" in page and '<tr class="failed">' in page
    assert "<p><strong>Loud.</strong></p>" in page
    assert "<pre>{&quot;a&quot;: 1}</pre>" in page
    assert "<details><summary>params</summary><pre>{}</pre></details>" in page
    assert page.endswith("</body></html>")


def test_the_markdown_formats_each_block_with_a_blank_line_after_it():
    text = to_markdown(TINY)
    assert text.startswith("# A <study>\n\n- one\n- two\n\nOnly here.\n\n## Verdicts\n\n")
    assert "### Attention: agrees\n\n*Answer.* it helps\n\n" in text
    assert "| finding | verdict |\n|---|---|\n| Attention | agrees |\n\na | b < c\n" in text
    assert "![an x](figures/x.png)\n\n| a |\n|---|\n| 1 |\n| 2 |\n\n**Loud.**\n" in text
    assert text.endswith('```json\n{"a": 1}\n```\n')
    assert "params" not in text and "toc" not in text


def test_both_formats_show_the_same_sections_and_the_contents_list_them():
    figures = Figures(differences="f/d", learning_curves="f/lc", heatmaps="f/h")
    report = report_model(context(figures=figures, heatmap_title="Test sentence 3"))
    page, text = to_html(report), to_markdown(report)
    shown = re.findall(r"<h2 id='([a-z]+)'>(.*?)</h2>", page)
    assert shown == list(report.contents())
    assert re.findall(r"^## (.*)$", text, flags=re.M) == [title for _, title in shown]
    listed = re.search(r"<nav class='toc'>(.*?)</nav>", page).group(1)
    assert re.findall(r"href='#([a-z]+)'", listed) == [anchor for anchor, _ in shown]
    assert [a for a, _ in shown] == [
        *("verdicts", "ranking", "differences", "findings", "exploratory", "curves"),
        *("heatmaps", "variants", "provenance"),
    ]
