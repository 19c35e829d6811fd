"""Linear-angular attention, "Castling-ViT" (arXiv:2211.10526): the angular kernel between
L2-normalised queries and keys keeps its constant and linear terms, ``Sim(q, k) = 1/2 + (1/pi) q^ .
k^`` (positive, so row-normalised attention is a weighted average), linear in ``q^`` and ``k^``::

    out_i = (1/2 sum_j v_j + 1/pi q^_i (K^T V)) / (N/2 + 1/pi q^_i . sum_j k^_j)

Backends in ``auto``'s order (:data:`OP`): ``triton`` and ``torch``, tested against
:func:`linear_angular_attention_reference`; :func:`linear_angular_unnormalised` is the official
module's form without the division."""
from torch import Tensor

from ..utils.dispatch import Backend, Op, Request, interpreted, triton_kernels
from .pytorch import linear_angular_attention_torch, linear_angular_unnormalised
from .reference import linear_angular_attention_reference


def _triton(*args) -> Tensor:
    from .triton import linear_angular_attention_triton  # Triton loads on the first call
    return linear_angular_attention_triton(*args)


OP = Op('linear_angular_attention', [
    Backend('triton', _triton, triton_kernels(), interpreted),
    Backend('torch', linear_angular_attention_torch),
])
IMPLS = OP.impls


def linear_angular_attention(q: Tensor, k: Tensor, v: Tensor, impl: str = 'auto') -> Tensor:
    """Row-normalised linear-angular attention.

    Args:
        q, k: ``(B, heads, N, d)`` queries and keys (normalised inside).
        v: ``(B, heads, N, e)`` values.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(B, heads, N, e)``.
    """
    return OP(impl, Request.of((q, k, v)), q, k, v)


__all__ = ['linear_angular_attention', 'linear_angular_unnormalised',
           'linear_angular_attention_reference', 'IMPLS', 'OP']
