"""Linearized attention, "Transformers are RNNs" (arXiv:2006.16236, Eq. 2-6), on queries and keys
already through a non-negative feature map ``phi`` (elu + 1: :func:`linear_attention`; ripple's
trig and ReLU map)::

    out_i = phi(q_i) (sum_j phi(k_j) v_j^T) / (phi(q_i) . sum_j phi(k_j) + eps)

The sums run over every token and leave float16's range, so the arithmetic is float32.
"""
import torch.nn.functional as F
from torch import Tensor

from .utils.amp import float32_math


@float32_math
def linearized_attention(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Linearized attention in O(N D E) (Eq. 4-6).

    Args:
        q, k: ``(..., N, D)`` non-negative features ``phi(q)``, ``phi(k)``.
        v: ``(..., N, E)`` values.
        eps: Added to the normaliser.

    Returns:
        ``(..., N, E)``.
    """
    numerator = q @ (k.transpose(-1, -2) @ v)
    denominator = q @ k.sum(dim=-2).unsqueeze(-1)
    return numerator / (denominator + eps)


def elu_feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1`` (Sec. 3.2.1): positive, so the normaliser never vanishes."""
    return F.elu(x) + 1


def linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Linear attention with the ``elu + 1`` feature map.

    Args:
        q, k: ``(..., N, D)`` queries and keys.
        v: ``(..., N, E)`` values.
        eps: Added to the normaliser.

    Returns:
        ``(..., N, E)``.
    """
    return linearized_attention(elu_feature_map(q), elu_feature_map(k), v, eps)
