"""Linear-angular attention in O(N d^2) with torch operations and a hand-written backward: one
matmul ``q^ S`` with ``S = [K^T V, sum_j k^_j] / pi`` gives numerator and normaliser; the backward
saves ``q``, ``k``, ``v`` and recomputes ``S``.

Mixed precision: autocast off, float32 arithmetic (``K^T V`` leaves float16's range); the norm clamp
follows :func:`~mmvisattn.ops.utils.amp.norm_eps`."""
import math
from typing import Tuple

import torch
from torch import Tensor

from ..utils.amp import autocast_off, no_autocast, norm_eps, upcast
from ..utils.tracing import apply_function


def normalise(x: Tensor) -> Tuple[Tensor, Tensor]:
    """``x / max(||x||, eps)`` in float32 (float64 stays float64) and the clamped norm."""
    wide = upcast(x)[0]
    norm = wide.norm(dim=-1, keepdim=True).clamp_min(norm_eps(x.dtype))
    return wide / norm, norm


def _mix(q_hat: Tensor, k_hat: Tensor, v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Summary ``S``, the mixed ``q^ S`` with the value sums and ``N / 2`` added, and ``out``."""
    summary = torch.cat([k_hat.transpose(-1, -2) @ v, k_hat.sum(dim=-2).unsqueeze(-1)],
                        dim=-1) / math.pi
    mixed = q_hat @ summary
    value_dims = v.shape[-1]
    numerator = mixed[..., :value_dims] + 0.5 * v.sum(dim=-2, keepdim=True)
    normaliser = mixed[..., value_dims:] + 0.5 * k_hat.shape[-2]
    return summary, normaliser, numerator / normaliser


def normalise_backward(grad_hat: Tensor, x_hat: Tensor, norm: Tensor) -> Tensor:
    """Gradient through ``x / ||x||``: ``grad_hat``'s part orthogonal to ``x^``, over ``||x||``."""
    return (grad_hat - x_hat * (x_hat * grad_hat).sum(dim=-1, keepdim=True)) / norm


class LinearAngularFunction(torch.autograd.Function):
    """``(1/2 sum v + q^ K^T V / pi) / (N/2 + q^ . sum k^ / pi)`` with the backward below; float32
    arithmetic under autocast or on half inputs, the result in ``v``'s dtype."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        ctx.save_for_backward(q, k, v)
        return _mix(normalise(q)[0], normalise(k)[0], *upcast(v))[2].to(v.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        q, k, v = ctx.saved_tensors
        return linear_angular_backward(q, k, v, grad_out)


def linear_angular_backward(q: Tensor, k: Tensor, v: Tensor,
                            grad_out: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Gradients of the row-normalised linear-angular attention from its inputs (recomputed in
    float32), each in its input's dtype."""
    (q_hat, q_norm), (k_hat, k_norm) = normalise(q), normalise(k)
    dtypes = (q.dtype, k.dtype, v.dtype)
    v, grad_out = upcast(v, grad_out)
    summary, normaliser, out = _mix(q_hat, k_hat, v)
    grad_numerator = grad_out / normaliser
    grad_normaliser = -(grad_out * out).sum(dim=-1, keepdim=True) / normaliser
    grad_mixed = torch.cat([grad_numerator, grad_normaliser], dim=-1)  # (B, h, N, d_v + 1)
    grad_q_hat = grad_mixed @ summary.transpose(-1, -2)
    grad_summary = q_hat.transpose(-1, -2) @ grad_mixed / math.pi  # (B, h, d, d_v + 1)
    value_dims = v.shape[-1]
    grad_k_hat = v @ grad_summary[..., :value_dims].transpose(-1, -2) + grad_summary[
        ..., value_dims:
    ].transpose(-1, -2)
    grad_v = k_hat @ grad_summary[..., :value_dims] + 0.5 * grad_numerator.sum(dim=-2, keepdim=True)
    grads = (normalise_backward(grad_q_hat, q_hat, q_norm),
             normalise_backward(grad_k_hat, k_hat, k_norm), grad_v)
    return tuple(grad.to(dtype) for grad, dtype in zip(grads, dtypes))


def linear_angular_unnormalised(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The official module's form, ``1/2 v + (1/pi) q^ (K^T V)``, unnormalised, float32 with
    autocast off; ``v``'s dtype."""
    with no_autocast(q.device.type):
        (q_hat, _), (k_hat, _), (values,) = normalise(q), normalise(k), upcast(v)
        return (0.5 * values + q_hat @ (k_hat.transpose(-1, -2) @ values) / math.pi).to(v.dtype)


def linear_angular_attention_torch(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``(B, heads, N, d)`` queries and keys, ``(..., e)`` values -> ``(B, heads, N, e)``."""
    return apply_function(LinearAngularFunction, q, k, v)
