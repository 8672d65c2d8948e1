"""How flat each configuration's dev BLEU was when it stopped, and the study's updates.

Reads a study's ``metrics/learning_curves.csv`` (the trainer's own dev BLEU at every
evaluation, one row per variant and evaluation) and prints, per configuration (a
variant without its seed), the seed median of the straight-line slope of dev BLEU over
each seed's last ``--window`` updates (BLEU per 1,000 updates: the fit the convergence
rule, :class:`pipeline.train.stopping.SlopeRule`, makes), each seed's slope and last
step, and the study's total updates (the sum of every variant's last step).

    python -m tools.convergence                       # metrics/learning_curves.csv
    python -m tools.convergence other/learning_curves.csv --window 800

Not part of the pipeline: a check of a finished study (docs/budget.md, "The default
study's steps and time").
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from pipeline.train.stopping import SlopeRule

SEED = re.compile(r"-s\d+(?=-|$)")


def configuration(variant: str) -> str:
    """``additive-fwd-h256-s2`` -> ``additive-fwd-h256``: the variant without its seed."""
    return SEED.sub("", variant, count=1)


def slopes(curves: pd.DataFrame, window: int = 2000) -> pd.DataFrame:
    """One row per variant: its configuration, last step and final slope (None where its
    evaluations do not span ``window`` updates)."""
    rule = SlopeRule(max_slope=None, window=window)
    rows = []
    for variant, group in curves.sort_values("step").groupby("variant", sort=True):
        steps, bleu = group.step.astype(int).tolist(), group.dev_bleu.astype(float).tolist()
        slope = rule.slope(steps, bleu)
        rows.append((configuration(variant), variant, steps[-1], slope))
    return pd.DataFrame(rows, columns=["configuration", "variant", "last_step", "slope"])


def by_configuration(per_variant: pd.DataFrame) -> pd.DataFrame:
    """Seeds, the seed median of the slopes and the updates of each configuration."""
    return per_variant.groupby("configuration").agg(
        seeds=("variant", "size"),
        median_slope=("slope", "median"),
        max_slope=("slope", "max"),
        updates=("last_step", "sum"),
    )


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("curves", type=Path, nargs="?", default=Path("metrics/learning_curves.csv"))
    cli.add_argument("--window", type=int, default=2000, help="updates (default 2000)")
    args = cli.parse_args(argv)
    if not args.curves.is_file():
        raise SystemExit(f"error: {args.curves}: no such file (run dvc repro evaluate first)")
    per_variant = slopes(pd.read_csv(args.curves), args.window)
    table = by_configuration(per_variant)
    print(per_variant.to_string(index=False, float_format=lambda x: f"{x:+.2f}"))
    print()
    print(table.to_string(float_format=lambda x: f"{x:+.2f}"))
    print(f"\n{len(per_variant)} variants, {int(per_variant.last_step.sum()):,} updates in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
