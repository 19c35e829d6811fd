"""The reference implementation of ripple attention: Eq. 4 with each token's group weight written
out (``alpha_r`` before ``r_hat``, Eq. 6's equal share beyond), ``N x N`` weights, O(H^2 W^2), no
local/global split.
"""
from typing import Sequence

from torch import Tensor

from ..utils.amp import float32_math
from .local_global import chebyshev_distances, group_weights


@float32_math  # in float32 whatever the dtype (float64 stays)
def ripple_attention_reference(q: Tensor, k: Tensor, v: Tensor, logits: Tensor,
                               hw_shape: Sequence[int],
                               tau: float = 1e-3, eps: float = 1e-6) -> Tensor:
    """Eq. 4 with explicit group weights; arguments as :func:`.ripple_attention`."""
    distances = chebyshev_distances(hw_shape, q.device)
    weights = group_weights(logits, hw_shape, tau)
    token_weights = weights.gather(-1, distances.expand(*weights.shape[:-2], -1, -1))
    scores = (q @ k.transpose(-1, -2)) * token_weights
    return scores @ v / (scores.sum(dim=-1, keepdim=True) + eps)

