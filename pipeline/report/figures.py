"""Figures shared by the sweep (dev heatmap per variant) and the report stage."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window (and no display needed)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DEV_EXAMPLE_SUBWORDS = 25
"""The dev heatmap shows the dev sentence whose source is closest to this many subwords:
long enough to show an alignment, short enough to read."""


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


def dev_attention_figure(checkpoint_path: Path, tok_dir: Path, out_dir: Path) -> Path | None:
    """Greedy-decode one fixed dev sentence with a trained variant and draw its attention.

    Returns the PNG path, or ``None`` for a model without attention (scorer ``none``).
    """
    from pipeline.data.batching import make_batch
    from pipeline.data.tokenized import TokenizedData
    from pipeline.models.checkpoint import VocabInfo, load_checkpoint
    from pipeline.models.search import greedy_search

    data = TokenizedData(Path(tok_dir))
    loaded = load_checkpoint(checkpoint_path, expected_vocab=VocabInfo.from_data(data))
    if loaded.config.scorer == "none":
        return None
    dev = data.split("dev")
    index = int(np.argmin(np.abs(dev.src_lengths - DEV_EXAMPLE_SUBWORDS)))
    batch = make_batch(dev, np.array([index]), reverse_source=loaded.config.reverse_source)
    hypotheses, attentions = greedy_search(loaded.model, batch)
    source = data.src_tokenizer.pieces(dev.source(index).tolist()) + ["</s>"]
    target = data.tgt_tokenizer.pieces(hypotheses[0]) + ["</s>"]
    matrix = attentions[0][: len(target)]
    target = target[: len(matrix)]
    title = f"{loaded.variant_id}: dev sentence {index} (greedy)"
    return heatmap_figure(matrix, source, target, title, Path(out_dir) / "dev_attention")[0]
