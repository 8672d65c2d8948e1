"""Findings: what the literature reports, the test stated in advance, and the verdict.

Each finding names its criterion before looking at the numbers and returns one of
:data:`VERDICTS`:

- ``agrees`` / ``disagrees``: the criterion's test came out for / against the claim on
  every twin pair (hidden size, order, seed) the grid offers;
- ``inconclusive``: mixed or non-significant results, or a direction that agrees with a
  magnitude far from the literature's;
- ``not testable``: the grid cannot test the claim (e.g. hidden sizes below 512).

Significance is sacreBLEU's paired approximate randomization test, Holm-adjusted over
every comparison of the study (``eval/significance.csv``); pairs are twins matched on
every other setting (:mod:`pipeline.twins`). A finding whose variants were stopped by a
budget before their dev BLEU plateaued says so, and one resting on a single seed says
its intervals cover test sampling only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pipeline.evaluation import format_p
from pipeline.report.data import StudyData

VERDICTS = ("agrees", "disagrees", "inconclusive", "not testable")
ALPHA = 0.05
"""Family-wise error rate of the Holm-adjusted tests."""
CLEAR_DROP = 0.10
"""Length effect: a relative BLEU change beyond 10% between the shortest and the longest
bucket inside the training lengths is a fall (or rise); within it, flat."""
SMALL_GAP = 2.0
"""Additive vs general: Britz et al. (2017) report +0.2-0.7 BLEU; a significant gap
above 2 BLEU agrees in direction but not in size."""


@dataclass(frozen=True)
class Finding:
    title: str
    literature: str
    criterion: str
    measured: str
    verdict: str
    caveats: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} not in {VERDICTS}")


# ------------------------------------------------------------------------- helpers
def direction_verdict(rows: pd.DataFrame, positive: bool = True, alpha: float = ALPHA) -> str:
    """Verdict of a set of paired tests (``delta``, ``p_holm``) on a claim of sign
    ``positive``: all significant the claimed way -> agrees; some significant against
    it and none for it -> disagrees; anything else -> inconclusive."""
    if rows.empty:
        return "not testable"
    sign = np.sign(rows.delta) * (1 if positive else -1)
    significant = rows.p_holm < alpha
    if bool((significant & (sign > 0)).all()):
        return "agrees"
    if bool((significant & (sign < 0)).any()) and not bool((significant & (sign > 0)).any()):
        return "disagrees"
    return "inconclusive"


def _tests_text(rows: pd.DataFrame) -> str:
    return "; ".join(
        f"{r.variant} vs {r.baseline}: {r.delta:+.2f} (p_Holm {format_p(r.p_holm)})"
        for r in rows.itertuples()
    )


def _caveats(data: StudyData, variants) -> list[str]:
    """What the reader must know about the variants a finding rests on."""
    table = data.evaluated.set_index("variant")
    used = [v for v in dict.fromkeys(variants) if v in table.index]
    notes = []
    flagged = [v for v in used if not table.loc[v, "plateaued"]]
    if flagged:
        notes.append(
            f"rests on {len(flagged)} of {len(used)} variants stopped before their dev BLEU "
            f"plateaued ({', '.join(flagged[:4])}{', ...' if len(flagged) > 4 else ''}): "
            "differences may reflect learning speed as much as the final models"
        )
    configs = table.loc[used, "config"] if used else pd.Series(dtype=str)
    seeds = table[table.config.isin(configs)].groupby("config").seed.nunique()
    if len(seeds) and int(seeds.min()) < 2:
        notes.append("some variants have one seed: their intervals cover test sampling only")
    return notes


def _largest_hidden(table: pd.DataFrame) -> int | None:
    return None if table.empty else int(table.hidden_size.max())


def best_attention_scorer(table: pd.DataFrame) -> str | None:
    """Highest mean test BLEU among attention scorers at the largest hidden size,
    forward source."""
    size = _largest_hidden(table)
    rows = table[(table.scorer != "none") & (table.hidden_size == size) & ~table.reverse_source]
    return None if rows.empty else str(rows.groupby("scorer").bleu.mean().idxmax())


# ---------------------------------------------------------------------- the length
def _bucket_change(by_length: pd.DataFrame, variant: str, first: str, last: str) -> dict:
    rows = by_length[by_length.variant == variant].set_index("bucket")
    a, b = rows.loc[first], rows.loc[last]
    change = (b.bleu - a.bleu) / a.bleu if a.bleu > 0 else np.nan
    return {
        "variant": variant,
        "first": a,
        "last": b,
        "change": change,
        "separated": bool(b.bleu_high < a.bleu_low or b.bleu_low > a.bleu_high),
    }


def _clear_fall(change: dict) -> bool:
    """A bucket change that counts as a fall: beyond :data:`CLEAR_DROP`, intervals apart."""
    return change["change"] < -CLEAR_DROP and change["separated"]


def _describe_change(c: dict, first: str, last: str) -> str:
    a, b = c["first"], c["last"]
    return (
        f"{c['variant']}: {first} {a.bleu:.1f} [{a.bleu_low:.1f}, {a.bleu_high:.1f}] -> "
        f"{last} {b.bleu:.1f} [{b.bleu_low:.1f}, {b.bleu_high:.1f}] ({c['change']:+.0%})"
    )


def length_effect(data: StudyData) -> Finding:
    literature = (
        "Without attention (RNNencdec) BLEU falls as sentences get longer; with attention "
        "(RNNsearch) it stays nearly flat (Bahdanau et al. 2014, Fig. 2; Cho et al. 2014)."
    )
    criterion = (
        f"Inside the training lengths, shortest vs longest bucket, every seed: the "
        f"no-attention model falls by more than {CLEAR_DROP:.0%} with non-overlapping 95% "
        f"intervals, and the best attention scorer changes by less than {CLEAR_DROP:.0%} "
        "(or rises). It disagrees if the no-attention model does not fall, or if the best "
        f"attention scorer falls by more than {CLEAR_DROP:.0%} with non-overlapping "
        "intervals. Buckets beyond the training cut are extrapolation and are described, "
        "not tested."
    )
    table, by_length = data.evaluated, data.by_length
    size, best = _largest_hidden(table), best_attention_scorer(table)
    inside = list(dict.fromkeys(by_length[by_length.training_range == "inside"].bucket))
    beyond = list(dict.fromkeys(by_length[by_length.training_range == "beyond"].bucket))
    base = table[(table.scorer == "none") & ~table.reverse_source & (table.hidden_size == size)]
    attn = table[(table.scorer == best) & ~table.reverse_source & (table.hidden_size == size)]
    if base.empty or attn.empty or len(inside) < 2:
        why = "needs a no-attention and an attention variant and two buckets inside the cut"
        return Finding("Length", literature, criterion, why.capitalize() + ".", "not testable")
    first, last = inside[0], inside[-1]
    none_changes = [_bucket_change(by_length, v, first, last) for v in base.variant]
    attn_changes = [_bucket_change(by_length, v, first, last) for v in attn.variant]
    # one test of a fall for both models: beyond the threshold *and* with non-overlapping
    # intervals; a point estimate alone does not count against the attention model
    flat = [c["change"] >= -CLEAR_DROP for c in attn_changes]
    if all(map(_clear_fall, none_changes)) and all(flat):
        verdict = "agrees"
    elif all(c["change"] >= 0 for c in none_changes) or all(map(_clear_fall, attn_changes)):
        verdict = "disagrees"
    else:
        verdict = "inconclusive"
    measured = "Inside the cut: " + "; ".join(
        _describe_change(c, first, last) for c in none_changes + attn_changes
    )
    if beyond:
        far = beyond[-1]
        tails = [
            _describe_change(_bucket_change(by_length, v, last, far), last, far)
            for v in (base.variant.iloc[0], attn.variant.iloc[0])
        ]
        measured += ". Beyond the cut (extrapolation, both models): " + "; ".join(tails)
    variants = [*base.variant, *attn.variant]
    return Finding("Length", literature, criterion, measured + ".", verdict,
                   _caveats(data, variants))  # fmt: skip


# --------------------------------------------------------------------- the others
def attention_vs_none(data: StudyData) -> Finding:
    literature = (
        "Attention (RNNsearch, additive scorer) translates better than the RNN "
        "Encoder-Decoder without it (Bahdanau et al. 2014, Table 1)."
    )
    criterion = (
        "additive minus none > 0, Holm-adjusted paired AR p < 0.05, for every twin pair "
        "(order, hidden size, seed)."
    )
    sig = data.significance
    rows = sig[(sig.comparison == "vs_none") & sig.variant.map(_scorer_of(data)).eq("additive")]
    if rows.empty:
        return Finding("Attention", literature, criterion, "Needs additive and none twins.",
                       "not testable")  # fmt: skip
    measured = f"{_tests_text(rows)}."
    return Finding("Attention", literature, criterion, measured, direction_verdict(rows),
                   _caveats(data, [*rows.variant, *rows.baseline]))  # fmt: skip


def reversal_effect(data: StudyData) -> Finding:
    literature = (
        "Reversing the source helps the model without attention (Sutskever et al. 2014: "
        "25.9 -> 30.6 BLEU); attention makes the order matter much less."
    )
    criterion = (
        "none reversed minus none forward > 0, Holm-adjusted paired AR p < 0.05, for every "
        "twin pair (hidden size, seed). The attention scorers' mean reversal gain is given "
        "for comparison."
    )
    sig = data.significance
    scorer = sig.variant.map(_scorer_of(data))
    reversal = sig[sig.comparison == "reversed_vs_forward"]
    rows = reversal[scorer[reversal.index] == "none"]
    if rows.empty:
        return Finding("Reversal", literature, criterion, "Needs reversed and forward "
                       "no-attention twins.", "not testable")  # fmt: skip
    attn = reversal[scorer[reversal.index] != "none"]
    measured = _tests_text(rows)
    if len(attn):
        significant = attn[attn.p_holm < ALPHA]
        gains = int((significant.delta > 0).sum())
        measured += (
            f". With attention: mean {attn.delta.mean():+.2f} BLEU over {len(attn)} twin "
            f"pairs, {len(significant)} significant ({len(significant) - gains} lower with "
            f"reversal, {gains} higher)"
        )
    return Finding("Reversal", literature, criterion, measured + ".", direction_verdict(rows),
                   _caveats(data, [*rows.variant, *rows.baseline]))  # fmt: skip


def additive_vs_multiplicative(data: StudyData) -> Finding:
    literature = (
        "Additive attention is slightly but consistently better than multiplicative "
        "(general) attention: +0.2-0.7 BLEU (Britz et al. 2017, Table 6)."
    )
    criterion = (
        "additive minus general > 0, Holm-adjusted paired AR p < 0.05, for every twin pair; "
        f"a mean gap above {SMALL_GAP:.0f} BLEU agrees in direction, not in size "
        "(inconclusive)."
    )
    sig = data.significance
    rows = sig[sig.comparison == "additive_vs_general"]
    if rows.empty:
        return Finding("Scorer", literature, criterion, "Needs additive and general twins.",
                       "not testable")  # fmt: skip
    verdict = direction_verdict(rows)
    measured = f"{_tests_text(rows)}; mean {rows.delta.mean():+.2f} BLEU."
    if verdict == "agrees" and rows.delta.mean() > SMALL_GAP:
        verdict = "inconclusive"
        measured += " Direction agrees; the gap is far above the literature's 0.2-0.7."
    return Finding("Scorer", literature, criterion, measured, verdict,
                   _caveats(data, [*rows.variant, *rows.baseline]))  # fmt: skip


def hidden_size_effect(data: StudyData) -> Finding:
    literature = (
        "Unscaled dot-product scores grow with the hidden size and hurt at large sizes "
        "(512 -> 1024), which scaling or additive scoring avoids (Britz et al. 2017; "
        "Vaswani et al. 2017, sec. 3.2.1)."
    )
    criterion = (
        "Needs hidden sizes of at least 512 and 1024: dot minus scaled_dot twins would have "
        "to turn significantly negative at the larger size."
    )
    table = data.evaluated
    sizes = sorted(int(s) for s in table.hidden_size.dropna().unique())
    described = []
    for scorer in ("dot", "scaled_dot", "general", "additive"):
        rows = data.first_seeds
        rows = rows[(rows.scorer == scorer) & ~rows.reverse_source].sort_values("hidden_size")
        if len(rows) > 1:
            described.append(f"{scorer} " + " -> ".join(f"{b:.1f}" for b in rows.bleu))
    measured = f"Hidden sizes in the grid: {', '.join(map(str, sizes))}. " + (
        f"Forward BLEU by size: {'; '.join(described)}." if described else ""
    )
    testable = len([s for s in sizes if s >= 512]) >= 2
    return Finding(
        "Hidden size",
        literature,
        criterion,
        measured,
        "inconclusive" if testable else "not testable",
    )


def _scorer_of(data: StudyData) -> dict[str, str]:
    return dict(zip(data.table.variant, data.table.scorer))


def all_findings(data: StudyData) -> list[Finding]:
    if data.evaluated.empty:
        return []
    return [
        length_effect(data),
        attention_vs_none(data),
        reversal_effect(data),
        additive_vs_multiplicative(data),
        hidden_size_effect(data),
    ]


# ------------------------------------------------------------------ report tables
def scorer_ranking(data: StudyData) -> pd.DataFrame:
    """The scorers at the largest hidden size, forward source, ranked by mean test BLEU
    over seeds, with the Holm-adjusted tests against the evaluate stage's reference
    scorer (the best by mean BLEU over all its variants, ``vs_best``; in
    ``ranking.attrs["reference"]``) and against ``none``.

    ``vs_best_delta`` is this scorer minus the reference over their twin pairs (mean),
    so the direction of a significant difference shows. ``ranking.attrs["seed_range"]``
    is the largest spread between seeds of one ranked scorer, ``(range, scorer)`` (None
    with one seed each): a gap smaller than that is within training variance, which the
    test-set p-values do not cover."""
    table = data.evaluated
    size = _largest_hidden(table)
    rows = table[(table.hidden_size == size) & ~table.reverse_source]
    if rows.empty:
        return pd.DataFrame()
    sig, scorer_of = data.significance, _scorer_of(data)
    duels = sig[sig.comparison.isin(["vs_best", "additive_vs_general"])]
    references = duels[duels.comparison == "vs_best"].baseline.map(scorer_of).unique()
    reference = str(references[0]) if len(references) else None
    out = []
    for scorer, group in rows.groupby("scorer"):
        mine, theirs = duels.variant.isin(group.variant), duels.baseline.isin(group.variant)
        vs_reference = duels[
            (mine & duels.baseline.map(scorer_of).eq(reference))
            | (theirs & duels.variant.map(scorer_of).eq(reference))
        ]
        vs_none = sig[(sig.comparison == "vs_none") & sig.variant.isin(group.variant)]
        signed = vs_reference.delta.where(vs_reference.variant.isin(group.variant),
                                          -vs_reference.delta)  # fmt: skip
        out.append({
            "scorer": scorer,
            "seeds": len(group),
            "bleu_mean": group.bleu.mean(),
            "bleu_min": group.bleu.min(),
            "bleu_max": group.bleu.max(),
            "bleu_low": group.bleu_low.min(),
            "bleu_high": group.bleu_high.max(),
            "vs_best_p": vs_reference.p_holm.max() if len(vs_reference) else np.nan,
            "vs_best_delta": signed.mean() if len(vs_reference) else np.nan,
            "vs_none_p": vs_none.p_holm.max() if len(vs_none) else np.nan,
            "plateaued": f"{int(group.plateaued.sum())}/{len(group)}",
        })  # fmt: skip
    ranked = pd.DataFrame(out).sort_values("bleu_mean", ascending=False, ignore_index=True)
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    ranked.attrs["reference"] = reference
    gaps = ranked.bleu_max - ranked.bleu_min  # 0 for a single seed
    widest = gaps.idxmax()
    ranked.attrs["seed_range"] = (
        (float(gaps[widest]), str(ranked.scorer[widest])) if (ranked.seeds > 1).any() else None
    )
    return ranked


def seed_spread(data: StudyData) -> pd.DataFrame:
    """Configurations trained with more than one seed: mean and spread of test BLEU
    across seeds next to each seed's test-set bootstrap interval."""
    table = data.evaluated
    out = []
    for _, group in table.groupby("config", sort=False):
        if len(group) < 2:
            continue
        first = group.sort_values("seed").iloc[0]
        out.append({
            "configuration": re.sub(r"-s\d+(?=-|$)", "", first.variant),
            "seeds": ", ".join(str(s) for s in sorted(group.seed)),
            "bleu_mean": group.bleu.mean(),
            "bleu_sd": group.bleu.std(ddof=1),
            "bleu_range": group.bleu.max() - group.bleu.min(),
            "intervals": "; ".join(
                f"s{r.seed}: {r.bleu:.2f} [{r.bleu_low:.2f}, {r.bleu_high:.2f}]"
                for r in group.sort_values("seed").itertuples()
            ),
        })  # fmt: skip
    return pd.DataFrame(out)
