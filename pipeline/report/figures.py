"""The report's figures: BLEU by length, the forest plot, learning curves, heatmaps."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window (and no display needed)

import matplotlib.pyplot as plt  # noqa: E402

from pipeline.plotting import MAX_TARGET_ROWS, draw_heatmap, save_figure  # noqa: E402
from pipeline.scorers import catalogue  # noqa: E402

# --------------------------------------------------------------- study figures
FORMATS = ("png", "svg")
_LINESTYLE = {False: "-", True: "--"}


def _colours(scorers) -> dict[str, str]:
    return catalogue.colours(scorers)


def seed_span(seeds) -> str:
    """``1-5``, ``1, 3-4`` or ``2``: a set of seeds, runs collapsed."""
    seeds = sorted({int(s) for s in seeds})
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def panel_title(rows, seeds_as: str = "seeds") -> str:
    """A panel's title from the variants drawn in it (``scorer``, ``reverse_source``,
    ``hidden_size``, ``seed``): what they share, then what differs between its curves:
    "additive, forward, h256: seeds 1-5"; "h256: 6 scorers, forward and reversed, seeds
    1-3". ``seeds_as``: how the seeds are named ("mean of seeds" for seed means)."""
    shared, differs = [], []
    scorers = list(dict.fromkeys(rows["scorer"]))
    if len(scorers) == 1:
        shared.append(str(scorers[0]))
    else:
        differs.append(f"{len(scorers)} scorers")
    orders = sorted({bool(r) for r in rows["reverse_source"]})
    names = ["reversed" if r else "forward" for r in orders]
    (shared if len(orders) == 1 else differs).append(" and ".join(names))
    sizes = sorted({int(h) for h in rows["hidden_size"]})
    if len(sizes) == 1:
        shared.append(f"h{sizes[0]}")
    else:
        differs.append("hidden sizes " + ", ".join(map(str, sizes)))
    seeds = sorted({int(s) for s in rows["seed"]})
    if len(seeds) == 1 and seeds_as == "seeds":
        shared.append(f"seed {seeds[0]}")
    else:
        plural = seeds_as if len(seeds) > 1 else seeds_as.removesuffix("s")
        differs.append(f"{plural} {seed_span(seeds)}")
    return ", ".join(shared) + (": " + ", ".join(differs) if differs else "")


def bleu_by_length_figure(means, by_length, path: Path) -> list[Path]:
    """Bahdanau et al. (2014) Fig. 2 for this study: BLEU vs source length, small
    multiples: one panel per hidden size and source order, one line per configuration:
    the mean over its seeds (``means``, :func:`pipeline.report.data.length_means`) with a
    95% band over the seeds; a configuration with one seed is dotted, its band covers
    test sentences only. Buckets beyond the training cut are shaded and labelled as
    extrapolation. ``by_length``: the per-seed rows, for the panels' titles."""
    panels = sorted(means.groupby(["hidden_size", "reverse_source"]).groups)
    colours = _colours(means["scorer"].unique())
    figsize = (5.2 * len(panels), 4.0)
    fig, axes = plt.subplots(1, len(panels), figsize=figsize, squeeze=False, sharey=True)
    labels = list(dict.fromkeys(means["bucket"]))
    ranges = dict(zip(means["bucket"], means["training_range"]))
    beyond = [i for i, b in enumerate(labels) if ranges.get(b) == "beyond"]
    ticks = [f"{b}\nbeyond" if ranges.get(b) == "beyond" else b for b in labels]
    for ax, (size, reversed_source) in zip(axes[0], panels):
        panel = means[(means["hidden_size"] == size) & (means["reverse_source"] == reversed_source)]
        if beyond:
            ax.axvspan(beyond[0] - 0.5, beyond[-1] + 0.5, color="0.9", zorder=0)
            note = "beyond the training cut:\nextrapolation"
            ax.text(beyond[0] - 0.4, 0.02, note, fontsize=7, transform=ax.get_xaxis_transform())
        for _, curve in panel.groupby(["config", "scorer"], sort=False):
            scorer, seeds = curve["scorer"].iloc[0], int(curve["seeds"].max())
            one_seed = seeds == 1
            x = [labels.index(b) for b in curve["bucket"]]
            label = f"{scorer} ({seeds} seed{'' if one_seed else 's'}"
            label += ", band: test sentences only)" if one_seed else ")"
            colour = colours[scorer]
            line = dict(color=colour, marker="o", markersize=3, label=label)
            ax.plot(x, curve["bleu"], ":" if one_seed else "-", **line)
            ax.fill_between(x, curve["low"], curve["high"], color=colour, alpha=0.12, linewidth=0)
        ax.set_xticks(range(len(labels)), ticks, fontsize=8)
        ax.set_xlabel("source sentence length (words)")
        ax.set_ylabel("test BLEU, mean over seeds")
        same = (by_length["hidden_size"] == size) & (by_length["reverse_source"] == reversed_source)
        shown = by_length[same]
        ax.set_title(panel_title(shown, seeds_as="mean of seeds"), fontsize=10)
        ax.grid(alpha=0.3)
        # below the panel, never over a curve (the baseline's runs along the bottom)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.27))
    fig.tight_layout()
    return save_figure(fig, path, FORMATS)


