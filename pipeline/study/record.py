"""The study's findings as a file, typed: ``eval/findings.json`` (the evaluate stage writes
it; the report copies it to ``reports/findings.json``, which the README's results quote).
Written and read only through :class:`StudyRecord`, never by string keys.

One :class:`StudyRecord` holds the design behind the verdicts (:class:`Family`, the
bootstrap, where the a-priori power came from, :class:`BaselineRatio`, the baseline's
gates as measured under each decoding, :class:`GateRecord`, and the design lock,
:class:`LockRecord`), the reference scorer chosen on dev, and each decoding's findings: a
:class:`FindingRecord` per finding, with its declared :class:`EffectOfInterest`, its
:class:`Design` (the a-priori power), its label, whether it is confirmatory (and, where
its declaration changed after training started, the :class:`DeclarationChange`), the
gates its claim needs, and its parts (:class:`PartRecord`), each with its
:class:`PartEstimate` once estimated. The JSON keeps one shape: a part's estimate is
spelled inline, beside its label and claim; a value that is not finite is ``null``. The
fields added with the gates and the lock have defaults, so a file written before them
still loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pipeline.io import write_json
from pipeline.records.base import RecordError, read_record, validated

MADE_BY = "dvc repro evaluate"
"""The command that writes ``eval/findings.json`` (named when it is missing)."""


def finite(value: float | None) -> float | None:
    """``value`` as a float, ``None`` where it is missing or not finite (JSON's ``null``)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _mapping(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise RecordError(f"{where}: not a JSON object")
    return data


@dataclass(frozen=True)
class EffectOfInterest:
    """A finding's smallest effect of interest, declared before the run
    (:class:`~pipeline.study.declarations.Effect` without its scale, which is the
    finding's)."""

    claim: str  # "> 0" | "< 0" | "equivalent"
    value: float  # in the finding's scale; an equivalence claim's margin
    source: str  # the literature's numbers, quoted
    why: str  # why this number is the effect that matters
    published: bool = True  # False: declared here, no paper gives this size (or margin)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Design:
    """A finding's design, computed before the run
    (:class:`~pipeline.study.declarations.Power`): its planned standard error, and its
    power at the effect of interest at the family's level."""

    finding: str
    effect: float  # the effect of interest's value
    claim: str
    scale: str  # "bleu" | "log_bleu"
    seeds: dict[str, int]  # configuration -> seeds in the grid
    planned_se: float
    alpha: float  # the level of its interval (Bonferroni over the family)
    power: float
    testable: bool  # power at least POWER
    seeds_needed: int | None  # per configuration for POWER (None: more than 50)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PartEstimate:
    """A part's estimate (:class:`~pipeline.study.statistics.Estimate`): the contrast's
    mean over seeds, its interval at ``level``, its tests and standard errors."""

    estimate: float
    low: float
    high: float
    level: float  # the interval's: 1 - alpha (Bonferroni for a primary part)
    p: float  # two-sided, H0: contrast = 0
    mde: float  # minimal detectable effect at POWER, at the interval's level
    seeds: int  # the fewest seeds of a configuration
    per_seed: dict[str, dict[str, float]]  # configuration -> seed -> its part
    se: float
    se_seed: float  # training part of the standard error
    se_test: float  # test-sampling part
    df: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ESTIMATE_KEYS = tuple(f.name for f in fields(PartEstimate))
"""A part's keys that belong to its estimate (spelled inline in the part's JSON)."""


@dataclass(frozen=True)
class PartRecord:
    """One part of a finding: a contrast with its claim, the verdict rule's reading of it
    (``state``) and, once estimated, its :class:`PartEstimate`."""

    label: str
    claim: str  # "> 0" | "< 0" | "equivalent"
    state: str  # the verdict rule's reading of this part
    primary: bool  # primary parts decide the verdict; secondary ones describe it
    effect: float | None  # the declared effect of interest (primary parts)
    margin: float  # an equivalence claim's margin (0 otherwise)
    p_adjusted: float | None  # Bonferroni over the family (primary parts)
    estimate: PartEstimate | None = None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "estimate"}
        if self.estimate is not None:
            out.update(self.estimate.to_json())
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "finding part") -> PartRecord:
        data = _mapping(data, where)
        head = {k: v for k, v in data.items() if k not in ESTIMATE_KEYS}
        part = validated(cls, head, where)
        if "estimate" not in data:
            return part
        inline = {k: data[k] for k in ESTIMATE_KEYS if k in data}
        return replace(part, estimate=validated(PartEstimate, inline, where))


