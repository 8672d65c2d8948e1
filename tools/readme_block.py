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
from pipeline.report.findings import (
    MDE_HEADER,
    bleu_ci,
    ci,
    gate_rows,
    gates_of,
    lock_note,
)
from pipeline.study.record import StudyRecord

START, END = "<!-- results:start -->", "<!-- results:end -->"
UNGATED = (
    "These verdicts were judged without the baseline's gates and the design lock "
    "(`reports/findings.json` records neither): read them with docs/budget.md, "
    '"Evaluation and findings"; `dvc repro` judges the study under both.'
)


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
        "| rank | scorer | seeds | test BLEU inside the training lengths [95% CI, unadjusted] |",
        "|---|---|---|---|",
    ]
    for r in ranking.itertuples():
        lines.append(
            f"| {r.rank} | {r.scorer} | {r.seeds} | "
            f"{bleu_ci(r.bleu_inside, r.low_inside, r.high_inside)} |"
        )
    family, gated = study.family, bool(study.gates)
    lines += [
        "",
        f"| finding | verdict ({main}) | greedy | estimate [{family.describe()}] | scale "
        f"| {MDE_HEADER} |" + (" gates |" if gated else ""),
        "|---|---|---|---|---|---|" + ("---|" if gated else ""),
    ]
    greedy = study.verdicts("greedy")
    for f in study.main:
        e = f.main.estimate if f.main is not None else None
        effect = ci(e.estimate, e.low, e.high) if e is not None else "-"
        if e is not None and abs(e.level - family.interval_level) > 1e-9:
            effect += f" (at {e.level:.1%})"
        mde = f"{e.mde:.2f}" if e is not None else "-"
        cells = [f.title, f.shown, greedy.get(f.title, "-"), effect, f.unit, mde]
        lines.append("| " + " | ".join(cells + ([gates_of(f)] if gated else [])) + " |")
    gates = gate_rows(study)
    if gates:
        lines += [
            "",
            "| baseline gate | declared threshold | measured [95% CI] | result | needed by |",
            "|---|---|---|---|---|",
            *(f"| {r[0]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} |" for r in gates),
        ]
    if study.design_lock is not None:
        lines += ["", lock_note(study)]
    if not gated and study.design_lock is None:
        lines += ["", UNGATED]
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
