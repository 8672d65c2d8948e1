"""The report's two writers: a :class:`~pipeline.report.blocks.Report` as a web page
(``index.html``: one file, its figures as relative ``.svg`` links) and as Markdown
(``README.md``: ``.png`` figures, for a code host). They format; what the report says is
decided once, in :mod:`pipeline.report.pages`."""

from __future__ import annotations

import html

from pipeline.report.blocks import (
    Block,
    Bullets,
    Code,
    Contents,
    Figure,
    Format,
    Heading,
    Paragraph,
    Report,
    Table,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2rem auto;padding:0 1rem;color:#1d2733;line-height:1.45}
h1{font-size:1.6rem}h2{border-bottom:1px solid #d8dee4;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.82rem;margin:.6rem 0}
th,td{border:1px solid #d8dee4;padding:.25rem .5rem;text-align:right}
th{background:#f3f5f7}td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eef0f2}
.v-agrees{color:#137333;font-weight:600}.v-disagrees{color:#b3261e;font-weight:600}
.v-smaller{color:#a15c00;font-weight:600}.v-equivalent{color:#1f4e79;font-weight:600}
.v-direction{color:#5b6f1e;font-weight:600}
.v-none,.v-other{color:#6b7280;font-weight:600}.failed{background:#fdecea}
.answers{font-size:1.05rem}.answers li{margin:.25rem 0}
details{margin:.5rem 0}pre{background:#f6f8fa;padding:.6rem;overflow:auto;font-size:.78rem}
.caption{color:#4b5563;font-size:.85rem}
.findings td{text-align:left;vertical-align:top}
.toc{font-size:.85rem;margin:.4rem 0 1rem}.toc a{color:#1f4e79}
"""
VERDICT_CLASSES = {
    "agrees with the literature": "v-agrees",
    "claimed direction, at least the effect of interest": "v-agrees",
    "claimed direction, not shown to reach it": "v-direction",
    "claimed direction, size not compared": "v-direction",
    "smaller than claimed": "v-smaller",
    "opposite direction": "v-disagrees",
    "equivalent": "v-equivalent",
    "not equivalent": "v-disagrees",
    "inconclusive": "v-none",
    "not testable": "v-none",
    "pass": "v-agrees",  # a gate's result
    "fail": "v-disagrees",
    "not measured": "v-none",
    # the words of findings.json files written before the labels
    "agrees": "v-agrees",
    "disagrees": "v-disagrees",
}
"""The web page's colour of each verdict (:data:`CSS`): green (shown, at least the size),
olive (the direction shown, not the size), amber (smaller), red (the opposite), blue
(equivalent), and grey for no answer."""


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict or of a label that begins with one ("not testable (the
    baseline is at the floor)"); ``v-other`` for a word the report does not know."""
    text = str(verdict).strip()
    if text in VERDICT_CLASSES:
        return VERDICT_CLASSES[text]
    known = [word for word in VERDICT_CLASSES if text.startswith(f"{word} (")]
    known += [word for word in VERDICT_CLASSES if text.startswith(f"{word} within ")]
    return VERDICT_CLASSES[max(known, key=len)] if known else "v-other"


def _shown(block: Block, fmt: Format) -> bool:
    only = getattr(block, "only", None)
    return only is None or only == fmt


def _blocks(report: Report, fmt: Format) -> list[Block]:
    """Every heading and block of the report that ``fmt`` shows, in order."""
    out: list[Block] = []
    for section in report.sections:
        out += [section.heading] if section.heading is not None else []
        out += [b for b in section.blocks if _shown(b, fmt)]
    return out


# ------------------------------------------------------------------------------ HTML
def _e(value: object) -> str:
    return html.escape(str(value))


def to_html(report: Report) -> str:
    """The report as one web page."""
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(report.title)}</h1>",
        *(_html_block(block, report) for block in _blocks(report, "html")),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _html_block(block: Block, report: Report) -> str:
    if isinstance(block, Heading):
        anchor = f" id='{block.anchor}'" if block.anchor else ""
        text = _e(block.text)
        if block.verdict is not None:
            text += f": <span class='{verdict_class(block.verdict)}'>{_e(block.verdict)}</span>"
        return f"<h{block.level}{anchor}>{text}</h{block.level}>"
    if isinstance(block, Paragraph):
        return _html_paragraph(block)
    if isinstance(block, Table):
        return _html_table(block)
    if isinstance(block, Figure):
        return f"<img src='{block.path}.svg' alt='{block.alt}'>"
    if isinstance(block, Bullets):
        items = "".join(f"<li>{_e(item)}</li>" for item in block.items)
        return f"<ul class='{block.style}'>{items}</ul>"
    if isinstance(block, Code):
        pre = f"<pre>{_e(block.text)}</pre>"
        if not block.collapsed:
            return pre
        return f"<details><summary>{_e(block.collapsed)}</summary>{pre}</details>"
    if isinstance(block, Contents):
        links = " · ".join(f"<a href='#{a}'>{_e(t)}</a>" for a, t in report.contents())
        return f"<nav class='toc'>{links}</nav>"
    raise TypeError(f"not a report block: {block!r}")


def _html_paragraph(block: Paragraph) -> str:
    text = _e(block.text) if block.escaped else block.text
    if block.lead:
        text = f"<em>{_e(block.lead)}</em> {text}"
    if block.style == "strong":
        return f"<p><strong>{text}</strong></p>"
    css = " class='caption'" if block.style == "caption" else ""
    return f"<p{css}>{text}</p>"


def _html_table(block: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in block.headers)
    body = []
    for index, row in enumerate(block.rows):
        css = block.row_classes[index] if block.row_classes else ""
        cells = "".join(_html_cell(block, column, cell) for column, cell in enumerate(row))
        row_class = f' class="{css}"' if css else ""
        body.append(f"<tr{row_class}>{cells}</tr>")
    kind = " class='findings'" if block.verdict_columns else ""
    table = f"<table{kind}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    if block.collapsed:
        return f"<details><summary>{_e(block.collapsed)}</summary>\n{table}\n</details>"
    return table


def _html_cell(block: Table, column: int, cell: str) -> str:
    if column in block.verdict_columns:
        return f"<td class='{verdict_class(cell)}'>{_e(cell)}</td>"
    if block.text:
        return f"<td style='text-align:left'>{_e(cell)}</td>"
    return f"<td>{_e(cell)}</td>"


# -------------------------------------------------------------------------- Markdown
def to_markdown(report: Report) -> str:
    """The report as Markdown: every block followed by a blank line."""
    lines = [f"# {report.title}", ""]
    for block in _blocks(report, "markdown"):
        lines += [*_markdown_block(block), ""]
    return "\n".join(lines)


def _markdown_block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        verdict = f": {block.verdict}" if block.verdict is not None else ""
        return [f"{'#' * block.level} {block.text}{verdict}"]
    if isinstance(block, Paragraph):
        text = f"*{block.lead}* {block.text}" if block.lead else block.text
        return [f"**{text}**" if block.style == "strong" else text]
    if isinstance(block, Table):
        return [markdown_table(block.headers, block.rows)]
    if isinstance(block, Figure):
        return [f"![{block.alt}]({block.path}.png)"]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Code):
        return [f"```{block.language}", block.text, "```"]
    raise TypeError(f"not a Markdown block: {block!r}")


def markdown_table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)
