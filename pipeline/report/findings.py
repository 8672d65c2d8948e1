"""What the report says about the findings: the evaluate stage's ``eval/findings.json``,
``comparisons.csv`` and ``ranking.csv`` (:mod:`pipeline.study.findings`) as table rows and
one-line answers. Nothing here tests anything: the verdicts are the evaluate stage's."""

from __future__ import annotations

import json

import pandas as pd

from pipeline.study.findings import Grid
from pipeline.study.record import FindingRecord, GateRecord, PartRecord, StudyRecord
from pipeline.study.statistics import ALPHA, POWER, format_p

MDE_HEADER = "MDE (at the interval's level)"
GATE_HEADERS = [
    *("gate", "measured", "declared threshold", "measured [95% CI]", "result"),
    *("needed by", "threshold's source"),
]


def verdict_headers(study: StudyRecord) -> list[str]:
    """The verdict table's headers, the estimate's stating the level of its interval and
    the correction ("estimate [99.0% CI, Bonferroni over 5]")."""
    return [
        *("finding", "verdict", "greedy", f"estimate [{study.family.describe()}]", "scale"),
        *("effect of interest", "power at it (planned)", MDE_HEADER, "seeds", "gates"),
        "why",
    ]


PART_HEADERS = [
    *("contrast", "claim", "estimate [interval]", "level", "per seed (configuration: seeds)"),
    *("p", "p adjusted", "MDE", "reading"),
]


def lengths(cut: int | None) -> str:
    """Which test lengths "all lengths" covers: "all lengths (1-30 words inside the
    training cut, 31+ beyond)", the cut from ``fetch.split.max_train_words``."""
    if cut is None:
        return "all lengths (no training length cut)"
    return f"all lengths (1-{cut} words inside the training cut, {cut + 1}+ beyond)"


def rank_headers(cut: int | None) -> list[str]:
    inside = f"BLEU 1-{cut} words, inside the cut" if cut is not None else "BLEU inside"
    bleu = [f"{inside} [95% CI]", "BLEU all lengths [95% CI]"]
    return ["rank", "scorer", "seeds", *bleu, "chrF all lengths (mean of seeds)", "plateaued"]


EXPLORE_HEADERS = [
    *("comparison", "estimate, BLEU [95% CI, unadjusted]", "seeds", "p (unadjusted)"),
    MDE_HEADER,
]

METHOD = (
    "Each finding's contrast, claim and smallest effect of interest, its margin and the "
    "gates its claim needs were declared before the run, and the design was locked when "
    "training started (models/design.json: its hash, the code's commit, when the design "
    "was declared and when training started). A finding whose declaration is not the "
    "locked one, or whose study locked none, is exploratory: it keeps its reading but is "
    "left out of the family. A contrast is a weighted sum of configurations' mean scores "
    "over their seeds (BLEU, or log BLEU where a finding says so). Its interval covers "
    "training seeds and test sentences: the seed variance, pooled over every configuration "
    "with two or more seeds (a configuration with one seed borrows it), plus a paired "
    "bootstrap over test sentences stratified by length bucket; Student's t with "
    "Welch-Satterthwaite degrees of freedom. The primary parts of the confirmatory findings "
    f"form one family: each primary interval is at 1 - {ALPHA:g}/m (Bonferroni, m primary "
    f"parts), so their verdicts together err with probability at most {ALPHA:g}; "
    f"secondary parts and exploratory comparisons are at {1 - ALPHA:.0%}. With [L, U] the "
    "primary interval, signed so that the claimed direction is positive, and E the effect "
    "of interest: 'claimed direction, at least the effect of interest' when L > 0 and "
    "L >= E; 'claimed direction, not shown to reach it' when L > 0 and L < E <= U; "
    "'agrees with the literature' for that interval only where E is the paper's, the model "
    "tested is the paper's and the gates pass; 'smaller than claimed' when U < E; "
    "'opposite direction' when U < 0; 'equivalent' (or 'not equivalent') when the interval "
    "lies inside (wholly outside) the margin; 'inconclusive' otherwise. A claim about the "
    "no-attention baseline's own behaviour needs its gates: that it uses its source (its "
    "test BLEU inside the training lengths above a declared floor) and reaches a declared "
    "share of additive attention's BLEU there, each shown by the lower end of its 95% "
    "interval; where a gate fails the finding is 'not testable' (the baseline is at the "
    "floor), and Attention keeps its direction ('claimed direction, size not compared') "
    "but its size is not compared with the paper's. 'Not testable' also when the grid "
    "lacks the variants or the design's power at E, computed before the run from the grid "
    f"and an earlier run's variance components, is below {POWER:.0%}. An effect or margin "
    "no paper gives is labelled 'declared here'. MDE: the smallest effect the design "
    f"detects with {POWER:.0%} power at the interval's level. Variants that stopped before "
    "their plateau (at the step cap) are kept out of these tests. The training settings "
    "(batch size, learning rate and its schedule, dropout, curriculum, the stopping "
    "rule) were tuned on additive attention "
    'and the no-attention model only (docs/budget.md, "Decisions"); the other scorers '
    "train with them untuned, which may favour those two."
)


