"""What both RWGK implementations share: the decay check and the bipartite graphs of Eq. (6)."""
from typing import Tuple

import torch
from torch import Tensor


def check_lam(lam: float) -> None:
    if not 0.0 < lam < 1.0:
        raise ValueError(f'random-walk decay lam={lam!r} must lie in the open interval (0, 1)')


def bipartite_graphs(q: Tensor, k: Tensor, anchor_q: Tensor,
                     anchor_k: Tensor) -> Tuple[Tensor, Tensor]:
    """Eq. (6): ``G_Q = softmax(Q B_K^T s)`` over anchors, ``G_K = softmax(B_Q K^T s)`` over tokens.

    Args:
        q, k: ``(B, heads, N, d)``.
        anchor_q, anchor_k: ``(B or 1, heads, M, d)`` anchors ``B_Q`` and ``B_K``.

    Returns:
        ``G_Q`` of shape ``(B, heads, N, M)`` and ``G_K`` of shape ``(B, heads, M, N)``.
    """
    # scaling the M x d anchors instead of the N x M logits saves a token-sized temporary
    scale = q.shape[-1] ** -0.5
    graph_q = torch.softmax(q @ (anchor_k * scale).transpose(-1, -2), dim=-1)
    graph_k = torch.softmax((anchor_q * scale) @ k.transpose(-1, -2), dim=-1)
    return graph_q, graph_k
