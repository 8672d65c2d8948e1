"""The report's figures say what they show: learning-curve panels titled by what differs
between their curves, attention heatmaps legible at a 1,280-pixel window, and the forest
plot's equivalence margins and smallest effects of interest."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from pipeline.report import figures
from pipeline.report.render import forest_rows
from pipeline.study.record import FindingRecord, PartRecord


@pytest.fixture
def drawn(monkeypatch):
    """The figures a test draws, kept open instead of saved."""
    kept = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, formats: kept.append(fig))
    return kept


def variants(rows: list[tuple[str, bool, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["scorer", "reverse_source", "hidden_size", "seed"])


def test_seed_spans():
    assert figures.seed_span([3, 1, 2, 4, 5]) == "1-5"
    assert figures.seed_span([1, 3, 4]) == "1, 3-4"
    assert figures.seed_span([1, 3, 5]) == "1, 3, 5"
    assert figures.seed_span([1, 2, 3, 7]) == "1-3, 7"
    assert figures.seed_span([2]) == "2"


def test_a_panel_is_titled_by_what_its_curves_share_and_what_differs():
    seeds = variants([("additive", False, 256, s) for s in range(1, 6)])
    assert figures.panel_title(seeds) == "additive, forward, h256: seeds 1-5"
    grid = variants(
        [(s, r, 256, k) for s in ("none", "additive") for r in (False, True) for k in (1, 2, 3)]
    )
    assert figures.panel_title(grid) == "h256: 2 scorers, forward and reversed, seeds 1-3"
    assert figures.panel_title(variants([("dot", True, 64, 2)])) == "dot, reversed, h64, seed 2"


def test_learning_curve_panels_have_titles_and_axis_titles(drawn, tmp_path):
    table = pd.DataFrame(
        {
            "variant": ["a1", "a2", "n1"],
            "scorer": ["additive", "additive", "none"],
            "reverse_source": False,
            "hidden_size": 32,
            "seed": [1, 2, 1],
            "config": ['{"s": "a"}', '{"s": "a"}', '{"s": "n"}'],
            "plateaued": [True, False, True],
        }
    )
    curves = pd.DataFrame(
        [
            {"variant": v, "epoch": e, "wall_time": 60.0 * e, "dev_bleu": 5.0 * e}
            for v in ("a1", "a2", "n1")
            for e in (1, 2, 3)
        ]
    )
    figures.learning_curves_figure(curves, table, tmp_path / "curves")
    left, right = drawn[0].axes
    assert left.get_title() == right.get_title() == "forward, h32: 2 scorers, seeds 1-2"
    assert (left.get_xlabel(), right.get_xlabel()) == ("epochs", "training minutes")
    assert left.get_ylabel() == right.get_ylabel() == "dev BLEU (greedy)"


def heatmap_panels(count: int, source: int, target: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [
        {
            "label": f"scorer{i}, forward source",
            "matrix": rng.dirichlet(np.ones(source), target),
            "source": [f"▁src{j}" for j in range(source)],
            "target": [f"▁tgt{j}" for j in range(target)],
        }
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("count", "source", "target", "columns"), [(6, 41, 45, 1), (6, 12, 15, 2), (1, 41, 60, 1)]
)
def test_heatmap_tick_labels_are_legible_at_1280_pixels(count, source, target, columns):
    """At most ``PAGE_WIDTH`` inches wide, the figure shows at its own size in the report
    at a 1,280-pixel window; its tick labels are >= 8 pt (>= 10.7 pixels) and each column
    and row is wider than a label's line, so neighbouring pieces do not overlap."""
    fig, axes = figures.heatmap_axes(heatmap_panels(count, source, target), "Test sentence 1")
    assert figures.heatmap_layout(heatmap_panels(count, source, target))[0] == columns
    fig.canvas.draw()
    width, _ = fig.get_size_inches()
    assert width <= figures.PAGE_WIDTH
    assert len(axes) == count
    for ax in axes:
        assert ax.get_xlabel() == "source" and ax.get_ylabel() == "target (generated)"
        box = ax.get_window_extent()
        points_per_column = box.width / fig.dpi * 72 / source
        points_per_row = box.height / fig.dpi * 72 / target
        for label in ax.get_xticklabels() + ax.get_yticklabels():
            assert label.get_fontsize() >= 8
            assert min(points_per_column, points_per_row) > label.get_fontsize()
        assert ax.get_xticklabels()[0].get_rotation() == 90


