"""Ripple attention, "Ripple attention for visual perception with sub-quadratic complexity"
(arXiv:2110.02453, §3, Eq. 4-9): linearized attention in which the tokens of each vicinal group
(Chebyshev distance ``r`` to the query) share a stick-breaking weight ``alpha_r(i, j)``; groups from
``r_hat`` (threshold ``tau``, at most ``R_max``) on share the merged stick (Eq. 6)::

    out_ij = phi(q_ij) sum_r alpha_r(i, j) sum_{N_r(i, j)} phi(k) v^T
             / phi(q_ij) sum_r alpha_r(i, j) sum_{N_r(i, j)} phi(k)

Every backend splits the groups inside ``R_max`` (a local attention) from the merged ones (global
sums, :func:`~.local_global.local_plus_global`). In ``auto``'s order: ``triton`` (CUDA), ``dense``
(small maps on CPU, ONNX export), ``cpu`` (C++ tiles) and ``torch`` (tiles, O(H W R_max^2 (D + E)));
all are tested against :func:`ripple_attention_reference`."""
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.dispatch import (
    Backend,
    Op,
    Request,
    cpu_kernels,
    interpreted,
    opaque_to_dispatch,
    triton_kernels,
)
from . import local_global
from .cpu import ripple_attention_cpu
from .dense import dense_is_faster, ripple_attention_dense
from .local_global import chebyshev_distances, group_weights
from .pytorch import ripple_attention_torch
from .reference import ripple_attention_reference


class Options(NamedTuple):
    """What of a call decides the backend beside its tensors."""
    hw_shape: Tuple[int, int]
    r_max: int


def _dense_passed_over(request: Request) -> Optional[str]:
    if request.context == 'export':
        return None
    if request.device != 'cpu':
        return 'its crossover is measured on CPU; on other devices the local part runs on tiles'
    hw_shape, r_max = request.options
    if dense_is_faster(hw_shape, r_max):
        return None
    return (f'a {hw_shape[0]}x{hw_shape[1]} map at R_max {r_max} is past the crossover where the '
            'tiles are faster')


def _not_exportable(request: Request) -> Optional[str]:
    if request.context == 'export':
        return ("ONNX export cannot trace the tiles' writes into preallocated outputs; "
                "impl='dense' exports")
    return None


def _triton(*args) -> Tensor:
    from .triton import ripple_attention_triton  # Triton loads on the first call
    return ripple_attention_triton(*args)


OP = Op('ripple_attention', [
    Backend('triton', _triton, triton_kernels(), interpreted),
    Backend('dense', ripple_attention_dense, passed_over=_dense_passed_over),
    Backend('cpu', ripple_attention_cpu, cpu_kernels, opaque_to_dispatch),
    Backend('torch', ripple_attention_torch, _not_exportable),
])
IMPLS = OP.impls


def stick_logits(v: Tensor, blocks: Tensor, bias: Tensor) -> Tensor:
    """``(B, heads, N, d)`` values -> ``(B, heads, N, R_max)`` logits ``v @ blocks[h]^T + bias[h]``,
    one block-diagonal linear map reading ``v`` in place (per head under ONNX export, which has no
    ``block_diag``)."""
    if torch.onnx.is_in_onnx_export():
        return v @ blocks.transpose(1, 2) + bias[:, None]
    batch, heads, tokens, _ = v.shape
    logits = F.linear(v.transpose(1, 2).flatten(2), torch.block_diag(*blocks), bias.flatten())
    return logits.view(batch, tokens, heads, -1).transpose(1, 2)


def ring_weights(logits: Tensor, hw_shape: Sequence[int], tau: float,
                 triton: bool = False) -> Tuple[Tensor, Tensor]:
    """``beta`` and ``w_m`` of the split (:func:`.local_global.ring_weights_by`), by the torch
    passes or Triton kernels."""
    if not triton:
        return local_global.ring_weights_by(logits, hw_shape, tau)
    from .triton import WEIGHT_PASSES  # Triton loads on the first call
    return local_global.ring_weights_by(logits, hw_shape, tau, WEIGHT_PASSES)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                  tau: float) -> None:
    """One-line errors for bad arguments of :func:`ripple_attention`."""
    height, width = hw_shape
    if height < 1 or width < 1 or q.shape[-2] != height * width:
        raise ValueError(f'ripple_attention: {q.shape[-2]} tokens do not match '
                         f'hw_shape={tuple(hw_shape)}')
    if k.shape != q.shape or v.shape[:-1] != q.shape[:-1] or logits.shape[:-1] != q.shape[:-1]:
        raise ValueError(f'ripple_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v '
                         f'{tuple(v.shape)} and '
                         f'logits {tuple(logits.shape)} must share (..., N) with k shaped like q')
    if logits.shape[-1] < 1:
        raise ValueError(f'ripple_attention: R_max={logits.shape[-1]} (logits.shape[-1]); expected '
                         'R_max >= 1')
    check_tau(tau)


def check_tau(tau: float, owner: str = 'ripple_attention') -> float:
    """``tau`` (the stick left over at which groups merge, §3.2) must lie in (0, 1)."""
    if not 0 < tau < 1:
        raise ValueError(f'{owner}: tau={tau!r}; expected 0 < tau < 1')
    return tau


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
    _check_inputs(q, k, v, logits, hw_shape, tau)
    request = Request.of((q, k, v), Options(tuple(hw_shape), logits.shape[-1]))
    return OP(impl, request, q, k, v, logits, hw_shape, tau, eps)


# group_weights, chebyshev_distances: the explicit weights of attention maps; stick_logits: Eq. 5's
# logits (C.3); ring_weights: the split every backend runs
__all__ = ['ripple_attention', 'ripple_attention_reference', 'check_tau', 'chebyshev_distances',
           'group_weights', 'ring_weights', 'stick_logits', 'IMPLS', 'OP', 'Options']
