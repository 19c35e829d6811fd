"""Peripheral attention, "Peripheral Vision Transformer" (arXiv:2206.06801, Eq. 5-8): ``out =
Normalize[Phi_c * Phi_p] V = softmax(tau q k^T + log Phi_p) V``, content attention times a position
attention learnt from query-key distances. Two ops: :func:`peripheral_attention` (``torch``: SDPA
with ``log Phi_p`` as bias) and :func:`position_logits` (Eq. 7-8; ``triton`` on CUDA, then
``torch``, :mod:`.position`), each tested against :mod:`.reference`."""
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.dispatch import Backend, Op, Request, interpreted, triton_kernels
from ..utils.tracing import onnx_constants
from .position import PositionParams
from .position import position_logits as _position_logits_torch
from .pytorch import mixed_attention_weights, peripheral_attention_sdpa
from .reference import peripheral_attention_reference, position_logits_reference


def _position_triton(*args) -> Tensor:
    from .position_triton import position_logits_triton  # Triton loads on the first call
    return position_logits_triton(*args)


OP = Op('peripheral_attention', [Backend('torch', peripheral_attention_sdpa)])
IMPLS = OP.impls
POSITION_OP = Op('position_logits', [
    Backend('triton', _position_triton, triton_kernels(), interpreted),
    Backend('torch', _position_logits_torch),
])
POSITION_IMPLS = POSITION_OP.impls


def peripheral_attention(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float,
                         impl: str = 'auto') -> Tensor:
    """``Normalize[exp(scale q k^T) * Phi_p] v`` (Eq. 5).

    Args:
        q, k: ``(B, heads, N, d)`` queries and keys.
        v: ``(B, heads, N, e)`` values.
        log_phi_p: ``(heads, N, N)`` log position attention, shared by the batch.
        scale: The content temperature ``tau``.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(B, heads, N, e)``.
    """
    if log_phi_p.shape != (q.shape[1], q.shape[2], k.shape[2]):
        raise ValueError(f'peripheral_attention: log_phi_p of shape {tuple(log_phi_p.shape)}; '
                         'expected '
                         f'(heads, queries, keys) = {(q.shape[1], q.shape[2], k.shape[2])}')
    return OP(impl, Request.of((q, k, v)), q, k, v, log_phi_p, scale)


def position_logits(params: PositionParams, hw_shape: Sequence[int], impl: str = 'auto',
                    eps: float = 1e-5) -> Tensor:
    """Pre-sigmoid ``Phi_p`` logits on an ``H x W`` grid (Eq. 7-8).

    Args:
        params: The peripheral projections and norms of one layer.
        hw_shape: ``(H, W)``.
        impl: One of :data:`POSITION_IMPLS`.
        eps: Of both instance norms.

    Returns:
        ``(heads, H W, H W)``, float32 (float64 stays).
    """
    return POSITION_OP(impl, Request.of((params.conv2_weight,)), params, hw_shape, eps)


def log_position_attention(params: PositionParams, hw_shape: Sequence[int], impl: str = 'auto',
                           frozen: bool = False) -> Tensor:
    """``log Phi_p = log sigmoid(position_logits)``; ``frozen``: of weights that do not train,
    without autograd and, under ONNX export, graph constants of one map size."""
    if not frozen:
        return F.logsigmoid(position_logits(params, hw_shape, impl))
    with torch.no_grad(), onnx_constants():
        return F.logsigmoid(position_logits(params, hw_shape, impl))


__all__ = ['peripheral_attention', 'position_logits', 'log_position_attention', 'PositionParams',
           'mixed_attention_weights', 'peripheral_attention_reference', 'position_logits_reference',
           'IMPLS', 'OP', 'POSITION_OP']
