"""Random-walk graph kernel attention (RWGKA), "Improving vision attention with random walk graph
kernel" (OpenReview, ICLR 2023), Eq. (5)-(8) and Algorithm 1.

Queries and keys are joined through ``M`` anchors by a bipartite graph (Eq. 6)::

    G_Q = softmax(Q B_K^T * s)   (N x M, rows sum to 1)
    G_K = softmax(B_Q K^T * s)   (M x N, rows sum to 1)

and ``A = G_Q G_K`` (Eq. 7) becomes the normalised random-walk kernel ``(1 - lam) / lam * ((I - lam
A)^-1 - I)`` (Eq. 5, rows summing to 1), by the push-through identity Eq. (8), an ``M x M``
inverse::

    (1 - lam) * G_Q (I_M - lam G_K G_Q)^-1 (G_K V)

``s = 1 / sqrt(d)`` as in Eq. (2) (Eq. 6 omits it and saturates the graphs). One backend, ``torch``
(:mod:`.pytorch`), O(N M d + N M^2 + M^3); :func:`rwgk_attention_reference` inverts the ``N x N``
kernel."""
from torch import Tensor

from ..utils.dispatch import Backend, Op, Request
from .common import check_lam
from .pytorch import neumann_solve, rwgk_attention_torch
from .reference import rwgk_attention_reference

OP = Op('rwgk_attention', [Backend('torch', rwgk_attention_torch)])
IMPLS = OP.impls


def rwgk_attention(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                   lam: float = 0.5, impl: str = 'auto') -> Tensor:
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


# neumann_solve: the solve in matrix products that mmvisattn.deploy.mmdeploy_support exports for
# backends without one
__all__ = ['rwgk_attention', 'rwgk_attention_reference', 'check_lam', 'neumann_solve', 'IMPLS',
           'OP']
