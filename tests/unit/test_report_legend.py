"""The BLEU-by-length figure's legend sits outside its curves."""

from __future__ import annotations

import matplotlib

from pipeline.report import figures
from pipeline.report.data import length_means
from tests.unit.test_report_length import by_length

matplotlib.use("Agg")


def test_the_length_figures_legend_lies_below_the_plot_not_over_the_curves(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, formats: drawn.append(fig))
    rows = by_length({("additive", False): [1, 2, 3], ("none", False): [1, 2]})
    figures.bleu_by_length_figure(length_means(rows), rows, tmp_path / "f")
    fig = drawn[0]
    fig.canvas.draw()
    (ax,) = fig.axes
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    plot = ax.get_window_extent(renderer)
    assert legend.y1 < plot.y0  # wholly below the axes: no curve under it
