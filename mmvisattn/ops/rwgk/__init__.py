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

One backend, ``torch`` (:mod:`.pytorch`), follows Algorithm 1 with a linear solve instead of an
explicit inverse: O(N M d + N M^2 + M^3) time; one autograd Function that saves the inputs and
O(M^2 + M d) per head and recomputes the ``N x M`` graphs in the backward, slice by slice of heads.
:func:`rwgk_attention_reference` builds the ``N x N`` kernel and inverts it (Eq. 5, O(N^3)): what the
backend is tested against. Both share :func:`bipartite_graphs` (:mod:`.common`).

The torch path runs in float32 (float64 stays float64) even under float16 / bfloat16 autocast
(:mod:`mmvisattn.ops.utils.amp`), where ``I - lam G_K G_Q`` would lose the digits that make it invertible.
"""
from torch import Tensor

from ..utils.dispatch import Backend, Op, Request
from .common import check_lam
from .pytorch import neumann_solve, rwgk_attention_torch
from .reference import rwgk_attention_reference

OP = Op('rwgk_attention', [Backend('torch', rwgk_attention_torch)])
IMPLS = OP.impls


def rwgk_attention(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor, lam: float = 0.5,
                   impl: str = 'auto') -> Tensor:
    """RWGK attention through ``M`` anchors (Eq. 8).

    Args:
        q, k: ``(B, heads, N, d)`` queries and keys.
        v: ``(B, heads, N, e)`` values.
        anchor_q, anchor_k: ``(B or 1, heads, M, d)`` anchors ``B_Q``, ``B_K``.
        lam: Decay of the random walk, in (0, 1).
        impl: One of :data:`IMPLS`.

    Returns:
        ``(B, heads, N, e)``.
    """
    return OP(impl, Request.of((q, k, v)), q, k, v, anchor_q, anchor_k, lam)


# neumann_solve: the solve in matrix products that mmvisattn.deploy.mmdeploy_support exports for backends
# without one
__all__ = ['rwgk_attention', 'rwgk_attention_reference', 'check_lam', 'neumann_solve', 'IMPLS', 'OP']
