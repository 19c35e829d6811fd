"""The deterministic adaptive feature map of ripple attention, "Ripple attention for visual perception
with sub-quadratic complexity" (arXiv:2110.02453, Appendix C.1, Eq. 13)::

    phi(x) = ReLU(W2 [sin(W1 s x); cos(W1 s x)] + b2)

with ``s`` the temperature the modules split between queries and keys.

Implementations (``impl=``):

* ``reference``: Eq. 13 under autograd (:mod:`.reference`), which keeps six token-sized
  intermediates for the backward and, through ``sin`` and ``cos``, evaluates each of them twice more;
* ``torch``: the same forward without a graph and the backward written out (:mod:`.pytorch`), saving
  only the input and the output and recomputing ``W1 s x`` and its sine and cosine once, by chunks of
  rows;
* ``cpu``: the arithmetic of ``torch`` in C++ by blocks of rows (:mod:`.cpu`), the heads read in place
  from the ``qkv`` projection.

``auto`` (:data:`OP`) takes ``cpu`` for CPU tensors (``torch`` under tracing and dispatch modes) and
``torch`` elsewhere.
"""
from torch import Tensor

from ..utils.dispatch import DRY_RUN, Op, Request, cpu_kernels, runs_anywhere
from .reference import trig_relu_features_reference


def _reference_refusal(request: Request) -> str:
    return 'Eq. 13 under autograd, for tests: keeps six token-sized intermediates for the backward'


OP = Op('trig_relu_features', dict(reference=_reference_refusal, torch=runs_anywhere, cpu=cpu_kernels),
        dict(cpu=('cpu', 'torch')))
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
    impl = OP.choose(impl, Request.of((x,)))
    if impl == DRY_RUN:
        return x.new_empty(*x.shape[:-1], w2.shape[0])
    if impl == 'reference':
        return trig_relu_features_reference(x, w1, w2, b2, scale)
    if impl == 'cpu':
        from .cpu import trig_relu_features_cpu
        return trig_relu_features_cpu(x, w1, w2, b2, scale)
    from .pytorch import trig_relu_features_torch
    return trig_relu_features_torch(x, w1, w2, b2, scale)


__all__ = ['trig_relu_features', 'trig_relu_features_reference', 'IMPLS', 'OP']
