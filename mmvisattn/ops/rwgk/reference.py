"""The reference implementation of RWGK attention: the explicit ``N x N`` kernel of Eq. (5) and its
inverse, O(N^3)."""
import torch
from torch import Tensor

from .common import bipartite_graphs, check_lam


def rwgk_kernel_reference(q: Tensor, k: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                          lam: float = 0.5) -> Tensor:
    """``(B, heads, N, N)`` normalised kernel of Eq. (5), ``(1-lam)/lam ((I - lam A)^-1 - I)``."""
    check_lam(lam)
    graph_q, graph_k = bipartite_graphs(q, k, anchor_q, anchor_k)
    one_step = graph_q @ graph_k
    eye = torch.eye(one_step.shape[-1], dtype=one_step.dtype, device=one_step.device)
    return (1.0 - lam) / lam * (torch.linalg.inv(eye - lam * one_step) - eye)


def rwgk_attention_reference(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                             lam: float = 0.5) -> Tensor:
    """Eq. (5) with the explicit ``N x N`` inverse: the reference
    of :func:`~mmvisattn.ops.rwgk.rwgk_attention`."""
    return rwgk_kernel_reference(q, k, anchor_q, anchor_k, lam) @ v
