"""Seeds by power: what each declared finding needs of the grid, before any variant trains.

For every finding (the study's and the user's ``evaluate.comparisons``) the plan gives
the seeds of each configuration its primary part compares, the a-priori power of its
test at its effect of interest with those seeds (:func:`pipeline.study.declarations.design_power`:
the pilot's variances, the Bonferroni level of the confirmatory family, the pooled seed
degrees of freedom of the whole grid), and the seeds per configuration that give 80%.
A configuration needs the most seeds any confirmatory finding that compares it needs
(at least 2: one seed has no seed variance); one that no confirmatory finding compares
needs none (the grid may give it one seed, exploratory). Findings named in
``evaluate.exploratory`` are declared exploratory before training and plan no seeds.

``python -m pipeline.study.plan [params.yaml]`` prints the plan and each configuration's
seeds in the grid against what the plan needs; the train stage logs the same lines
before its first trial and warns, in one line, about the confirmatory findings below
80% power.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import load_config
from pipeline.config.params import Config, ConfigError
from pipeline.study.declarations import design_power
from pipeline.study.design import planned_grid
from pipeline.study.findings import (
    check_exploratory,
    declare,
    declare_comparisons,
    effect_of,
)
from pipeline.study.statistics import POWER

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FindingPlan:
    """One finding's primary part against the grid."""

    finding: str
    effect: str  # the effect of interest in words ("+7.57 BLEU", "within +-2 BLEU")
    seeds: dict[str, int]  # configuration -> seeds in the grid (0: absent)
    se: float  # the planned standard error of its estimate (scale units)
    power: float | None  # at the grid's seeds (None: a configuration has fewer than 2)
    seeds_needed: int | None  # per configuration for 80% (None: more than 50)
    exploratory: str  # why, where declared exploratory before training; "" confirmatory

    @property
    def confirmatory(self) -> bool:
        return not self.exploratory

    def line(self) -> str:
        seeds = ", ".join(f"{c} {n}" for c, n in self.seeds.items())
        if self.power is None:
            power = "not testable (fewer than 2 seeds)"
        else:
            power = f"planned SE {self.se:.3g}, power {self.power:.0%}"
        needed = self.seeds_needed if self.seeds_needed is not None else ">50"
        kind = "exploratory" if self.exploratory else "confirmatory"
        return f"{self.finding} ({kind}, {self.effect}): {seeds}; {power}; 80% needs {needed}"


def plan(config: Config) -> list[FindingPlan]:
    """Every declared finding's plan for ``config``'s grid."""
    grid = planned_grid(config)
    cut = config.fetch.split.max_train_words
    declared = [(f, specs, effect_of(f, specs, cut)) for f, specs in declare(grid)]
    declared += declare_comparisons(config.evaluate.comparisons)
    exploratory = config.evaluate.exploratory
    check_exploratory(exploratory, [f.title for f, _, _ in declared])
    primaries = []
    for finding, specs, effect in declared:
        spec = next((s for s in specs if s.primary), None)
        if spec is None or effect is None:
            continue
        labels = sorted({c.label(grid) for _, c, _ in spec.terms})
        seeds = {
            c.label(grid): len(grid.systems(c.scorer, c.reverse, c.hidden))
            for _, c, _ in spec.terms
        }
        primaries.append((finding.title, effect, {c: seeds[c] for c in labels}))
    family = sum(1 for title, _, _ in primaries if title not in exploratory)
    seed_df = sum(len(c) - 1 for c in grid.configurations())
    plans = []
    for title, effect, seeds in primaries:
        size = family if title not in exploratory else len(primaries)
        weights = dict.fromkeys(seeds, 1.0)
        counted = {c: max(n, 1) for c, n in seeds.items()}
        power = design_power(title, effect, weights, counted, size, seed_df)
        testable = min(seeds.values()) >= 2
        plans.append(
            FindingPlan(
                title,
                effect.describe(),
                seeds,
                power.se,
                power.power if testable else None,
                power.seeds_needed,
                exploratory.get(title, ""),
            )
        )
    return plans


def needed_seeds(plans: list[FindingPlan]) -> dict[str, int]:
    """Each configuration's seeds by the plan: the most any confirmatory finding comparing
    it needs (at least 2); 0 where only exploratory findings compare it (the grid may give
    it one seed, or none)."""
    needed: dict[str, int] = {}
    for p in plans:
        for configuration in p.seeds:
            want = max(2, p.seeds_needed or 51) if p.confirmatory else 0
            needed[configuration] = max(needed.get(configuration, 0), want)
    return needed


def underpowered(plans: list[FindingPlan]) -> list[FindingPlan]:
    """Confirmatory findings whose grid gives them less than 80% power (or no test)."""
    return [p for p in plans if p.confirmatory and (p.power is None or p.power < POWER)]


def log_plan(config: Config) -> None:
    """The train stage's lines: one with each confirmatory finding's power, and a warning
    naming the confirmatory findings below 80% (the details: ``python -m
    pipeline.study.plan``)."""
    plans = plan(config)
    powered = [
        f"{p.finding} {p.power:.0%}" for p in plans if p.confirmatory and p.power is not None
    ]
    logger.info(
        "seed plan: a-priori power of the confirmatory findings: %s (python -m "
        "pipeline.study.plan)",
        ", ".join(powered) or "none testable",
    )
    weak = underpowered(plans)
    if weak:
        logger.warning(
            "below 80%% power, so 'not testable' whatever the data: %s; give their "
            "configurations more seeds or declare them in evaluate.exploratory",
            ", ".join(
                f"{p.finding} ({p.seeds_needed or 'over 50'} seeds each for 80%)" for p in weak
            ),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("params", nargs="?", default="params.yaml", type=Path)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.params)
        plans = plan(config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for p in plans:
        print(p.line())
    needed = needed_seeds(plans)
    print("configuration: seeds in the grid / by the plan")
    for configuration, want in sorted(needed.items()):
        have = next((p.seeds[configuration] for p in plans if configuration in p.seeds), 0)
        print(f"  {configuration}: {have} / {want}")
    return 1 if underpowered(plans) else 0


if __name__ == "__main__":
    sys.exit(main())
