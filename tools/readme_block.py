"""The README's results, generated from the committed study outputs so they cannot go
stale: ``metrics/test.json`` (the best scorer's test BLEU), ``reports/ranking.csv`` and
``reports/findings.json`` (the best scorer, chosen on dev, and the verdicts). The block
sits between two markers in README.md.

    python -m tools.readme_block            # rewrite the block in README.md
    python -m tools.readme_block --check    # exit 1 if it differs (CI's test)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from pipeline.io import write_text
from pipeline.report.findings import bleu_ci, ci
from pipeline.study.record import StudyRecord

START, END = "<!-- results:start -->", "<!-- results:end -->"


def render(root: Path) -> str:
    metrics = json.loads((root / "metrics" / "test.json").read_text())
    study = StudyRecord.load(root / "reports" / "findings.json")
    ranking = pd.read_csv(root / "reports" / "ranking.csv")
    main = study.main_decoding
    lines = [
        f"**Best scorer: {study.reference}** (chosen on dev; test BLEU "
        f"{metrics['best_bleu_inside']:.2f} inside the training lengths, "
        f"{metrics['best_bleu_all']:.2f} on all lengths, mean over seeds).",
        "",
        "| rank | scorer | seeds | test BLEU inside the training lengths [95% CI] |",
        "|---|---|---|---|",
    ]
    for r in ranking.itertuples():
        lines.append(
            f"| {r.rank} | {r.scorer} | {r.seeds} | "
            f"{bleu_ci(r.bleu_inside, r.low_inside, r.high_inside)} |"
        )
    lines += [
        "",
        f"| finding | verdict ({main}) | greedy | effect, BLEU [95% CI] | MDE (Holm level) |",
        "|---|---|---|---|---|",
    ]
    greedy = study.verdicts("greedy")
    for f in study.main:
        e = f.main.estimate if f.main is not None else None
        effect = ci(e.estimate, e.low, e.high) if e is not None else "-"
        mde = f"{e.mde:.2f}" if e is not None else "-"
        lines.append(f"| {f.title} | {f.verdict} | {greedy.get(f.title, '-')} | {effect} | {mde} |")
    return "\n".join(lines)


def replace_block(text: str, block: str, start: str = START, end: str = END) -> str:
    """``text`` with what lies between the ``start`` and ``end`` markers replaced."""
    if start not in text or end not in text:
        raise ValueError(f"README.md: no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def sync_block(readme: Path, block: str, start: str, end: str, check: bool, how: str) -> int:
    """Write ``block`` between the markers of ``readme``; with ``check``, only compare and
    return 1 (naming ``how`` to regenerate it) if the README differs."""
    text = readme.read_text(encoding="utf-8")
    updated = replace_block(text, block, start, end)
    if not check:
        write_text(readme, updated)
        return 0
    if updated != text:
        print(f"{readme}: the block between {start} and {end} is stale; run {how}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    return sync_block(
        args.root / "README.md",
        render(args.root),
        START,
        END,
        args.check,
        "python -m tools.readme_block",
    )


if __name__ == "__main__":
    sys.exit(main())
