"""The autograd Function the fast feature maps share: a pair of passes of Eq. 13 (arXiv:2110.02453,
C.1), ``forward(x, w1, w2, b2, scale)`` and ``backward(x, w1, w2, features, grad_out, scale) -> (dx,
dw1, dw2, db2)`` from :mod:`.pytorch` or :mod:`.cpu`, saving only the input view and the output.

Mixed precision: autocast off, float32 arithmetic (``sin`` and ``cos`` of ``|x| sqrt(d)`` keep no
digits in half); the output in ``x``'s dtype, gradients in their inputs'.
"""
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from ..utils.amp import autocast_off, upcast
from ..utils.tracing import apply_function


class TrigReLUFeatures(torch.autograd.Function):
    """Eq. 13 with the backward written out, by a ``(forward, backward)`` pair of passes."""

    @staticmethod
    @autocast_off
    def forward(ctx, x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float,
                passes: Tuple[Callable, Callable]) -> Tensor:
        features = passes[0](*upcast(x, w1, w2, b2), scale)
        ctx.save_for_backward(x, w1, w2, features)
        ctx.scale, ctx.backward_pass, ctx.dtypes = (
            scale,
            passes[1],
            (x.dtype, w1.dtype, w2.dtype, b2.dtype),
        )
        return features.to(x.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, w1, w2, features = ctx.saved_tensors
        grads = ctx.backward_pass(*upcast(x, w1, w2), features, upcast(grad_out)[0], ctx.scale)
        return (*(grad.to(dtype) for grad, dtype in zip(grads, ctx.dtypes)), None, None)


def run_passes(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float, forward: Callable,
               backward: Callable) -> Tensor:
    """Eq. 13 through a pair of passes under autograd."""
    return apply_function(TrigReLUFeatures, x, w1, w2, b2, scale, (forward, backward))
