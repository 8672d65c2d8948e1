"""The report's pages never claim more than the numbers show: they open with what the study
found for each question, qualify the single best scorer by its test comparison with the
runner-up, colour every verdict word, say which lengths the variants' scores cover, put
chrF beside BLEU, and name the commit they were built from (and whether it was clean)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace

import pandas as pd
import pytest

from pipeline.report.findings import (
    answers,
    best_scorer,
    late_gain_note,
    late_gains,
    lengths,
    rank_headers,
    ranking_chrf,
    ranking_rows,
)
from pipeline.report.pages import (
    Figures,
    PageInputs,
    render_html,
    render_markdown,
    variants_caption,
)
from pipeline.report.render import PIPELINE_OUTPUTS, commit_state, table_headers
from pipeline.report.writers import verdict_class
from pipeline.study.record import (
    Design,
    EffectOfInterest,
    FindingRecord,
    PartEstimate,
    PartRecord,
    StudyRecord,
)
from tests.support import study_record


def finding(title: str, verdict: str, answer: str = "", effect=None) -> FindingRecord:
    """A finding as ``eval/findings.json`` holds it (``pipeline.study.record``)."""
    estimate = PartEstimate(
        estimate=0.4,
        low=-0.3,
        high=1.1,
        level=0.99,
        p=0.1,
        mde=1.2,
        seeds=3,
        per_seed={"a-fwd-h8": {"1": 10.3, "2": 10.4}, "b-fwd-h8": {"1": -9.9, "3": -10.0}},
        se=0.3,
        se_seed=0.2,
        se_test=0.2,
        df=12.0,
    )
    part = PartRecord(f"{title.lower()} part", "> 0", verdict, True, effect, 0.0, 0.2, estimate)
    declared = None
    if effect is not None:
        declared = EffectOfInterest("> 0", effect, "The paper, Table 1.", "its gain")
    seeds = {"a-fwd-h8": 2, "b-fwd-h8": 2}
    design = Design(title, effect or 1.0, "> 0", "bleu", seeds, 0.5, 0.01, 0.45, False, 6)
    return FindingRecord(
        title=title,
        literature="a paper",
        criterion="a test",
        verdict=verdict,
        why="a reason",
        answer=answer,
        scale="bleu",
        effect_of_interest=declared,
        design=design,
        notes=(),
        parts=(part,),
    )


def study(*findings: FindingRecord) -> StudyRecord:
    beam = findings or (
        finding(
            "Attention",
            "claimed direction, at least the effect of interest",
            "Attention helps: +18 BLEU over none.",
            effect=2.0,
        ),
        finding("Scorer", "smaller than claimed", "Additive beats general by less than claimed."),
        finding("Reversal", "equivalent", "Reversing the source changes nothing that matters."),
        finding("Length", "inconclusive"),  # no answer: the title and verdict stand in
        finding("Hidden size", "not testable", ""),
        finding(
            "Depth", "opposite direction", "Deeper encoders translate worse, against the claim."
        ),
    )
    return study_record(beam)


def ranking() -> pd.DataFrame:
    rows = [
        ("general", False, 27.80),
        ("additive", True, 27.79),
        ("dot", False, 26.0),
        ("none", False, 9.8),
    ]
    return pd.DataFrame(
        [
            {
                "rank": i + 1,
                "scorer": s,
                "seeds": 3,
                "reference": ref,
                "plateaued": 3,
                "bleu_inside": b,
                "low_inside": b - 1,
                "high_inside": b + 1,
                "per_seed_inside": json.dumps({"1": b, "2": b, "3": b}),
                "bleu_all": b - 3,
                "low_all": b - 4,
                "high_all": b - 2,
                "decoding": "beam",
            }
            for i, (s, ref, b) in enumerate(rows)
        ]
    )


def comparisons(low: float = -1.2, high: float = 1.2) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "family": "exploratory",
                "finding": "",
                "comparison": "vs reference",
                "name": "general - additive",
                "estimate": (low + high) / 2,
                "low": low,
                "high": high,
                "p": 0.98,
                "mde": 2.0,
                "seeds": 3,
                "per_seed": "{}",
                "decoding": "beam",
            }
        ]
    )


def variant_table() -> pd.DataFrame:
    rows = []
    for scorer, chrf in (("general", 42.0), ("additive", 43.0), ("dot", 41.0), ("none", 25.0)):
        for seed in (1, 2, 3):
            rows.append(
                {
                    "variant": f"{scorer}-fwd-h8-s{seed}",
                    "scorer": scorer,
                    "reverse_source": False,
                    "hidden_size": 8,
                    "seed": seed,
                    "rest": "{}",
                    "plateaued": True,
                    "status": "finished",
                    "evaluated": True,
                    "chrf": chrf + seed,
                    "steps": 100,
                    "config": "{}",
                }
            )
    rows.append(dict(rows[0], variant="general-fwd-h4-s1", hidden_size=4, chrf=10.0))
    return pd.DataFrame(rows)


def context(**changes) -> PageInputs:
    base = {
        "title": "Tiny study",
        "study": study(),
        "comparisons": comparisons(),
        "table": variant_table(),
        "headers": table_headers(30),
        "rows": [],
        "failed": [],
        "provenance": {"git commit": "abc1234def56 + uncommitted changes"},
        "params": {},
        "ranking": ranking(),
        "chrf": {"general": 44.0, "additive": 45.0},
        "cut": 30,
    }
    return PageInputs(**{**base, **changes})


ANSWERS = [
    "Attention helps: +18 BLEU over none.",
    "Additive beats general by less than claimed.",
    "Reversing the source changes nothing that matters.",
    "Length: inconclusive",
    "Hidden size: not testable",
    "Deeper encoders translate worse, against the claim.",
]


def test_answers_in_words_with_the_title_and_verdict_where_a_finding_has_none():
    assert answers(study()) == ANSWERS


def test_the_markdown_report_opens_with_the_answers_then_qualifies_the_best_scorer():
    text = render_markdown(context())
    lines = text.splitlines()
    assert lines[0] == "# Tiny study" and lines[1] == ""
    assert lines[2 : 2 + len(ANSWERS)] == [f"- {a}" for a in ANSWERS]
    assert not text.startswith("Best") and text.index("Best scorer") > text.index("## Verdicts")
    best = next(line for line in lines if line.startswith("Best scorer"))
    assert "not significantly different from general" in best
    assert "general - additive: +0.00 [-1.20, +1.20] BLEU" in best
    assert "rank 2 of 4 on test" in best


def test_the_web_page_opens_with_the_answers():
    page = render_html(context())
    body = page.split("<body>", 1)[1]
    first = re.search(r"<h1>.*?</h1>\s*(<[a-z]+[^>]*>.*?</ul>)", body, re.S).group(1)
    assert first.startswith("<ul class='answers'>")
    assert re.findall(r"<li>(.*?)</li>", first) == [a.replace("'", "&#x27;") for a in ANSWERS]
    assert page.index("Best scorer") > page.index("id='verdicts'")


@pytest.mark.parametrize(
    ("low", "high", "says"),
    [
        (-1.2, 1.2, "not significantly different from general"),
        (-2.0, -0.5, "significantly above general"),
        (0.5, 2.0, "significantly below general"),
    ],
)
def test_the_best_scorer_is_qualified_by_its_test_comparison_with_the_runner_up(low, high, says):
    text = best_scorer(study(), ranking(), comparisons(low, high))
    assert text.startswith("Best scorer, chosen on dev before test was read: additive")
    assert says in text and "exploratory, unadjusted" in text


def test_a_best_scorer_never_compared_with_the_runner_up_says_so():
    text = best_scorer(study(), ranking(), comparisons().iloc[:0])
    assert "It was not compared with general" in text and "significant" not in text
    assert best_scorer(replace(study(), reference=None), ranking(), comparisons()) == ""


def test_every_verdict_word_has_its_colour():
    from pipeline.study.findings import VERDICTS

    classes = {v: verdict_class(v) for v in VERDICTS}
    assert len(set(classes.values()) - {"v-none"}) == 5  # no answer: one grey
    assert classes["inconclusive"] == classes["not testable"] == "v-none"
    assert verdict_class("something new") == "v-other"
    # a label is coloured by the verdict word it begins with
    assert verdict_class("not testable (the baseline is at the floor)") == "v-none"
    assert verdict_class("equivalent within +-2 BLEU (margin declared here)") == "v-equivalent"
    every = study(*(finding(f"F{i}", v) for i, v in enumerate(VERDICTS)))
    page = render_html(context(study=every))
    for verdict, css in classes.items():
        assert f"<td class='{css}'>{verdict}</td>" in page
        assert f".{css}{{" in page or f".{css}," in page  # styled
    page = render_html(context())
    assert "<span class='v-smaller'>smaller than claimed</span>" in page


def test_each_finding_states_its_effect_of_interest_and_planned_power():
    text = render_markdown(context())
    assert "| estimate [99.2% CI, Bonferroni over 6] | scale | effect of interest |" in text
    assert (
        "| Attention | claimed direction, at least the effect of interest | - "
        "| +0.40 [-0.30, +1.10] (at 99.0%) | BLEU | +2 BLEU | 45% |"
    ) in text
    assert "> 0 (effect of interest +2.00 BLEU)" in text
    assert "Effect of interest, declared before the run: +2 BLEU. The paper, Table 1." in text
    assert "Design, before the run: power 45% at that effect (seeds a-fwd-h8: 2, " in text
    assert "6 seeds per configuration would give 80%" in text
    # each configuration's seeds: independent draws, never differenced seed by seed
    assert "a-fwd-h8: s1 +10.30, s2 +10.40; b-fwd-h8: s1 -9.90, s3 -10.00" in text


def test_a_part_table_reads_an_equivalence_margin_and_a_log_scale():
    plain = finding("Scorer", "equivalent")
    part = replace(plain.parts[0], claim="equivalent", margin=2.0, effect=None)
    equivalent = replace(plain, parts=(part,), scale="log_bleu")
    text = render_markdown(context(study=study(equivalent)))
    assert "| scorer part | equivalent (+-2.00 log BLEU) | +0.40 [-0.30, +1.10] log BLEU |" in text


def test_the_variants_table_says_which_lengths_its_scores_cover():
    assert lengths(30) == "all lengths (1-30 words inside the training cut, 31+ beyond)"
    assert lengths(25) == "all lengths (1-25 words inside the training cut, 26+ beyond)"
    assert lengths(None) == "all lengths (no training length cut)"
    headers = table_headers(25)
    bleu = headers.index(f"test BLEU, {lengths(25)} [95% CI]")
    assert headers[bleu + 1] == "test chrF"  # beside it
    assert lengths(25) in variants_caption(25)
    text = render_markdown(context(cut=25, headers=headers))
    assert variants_caption(25) in text.split("## All variants", 1)[1]


def test_the_ranking_shows_the_seed_mean_chrf_beside_bleu():
    headers = rank_headers(30)
    assert headers[3] == "BLEU 1-30 words, inside the cut [95% CI]"
    assert headers[4:6] == ["BLEU all lengths [95% CI]", "chrF all lengths (mean of seeds)"]
    chrf = ranking_chrf(variant_table(), ranking())
    assert chrf == {"general": 44.0, "additive": 45.0, "dot": 43.0, "none": 27.0}
    rows = ranking_rows(ranking(), {"general": 44.0})
    assert rows[0][5] == "44.00" and rows[1][5] == "-"  # where the data has none: "-"


def test_chrf_is_left_out_where_the_ranking_averages_other_seeds():
    changed = ranking()
    changed.loc[0, "per_seed_inside"] = json.dumps({"1": 1.0, "2": 1.0})
    assert "general" not in ranking_chrf(variant_table(), changed)


def git(root, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=root, check=True, capture_output=True, text=True).stdout


def test_provenance_names_the_commit_and_whether_the_tree_had_changes(tmp_path):
    assert commit_state(tmp_path) == "unknown"  # not a git repository
    git(tmp_path, "init", "-q")
    for name in ("params.yaml", *(f"{p}/x" if "." not in p else p for p in PIPELINE_OUTPUTS)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "study")
    head = git(tmp_path, "rev-parse", "--short=12", "HEAD").strip()
    assert commit_state(tmp_path) == head
    (tmp_path / "dvc.lock").write_text("2\n")  # the pipeline's own outputs: still clean
    (tmp_path / "metrics" / "x").write_text("2\n")
    (tmp_path / "untracked.py").write_text("2\n")
    assert commit_state(tmp_path) == head
    (tmp_path / "params.yaml").write_text("2\n")
    assert commit_state(tmp_path) == f"{head} + uncommitted changes"


def _curve(variant: str, bleus: list[float], every: int = 200) -> pd.DataFrame:
    steps = [every * (i + 1) for i in range(len(bleus))]
    return pd.DataFrame({"variant": variant, "step": steps, "dev_bleu": bleus})


def _evaluated(*variants: tuple[str, str, int]) -> pd.DataFrame:
    settings = {"patience": 2, "eval_every_steps": 200, "bleu_progress_delta": 0.5}
    return pd.DataFrame(
        [
            {"variant": v, "scorer": scorer, "reverse_source": False, "hidden_size": 8}
            | {"seed": seed, "config": json.dumps({**settings, "scorer": scorer})}
            for v, scorer, seed in variants
        ]
    )


def test_late_gains_measure_each_seeds_rise_over_the_plateau_window_before_its_stop():
    curves = pd.concat(
        [
            _curve("none-s1", [1.0, 3.0, 4.0, 5.0, 7.0]),  # best 7 at the stop, 4 a window before
            _curve("none-s2", [2.0, 6.0, 5.0, 6.5]),  # 6.5 against 6.0
            _curve("none-s3", [1.0, 2.0, 2.5]),  # 2.5 against 1.0
            _curve("dot-s1", [5.0, 9.0, 8.0, 8.5, 8.9]),  # flat: the best came early
            _curve("dot-s2", [5.0, 6.0]),  # shorter than the window: left out
        ]
    )
    table = _evaluated(
        ("none-s1", "none", 1),
        ("none-s2", "none", 2),
        ("none-s3", "none", 3),
        ("dot-s1", "dot", 1),
        ("dot-s2", "dot", 2),
    )
    gains = late_gains(curves, table).set_index("scorer")
    assert gains.loc["none", ["seeds", "steps_low", "steps_high"]].tolist() == [3, 600, 1000]
    assert gains.loc["none", ["gain", "gain_low", "gain_high"]].tolist() == pytest.approx(
        [1.5, 0.5, 3.0]
    )
    assert gains.loc["none", "best"] == pytest.approx((7.0 + 6.5 + 2.5) / 3)
    assert gains.loc["dot", "seeds"] == 1 and gains.loc["dot", "gain"] == 0.0
    assert set(gains.window) == {400}


def test_the_report_shows_the_late_gains_and_names_the_largest_without_calling_it_converged():
    curves = pd.concat([_curve("none-s1", [1.0, 3.0, 4.0, 5.0, 7.0]), _curve("dot-s1", [9, 9, 9])])
    gains = late_gains(curves, _evaluated(("none-s1", "none", 1), ("dot-s1", "dot", 1)))
    text = render_markdown(context(late_gains=gains, figures=Figures(learning_curves="f/lc")))
    row = next(line for line in text.splitlines() if line.startswith("| none, forward, h8"))
    assert "+3.00" in row and "1,000" in row
    note = next(line for line in text.splitlines() if "the trainer's dev sample" in line)
    assert "last 400 updates" in note and "none h8, +3.00 (one seed) on a best of 7.0" in note
    assert "at most what that configuration still improved" in note
    assert "dot, forward, h8" in render_html(context(late_gains=gains))


def test_the_largest_late_gain_named_is_a_median_over_seeds_where_there_is_one():
    curves = pd.concat(
        [
            _curve("none-s1", [1.0, 2.0, 3.0]),  # +2 over the window
            _curve("none-s2", [1.0, 2.0, 2.0]),  # +1
            _curve("dot-s1", [1.0, 1.0, 6.0]),  # +5, one seed: one noisy difference
        ]
    )
    table = _evaluated(("none-s1", "none", 1), ("none-s2", "none", 2), ("dot-s1", "dot", 1))
    note = late_gain_note(late_gains(curves, table))
    assert "Largest gain over several seeds: none h8, +1.50 (median of 2 seeds)" in note


def test_the_report_says_what_the_test_set_was_kept_from():
    """corpus.json's record of fetch.split.exclude_from_test becomes one sentence, in the
    provenance and beside the design notes of the findings."""
    from pipeline.report.render import test_set_note

    corpus = {"exclude_from_test": {"path": "data/x.txt", "sentences": 5490, "in_corpus": 5400}}
    note = test_set_note(corpus)
    assert note.startswith("The test set holds none of the 5,490 source sentences listed in")
    assert "5,400 of them occur" in note
    page = render_markdown(context(provenance={"git commit": "abc", "test set": note}))
    findings = page.split("Findings in detail", 1)[1]
    assert "holds none of the 5,490" in findings.split("###", 1)[0]
    unguarded = test_set_note({"exclude_from_test": {"path": None, "sentences": 0}})
    assert "without regard" in unguarded and "5,490" not in unguarded
    assert "without regard" in test_set_note({})