HEATMAP_FONT = 8.5
"""Tick labels (subword pieces) of the attention heatmaps, in points."""
HEATMAP_CELL = 0.16
"""Inches per source column and target row: wider than a label's line (no overlap)."""
PAGE_WIDTH = 11.0
"""Inches the report's column shows unscaled: 1,068 CSS pixels (``index.html``'s body at
a 1,280-pixel window) at 96 pixels per inch. A figure no wider shows its tick labels at
their size (8.5 pt: 11 pixels)."""


def heatmap_layout(panels: list[dict]) -> tuple[int, int, float, float]:
    """``(columns, rows, width, height)`` in inches of the heatmap figure: each cell
    ``HEATMAP_CELL`` wide and high, room for the longest piece's label, two panels a row
    when they fit ``PAGE_WIDTH``, else one."""
    char = 0.6 * HEATMAP_FONT / 72  # a piece's character, in inches
    source = max(len(p["source"]) for p in panels)
    target = max(len(p["target"]) for p in panels)
    longest_source = max((len(s) for p in panels for s in p["source"]), default=1)
    longest_target = max((len(t) for p in panels for t in p["target"]), default=1)
    panel_width = source * HEATMAP_CELL + longest_target * char + 0.5
    panel_height = target * HEATMAP_CELL + longest_source * char + 0.9
    colorbar = 0.9
    cols = 2 if len(panels) > 1 and 2 * panel_width + colorbar <= PAGE_WIDTH else 1
    rows = (len(panels) + cols - 1) // cols
    width = min(PAGE_WIDTH, cols * panel_width + colorbar)
    return cols, rows, width, rows * panel_height + 0.6


def heatmap_axes(panels: list[dict], title: str):
    """The heatmap figure, unsaved: ``(figure, axes drawn)``. See
    :func:`heatmap_comparison_figure`."""
    panels = [
        dict(p, matrix=p["matrix"][:MAX_TARGET_ROWS], target=p["target"][:MAX_TARGET_ROWS])
        for p in panels
    ]
    vmax = max(float(p["matrix"].max()) for p in panels)
    cols, rows, width, height = heatmap_layout(panels)
    fig, axes = plt.subplots(
        rows, cols, squeeze=False, figsize=(width, height), layout="constrained"
    )
    for ax in axes.flat:
        ax.axis("off")
    image, drawn = None, []
    for ax, panel in zip(axes.flat, panels):
        ax.axis("on")
        image = draw_heatmap(ax, panel["matrix"], panel["source"], panel["target"], vmax=vmax)
        ax.tick_params(axis="x", labelsize=HEATMAP_FONT, labelrotation=90)
        ax.tick_params(axis="y", labelsize=HEATMAP_FONT)
        ax.set_xlabel("source", fontsize=9)
        ax.set_ylabel("target (generated)", fontsize=9)
        ax.set_title(panel["label"], fontsize=10)
        drawn.append(ax)
    fig.suptitle(title, fontsize=11)
    fig.colorbar(image, ax=axes, shrink=min(0.5, 6.0 / height), label="attention weight")
    return fig, drawn


def heatmap_comparison_figure(panels: list[dict], title: str, path: Path) -> list[Path]:
    """The same test sentence under several variants, one shared colour scale.

    ``panels``: dicts with ``label``, ``matrix`` (T, S), ``source`` and ``target`` pieces.
    Each panel shows at most ``MAX_TARGET_ROWS`` output steps, so a model stuck repeating
    itself stays readable; laid out (:func:`heatmap_layout`) so that the tick labels are
    legible in the report at a 1,280-pixel window: two panels a row where they fit, else
    one, axes titled "source" and "target (generated)".
    """
    fig, _ = heatmap_axes(panels, title)
    return save_figure(fig, path, FORMATS)


