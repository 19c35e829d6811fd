"""Ripple attention, "Ripple attention for visual perception with sub-quadratic complexity" (seed 000,
§3, Eq. 4-9, Algorithm 1, Appendix B): linearized attention in which the tokens of each vicinal
group (same Chebyshev distance ``r`` to the query) share a spatial weight ``alpha_r(i, j)`` given by
a stick-breaking transform; groups from ``r_hat`` (threshold ``tau``, at most ``R_max``) on share
the merged stick equally (Eq. 6)::

    out_ij = phi(q_ij) sum_r alpha_r(i, j) sum_{N_r(i, j)} phi(k) v^T
             / phi(q_ij) sum_r alpha_r(i, j) sum_{N_r(i, j)} phi(k)

Implementations (``impl=``): ``reference`` (explicit per-token group weights, O(H^2 W^2)).
``auto`` picks the reference until the fast paths exist.
"""
from typing import Sequence

from torch import Tensor

from .common import check_inputs, ring_weights, stick_breaking, truncate
from .reference import group_weights_reference, ripple_attention_reference

IMPLS = ('auto', 'reference')


def ripple_attention(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                     tau: float = 1e-3, impl: str = 'auto', eps: float = 1e-6) -> Tensor:
    """Ripple attention of feature-mapped queries and keys.

    Args:
        q, k: ``(..., N, D)`` non-negative features ``phi(q)``, ``phi(k)`` of ``N = H * W`` tokens
            (row-major).
        v: ``(..., N, E)`` values.
        logits: ``(..., N, R_max)`` stick logits ``o_r(i, j)`` of each query (C.3).
        hw_shape: ``(H, W)``; any size, ``R_max >= max(H, W)`` included.
        tau: Threshold of the stick left over, in (0, 1) (§3.2).
        impl: One of :data:`IMPLS`.
        eps: Added to the normaliser.

    Returns:
        ``(..., N, E)``.
    """
    if impl not in IMPLS:
        raise ValueError(f'ripple_attention: impl={impl!r}; expected one of {IMPLS}')
    check_inputs(q, k, v, logits, hw_shape, tau)
    return ripple_attention_reference(q, k, v, logits, hw_shape, tau, eps)


__all__ = ['ripple_attention', 'ripple_attention_reference', 'group_weights_reference', 'stick_breaking',
           'truncate', 'ring_weights', 'IMPLS']