def comparisons() -> pd.DataFrame:
    """``eval/comparisons.csv`` rows: each configuration's per-seed values, nested."""
    two = json.dumps({"additive-fwd-h8": {"1": 25.0, "2": 25.4}, "none-fwd-h8": {"1": -20.0}})
    one = json.dumps({"additive-fwd-h8": {"1": 0.25, "2": 0.35}})
    base = dict(mde=1.5, per_seed=two, name="", margin=0.0)
    return pd.DataFrame(
        [
            dict(
                base,
                family="primary",
                finding="Attention",
                comparison="additive - none",
                estimate=5.0,
                low=4.0,
                high=6.0,
            ),
            dict(
                base,
                family="primary",
                finding="Scorer",
                comparison="additive - general",
                estimate=0.3,
                low=-0.5,
                high=1.1,
                margin=np.nan,
            ),
            dict(
                base,
                family="secondary",
                finding="Length",
                comparison="additive's change",
                estimate=-0.3,
                low=-0.4,
                high=-0.2,
                per_seed=one,
                mde=0.1,
            ),
            dict(
                base,
                family="exploratory",
                finding="",
                comparison="vs none",
                name="dot - none",
                estimate=4.0,
                low=2.0,
                high=6.0,
                margin=np.nan,
            ),
        ]
    )


def _finding(title: str, label: str, effect, margin: float, scale: str = "bleu"):
    """A finding with one part, as far as the forest plot reads it (label, effect of
    interest, margin, the finding's scale)."""
    part = PartRecord(label, "> 0", "agrees", True, effect, margin, None)
    return FindingRecord(title, "", "", "agrees", "", "", scale, None, None, (), (part,))


FINDINGS = [
    _finding("Attention", "additive - none", 2.0, 0.0),
    _finding("Scorer", "additive - general", None, 0.8),
    _finding("Length", "additive's change", None, 0.0, scale="log_bleu"),
]


def test_forest_rows_take_margin_effect_and_scale_from_the_findings():
    rows = forest_rows(comparisons(), FINDINGS)
    assert rows.effect.iloc[0] == 2.0 and np.isnan(rows.effect.iloc[1:]).all()
    assert rows.margin.iloc[1] == 0.8 and rows.margin.iloc[0] == 0.0
    assert np.isnan(rows.margin.iloc[3])  # exploratory: none
    assert list(rows.scale) == ["bleu", "bleu", "log_bleu", "bleu"]
    given = comparisons().assign(effect=[1.0, np.nan, np.nan, np.nan])
    assert forest_rows(given, FINDINGS).effect.iloc[0] == 1.0  # the table's own wins


def test_seeds_are_dots_only_within_one_configuration():
    assert figures.seed_values(comparisons().per_seed[2]) == [0.25, 0.35]
    assert figures.seed_values(comparisons().per_seed[0]) == []  # independent draws
    assert figures.seed_values('{"1": 4.8, "2": 5.2}') == [4.8, 5.2]


def test_the_forest_plot_shades_equivalence_margins_and_marks_effects(drawn, tmp_path):
    figures.forest_figure(forest_rows(comparisons(), FINDINGS), tmp_path / "forest")
    bleu, log_bleu = drawn[0].axes  # one panel per scale, each its own axis
    assert "log BLEU" in log_bleu.get_xlabel() and "log" not in bleu.get_xlabel()
    assert [t.get_text() for t in log_bleu.get_yticklabels()] == ["Length: additive's change"]
    bands = [c for c in bleu.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1  # only the part with margin > 0
    xs = bands[0].get_paths()[0].vertices[:, 0]
    assert (xs.min(), xs.max()) == pytest.approx((-0.8, 0.8))
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert 1 - 0.5 < ys.min() and ys.max() < 1 + 0.5  # on the Scorer row (y = 1)
    diamonds = [line for line in bleu.get_lines() if line.get_marker() == "D"]
    assert [(list(d.get_xdata()), list(d.get_ydata())) for d in diamonds] == [([2.0], [0])]
    dots = [line for line in log_bleu.get_lines() if line.get_marker() == "."]
    assert [list(d.get_xdata()) for d in dots] == [[0.25, 0.35]]
    assert not [
        line.get_xdata()
        for line in bleu.get_lines()
        if line.get_marker() == "." and len(line.get_xdata())
    ]
    labels = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert "equivalence margin" in labels and "smallest effect of interest" in labels


def test_the_forest_plot_without_margins_or_effects_draws_neither(drawn, tmp_path):
    rows = comparisons().assign(margin=0.0)
    figures.forest_figure(rows, tmp_path / "forest")
    (ax,) = drawn[0].axes  # no scale given: one BLEU panel
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert not [line for line in ax.get_lines() if line.get_marker() == "D"]
    labels = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert "equivalence margin" not in labels and "smallest effect of interest" not in labels
