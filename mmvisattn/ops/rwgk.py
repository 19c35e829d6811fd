"""Random-walk graph kernel attention (RWGKA), "Improving vision attention with random walk graph
kernel" (OpenReview, ICLR 2023), Eq. (5)-(8) and Algorithm 1.

Queries and keys are joined through ``M`` anchors by a bipartite graph (Eq. 6)::

    G_Q = softmax(Q B_K^T * s)   (N x M, rows sum to 1)
    G_K = softmax(B_Q K^T * s)   (M x N, rows sum to 1)

and the row-stochastic one-step attention ``A = G_Q G_K`` (Eq. 7) is replaced by the normalised
random-walk (Katz) kernel of Eq. (5), ``(1 - lam) / lam * ((I - lam A)^-1 - I)``, a weighted sum of
all path lengths ``sum_n (1 - lam) lam^(n-1) A^n`` whose rows still sum to 1 (Lemma 1). With the
push-through identity it equals Eq. (8), which only inverts an ``M x M`` matrix::

    (1 - lam) * G_Q (I_M - lam G_K G_Q)^-1 (G_K V)

``s`` is ``1 / sqrt(d)`` as in Eq. (2); Eq. (6) writes the softmax without it, which saturates the
graphs as ``d`` grows.

Two implementations share :func:`bipartite_graphs`:

* :func:`rwgk_attention_reference` builds the ``N x N`` kernel and inverts it (Eq. 5): O(N^3),
  obviously correct, for tests at small ``N``;
* :func:`rwgk_attention` follows Algorithm 1 with a linear solve instead of an explicit inverse:
  O(N M d + N M^2 + M^3) time, O(N M + M^2) extra memory.

:func:`rwgk_attention` runs in float32 (float64 stays float64) even under float16 / bfloat16 autocast
(:mod:`mmvisattn.ops.amp`), where ``I - lam G_K G_Q`` would lose the digits that make it invertible.
"""
from typing import Tuple

import torch
from torch import Tensor

from .amp import float32_math


def check_lam(lam: float) -> None:
    if not 0.0 < lam < 1.0:
        raise ValueError(f'random-walk decay lam={lam!r} must lie in the open interval (0, 1)')


def bipartite_graphs(q: Tensor, k: Tensor, anchor_q: Tensor, anchor_k: Tensor) -> Tuple[Tensor, Tensor]:
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


@float32_math
def rwgk_attention(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
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


def rwgk_kernel_reference(q: Tensor, k: Tensor, anchor_q: Tensor, anchor_k: Tensor, lam: float = 0.5) -> Tensor:
    """The ``(B, heads, N, N)`` normalised kernel of Eq. (5), ``(1 - lam)/lam ((I - lam A)^-1 - I)``."""
    check_lam(lam)
    graph_q, graph_k = bipartite_graphs(q, k, anchor_q, anchor_k)
    one_step = graph_q @ graph_k
    eye = torch.eye(one_step.shape[-1], dtype=one_step.dtype, device=one_step.device)
    return (1.0 - lam) / lam * (torch.linalg.inv(eye - lam * one_step) - eye)


def rwgk_attention_reference(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                             lam: float = 0.5) -> Tensor:
    """Eq. (5) with the explicit ``N x N`` inverse: the slow twin of :func:`rwgk_attention`."""
    return rwgk_kernel_reference(q, k, anchor_q, anchor_k, lam) @ v