def design_notes(study: StudyRecord) -> str:
    """The design behind the verdicts, from ``eval/findings.json``: the family and its
    level, where the a-priori power came from, how the bootstrap drew sentences, and where
    the no-attention baseline stands against the paper's."""
    family, ratio = study.family, study.baseline_ratio
    notes = [
        f"Primary family: {family.size} tests, each interval at "
        f"{family.interval_level:.1%} ({family.correction})."
    ]
    if family.exploratory and family.exploratory_level is not None:
        notes.append(
            f"Left out of it as exploratory: {family.exploratory} primary part(s), each "
            f"interval at {family.exploratory_level:.1%} (the level the declared design "
            "gave them)."
        )
    notes.append(lock_note(study))
    if study.power_from:
        notes.append(f"A-priori power from {study.power_from}.")
    if study.bootstrap:
        notes.append(f"The bootstrap resampled {study.bootstrap}.")
    if ratio.measured is not None:
        notes.append(
            f"The no-attention baseline reaches {ratio.measured:.0%} of additive "
            f"attention's test BLEU inside the training lengths; Bahdanau et al.'s "
            f"RNNencdec-30 reaches {ratio.paper:.0%} of RNNsearch-30's "
            f"(Table 1)."
        )
    return " ".join(notes)


def lock_note(study: StudyRecord) -> str:
    """The design lock in one or two sentences: hash, commit, when the design was
    declared and when training started, and whether the one preceded the other."""
    lock = study.design_lock
    if lock is None:
        return "This findings.json records no design lock."
    if not lock.locked:
        return f"Design {lock.current_hash[:12]}: {lock.status}."
    dirty = " with uncommitted changes" if lock.dirty else ""
    preceded = {True: "before", False: "after", None: "at an unknown time relative to"}
    return (
        f"Design {lock.hash[:12]} locked at commit {(lock.commit or 'unknown')[:12]}{dirty}; "
        f"declared {lock.declared_at or 'at an unknown time'} ({lock.declared_from}), "
        f"{preceded[lock.preceded]} training started ({lock.training_started}); "
        f"{lock.status}."
    )


def lock_provenance(study: StudyRecord) -> dict[str, object]:
    """The design lock as the report's provenance lists it."""
    lock = study.design_lock
    if lock is None:
        return {"status": "not recorded in findings.json"}
    answer = {True: "yes", False: "no", None: "unknown"}
    return {
        "hash (sha256 of the design's canonical JSON)": lock.hash or "none: not locked",
        "hash now": lock.current_hash,
        "commit": (lock.commit or "unknown") + (" + uncommitted changes" if lock.dirty else ""),
        "declared at": lock.declared_at or "unknown",
        "declared at, found from": lock.declared_from or "-",
        "training started": lock.training_started or "unknown",
        "declared before training started": answer[lock.preceded],
        "status": lock.status,
    }