def effects_figure(table, path: Path) -> list[Path]:
    """Left: BLEU vs hidden size per scorer. Right: reversal gain (rev - fwd) per scorer."""
    colours = _colours(table["scorer"].unique())
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for (scorer, reverse), rows in table.groupby(["scorer", "reverse_source"], sort=False):
        rows = rows.sort_values("hidden_size")
        left.errorbar(
            rows["hidden_size"],
            rows["bleu"],
            yerr=[rows["bleu"] - rows["bleu_low"], rows["bleu_high"] - rows["bleu"]],
            fmt=_LINESTYLE[bool(reverse)],
            marker="o",
            markersize=3,
            capsize=2,
            color=colours[scorer],
            label=f"{scorer}{' (rev)' if reverse else ''}",
        )
    left.set_xlabel("hidden size")
    left.set_ylabel("test BLEU")
    left.set_title("BLEU vs hidden size")
    left.grid(alpha=0.3)
    left.legend(fontsize=7, ncol=2)
    gains = []
    for scorer in colours:
        fwd = table[(table.scorer == scorer) & ~table.reverse_source].set_index("hidden_size")
        rev = table[(table.scorer == scorer) & table.reverse_source].set_index("hidden_size")
        common = fwd.index.intersection(rev.index)
        if len(common):
            gains.append(
                (scorer, float((rev.loc[common, "bleu"] - fwd.loc[common, "bleu"]).mean()))
            )
    if gains:
        right.bar(
            [g[0] for g in gains], [g[1] for g in gains], color=[colours[g[0]] for g in gains]
        )
    right.axhline(0, color="black", linewidth=0.8)
    right.set_ylabel("BLEU(reversed) - BLEU(forward)")
    right.set_title("Reversal gain per scorer")
    right.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return save_figure(fig, path, FORMATS)


