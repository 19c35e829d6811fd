"""The deterministic adaptive feature map of ripple attention (arXiv:2110.02453, Appendix C.1, Eq. 13)::

    phi(x) = ReLU(W2 [sin(W1 s x); cos(W1 s x)] + b2)

with ``s`` the temperature the modules split between queries and keys. Three forms:

* :func:`trig_relu_features_reference`: Eq. 13 under autograd, which keeps six token-sized
  intermediates for the backward and, through ``sin`` and ``cos``, evaluates each of them twice more;
* :class:`TrigReLUFeatures` with the torch passes (``impl='torch'``, :data:`TORCH`): the same forward
  without a graph and the backward written out, saving only the input (the caller's view) and the
  output (which the attention keeps anyway): the backward recomputes ``W1 s x`` and its sine and
  cosine once, by chunks of :data:`~mmvisattn.ops.recompute.CHUNK_TOKENS` rows of tokens, so its
  temporaries stay small. The reference recomputed by
  :func:`~mmvisattn.ops.recompute.checkpointed_chunks` would save as little but evaluate six sines
  and cosines instead of four and replay a graph: 1.5 ms more of 31 ms for a ripple module of 96
  dims on a 32x32 map (forward + backward, two cores);
* the same Function with the C++ passes (``impl='cpu'``, ``cpu.cpp``): the arithmetic of the torch
  passes by blocks of 256 rows, each block's projections, sines and cosines and products in cache,
  the heads read in place from the ``qkv`` projection. One map of 6144 rows of 32 (a 32x32 map,
  3 heads, batch 2), forward + backward: 2.6 -> 1.5 ms.

``impl='auto'`` takes the C++ passes for CPU tensors (the torch passes under tracing and dispatch
modes, :func:`~mmvisattn.ops.cpu_extension.kernels_hidden`) and the torch passes elsewhere.

Mixed precision (:mod:`mmvisattn.ops.amp`): autocast off in both passes and float32 arithmetic (the
arguments of ``sin`` and ``cos`` are of size ``|x| sqrt(d)`` and keep none of their digits in half
precision); the output comes back in ``x``'s dtype, each gradient in its input's.
"""
from typing import Callable, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..amp import autocast_off, float32_math, upcast
from ..dispatch import DRY_RUN, Op, Request, cpu_kernels, runs_anywhere
from ..recompute import CHUNK_TOKENS, runs
from ..tracing import apply_function


def _reference_refusal(request: Request) -> str:
    return 'Eq. 13 under autograd, for tests: keeps six token-sized intermediates for the backward'


FEATURE_OP = Op('trig_relu_features', dict(reference=_reference_refusal, torch=runs_anywhere, cpu=cpu_kernels),
                dict(cpu=('cpu', 'torch')))
FEATURE_IMPLS = FEATURE_OP.impls


@float32_math
def trig_relu_features_reference(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float = 1.0) -> Tensor:
    """Eq. 13 of ``(..., d)`` inputs: ``w1`` ``(m, d)``, ``w2`` ``(d', 2m)``, ``b2`` ``(d',)``."""
    projected = (x * scale) @ w1.t()
    return F.relu(torch.cat([projected.sin(), projected.cos()], dim=-1) @ w2.t() + b2)


def _rows(x: Tensor) -> Tensor:
    return x.reshape(-1, x.shape[-1])


class FeatureKernels(NamedTuple):
    """A pair of passes of Eq. 13 on tensors of one floating dtype: ``forward(x, w1, w2, b2, scale) ->
    features`` and ``backward(x, w1, w2, features, grad_out, scale) -> (dx, dw1, dw2, db2)``, ``dx``
    shaped as ``x``."""
    forward: Callable
    backward: Callable


def torch_forward(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    """Eq. 13 without a graph."""
    with torch.no_grad():
        return trig_relu_features_reference(x, w1, w2, b2, scale)


def torch_backward(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                   scale: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients, ``W1 s x`` and its sine and cosine recomputed by chunks of rows."""
    shape, num_features = x.shape, w1.shape[0]
    # rows of tokens: one copy of a permuted input, then every product is a plain matrix product
    x, features, grad_out = (_rows(t) for t in (x, features, grad_out))
    grad_w1, grad_w2 = torch.zeros_like(w1), torch.zeros_like(w2)
    grad_b2 = w2.new_zeros(w2.shape[0])
    grad_x = torch.empty_like(x)
    for rows in runs(x.shape[0], CHUNK_TOKENS):
        scaled = x[rows] * scale
        projected = scaled @ w1.t()
        sin, cos = projected.sin(), projected.cos()
        grad_pre = grad_out[rows] * (features[rows] > 0)  # through the ReLU
        grad_b2 += grad_pre.sum(dim=0)
        grad_w2 += grad_pre.t() @ torch.cat([sin, cos], dim=1)
        grad_trig = grad_pre @ w2
        grad_projected = grad_trig[:, :num_features] * cos - grad_trig[:, num_features:] * sin
        grad_w1 += grad_projected.t() @ scaled
        grad_x[rows] = (grad_projected @ w1) * scale
    return grad_x.view(shape), grad_w1, grad_w2, grad_b2


TORCH = FeatureKernels(torch_forward, torch_backward)


class TrigReLUFeatures(torch.autograd.Function):
    """Eq. 13 with the backward written out, by a pair of :class:`FeatureKernels`; see the module
    docstring."""

    @staticmethod
    @autocast_off
    def forward(ctx, x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float, kernels: FeatureKernels) -> Tensor:
        features = kernels.forward(*upcast(x, w1, w2, b2), scale)
        ctx.save_for_backward(x, w1, w2, features)
        ctx.scale, ctx.kernels, ctx.dtypes = scale, kernels, (x.dtype, w1.dtype, w2.dtype, b2.dtype)
        return features.to(x.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, w1, w2, features = ctx.saved_tensors
        grads = ctx.kernels.backward(*upcast(x, w1, w2), features, upcast(grad_out)[0], ctx.scale)
        return (*(grad.to(dtype) for grad, dtype in zip(grads, ctx.dtypes)), None, None)


def trig_relu_features(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float = 1.0,
                       impl: str = 'auto') -> Tensor:
    """``phi(x)`` of Eq. 13 for ``(..., d)`` inputs ``x`` scaled by ``scale`` first; ``impl`` one of
    :data:`FEATURE_IMPLS` (``auto``: the C++ kernels for CPU tensors, the torch passes otherwise)."""
    impl = FEATURE_OP.choose(impl, Request.of((x,)))
    if impl == DRY_RUN:
        return x.new_empty(*x.shape[:-1], w2.shape[0])
    if impl == 'reference':
        return trig_relu_features_reference(x, w1, w2, b2, scale)
    if impl == 'cpu':
        from .cpu import FEATURES_CPU as kernels
    else:
        kernels = TORCH
    return apply_function(TrigReLUFeatures, x, w1, w2, b2, scale, kernels)
