"""Training preflight: can this machine train every model family of the grid, and how
long will the grid take?

Run by the train stage before the sweep starts (on this machine for a local Ray, else as
one Ray task with a trial's resources): each model family
(:func:`pipeline.models.preflight.families`) trains :data:`WARMUP_STEPS` warm-up and
:data:`TIMED_STEPS` timed optimizer steps on real batches, in the resolved
``train.precision``, at a trial's threads. A failure is one line naming the params key
(:class:`PreflightError`); the measured seconds per step give the stage's time estimate
(:func:`estimate`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.config.grid import Variant
from pipeline.data.batching import make_batch, token_batches
from pipeline.data.dataset import TokenizedData
from pipeline.models.preflight import (  # noqa: F401  (PreflightError: re-exported)
    RUN_ERRORS,
    FamilyCheck,
    PreflightError,
    build_model,
    check_scorer_shapes,
    fail,
    families,
)
from pipeline.runtime.precision import resolve
from pipeline.train.trainer import make_optimizer, optimizer_step

WARMUP_STEPS = 2
"""Untimed steps first (oneDNN builds its primitives, the allocator grows its pools)."""
TIMED_STEPS = 5
"""Optimizer steps timed per family after the warm-up; the estimate uses their median."""

EXPECTED_SHARE_OF_CAP = 0.5
"""The expected steps of a variant, as a share of ``train.max_steps``: the cap is set to
about twice the median steps to the plateau (docs/budget.md), so half of it is the
estimate and the cap the bound."""

EVALUATION_OVERHEAD = 0.12
"""Dev evaluations (all of dev's loss, greedy BLEU of 300 sentences, every 200 steps) as
a share of the training steps' time: 0.09-0.21 (median 0.12) between the Tune reports of
the default grid's trials in fp32 on a 2-core AVX2 CPU, hidden 128 and 256
(docs/budget.md, "Numerics")."""


def _sample_batches(data: TokenizedData, variant: Variant, count: int) -> list:
    """``count`` real training batches of the variant's size, of typical length."""
    split = data.split("train")
    batches = token_batches(
        split.src_lengths, split.tgt_lengths, variant.train.batch_tokens, np.random.default_rng(0)
    )
    return [
        make_batch(split, b, reverse_source=variant.model.reverse_source) for b in batches[:count]
    ]


def check_training(
    variants: Sequence[Variant], data: TokenizedData, device: str = "cpu", threads: int = 1
) -> list[FamilyCheck]:
    """:data:`WARMUP_STEPS` and :data:`TIMED_STEPS` timed training steps per model family, at
    ``threads`` torch threads (a trial's share); raises :class:`PreflightError`."""
    check_scorer_shapes([v.model.scorer for v in variants], variants[0].model.hidden_size)
    # one check per model family, batch size and precision: what a step computes and costs
    groups = families((v.id, v.model, (v.train.batch_tokens, v.train.precision)) for v in variants)
    by_id = {v.id: v for v in variants}
    saved_threads, checks = torch.get_num_threads(), []
    torch.set_num_threads(max(1, threads))
    try:
        for name, ids in groups.items():
            family = [by_id[i] for i in ids]
            variant = family[0]
            precision = resolve(variant.train.precision, device)
            batches = _sample_batches(data, variant, WARMUP_STEPS + TIMED_STEPS)
            try:
                model = build_model(variant.model, data, device)
                optimizer = make_optimizer(model, variant.train.learning_rate)
                seconds = []
                for batch in batches:
                    start = time.perf_counter()
                    loss, _, _ = optimizer_step(
                        model, optimizer, batch.to(device), variant.train, precision, device
                    )
                    float(loss.detach())  # waits for a GPU
                    seconds.append(time.perf_counter() - start)
            except RUN_ERRORS as err:
                fail(
                    "train.precision",
                    precision,
                    variant.model.scorer,
                    [v.id for v in family],
                    device,
                    err,
                )
            median = statistics.median(seconds[WARMUP_STEPS:])
            checks.append(FamilyCheck(name, tuple(v.id for v in family), precision, median))
    finally:
        torch.set_num_threads(saved_threads)
    return checks


@dataclass(frozen=True)
class Estimate:
    """The train stage's forecast, from the preflight's measured step times."""

    variants: int
    expected_steps: int
    max_steps: int
    expected_hours: float
    bound_hours: float
    concurrent: int
    longest_minutes: float = 0.0  # the longest variant at its step cap, alone (0: no cap)

    def line(self) -> str:
        cap = f"at most {self.max_steps:,}" if self.max_steps else "no step cap"
        return (
            f"{self.variants} variants to train: about {self.expected_steps:,} steps ({cap}); "
            f"about {_hours(self.expected_hours)} on this machine at {self.concurrent} "
            f"trial(s) at a time (at most {_hours(self.bound_hours)})"
        )


def _hours(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1.5 else f"{hours:.1f} h"


def estimate(
    variants: Sequence[Variant], checks: Sequence[FamilyCheck], concurrent: int
) -> Estimate:
    """Expected and bounding time of training ``variants`` (those still to train), at
    ``concurrent`` trials at a time, from the preflight's seconds per step. A variant's
    expected steps are :data:`EXPECTED_SHARE_OF_CAP` of ``train.max_steps`` (its
    bound: the cap); without a cap, ``max_epochs`` epochs bound it."""
    per_step = {vid: c.seconds_per_step for c in checks for vid in c.variants}
    expected = bound = longest = 0.0
    expected_steps = max_steps = 0
    for variant in variants:
        cap = variant.train.max_steps
        steps = int(cap * EXPECTED_SHARE_OF_CAP) if cap else 0
        seconds = per_step.get(variant.id, 0.0) * (1 + EVALUATION_OVERHEAD)
        expected_steps, max_steps = expected_steps + steps, max_steps + cap
        expected, bound = expected + steps * seconds, bound + cap * seconds
        longest = max(longest, cap * seconds / 60)
    lanes = max(1, min(concurrent, len(variants)))
    return Estimate(
        len(variants),
        expected_steps,
        max_steps,
        expected / lanes / 3600,
        bound / lanes / 3600,
        lanes,
        longest,
    )