def learning_curves_figure(curves, table, path: Path) -> list[Path]:
    """Dev BLEU (the trainer's greedy dev BLEU) of every variant at every evaluation,
    against epochs (left) and training minutes (right), one row per hidden size. A hollow
    marker ends each variant stopped by its budget before its dev BLEU plateaued; lighter
    lines are further seeds."""
    info = table.set_index("variant")
    curves = curves[curves.variant.isin(info.index)]
    sizes = sorted(info.loc[curves.variant.unique(), "hidden_size"].unique())
    colours = _colours(info.scorer.unique())
    x_epochs = "epochs" if "epochs" in curves else "epoch"
    fig, axes = plt.subplots(len(sizes), 2, figsize=(11, 3.4 * len(sizes)), squeeze=False)
    first_seed = info.groupby("config").seed.transform("min")
    for (ax_e, ax_m), size in zip(axes, sizes):
        for variant, curve in curves.groupby("variant", sort=False):
            row = info.loc[variant]
            if row.hidden_size != size:
                continue
            style = dict(
                color=colours[row.scorer],
                linestyle=_LINESTYLE[bool(row.reverse_source)],
                linewidth=1.2 if row.seed == first_seed[variant] else 0.6,
                alpha=1.0 if row.seed == first_seed[variant] else 0.45,
            )
            label = f"{row.scorer}{' (rev)' if row.reverse_source else ''}"
            for ax, x in ((ax_e, curve[x_epochs]), (ax_m, curve["wall_time"] / 60)):
                ax.plot(x, curve["dev_bleu"], label=label if ax is ax_e else None, **style)
                end = dict(marker="o", markersize=4, color=colours[row.scorer])
                if not row.plateaued:
                    end.update(markerfacecolor="white")
                ax.plot(x.iloc[-1], curve["dev_bleu"].iloc[-1], **end)
        drawn = [v for v in curves.variant.unique() if info.loc[v, "hidden_size"] == size]
        title = panel_title(info.loc[drawn])
        for ax, xlabel in ((ax_e, "epochs"), (ax_m, "training minutes")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel("dev BLEU (greedy)")
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
        unique: dict = {}  # the first line of each label: the lowest seed's
        for handle, label in zip(*ax_e.get_legend_handles_labels()):
            unique.setdefault(label, handle)
        ax_e.legend(unique.values(), unique.keys(), fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    return save_figure(fig, path, FORMATS)


FAMILY_COLOURS = {
    "primary": "#1f4e79",
    "secondary": "#6b4c9a",
    "equivalence": "#6b4c9a",
    "exploratory": "#8a8f98",
}
SCALE_NAMES = {"bleu": "BLEU", "log_bleu": "log BLEU"}


def seed_values(per_seed) -> list[float]:
    """The values to draw as one dot per seed: a contrast's own per-seed values when it
    has one configuration (or a plain ``{seed: value}``); none when it spans several
    configurations, whose seeds are independent draws (no seed-by-seed difference)."""
    values = json.loads(per_seed) if isinstance(per_seed, str) else (per_seed or {})
    if not isinstance(values, dict) or not values:
        return []
    nested = [v for v in values.values() if isinstance(v, dict)]
    if not nested:
        return [float(v) for v in values.values()]
    return [float(v) for v in nested[0].values()] if len(values) == 1 else []


def forest_figure(comparisons, path: Path) -> list[Path]:
    """The differences the findings rest on: one row per contrast (the findings' parts,
    then exploratory), its mean over seeds with its interval (seeds and sentences, at
    the level it is tested), each seed's value as a dot where the contrast has one
    configuration, the design's MDE as a bracket around zero, the part's equivalence
    margin (``margin`` > 0) as a shaded band [-margin, +margin] and its declared smallest
    effect of interest (``effect``) as a diamond. One panel per ``scale`` (BLEU, log
    BLEU), each with its own axis."""
    rows = comparisons.reset_index(drop=True)
    if "scale" not in rows:
        rows = rows.assign(scale="bleu")
    rows["scale"] = rows["scale"].fillna("bleu")
    scales = list(dict.fromkeys(rows["scale"]))
    heights = [max(int((rows.scale == s).sum()), 1) for s in scales]
    fig, axes = plt.subplots(
        len(scales),
        1,
        figsize=(9.5, 0.34 * len(rows) + 1.3 * len(scales) + 0.6),
        height_ratios=[h + 1.5 for h in heights],
        squeeze=False,
        layout="constrained",
    )
    for ax, scale in zip(axes[:, 0], scales):
        _forest_panel(ax, rows[rows.scale == scale].reset_index(drop=True), scale)
    legend = dict(loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    fig.legend(handles=_forest_legend(rows), **legend)
    return save_figure(fig, path, FORMATS)


def _forest_panel(ax, rows, scale: str) -> None:
    for y, row in enumerate(rows.itertuples()):
        colour = FAMILY_COLOURS.get(row.family, "black")
        margin = _number(getattr(row, "margin", None))
        if margin is not None and margin > 0:
            band = dict(color=MARGIN_COLOUR, alpha=0.15, linewidth=0)
            ax.fill_betweenx([y - 0.4, y + 0.4], -margin, margin, **band)
        ax.plot([row.low, row.high], [y, y], color=colour, linewidth=2)
        ax.plot(row.estimate, y, "o", color=colour, markersize=5)
        seeds = seed_values(getattr(row, "per_seed", None))
        ax.plot(seeds, [y] * len(seeds), ".", color="0.35", markersize=4)
        ax.plot([-row.mde, row.mde], [y, y], "|", color=colour, alpha=0.35, markersize=9)
        effect = _number(getattr(row, "effect", None))
        if effect is not None:
            ax.plot(effect, y, "D", color=EFFECT_COLOUR, markerfacecolor="white", markersize=6)
    labels = [
        f"{r.finding}: {r.comparison}" if r.family != "exploratory" else r.name
        for r in rows.itertuples()
    ]
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.axvline(0, color="black", linewidth=0.8)
    name = SCALE_NAMES.get(scale, scale)
    ax.set_xlabel(f"difference in {name} (mean over seeds, interval over seeds and sentences)")
    ax.grid(axis="x", alpha=0.3)


EFFECT_COLOUR = "#c05600"
MARGIN_COLOUR = "#6b4c9a"


def _number(value) -> float | None:
    """A finite float, else None (a missing margin or effect)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _forest_legend(rows) -> list:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    mde = dict(color="#1f4e79", marker="|", linestyle="", alpha=0.35, markersize=9)
    handles = [
        Line2D([], [], color="#1f4e79", marker="o", linewidth=2, label="mean, interval"),
        Line2D([], [], label="± MDE", **mde),
    ]
    if any(seed_values(v) for v in rows.get("per_seed", [])):
        handles.insert(1, Line2D([], [], color="0.35", marker=".", linestyle="", label="one seed"))
    margins = [_number(m) for m in rows.get("margin", [])]
    if any(m is not None and m > 0 for m in margins):
        handles.append(Patch(color=MARGIN_COLOUR, alpha=0.15, label="equivalence margin"))
    if any(_number(e) is not None for e in rows.get("effect", [])):
        effect = dict(color=EFFECT_COLOUR, marker="D", markerfacecolor="white", linestyle="")
        handles.append(Line2D([], [], label="smallest effect of interest", **effect))
    return handles