def gate_value(gate: GateRecord, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if gate.unit == "BLEU" else f"{value:.3f}"


def gate_rows(study: StudyRecord) -> list[list[str]]:
    """One row per gate under the main decoding: what it measures, the declared
    threshold, the measure with its interval, the result, the findings that need it."""
    needs: dict[str, list[str]] = {}
    for f in study.main:
        for g in f.gates:
            scope = "" if f.gated == "claim" else " (its size only)"
            needs.setdefault(g.name, []).append(f.title + scope)
    rows = []
    for g in study.gates.get(study.main_decoding, ()):
        measured = "-"
        if g.estimate is not None:
            measured = (
                f"{gate_value(g, g.estimate)} [{gate_value(g, g.low)}, {gate_value(g, g.high)}]"
            )
        unit = " BLEU" if g.unit == "BLEU" else " of additive's BLEU"
        rows.append(
            [
                g.name,
                g.what,
                f"at least {gate_value(g, g.threshold)}{unit}",
                measured,
                g.result,
                ", ".join(needs.get(g.name, [])) or "-",
                g.source,
            ]
        )
    return rows


def gates_of(finding: FindingRecord) -> str:
    """ "pass", "fail (claim)", "-": the gates a finding needs, in one cell."""
    if not finding.gates:
        return "-"
    result = "pass" if all(g.result == "pass" for g in finding.gates) else "fail"
    return f"{result} ({'claim' if finding.gated == 'claim' else 'size only'})"


def ci(estimate: float, low: float, high: float, digits: int = 2) -> str:
    return f"{estimate:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def bleu_ci(estimate: float, low: float, high: float) -> str:
    return f"{estimate:.2f} [{low:.2f}, {high:.2f}]"


def effect_of_interest(finding: FindingRecord) -> str:
    """The declared smallest effect of interest: "+7.57 BLEU", "within +-2 BLEU", "-"."""
    declared = finding.effect_of_interest
    if declared is None:
        return "-"
    if declared.claim == "equivalent":
        return f"within +-{declared.value:g} {finding.unit}"
    return f"{declared.value:+g} {finding.unit}"


def _where_from(finding: FindingRecord) -> str:
    """ " (declared here)" for an effect or margin no paper gives."""
    declared = finding.effect_of_interest
    return " (declared here)" if declared is not None and not declared.published else ""


def planned_power(finding: FindingRecord) -> str:
    """The design's a-priori power at the effect of interest: "45%", "-"."""
    return f"{finding.design.power:.0%}" if finding.design is not None else "-"


def verdict_rows(study: StudyRecord) -> list[list[str]]:
    """One line per finding: verdict under the main decoding and greedy, the main
    contrast's estimate with its interval (at its level), the declared effect of
    interest, the design's planned power at it, its MDE, seeds, and what decided it."""
    other = study.verdicts("greedy") if study.main_decoding != "greedy" else {}
    rows = []
    for f in study.main:
        main = f.main
        e = main.estimate if main is not None else None
        estimate = "-"
        if e is not None:
            estimate = ci(e.estimate, e.low, e.high)
            if abs(e.level - study.family.interval_level) > 1e-9:
                estimate += f" (at {e.level:.1%}{'' if f.confirmatory else ', exploratory'})"
        rows.append(
            [
                f.title,
                f.shown,
                other.get(f.title, "-"),
                estimate,
                f.unit,
                effect_of_interest(f),
                planned_power(f),
                f"{e.mde:.2f}" if e is not None else "-",
                str(e.seeds) if e is not None else "-",
                gates_of(f),
                f.why,
            ]
        )
    return rows


def per_seed(values: dict[str, dict[str, float]]) -> str:
    """Each seed's value, per configuration: "additive-fwd-h256: s1 +28.08, s2 +27.75;
    none-fwd-h256: s1 -9.80"."""
    return "; ".join(
        f"{config}: " + ", ".join(f"s{k} {v:+.2f}" for k, v in by_seed.items())
        for config, by_seed in values.items()
    )


def part_rows(finding: FindingRecord) -> list[list[str]]:
    rows = []
    for p in finding.parts:
        label = p.label + ("" if p.primary else " (secondary)")
        e = p.estimate
        if e is None:
            rows.append([label, _claim(p, finding), *["-"] * 6, p.state])
            continue
        rows.append(
            [
                label,
                _claim(p, finding),
                f"{ci(e.estimate, e.low, e.high)} {finding.unit}",
                f"{e.level:.1%}",
                per_seed(e.per_seed),
                format_p(e.p),
                format_p(p.p_adjusted) if p.p_adjusted is not None else "-",
                f"{e.mde:.2f}",
                p.state,
            ]
        )
    return rows


def _claim(part: PartRecord, finding: FindingRecord) -> str:
    """A part's claim with its equivalence margin and smallest effect of interest:
    "equivalent (+-2.00 BLEU)", "> 0 (effect of interest +7.57 BLEU)"."""
    claim = part.claim
    if part.margin:
        claim += f" (+-{part.margin:.2f} {finding.unit})"
    if part.effect is not None:
        claim += f" (effect of interest {part.effect:+.2f} {finding.unit})"
    return claim


def ranking_rows(ranking: pd.DataFrame, chrf: dict[str, float] | None = None) -> list[list[str]]:
    """One row per scorer of the ranking; ``chrf``: each scorer's mean chrF over the
    same seeds (:func:`ranking_chrf`), "-" where the data has none."""
    chrf = chrf or {}
    rows = []
    for r in ranking.itertuples():
        name = f"{r.scorer} (best, chosen on dev)" if r.reference else r.scorer
        score = chrf.get(r.scorer)
        rows.append(
            [
                r.rank,
                name,
                r.seeds,
                bleu_ci(r.bleu_inside, r.low_inside, r.high_inside),
                bleu_ci(r.bleu_all, r.low_all, r.high_all),
                f"{score:.2f}" if score is not None else "-",
                f"{r.plateaued}/{r.seeds}",
            ]
        )
    return rows


def ranking_chrf(table: pd.DataFrame, ranking: pd.DataFrame) -> dict[str, float]:
    """Each ranked scorer's chrF (all test lengths), the mean over the variants its
    ranking row averages: the findings' configuration (:class:`Grid`: source forward,
    the hidden size with the most seeds), the same seeds. A scorer whose variants the
    table does not match, or whose chrF is missing, is left out."""
    evaluated = table[table.evaluated] if "evaluated" in table else table
    needed = {"variant", "scorer", "reverse_source", "hidden_size", "seed", "rest", "chrf"}
    if ranking is None or not len(ranking) or evaluated.empty or not needed <= set(evaluated):
        return {}
    grid = Grid(evaluated.assign(plateaued=evaluated.get("plateaued", True)))
    chrf = evaluated.set_index("variant").chrf
    out = {}
    for r in ranking.itertuples():
        systems = grid.systems(r.scorer, confirmatory=False)
        seeds = set(json.loads(r.per_seed_inside)) if isinstance(r.per_seed_inside, str) else set()
        scores = chrf[list(systems.values())]
        if {str(s) for s in systems} == seeds and len(scores) and scores.notna().all():
            out[r.scorer] = float(scores.mean())
    return out


def design_lines(finding: FindingRecord) -> list[str]:
    """What was declared before the run, in words: the effect of interest with its source
    and reason, and the design's planned power at it; then the finding's notes."""
    lines = []
    declared, design = finding.effect_of_interest, finding.design
    if declared is not None:
        words = [
            f"Effect of interest, declared before the run: {effect_of_interest(finding)}"
            f"{_where_from(finding)}."
        ]
        if declared.source:
            words.append(declared.source)
        if declared.why:
            words.append(f"Why this size: {declared.why}.")
        lines.append(" ".join(words))
    if design is not None:
        seeds = ", ".join(f"{c}: {k}" for c, k in design.seeds.items())
        more = ""
        if design.power < POWER:
            more = (
                f"; {design.seeds_needed} seeds per configuration would give {POWER:.0%}"
                if design.seeds_needed
                else f"; more than 50 seeds per configuration would be needed for {POWER:.0%}"
            )
        lines.append(
            f"Design, before the run: power {design.power:.0%} at that effect "
            f"(seeds {seeds or '-'}{more})."
        )
    if finding.gates:
        scope = "its claim" if finding.gated == "claim" else "the comparison of its size"
        lines.append(
            f"Gates {scope} needs, declared before the run: "
            + "; ".join(_gate_words(g) for g in finding.gates)
            + "."
        )
    if not finding.confirmatory:
        change = finding.change
        lines.append(
            f"Exploratory: {finding.exploratory}"
            + (f" ({'; '.join(change.changes)})" if change is not None and change.changes else "")
            + "."
        )
    return lines + list(finding.notes)


def _gate_words(g: GateRecord) -> str:
    measured = "not measured"
    if g.estimate is not None:
        measured = (
            f"{gate_value(g, g.estimate)} [{gate_value(g, g.low)}, {gate_value(g, g.high)}] "
            f"at {g.level:.0%}"
        )
    return f"{g.name}, at least {gate_value(g, g.threshold)} ({measured}): {g.result}"


def answers(study: StudyRecord) -> list[str]:
    """What the study found, in words: each finding's ``answer`` under the main
    decoding ("<title>: <verdict>" where a finding has none)."""
    return [f.answer or f"{f.title}: {f.shown}" for f in study.main]


def best_scorer(
    study: StudyRecord, ranking: pd.DataFrame, comparisons: pd.DataFrame | None = None
) -> str:
    """The single "best" scorer (chosen on dev) with its test BLEU, qualified by its
    test comparison with the strongest other attention scorer on test (the exploratory
    "<other> - <best>" contrast): whether that difference is significant. "" when the
    study has no best scorer."""
    best = study.reference
    if not best or ranking is None or not len(ranking) or best not in set(ranking.scorer):
        return ""
    row = ranking.set_index("scorer").loc[best]
    text = (
        f"Best scorer, chosen on dev before test was read: {best}, test BLEU "
        f"{bleu_ci(row.bleu_inside, row.low_inside, row.high_inside)} inside the training "
        f"lengths, mean of {row.seeds} seed{'s' if row.seeds != 1 else ''}"
    )
    others = ranking[~ranking.scorer.isin([best, "none"])]
    if others.empty:
        return text + "; no other attention scorer to compare it with."
    other = others.sort_values("bleu_inside", ascending=False).scorer.iloc[0]
    text += f", rank {row['rank']} of {len(ranking)} on test"
    name = f"{other} - {best}"
    found = pd.DataFrame()
    if comparisons is not None and len(comparisons) and "name" in comparisons:
        main = study.main_decoding
        shown = comparisons[(comparisons.family == "exploratory") & (comparisons.decoding == main)]
        found = shown[shown.name == name]
    if found.empty:
        return text + f". It was not compared with {other}, the strongest other scorer on test."
    return f"{text}. {_compared(found.iloc[0], name, other)}"


def _compared(c, name: str, other: str) -> str:
    """The best scorer's exploratory comparison with ``other`` (a ``comparisons.csv``
    row), in words."""
    difference = f"{name}: {ci(c.estimate, c.low, c.high)} BLEU"
    only_test = "se_seed" in c and c.se_seed == 0  # no seed variance to pool: test sampling
    sampling = ", its interval covers test sentences only" if only_test else ""
    tested = f"exploratory, unadjusted p {format_p(c.p)}{sampling}"
    if c.high < 0:
        verdict = f"significantly above {other}, the strongest other scorer on test"
    elif c.low > 0:
        verdict = f"significantly below {other}, the strongest other scorer on test"
    else:
        verdict = (
            f"not significantly different from {other}, the strongest other scorer on test, "
            "so the test data do not single it out"
        )
    return f"It is {verdict} ({difference}; {tested})."


def exploratory_rows(comparisons: pd.DataFrame, decoding: str) -> list[list[str]]:
    rows = comparisons[(comparisons.family == "exploratory") & (comparisons.decoding == decoding)]
    return [
        [r.name, ci(r.estimate, r.low, r.high), r.seeds, format_p(r.p), f"{r.mde:.2f}"]
        for r in rows.itertuples()
    ]


def _updates(evaluated: pd.DataFrame) -> str:
    """ ", at 3,600-5,400 updates (cap 9,000)": the range of the evaluated variants' steps
    and the step cap (the same for every variant of a study, else left out)."""
    steps = evaluated.steps.dropna() if "steps" in evaluated else pd.Series(dtype=float)
    if steps.empty:
        return ""
    low, high = int(steps.min()), int(steps.max())
    span = f"{low:,}" if low == high else f"{low:,}-{high:,}"
    caps = {json.loads(c).get("max_steps") for c in evaluated.get("config", [])}
    cap = caps.pop() if len(caps) == 1 else None
    cap_text = f" (cap {cap:,})" if cap else ""
    return f", at {span} updates{cap_text}"


def answer(study: StudyRecord, table: pd.DataFrame) -> str:
    """The sentence after the study's answers (:func:`answers`): a warning when most
    variants did not converge, how many variants converged, and which verdicts depend on
    decoding. (The best scorer is further down: :func:`best_scorer`.)"""
    parts = []
    evaluated = table[table.evaluated]
    capped = list(study.excluded_from_confirmatory)
    if len(evaluated) and len(capped) > len(evaluated) / 2:
        parts.append(
            f"UNCONVERGED: {len(capped)} of {len(evaluated)} variants stopped at the step cap "
            "before their dev loss and dev BLEU plateaued; these numbers are for trying the "
            "pipeline, not for conclusions"
        )
    parts.append(
        f"{len(evaluated) - len(capped)} of {len(evaluated)} variants trained until the plateau "
        f"rule stopped them"
        + _updates(evaluated[~evaluated.variant.isin(capped)])
        + (
            f"; {len(capped)} stopped at the step cap and are left out of the confirmatory tests"
            if capped
            else ""
        )
    )
    dependent = study.decoding_dependent
    if "greedy" in study.findings and study.main_decoding != "greedy":
        parts.append(
            "Verdicts that change between beam search and greedy decoding: "
            + (", ".join(dependent) if dependent else "none")
        )
    return ". ".join(parts) + "."


LATE_GAIN_HEADERS = [
    *("configuration", "seeds", "stopped at (updates)"),
    "highest dev BLEU of any evaluation (mean)",
    "dev BLEU gain in the rule's window: median [min, max]",
]


def late_gains(curves: pd.DataFrame, evaluated: pd.DataFrame) -> pd.DataFrame:
    """How much each configuration's dev BLEU still rose just before its stop: per
    variant, the running best of the trainer's dev BLEU at the stop minus the same at
    the last evaluation a whole plateau window earlier (``patience`` evaluations of
    ``eval_every_steps`` updates, the window in which the plateau rule looks for
    progress); per configuration, the seeds' median, least and greatest gain.

    One row per configuration (``scorer``, ``reverse_source``, ``hidden_size``, ``seeds``,
    ``steps_low``/``steps_high``, ``best``, ``gain``/``gain_low``/``gain_high``,
    ``window``, ``delta``: the rule's ``bleu_progress_delta``); a variant whose curve
    is shorter than the window is left out."""
    columns = ["scorer", "reverse_source", "hidden_size", "seeds", "steps_low", "steps_high"]
    columns += ["best", "gain", "gain_low", "gain_high", "window", "delta"]
    if curves is None or curves.empty or not {"dev_bleu", "step"} <= set(curves) or evaluated.empty:
        return pd.DataFrame(columns=columns)
    by_variant = dict(tuple(curves[curves.dev_bleu.notna()].groupby("variant", sort=False)))
    per_variant = []
    for row in evaluated.itertuples():
        curve = by_variant.get(row.variant)
        if curve is None:
            continue
        settings = json.loads(row.config)
        window = int(settings.get("patience", 0)) * int(settings.get("eval_every_steps", 0))
        stop = int(curve.step.max())
        before = curve[curve.step <= stop - window]
        if window <= 0 or before.empty:
            continue
        per_variant.append(
            {
                "config": row.config,
                "scorer": row.scorer,
                "reverse_source": bool(row.reverse_source),
                "hidden_size": int(row.hidden_size),
                "steps": stop,
                "best": float(curve.dev_bleu.max()),
                "gain": float(curve.dev_bleu.max() - before.dev_bleu.max()),
                "window": window,
                "delta": float(settings.get("bleu_progress_delta", float("nan"))),
            }
        )
    if not per_variant:
        return pd.DataFrame(columns=columns)
    table = pd.DataFrame(per_variant)
    keys = ["config", "scorer", "reverse_source", "hidden_size"]
    rows = table.groupby(keys, sort=False).agg(
        seeds=("gain", "size"),
        steps_low=("steps", "min"),
        steps_high=("steps", "max"),
        best=("best", "mean"),
        gain=("gain", "median"),
        gain_low=("gain", "min"),
        gain_high=("gain", "max"),
        window=("window", "first"),
        delta=("delta", "first"),
    )
    rows = rows.reset_index().sort_values(["hidden_size", "reverse_source", "scorer"])
    return rows[columns].reset_index(drop=True)


def late_gain_note(gains: pd.DataFrame) -> str:
    """The sentence under the late-gain table: what the window is, the configuration
    whose dev BLEU rose most in it, and how far such a gain can be read."""
    if gains.empty:
        return ""
    windows = sorted({int(w) for w in gains.window})
    window = "/".join(f"{w:,}" for w in windows)
    several = gains[gains.seeds > 1]  # a one-seed gain is one noisy difference, no median
    top = (several if len(several) else gains).sort_values("gain").iloc[-1]
    name = f"{top.scorer}{' reversed' if top.reverse_source else ''} h{int(top.hidden_size)}"
    over = f"median of {int(top.seeds)} seeds" if top.seeds > 1 else "one seed"
    return (
        f"Dev BLEU (greedy, the trainer's dev sample, running best) gained over the last "
        f"{window} updates before each stop, the plateau rule's window (patience x the "
        f"evaluation interval). The rule counts a gain above {gains.delta.iloc[0]:g} BLEU "
        "at one evaluation as progress; slower rises do not hold off its learning-rate "
        f"halvings. Largest gain over several seeds: {name}, {top.gain:+.2f} ({over}) on a "
        f"best of {top.best:.1f}. A running best over noisy evaluations also rises on a flat "
        "curve, so a gain here is at most what that configuration still improved; the "
        "findings are about the models as the rule stopped them."
    )
