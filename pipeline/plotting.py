"""Matplotlib primitives shared by the figures of training (the dev heatmap logged per
variant) and of the report: files only, never a window."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window (and no display needed)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

MAX_TARGET_ROWS = 60
"""Output steps shown per heatmap panel."""


def draw_heatmap(ax, matrix: np.ndarray, src_pieces: list[str], tgt_pieces: list[str], vmax=1.0):
    """Attention ``(T, S)`` on ``ax``: source pieces on x, target pieces on y."""
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90, fontsize=6)
    ax.set_yticks(range(len(tgt_pieces)), tgt_pieces, fontsize=6)
    ax.tick_params(length=0)
    return image


def save_figure(fig, path: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Save ``fig`` as ``path`` with each suffix in ``formats``; closes it."""
    written = []
    for suffix in formats:
        target = path.with_suffix(f".{suffix}")
        fig.savefig(target, dpi=130, bbox_inches="tight")
        written.append(target)
    plt.close(fig)
    return written


def heatmap_figure(matrix, src_pieces, tgt_pieces, title: str, path: Path) -> list[Path]:
    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.18 * cols + 1.5), max(3.0, 0.18 * rows + 1.2)))
    image = draw_heatmap(ax, matrix, src_pieces, tgt_pieces)
    ax.set_title(title, fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.03)
    return save_figure(fig, path)
