"""The deterministic adaptive feature map of ripple attention (arXiv:2110.02453, Appendix C.1, Eq. 13)::

    phi(x) = ReLU(W2 [sin(W1 s x); cos(W1 s x)] + b2)

with ``s`` the temperature the modules split between queries and keys. Two forms:

* :func:`trig_relu_features_reference`: Eq. 13 under autograd, which keeps six token-sized
  intermediates for the backward and, through ``sin`` and ``cos``, evaluates each of them twice more;
* :class:`TrigReLUFeatures` (``impl='torch'``): the same forward without a graph and the backward
  written out, saving only the input (the caller's view) and the output (which the attention keeps
  anyway): the backward recomputes ``W1 s x`` and its sine and cosine once, by chunks of
  :data:`~mmvisattn.ops.recompute.CHUNK_TOKENS` rows of tokens, so its temporaries stay small.
  The reference recomputed by :func:`~mmvisattn.ops.recompute.checkpointed_chunks` would save as
  little but evaluate six sines and cosines instead of four and replay a graph: 1.5 ms more of
  31 ms for a ripple module of 96 dims on a 32x32 map (forward + backward, two cores).

Mixed precision (:mod:`mmvisattn.ops.amp`): autocast off in both passes and float32 arithmetic (the
arguments of ``sin`` and ``cos`` are of size ``|x| sqrt(d)`` and keep none of their digits in half
precision); the output comes back in ``x``'s dtype, each gradient in its input's.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..amp import autocast_off, float32_math, upcast
from ..dispatch import check_impl
from ..recompute import CHUNK_TOKENS, runs
from ..tracing import apply_function

FEATURE_IMPLS = ('reference', 'torch')


@float32_math
def trig_relu_features_reference(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float = 1.0) -> Tensor:
    """Eq. 13 of ``(..., d)`` inputs: ``w1`` ``(m, d)``, ``w2`` ``(d', 2m)``, ``b2`` ``(d',)``."""
    projected = (x * scale) @ w1.t()
    return F.relu(torch.cat([projected.sin(), projected.cos()], dim=-1) @ w2.t() + b2)


def _rows(x: Tensor) -> Tensor:
    return x.reshape(-1, x.shape[-1])


class TrigReLUFeatures(torch.autograd.Function):
    """Eq. 13 with the backward written out; see the module docstring."""

    @staticmethod
    @autocast_off
    def forward(ctx, x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
        with torch.no_grad():
            features = trig_relu_features_reference(*upcast(x, w1, w2, b2), scale)
        ctx.save_for_backward(x, w1, w2, features)
        ctx.scale, ctx.dtypes = scale, (x.dtype, w1.dtype, w2.dtype, b2.dtype)
        return features.to(x.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, w1, w2, features = ctx.saved_tensors
        shape, num_features = x.shape, w1.shape[0]
        # rows of tokens: one copy of a permuted input, then every product is a plain matrix product
        x, features, grad_out = (_rows(t) for t in (x, features, grad_out))
        x, w1, w2, grad_out = upcast(x, w1, w2, grad_out)
        grad_w1, grad_w2 = torch.zeros_like(w1), torch.zeros_like(w2)
        grad_b2 = w2.new_zeros(w2.shape[0])
        grad_x = torch.empty_like(x)
        for rows in runs(x.shape[0], CHUNK_TOKENS):
            scaled = x[rows] * ctx.scale
            projected = scaled @ w1.t()
            sin, cos = projected.sin(), projected.cos()
            grad_pre = grad_out[rows] * (features[rows] > 0)  # through the ReLU
            grad_b2 += grad_pre.sum(dim=0)
            grad_w2 += grad_pre.t() @ torch.cat([sin, cos], dim=1)
            grad_trig = grad_pre @ w2
            grad_projected = grad_trig[:, :num_features] * cos - grad_trig[:, num_features:] * sin
            grad_w1 += grad_projected.t() @ scaled
            grad_x[rows] = (grad_projected @ w1) * ctx.scale
        grads = (grad_x.view(shape), grad_w1, grad_w2, grad_b2)
        return (*(grad.to(dtype) for grad, dtype in zip(grads, ctx.dtypes)), None)


def trig_relu_features(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float = 1.0,
                       impl: str = 'torch') -> Tensor:
    """``phi(x)`` of Eq. 13 for ``(..., d)`` inputs ``x`` scaled by ``scale`` first; ``impl`` one of
    :data:`FEATURE_IMPLS`."""
    check_impl('trig_relu_features', impl, FEATURE_IMPLS)
    if impl == 'reference':
        return trig_relu_features_reference(x, w1, w2, b2, scale)
    return apply_function(TrigReLUFeatures, x, w1, w2, b2, scale)