@dataclass(frozen=True)
class GateRecord:
    """A gate on the no-attention baseline as measured
    (:class:`~pipeline.study.gates.GateResult`): the declared threshold with its source,
    the measure with its interval at ``level``, and the result."""

    name: str
    what: str  # what is measured, in words
    unit: str  # "BLEU" | "share" (none's BLEU over additive's)
    threshold: float  # declared before the run: the interval's lower end must reach it
    source: str  # where the threshold comes from
    estimate: float | None
    low: float | None
    high: float | None
    level: float
    result: str  # "pass" | "fail" | "not measured"


@dataclass(frozen=True)
class DeclarationChange:
    """A finding's declaration as the design lock holds it (written when training
    started; ``locked`` is ``None`` where the finding was not in it) and as it is now
    (canonical JSON text each, :mod:`pipeline.study.design`), and each value that
    differs, dotted: "effect.value: 7.57 -> 5.0"."""

    locked: str | None
    current: str
    changes: tuple[str, ...]


@dataclass(frozen=True)
class FindingRecord:
    """One finding under one decoding: the literature's claim, the test stated in
    advance, the verdict with what decided it and the answer in words, the declared
    effect of interest, the design's a-priori power, notes, and its parts (the primary
    one first)."""

    title: str
    literature: str
    criterion: str
    verdict: str  # one of pipeline.study.findings.VERDICTS
    why: str  # one line: what decided the verdict
    answer: str  # one sentence in words: what the study found
    scale: str  # "bleu" | "log_bleu"
    effect_of_interest: EffectOfInterest | None
    design: Design | None
    notes: tuple[str, ...]
    parts: tuple[PartRecord, ...]
    label: str = ""  # the verdict with what qualifies it ("" in files from before labels)
    confirmatory: bool = True  # False: exploratory (the design was not locked before it)
    exploratory: str = ""  # why it is exploratory
    change: DeclarationChange | None = None  # its declaration, locked and now
    gated: str = ""  # what the gates decide: "claim", "size" or "" (it needs none)
    gates: tuple[GateRecord, ...] = ()  # the gates it needs, as measured

    @property
    def shown(self) -> str:
        """What the report prints for its verdict: the label, else the verdict word."""
        return self.label or self.verdict

    @property
    def main(self) -> PartRecord | None:
        """The primary part, once estimated (``None`` when the finding has none)."""
        first = self.parts[0] if self.parts else None
        if first is None or first.estimate is None or not first.primary:
            return None
        return first

    @property
    def unit(self) -> str:
        """The units of the finding's contrasts: "BLEU" or "log BLEU"."""
        return "log BLEU" if self.scale == "log_bleu" else "BLEU"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        effect, design = self.effect_of_interest, self.design
        out.update(
            effect_of_interest=None if effect is None else effect.to_json(),
            design=None if design is None else design.to_json(),
            notes=list(self.notes),
            parts=[p.to_json() for p in self.parts],
            change=None if self.change is None else asdict(self.change),
            gates=[asdict(g) for g in self.gates],
        )
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "finding") -> FindingRecord:
        data = _mapping(data, where)
        finding = validated(cls, {**data, "parts": ()}, where)
        parts = data.get("parts")
        if not isinstance(parts, list):
            raise RecordError(f"{where}: not a FindingRecord (parts: not a list)")
        found = tuple(PartRecord.from_json(p, f"{where}.parts[{i}]") for i, p in enumerate(parts))
        return replace(finding, parts=found)


@dataclass(frozen=True)
class Family:
    """The primary family: its size (the confirmatory findings' primary parts), the
    correction, and the level of each interval; and the primary parts of exploratory
    findings (their declaration not locked before training), left out of it and judged at
    ``exploratory_level``, the level the declared design gave them."""

    size: int
    correction: str
    alpha: float
    interval_level: float
    exploratory: int = 0
    exploratory_level: float | None = None

    def describe(self) -> str:
        """ "99.0% CI, Bonferroni over 5": the level of the primary intervals."""
        if self.size == 0 and self.exploratory_level is not None:
            return (
                f"{self.exploratory_level:.1%} CI, exploratory (the level of a "
                f"{self.correction} family of {self.exploratory})"
            )
        return f"{self.interval_level:.1%} CI, {self.correction} over {self.size}"


