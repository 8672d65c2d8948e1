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


def bleu_by_length_figure(by_length, path: Path) -> list[Path]:
    """Bahdanau et al. (2014) Fig. 2 for this study: BLEU vs source length, small
    multiples: one panel per hidden size and source order (at most one line per scorer
    in a panel), 95% bootstrap bands."""
    panels = sorted(by_length.groupby(["hidden_size", "reverse_source"]).groups)
    colours = _colours(by_length["scorer"].unique())
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False,
                             sharey=True)  # fmt: skip
    labels = list(dict.fromkeys(by_length["bucket"]))
    ranges = dict(zip(by_length["bucket"], by_length.get("training_range", "inside")))
    beyond = [i for i, b in enumerate(labels) if ranges.get(b) == "beyond"]
    for ax, (size, reversed_source) in zip(axes[0], panels):
        panel = by_length[(by_length["hidden_size"] == size)
                          & (by_length["reverse_source"] == reversed_source)]  # fmt: skip
        if beyond:
            ax.axvspan(beyond[0] - 0.5, beyond[-1] + 0.5, color="0.9", zorder=0)
            ax.text(beyond[0] - 0.4, 0.02, "beyond the training cut", fontsize=7,
                    transform=ax.get_xaxis_transform())  # fmt: skip
        for (scorer, reverse), curve in panel.groupby(["scorer", "reverse_source"], sort=False):
            x = [labels.index(b) for b in curve["bucket"]]
            label = f"{scorer}{' (rev)' if reverse else ''}"
            ax.plot(
                x,
                curve["bleu"],
                _LINESTYLE[bool(reverse)],
                color=colours[scorer],
                marker="o",
                markersize=3,
                label=label,
            )
            ax.fill_between(
                x,
                curve["bleu_low"],
                curve["bleu_high"],
                color=colours[scorer],
                alpha=0.12,
                linewidth=0,
            )
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("source sentence length (words)")
        ax.set_ylabel("test BLEU")
        order = "reversed source" if reversed_source else "forward source"
        ax.set_title(f"hidden size {size}, {order}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    return save_figure(fig, path, FORMATS)


def heatmap_comparison_figure(panels: list[dict], title: str, path: Path) -> list[Path]:
    """The same test sentence under several variants, one shared colour scale.

    ``panels``: dicts with ``label``, ``matrix`` (T, S), ``source`` and ``target`` pieces,
    laid out in rows of two (forward | reversed). Each panel shows at most
    ``MAX_TARGET_ROWS`` output steps, so a model stuck repeating itself stays readable.
    """
    panels = [
        dict(p, matrix=p["matrix"][:MAX_TARGET_ROWS], target=p["target"][:MAX_TARGET_ROWS])
        for p in panels
    ]
    vmax = max(float(p["matrix"].max()) for p in panels)
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    width = min(9.0, 0.17 * max(len(p["source"]) for p in panels) + 1.4)
    height = min(9.0, 0.17 * max(len(p["target"]) for p in panels) + 1.2)
    fig, axes = plt.subplots(
        rows, cols, squeeze=False, figsize=(cols * width, rows * height), layout="constrained"
    )
    for ax in axes.flat:
        ax.axis("off")
    image = None
    for ax, panel in zip(axes.flat, panels):
        ax.axis("on")
        image = draw_heatmap(ax, panel["matrix"], panel["source"], panel["target"], vmax=vmax)
        ax.tick_params(labelsize=7)
        ax.set_title(panel["label"], fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.colorbar(image, ax=axes, shrink=0.4, label="attention weight")
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
        for ax, xlabel in ((ax_e, "epochs"), (ax_m, "training minutes")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel("dev BLEU (greedy)")
            ax.set_title(f"hidden size {size}")
            ax.grid(alpha=0.3)
        unique: dict = {}  # the first line of each label: the lowest seed's
        for handle, label in zip(*ax_e.get_legend_handles_labels()):
            unique.setdefault(label, handle)
        ax_e.legend(unique.values(), unique.keys(), fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    return save_figure(fig, path, FORMATS)


def forest_figure(comparisons, path: Path) -> list[Path]:
    """The paired differences the findings rest on: one row per contrast (primary and
    equivalence parts first, then exploratory), its mean over seeds with the 95% interval
    (seeds and sentences), each seed's own value as a dot, and the design's MDE as a
    bracket around zero."""
    rows = comparisons.reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(9.5, 0.34 * len(rows) + 1.2))
    colours = {"primary": "#1f4e79", "equivalence": "#6b4c9a", "exploratory": "#8a8f98"}
    for y, row in enumerate(rows.itertuples()):
        colour = colours.get(row.family, "black")
        ax.plot([row.low, row.high], [y, y], color=colour, linewidth=2)
        ax.plot(row.estimate, y, "o", color=colour, markersize=5)
        seeds = json.loads(row.per_seed) if isinstance(row.per_seed, str) else {}
        ax.plot(list(seeds.values()), [y] * len(seeds), ".", color="0.35", markersize=4)
        ax.plot([-row.mde, row.mde], [y, y], "|", color=colour, alpha=0.35, markersize=9)
    labels = [
        f"{r.finding}: {r.comparison}" if r.family != "exploratory" else r.name
        for r in rows.itertuples()
    ]
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("BLEU difference (mean over seeds, 95% interval; dots: seeds; |: ±MDE)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, FORMATS)
