"""What a finding's interval shows, in words: the verdict vocabulary and the rules that
read an interval, the baseline's gates and the design lock into a verdict, a label and a
one-sentence answer. Direction and size are told apart; a label claims only what was
shown.

With ``[L, U]`` a primary interval, signed so that the claimed direction is positive, and
``E`` the declared effect of interest (an equivalence claim's margin ``M``):

- **claimed direction, at least the effect of interest**: ``L > 0`` and ``L >= E``;
- **claimed direction, not shown to reach it**: ``L > 0`` and ``L < E <= U``;
- **agrees with the literature**: the same interval (the paper's size inside it, the
  direction shown), where the effect is the paper's (not declared here), the model
  tested is the paper's (:class:`~pipeline.study.declarations.Literature`) and the gates
  the claim needs pass;
- **smaller than claimed**: ``U < E`` (the answer says whether the direction is shown);
- **opposite direction**: ``U < 0``;
- **equivalent** (within ``+-M``): the interval lies inside ``(-M, M)``; **not
  equivalent**: it lies wholly outside;
- **claimed direction, size not compared**: ``L > 0`` where the size may not be compared
  with the paper's: a gate that only the size needs failed (Attention against a baseline
  at the floor), or the part has no effect of interest;
- **inconclusive**: anything else;
- **not testable**: the grid lacks the configurations (or they stopped at the step cap),
  the design's a-priori power is below 80%, or a gate the claim needs failed or could
  not be measured ("the baseline is at the floor").

A label adds what qualifies the verdict: an effect or margin without a published source
is "declared here"; a verdict on size against the literature's effect with a model that
is not the paper's says how it differs; a finding whose declaration was not locked before
training (or changed after it started) is "exploratory".
"""

from __future__ import annotations

from typing import Any

Finding = Any
"""A :class:`pipeline.study.findings.Finding` (which imports this module)."""
Part = Any
"""A :class:`pipeline.study.findings.Part`."""

AGREES = "agrees with the literature"
AT_LEAST = "claimed direction, at least the effect of interest"
NOT_SHOWN = "claimed direction, not shown to reach it"
DIRECTION = "claimed direction, size not compared"
SMALLER = "smaller than claimed"
OPPOSITE = "opposite direction"
EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
INCONCLUSIVE = "inconclusive"
NOT_TESTABLE = "not testable"

VERDICTS = (
    AGREES,
    AT_LEAST,
    NOT_SHOWN,
    DIRECTION,
    SMALLER,
    OPPOSITE,
    EQUIVALENT,
    NOT_EQUIVALENT,
    INCONCLUSIVE,
    NOT_TESTABLE,
)
"""Every verdict word, in the order the report and ``metrics/test.json`` count them."""
SIZE_VERDICTS = (AGREES, AT_LEAST, NOT_SHOWN, SMALLER)
"""Verdicts that say something about the effect's size against the declared one."""
FLOOR = "the baseline is at the floor"


def state(part: Part) -> str:
    """The verdict rule's reading of one part's interval (no gate, no lock)."""
    e = part.estimate
    if part.claim == "equivalent":
        m = part.margin
        if -m < e.low and e.high < m:
            return EQUIVALENT
        if e.low > m or e.high < -m:
            return NOT_EQUIVALENT
        return INCONCLUSIVE
    sign = 1.0 if part.claim == "> 0" else -1.0
    low, high = sorted((sign * e.low, sign * e.high))
    if high < 0:
        return OPPOSITE
    if part.effect is None:
        return DIRECTION if low > 0 else INCONCLUSIVE
    effect = abs(part.effect)
    if low > 0 and low >= effect:
        return AT_LEAST
    if high < effect:
        return SMALLER
    return NOT_SHOWN if low > 0 else INCONCLUSIVE


def _direction_shown(part: Part) -> bool:
    sign = 1.0 if part.claim == "> 0" else -1.0
    return min(sign * part.estimate.low, sign * part.estimate.high) > 0