@dataclass(frozen=True)
class BaselineRatio:
    """None's test BLEU over additive's inside the training lengths, beside the paper's
    RNNencdec-30 over RNNsearch-30 (Bahdanau et al. 2014, Table 1)."""

    measured: float | None
    paper: float
    what: str


@dataclass(frozen=True)
class LockRecord:
    """The design lock behind the verdicts (:class:`~pipeline.study.design.DesignLock`,
    ``models/design.json``): its hash, the commit of the code, when the design was
    declared and when training started, whether the declaration preceded the start, the
    current design's hash and the findings whose declaration changed after the start."""

    locked: bool  # a lock was written when training started
    hash: str | None  # the locked design's (None: no lock)
    current_hash: str  # the design as declared when evaluate ran
    commit: str | None  # the code's commit when the lock was written
    dirty: bool | None  # tracked files differed from it
    declared_at: str | None  # ISO 8601, UTC
    declared_from: str  # how declared_at was found
    training_started: str | None  # ISO 8601, UTC
    preceded: bool | None  # the declaration preceded the training start
    changed: tuple[str, ...]  # findings declared differently now than in the lock
    status: str  # in words


@dataclass(frozen=True)
class StudyRecord:
    """``eval/findings.json``: the study's findings under each decoding, with the design
    behind their verdicts and the reference scorer chosen on dev."""

    main_decoding: str  # the decoding the headline numbers use
    reference: str | None  # the best scorer, chosen on dev
    reference_chosen_on: str
    reference_dev_bleu: dict[str, float]  # each candidate's mean best dev BLEU
    excluded_from_confirmatory: tuple[str, ...]  # variants stopped at the step cap
    family: Family
    power_from: str
    bootstrap: str  # what the bootstrap resampled
    baseline_ratio: BaselineRatio
    decoding_dependent: tuple[str, ...]  # findings whose verdict differs between decodings
    findings: dict[str, tuple[FindingRecord, ...]]  # decoding -> findings
    gates: dict[str, tuple[GateRecord, ...]] = field(default_factory=dict)  # decoding ->
    design_lock: LockRecord | None = None

    @property
    def main(self) -> tuple[FindingRecord, ...]:
        """The findings under the main decoding."""
        return self.under(self.main_decoding)

    def under(self, decoding: str) -> tuple[FindingRecord, ...]:
        """The findings under ``decoding`` (none when it was not decoded)."""
        return self.findings.get(decoding, ())

    def verdicts(self, decoding: str) -> dict[str, str]:
        """Each finding's verdict under ``decoding``, by title."""
        return {f.title: f.verdict for f in self.under(decoding)}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(
            excluded_from_confirmatory=list(self.excluded_from_confirmatory),
            family=asdict(self.family),
            baseline_ratio=asdict(self.baseline_ratio),
            decoding_dependent=list(self.decoding_dependent),
            findings={d: [f.to_json() for f in fs] for d, fs in self.findings.items()},
            gates={d: [asdict(g) for g in gs] for d, gs in self.gates.items()},
            design_lock=None if self.design_lock is None else asdict(self.design_lock),
        )
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "findings.json") -> StudyRecord:
        data = _mapping(data, where)
        study = validated(cls, {**data, "findings": {}}, where)
        findings = {}
        for decoding, listed in _mapping(data.get("findings"), f"{where}: findings").items():
            if not isinstance(listed, list):
                raise RecordError(f"{where}: findings.{decoding}: not a list")
            findings[str(decoding)] = tuple(
                FindingRecord.from_json(f, f"{where}: findings.{decoding}[{i}]")
                for i, f in enumerate(listed)
            )
        return replace(study, findings=findings)

    @classmethod
    def load(cls, path: Path) -> StudyRecord:
        """The record in ``path``; a missing or malformed file is a
        :class:`~pipeline.records.base.RecordError` naming it."""
        return cls.from_json(read_record(path, MADE_BY), str(path))

    def write(self, path: Path) -> None:
        write_json(path, self.to_json())
