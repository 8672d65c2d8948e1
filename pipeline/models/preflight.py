"""Preflight checks of model families, shared by the train and evaluate stages.

A model family is a set of variants whose models compute the same thing (they differ
only in seed or source reversal). Before any Ray task starts, each family builds its
model at its real size and runs what the stage will run (training steps:
:mod:`pipeline.train.preflight`; greedy and beam decoding: :func:`check_decoding`) in
the resolved precision on this machine. A plugin scorer is first called on small tensors
and must return scores of shape ``(B, T, S)``.

A failure is one line naming the params key to change (:class:`PreflightError`), raised
before any trial or decode task starts: an error every task would hit (a bf16 LSTM on a
CPU without bf16 instructions, a broken plugin) costs seconds, not a sweep of retries.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.config.params import ModelConfig
from pipeline.data.dataset import TokenizedData
from pipeline.errors import StageError
from pipeline.models.checkpoint import VocabInfo
from pipeline.models.search import translate
from pipeline.models.seq2seq import Seq2Seq
from pipeline.runtime.precision import resolve
from pipeline.scorers import catalogue

RUN_ERRORS = (RuntimeError, NotImplementedError, TypeError, ValueError)
"""What a model that cannot run raises (oneDNN and CUDA errors are RuntimeErrors)."""


class PreflightError(StageError):
    """A model family cannot run here as configured (one line naming the params key)."""


@dataclass(frozen=True)
class FamilyCheck:
    """What the preflight found for one model family."""

    name: str  # a representative variant id
    variants: tuple[str, ...]
    precision: str  # resolved
    seconds_per_step: float  # median of the timed training steps (0 for decoding checks)


FAMILY_AXES = frozenset({"reverse_source"})
"""Model fields that do not change what a step computes or costs (the seed, a train field,
does not either): one check covers variants that differ only in them."""


def family_key(model: ModelConfig) -> str:
    """What makes two models one family for the preflight (all fields but
    :data:`FAMILY_AXES`)."""
    return repr(sorted(model.model_dump(exclude=set(FAMILY_AXES)).items()))


def families(members: Iterable[tuple[str, ModelConfig, Hashable]]) -> dict[str, list[str]]:
    """Member ids grouped by what a check of them computes and costs: their model's
    :func:`family_key` and what else their step depends on (the third item: the train
    stage's batch size and precision, ``None`` for decoding); keyed by each group's first
    id, in order."""
    groups: dict[str, list[str]] = {}
    firsts: dict[tuple, str] = {}
    for member_id, model, extra in members:
        first = firsts.setdefault((family_key(model), extra), member_id)
        groups.setdefault(first, []).append(member_id)
    return groups


def build_model(config: ModelConfig, data: TokenizedData, device: str) -> Seq2Seq:
    """The family's model at its real size, seeded, untrained."""
    torch.manual_seed(0)
    vocab = VocabInfo.from_data(data)
    return Seq2Seq(config, vocab.src_vocab_size, vocab.tgt_vocab_size).to(device)


def check_scorer_shapes(names: Iterable[str], hidden_size: int) -> None:
    """Call each plugin scorer on small tensors: ``score(query (B, T, H), keys (B, S, H))``
    after ``precompute(keys)`` must give (B, T, S)."""
    batch, steps, source = 2, 3, 5
    for name in sorted(set(names)):
        entry = catalogue.get(name)
        if entry is None or not entry.plugin:
            continue
        scorer = entry.load()(hidden_size)
        query = torch.randn(batch, steps, hidden_size)
        keys = torch.randn(batch, source, hidden_size)
        where = f"{entry.plugin}: scorer {name!r}"
        try:
            scores = scorer.score(query, scorer.precompute(keys))
        except Exception as err:  # the user's code: any failure is theirs to fix
            raise PreflightError(
                f"{where} failed on query (B, T, H) = {tuple(query.shape)}, "
                f"keys (B, S, H) = {tuple(keys.shape)}: "
                f"{type(err).__name__}: {err}"
            ) from None
        expected = (batch, steps, source)
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != expected:
            got = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores)
            raise PreflightError(
                f"{where}: score(query, keys) must return (B, T, S) = {expected} for query "
                f"(B, T, H) = {tuple(query.shape)} and keys (B, S, H) = {tuple(keys.shape)}; "
                f"got {got}"
            )


def fail(
    key: str, precision: str, scorer: str, variant_ids: Sequence[str], device: str, err: Exception
) -> None:
    """The one-line error for a family that cannot run: which key to change, and why."""
    lines = str(err).strip().splitlines() or [type(err).__name__]
    first = lines[0].split(". ")[0].rstrip(". ")  # oneDNN adds "Run workload with ..."
    ids = ", ".join(variant_ids[:3]) + (", ..." if len(variant_ids) > 3 else "")
    if precision == "bf16":
        hint = (
            f"{key}: bf16 cannot run the {scorer} model ({ids}) on "
            f"this {device}: {first}. bf16 needs native instructions (a CPU with "
            f"AVX512-BF16 or AMX, a GPU from Ampere on); set {key}: fp32, the study's "
            "default, which runs everywhere"
        )
    else:
        hint = (
            f"{key}: the {scorer} model ({ids}) cannot run a step in "
            f"{precision} on this {device}: {type(err).__name__}: {first}"
        )
    raise PreflightError(hint) from None


def check_decoding(
    models: Mapping[str, ModelConfig],
    data: TokenizedData,
    beam_size: int,
    precision: str,
    device: str = "cpu",
) -> list[FamilyCheck]:
    """Greedy and beam decoding of a few dev sentences per model family of ``models``
    (variant id -> its model config) in ``precision`` (``evaluate.precision``), with
    untrained weights; raises :class:`PreflightError`."""
    check_scorer_shapes(
        [m.scorer for m in models.values()], next(iter(models.values())).hidden_size
    )
    dev = data.split("dev")
    split = dev.subset(np.arange(min(4, len(dev))))
    resolved = resolve(precision, device)
    checks = []
    for ids in families((i, model, None) for i, model in models.items()).values():
        config = models[ids[0]]
        try:
            model = build_model(config, data, device)
            for beam in sorted({1, beam_size}):
                translate(
                    model.eval(),
                    split,
                    beam_size=beam,
                    max_ratio=0.5,
                    device=device,
                    precision=resolved,
                )
        except RUN_ERRORS as err:
            fail("evaluate.precision", resolved, config.scorer, ids, device, err)
        checks.append(FamilyCheck(ids[0], tuple(ids), resolved, 0.0))
    return checks
