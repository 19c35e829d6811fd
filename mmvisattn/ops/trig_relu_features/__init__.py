"""The deterministic adaptive feature map of ripple attention, "Ripple attention for visual
perception with sub-quadratic complexity" (arXiv:2110.02453, Appendix C.1, Eq. 13)::

    phi(x) = ReLU(W2 [sin(W1 s x); cos(W1 s x)] + b2)

``s`` is the temperature the modules split between queries and keys. Backends in ``auto``'s order
(:data:`OP`): ``cpu`` (C++, heads read in place from ``qkv``) and ``torch``;
:func:`trig_relu_features_reference` is Eq. 13 under autograd."""
from typing import NamedTuple, Optional

from torch import Tensor

from ..utils.dispatch import Backend, Op, Request, cpu_kernels, opaque_to_dispatch
from .cpu import trig_relu_features_cpu
from .pytorch import trig_relu_features_torch
from .reference import trig_relu_features_reference


class Options(NamedTuple):
    """What of a call decides the backend beside its tensors."""
    row_stride: int


def _cpu_unsupported(request: Request) -> Optional[str]:
    if request.options.row_stride != 1:
        return ('the kernels read rows in place: the last dimension has stride '
                f'{request.options.row_stride}, not 1')
    return cpu_kernels(request)


OP = Op('trig_relu_features', [
    Backend('cpu', trig_relu_features_cpu, _cpu_unsupported, opaque_to_dispatch),
    Backend('torch', trig_relu_features_torch),
])
IMPLS = OP.impls


def trig_relu_features(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float = 1.0,
                       impl: str = 'auto') -> Tensor:
    """``phi(scale x)`` of Eq. 13.

    Args:
        x: ``(..., d)`` inputs; may be a strided view whose last dimension is contiguous.
        w1: ``(m, d)`` random projection.
        w2: ``(d', 2m)`` output projection.
        b2: ``(d',)`` output bias.
        scale: The temperature ``s`` applied to ``x`` first.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(..., d')`` non-negative features in ``x``'s dtype.
    """
    return OP(impl, Request.of((x,), Options(x.stride(-1))), x, w1, w2, b2, scale)


__all__ = ['trig_relu_features', 'trig_relu_features_reference', 'IMPLS', 'OP', 'Options']