def decide(finding: Finding) -> None:
    """Give ``finding`` its verdict, the line that decided it (``why``), its label and
    its answer, from its parts' intervals, its design's power, its gates and whether it
    is confirmatory."""
    for part in finding.parts:
        part.state = state(part)
    main = finding.main
    if main is None or not main.primary:
        finding.verdict = NOT_TESTABLE
        finding.why = (
            finding.why or "the grid lacks the variants or seeds (at least 2 plateaued twins)"
        )
        finding.reason = finding.why.split(" (")[0]
        _finish(finding, None)
        return
    power, failed = finding.power, finding.failed_gates()
    if power is not None and not power.testable:
        finding.verdict = NOT_TESTABLE
        more = (
            f"{power.seeds_needed} seeds per configuration would give 80%"
            if power.seeds_needed
            else "more than 50 seeds per configuration would be needed"
        )
        finding.why = (
            f"the design's power at the declared {finding.effect.describe()} is "
            f"{power.power:.0%} (computed before the run; {more})"
        )
        finding.reason = f"power {power.power:.0%} at the effect of interest"
    elif finding.gated == "claim" and failed:
        finding.verdict = NOT_TESTABLE
        finding.why = _gate_why(failed)
        finding.reason = FLOOR
    elif finding.gated == "size" and failed:
        finding.verdict = DIRECTION if _direction_shown(main) else main.state
        if finding.verdict not in (DIRECTION, OPPOSITE):
            finding.verdict = INCONCLUSIVE
        reading = _reading(main, finding.verdict)
        finding.why = f"{_ci(main)}: {reading}; size not compared, since {_gate_why(failed)}"
    else:
        finding.verdict = main.state
        if main.state == NOT_SHOWN and finding.literature_agrees():
            finding.verdict = AGREES
        finding.why = f"{_ci(main)}: {_reading(main, finding.verdict)}"
    _finish(finding, main)


def _gate_why(failed) -> str:
    words = "; ".join(g.describe() for g in failed)
    if any(g.result == "fail" for g in failed):
        return f"{FLOOR}: {words}"
    return f"the baseline's gates were not measured: {words}"


def _ci(part: Part) -> str:
    e = part.estimate
    return f"{e.estimate:+.2f} [{e.low:+.2f}, {e.high:+.2f}] at {1 - e.alpha:.1%}"


def _reading(part: Part, verdict: str) -> str:
    """What the interval does that gives ``verdict``."""
    if part.claim == "equivalent":
        return {
            EQUIVALENT: f"inside +-{part.margin:g}",
            NOT_EQUIVALENT: f"wholly outside +-{part.margin:g}",
        }.get(verdict, f"neither inside +-{part.margin:g} nor wholly outside it")
    declared = f"the declared {part.effect:+g}" if part.effect is not None else "no effect"
    short = "above" if part.claim == "< 0" else "below"  # short of the claimed size
    return {
        AGREES: f"excludes 0 and holds {declared}",
        AT_LEAST: f"excludes 0 and is wholly beyond {declared}",
        NOT_SHOWN: f"excludes 0 and holds {declared}",
        DIRECTION: "excludes 0 on the claimed side",
        SMALLER: f"wholly {short} {declared}",
        OPPOSITE: "wholly on the other side of 0",
    }.get(verdict, "includes 0" + (f" and reaches {declared}" if part.effect is not None else ""))


def _finish(finding: Finding, main: Part | None) -> None:
    finding.label = label(finding)
    finding.answer = answer(finding, main)


def _qualifiers(finding: Finding) -> list[str]:
    verdict, effect = finding.verdict, finding.effect
    words = []
    if verdict == NOT_TESTABLE:
        words.append(finding.reason)
    if verdict == DIRECTION and finding.gated == "size" and finding.failed_gates():
        words.append(FLOOR)
    if effect is not None and not effect.published:
        if verdict in (EQUIVALENT, NOT_EQUIVALENT):
            words.append("margin declared here")
        elif verdict in SIZE_VERDICTS:
            words.append("effect of interest declared here")
    differences = finding.literature_differences()
    if verdict in SIZE_VERDICTS and differences and effect.published:
        shown = "; ".join(differences[:2]) + ("; ..." if len(differences) > 2 else "")
        words.append(f"not {effect.literature.paper}'s model: {shown}")
    if not finding.confirmatory:
        words.append(f"exploratory: {finding.exploratory}")
    return words


