"""What the report says about the findings: the evaluate stage's ``eval/findings.json``,
``comparisons.csv`` and ``ranking.csv`` (:mod:`pipeline.study.findings`) as table rows and
one-line answers. Nothing here tests anything: the verdicts are the evaluate stage's."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from pipeline.study.findings import FLAT_MARGIN, LITERATURE_EFFECT
from pipeline.study.statistics import ALPHA, POWER, format_p

VERDICT_HEADERS = ["finding", "verdict", "greedy", "effect [95% CI]", "MDE (Holm level)", "seeds",
                   "why"]  # fmt: skip
# MDE: at the Holm level for the primary tests, at alpha for the equivalence parts
PART_HEADERS = ["contrast", "claim", "estimate [95% CI]", "per seed", "p", "p Holm", "MDE",
                "state"]  # fmt: skip
RANK_HEADERS = ["rank", "scorer", "seeds", "BLEU inside [95% CI]", "BLEU all lengths [95% CI]",
                "plateaued"]  # fmt: skip
EXPLORE_HEADERS = ["comparison", "estimate [95% CI]", "seeds", "p (unadjusted)", "MDE"]

METHOD = (
    f"Every interval covers both training seeds and test sentences: per seed, the contrast of "
    f"corpus BLEU scores (twins: equal in every other setting); its mean over seeds; a "
    f"variance that adds the spread between seeds to a paired bootstrap over test sentences "
    f"(stratified by length bucket); Student's t with Welch-Satterthwaite degrees of freedom. "
    f"The main contrast of each finding was declared before the run and is Holm-adjusted "
    f"with the others (family-wise alpha {ALPHA}). A part is supported or contradicted only "
    f"by a significant test, so either verdict needs the same evidence. 'Flat' is an "
    f"equivalence test (TOST) with a margin of {FLAT_MARGIN:.0%} of the model's BLEU on the "
    f"shortest sentences. MDE: the smallest effect this design detects with {POWER:.0%} "
    f"power at the Holm level; a finding with no significant result whose MDE exceeds the "
    f"literature's effect ({', '.join(f'{k}: {v:g}' for k, v in LITERATURE_EFFECT.items())} "
    f"BLEU) is not testable with this design. Variants stopped at the step cap are kept "
    f"out of these tests."
)


def ci(estimate: float, low: float, high: float, digits: int = 2) -> str:
    return f"{estimate:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def bleu_ci(estimate: float, low: float, high: float) -> str:
    return f"{estimate:.2f} [{low:.2f}, {high:.2f}]"


def verdict_rows(study: dict[str, Any]) -> list[list[str]]:
    """One line per finding: verdict under the main decoding and greedy, the main
    contrast's effect with its interval, its MDE, seeds, and what decided it."""
    main = study["main_decoding"]
    other = {f["title"]: f["verdict"] for f in study["findings"].get("greedy", [])}
    rows = []
    for f in study["findings"][main]:
        part = f["parts"][0] if f["parts"] and "estimate" in f["parts"][0] else None
        effect = ci(part["estimate"], part["low"], part["high"]) if part else "-"
        mde = f"{part['mde']:.2f}" if part else "-"
        greedy = other.get(f["title"], "-") if main != "greedy" else "-"
        rows.append([f["title"], f["verdict"], greedy, effect, mde,
                     str(part["seeds"]) if part else "-", f["why"]])  # fmt: skip
    return rows


def part_rows(finding: dict[str, Any]) -> list[list[str]]:
    rows = []
    for p in finding["parts"]:
        if "estimate" not in p:
            rows.append([p["label"], p["claim"], "-", "-", "-", "-", "-", p["state"]])
            continue
        claim = f"flat (+-{p['margin']:.2f})" if p["claim"] == "flat" else p["claim"]
        seeds = ", ".join(f"s{k}: {v:+.2f}" for k, v in p["per_seed"].items())
        rows.append([p["label"], claim, ci(p["estimate"], p["low"], p["high"]), seeds,
                     format_p(p["p"]), format_p(p["p_holm"]) if p["p_holm"] is not None else "-",
                     f"{p['mde']:.2f}", p["state"]])  # fmt: skip
    return rows


def ranking_rows(ranking: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in ranking.itertuples():
        name = f"{r.scorer} (best, chosen on dev)" if r.reference else r.scorer
        rows.append([r.rank, name, r.seeds, bleu_ci(r.bleu_inside, r.low_inside, r.high_inside),
                     bleu_ci(r.bleu_all, r.low_all, r.high_all),
                     f"{r.plateaued}/{r.seeds}"])  # fmt: skip
    return rows


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


def answer(study: dict[str, Any], ranking: pd.DataFrame, table: pd.DataFrame) -> str:
    """The first sentence of the report: the best scorer (chosen on dev) with its test
    BLEU, how many variants converged, and which verdicts depend on decoding."""
    best = study.get("reference")
    parts = []
    evaluated = table[table.status == "evaluated"]
    capped = study.get("excluded_from_confirmatory") or []
    if len(evaluated) and len(capped) > len(evaluated) / 2:
        parts.append(
            f"UNCONVERGED: {len(capped)} of {len(evaluated)} variants stopped at the step cap "
            "before their dev loss plateaued; these numbers are for trying the pipeline, not "
            "for conclusions"
        )
    if best and len(ranking):
        row = ranking.set_index("scorer").loc[best]
        parts.append(
            f"Best scorer (chosen on dev before test was read): {best}, test BLEU "
            f"{bleu_ci(row.bleu_inside, row.low_inside, row.high_inside)} inside the training "
            f"lengths, mean of {row.seeds} seed{'s' if row.seeds != 1 else ''}"
        )
    parts.append(
        f"{len(evaluated) - len(capped)} of {len(evaluated)} variants trained until their dev "
        f"loss plateaued"
        + _updates(evaluated[~evaluated.variant.isin(capped)])
        + (
            f"; {len(capped)} stopped at the step cap and are left out of the confirmatory tests"
            if capped
            else ""
        )  # fmt: skip
    )
    dependent = study.get("decoding_dependent") or []
    if "greedy" in study["findings"] and study["main_decoding"] != "greedy":
        parts.append(
            "Verdicts that change between beam search and greedy decoding: "
            + (", ".join(dependent) if dependent else "none")
        )
    return ". ".join(parts) + "."
