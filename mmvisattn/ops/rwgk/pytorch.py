"""RWGK attention in linear time: Algorithm 1 / Eq. (8) with a linear solve (``impl='torch'``)."""
import torch
from torch import Tensor

from ..amp import float32_math
from .common import bipartite_graphs, check_lam


@float32_math
def rwgk_attention_torch(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                         lam: float = 0.5) -> Tensor:
    """Algorithm 1 / Eq. (8): ``(1 - lam) (G_Q (I - lam G_K G_Q)^-1) (G_K V)`` in linear time.

    Args:
        q, k, v: ``(B, heads, N, d)``.
        anchor_q, anchor_k: ``(B or 1, heads, M, d)``.
        lam: Decay of longer random walks, in (0, 1).

    Returns:
        ``(B, heads, N, d)`` in the dtype of ``q``.
    """
    check_lam(lam)
    graph_q, graph_k = bipartite_graphs(q, k, anchor_q, anchor_k)
    anchor_values = graph_k @ v  # (B, h, M, d): one walk step from tokens to anchors
    eye = torch.eye(graph_k.shape[-2], dtype=v.dtype, device=v.device)
    system = eye - lam * (graph_k @ graph_q)  # (B, h, M, M), strictly diagonally dominant
    return (1.0 - lam) * (graph_q @ torch.linalg.solve(system, anchor_values))
