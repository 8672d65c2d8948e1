"""Looks into a trained variant for its run's artifacts: the dev attention heatmap."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.data.batching import make_batch
from pipeline.data.dataset import TokenizedData
from pipeline.models.checkpoint import VocabInfo, load_checkpoint
from pipeline.models.search import greedy_search

DEV_EXAMPLE_SUBWORDS = 25
"""The dev heatmap shows the dev sentence whose source is closest to this many subwords:
long enough to show an alignment, short enough to read."""


def dev_attention_figure(checkpoint_path: Path, data, out_dir: Path) -> Path | None:
    """Greedy-decode one fixed dev sentence with a trained variant and draw its attention.

    ``data``: the :class:`~pipeline.data.dataset.TokenizedData` it was trained on.

    Returns the PNG path, or ``None`` for a model without attention (scorer ``none``).
    """
    if not isinstance(data, TokenizedData):
        data = TokenizedData.load(data)
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
    from pipeline.plotting import heatmap_figure  # matplotlib: only for a model with attention

    return heatmap_figure(matrix, source, target, title, Path(out_dir) / "dev_attention")[0]
