"""Replay the plateau rule on measured learning curves: where would each variant stop, and
what step cap does that call for (docs/budget.md, "Calibration")?

Reads stacked histories (``eval/learning_curves.csv`` of a study, or the
``history.csv`` files under a ``tools.learning_curves`` output folder), feeds each
variant's dev evaluations in order through the trainer's own rule (torch's
``ReduceLROnPlateau`` and :class:`pipeline.train.stopping.Plateau`, with ``params.yaml``'s
``train`` settings or ``--set`` overrides), and prints the step at which the rule stops
it, the median over variants and the cap of ``--cap-factor`` x that median.

    python -m tools.plateau_calibration eval/learning_curves.csv
    python -m tools.plateau_calibration /tmp/curves --set patience=6

A curve recorded under the same settings replays exactly (the study's own curves: the
replayed stop is the step the trainer stopped at). A curve recorded under other settings
(another learning-rate schedule) replays approximately: its losses came from that
schedule. Not part of the tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipeline.config import load_config
from pipeline.config.params import TrainConfig
from pipeline.train.stopping import Plateau, make_scheduler, progress_signal


def load_curves(source: Path) -> pd.DataFrame:
    if source.is_dir():
        frames = [
            pd.read_csv(path).assign(variant=path.parent.name)
            for path in sorted(source.glob("*/history.csv"))
        ]
        return pd.concat(frames, ignore_index=True)
    return pd.read_csv(source)


def replay(curve: pd.DataFrame, cfg: TrainConfig) -> int | None:
    """The step at which ``cfg``'s plateau rule stops a run with these evaluations, or
    None if it would still be training after the last one."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=cfg.learning_rate)
    scheduler = make_scheduler(optimizer, cfg)
    bleu = cfg.early_stopping_metric == "bleu"
    signal = progress_signal(cfg)
    plateau = Plateau(cfg.patience, signal.threshold, mode="max")
    for row in curve.sort_values("step").itertuples():
        value, _ = signal.update(row.dev_bleu if bleu else -row.dev_loss, row.dev_bleu)
        if scheduler is not None:
            scheduler.step(value)
        plateau.update(value)
        rate = optimizer.param_groups[0]["lr"]
        if plateau.exhausted or (cfg.min_learning_rate and rate < cfg.min_learning_rate):
            return int(row.step)
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="learning_curves.csv or a folder of runs")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--set", nargs="*", default=[], help="train key=value overrides")
    parser.add_argument("--cap-factor", type=float, default=2.0)
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    train = load_config(args.params).train
    cfg = TrainConfig.model_validate({**train.model_dump(), **overrides})
    curves = load_curves(args.source)
    rows = []
    for variant, curve in curves.groupby("variant", sort=True):
        stop = replay(curve, cfg)
        rows.append({"variant": variant, "last_step": int(curve.step.max()), "replayed_stop": stop})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    stops = table.replayed_stop.dropna()
    print(f"\nplateaued within the curve: {len(stops)} of {len(table)}")
    if len(stops):
        median = float(np.median(stops))
        print(
            f"median steps to the plateau: {median:.0f}; "
            f"{args.cap_factor:g} x median: {args.cap_factor * median:.0f}"
        )


if __name__ == "__main__":
    main()
