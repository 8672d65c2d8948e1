"""Cosine attention: a scorer of this project's own, added without editing the package.

score(q, k) = g * cos(q, k), the cosine similarity of the decoder state and each encoder
output scaled by a learned sharpness g (content-based addressing, Graves et al. 2014,
eq. 5-6). It is named in params.yaml (``plugins: [scorers/cosine.py]``) and then used
like a built-in one: ``train.grid.scorer: [..., cosine]``. See docs/scorers.md.
"""

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.models.attention import Scorer
from pipeline.scorers import register_scorer


def flops(hidden_size: int, source_positions: int) -> tuple[int, int]:
    """Matmul FLOPs: none per key (normalising is not a matmul), 2 S H per query."""
    return 0, 2 * source_positions * hidden_size


@register_scorer(
    "cosine",
    paper="Graves et al. 2014, eq. 5-6 (content-based addressing)",
    formula="g * cos(q, k), g learned",
    flops=flops,
)
class CosineScorer(Scorer):
    def __init__(self, hidden_size: int):
        super().__init__(hidden_size)
        # g = exp(log_sharpness): positive, starting at 10 so that the first softmax is
        # neither uniform nor one-hot over cosines in [-1, 1]
        self.log_sharpness = nn.Parameter(torch.tensor(2.3))

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        """Unit-length keys, once per batch: (B, S, H)."""
        return F.normalize(keys.float(), dim=-1)

    def score_projected(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """(B, T, H) queries against the unit keys -> (B, T, S) scores."""
        unit = F.normalize(query.float(), dim=-1)
        return self.log_sharpness.exp() * (unit @ keys.transpose(1, 2))