def label(finding: Finding) -> str:
    """The verdict with what qualifies it: "equivalent within +-2 BLEU (margin declared
    here)", "not testable (the baseline is at the floor)"."""
    text = finding.verdict
    if text in (EQUIVALENT, NOT_EQUIVALENT) and finding.main is not None:
        text += f" within +-{finding.main.margin:g} {_unit(finding)}"
    words = _qualifiers(finding)
    return f"{text} ({'; '.join(words)})" if words else text


def _unit(finding: Finding) -> str:
    return "log BLEU" if finding.scale == "log_bleu" else "BLEU"


def answer(finding: Finding, main: Part | None) -> str:
    """One sentence (or two) in words: what the study found for ``finding``."""
    title, verdict = finding.title, finding.verdict
    if main is None or main.estimate is None:
        return f"{title}: not testable here ({finding.why})."
    e, unit = main.estimate, _unit(finding)
    measured = (
        f"{main.label} {e.estimate:+.2f} {unit} [{e.low:+.2f}, {e.high:+.2f}] at {1 - e.alpha:.1%}"
    )
    declared = finding.effect.describe() if finding.effect else ""
    if verdict == NOT_TESTABLE:
        text = f"{title}: not testable: {finding.why}; measured {measured}, declared {declared}."
    elif verdict == AGREES:
        paper = finding.effect.literature.paper
        text = (
            f"{title}: agrees with the literature: the claimed direction is shown and the "
            f"interval holds {paper}'s {declared} ({measured}), with the paper's model."
        )
    elif verdict == AT_LEAST:
        text = f"{title}: in the claimed direction, at least the declared {declared} ({measured})."
    elif verdict == NOT_SHOWN:
        text = (
            f"{title}: in the claimed direction, not shown to reach the declared {declared} "
            f"({measured})."
        )
    elif verdict == DIRECTION:
        text = f"{title}: in the claimed direction ({measured}); {_size_not_compared(finding, e)}"
    elif verdict == SMALLER:
        shown = (
            "an effect in the claimed direction, but"
            if _direction_shown(main)
            else "no effect shown, and"
        )
        text = f"{title}: {shown} smaller than claimed ({measured}; declared {declared})."
    elif verdict == OPPOSITE:
        text = f"{title}: the opposite of the claim is shown ({measured}; declared {declared})."
    elif verdict in (EQUIVALENT, NOT_EQUIVALENT):
        inside = "equivalent within" if verdict == EQUIVALENT else "a difference beyond"
        text = f"{title}: {inside} +-{main.margin:g} {unit} ({measured})."
    else:
        text = f"{title}: inconclusive ({measured}; declared {declared})."
    return " ".join([text, *_answer_notes(finding)])


def _size_not_compared(finding: Finding, e) -> str:
    if finding.effect is None:
        return "no effect of interest was declared."
    text = f"its size is not compared with the declared {finding.effect.describe()}"
    failed = finding.failed_gates()
    if not failed:
        return text + "."
    ratio = e.estimate / finding.effect.value if finding.effect.value else float("nan")
    return (
        f"{text}, since {_gate_why(failed)}. As a ratio only: {ratio:.2f} times the declared "
        "effect, against a baseline weaker than the paper's."
    )


def _answer_notes(finding: Finding) -> list[str]:
    notes = []
    effect = finding.effect
    if effect is not None and finding.verdict in (EQUIVALENT, NOT_EQUIVALENT) and effect.limits:
        notes.append(f"The margin is declared here; {effect.limits}.")
    elif effect is not None and not effect.published and finding.verdict in SIZE_VERDICTS:
        notes.append("The effect of interest is declared here, not a published one.")
    differences = finding.literature_differences()
    if effect is not None and differences and finding.verdict in SIZE_VERDICTS:
        notes.append(
            f"The model tested is not {effect.literature.paper}'s ({effect.literature.words}): "
            f"{'; '.join(differences)}."
        )
    if not finding.confirmatory:
        notes.append(f"Exploratory: {finding.exploratory}.")
    return notes
