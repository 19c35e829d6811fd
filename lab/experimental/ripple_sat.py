"""Ripple attention by dynamic programming over summed-area tables (§3.3, Eq. 7-9, Algorithm 1) with
the hand-written backward of Appendix B.

The generalised pixels ``x = [phi(k) v^T; phi(k)]`` get one summed-area table, a window sum is four
look-ups (Eq. 8) and a group sum the difference of two windows. With
:func:`mmvisattn.ops.ripple.ring_weights`' form and ``beta_{R_max} = 0``, summing by parts::

    y_ij = w_m(i, j) S(H, W) + sum_{r < R_max} (beta_r(i, j) - beta_{r+1}(i, j)) W(i, j, r)

O(H W R_max) look-ups and O(H W) memory per channel. The backward (Appendix B) is window sums again,
by the symmetry ``(m, n) in N_r(i, j) <=> (i, j) in N_r(m, n)``; nothing of size ``H W R`` is
stored. Float32 with autocast off (the tables sum the whole map).
"""
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.ops.ripple import ring_weights
from mmvisattn.ops.utils.amp import autocast_off, float32_math, upcast
from mmvisattn.ops.utils.tracing import apply_function


def summed_area_table(x: Tensor) -> Tensor:
    """``(S, H, W, C) -> (S, H + 1, W + 1, C)``, ``table[:, a, b] = x[:, :a, :b].sum()`` (Eq. 7);
    the zero first row and column make look-ups branch-free."""
    return F.pad(x.cumsum(dim=1).cumsum(dim=2), (0, 0, 1, 0, 1, 0))


def window_sums(table: Tensor, radius: int) -> Tensor:
    """Sums over the square windows of ``radius`` around every position, clipped (Eq. 8)."""
    height, width = table.shape[1] - 1, table.shape[2] - 1
    rows = torch.arange(height, device=table.device)
    cols = torch.arange(width, device=table.device)
    rows_in = table.index_select(1, (rows + radius + 1).clamp(max=height)) - \
        table.index_select(1, (rows - radius).clamp(min=0))
    return rows_in.index_select(2, (cols + radius + 1).clamp(max=width)) - \
        rows_in.index_select(2, (cols - radius).clamp(min=0))


def window_weights(beta: Tensor) -> Tensor:
    """``beta_r - beta_{r+1}`` with ``beta_{R_max} = 0``: the weight of window ``r`` after summing
    by parts."""
    return beta - F.pad(beta[..., 1:], (0, 1))


class VicinalSum(torch.autograd.Function):
    """``y_ij = w_m(i, j) sum_all x + sum_{r < R_max} beta_r(i, j) sum_{N_r(i, j)} x`` (Eq. 11) for
    ``x`` ``(S, H, W, C)``."""

    @staticmethod
    @autocast_off
    def forward(ctx, x: Tensor, beta: Tensor, merged_weight: Tensor) -> Tensor:
        ctx.save_for_backward(x, beta, merged_weight)
        dtype = x.dtype
        x, beta, merged_weight = upcast(x, beta, merged_weight)
        table = summed_area_table(x)
        weights = window_weights(beta)
        out = merged_weight.unsqueeze(-1) * table[:, -1:, -1:]
        for radius in range(beta.shape[-1]):
            out = out + weights[..., radius, None] * window_sums(table, radius)
        return out.to(dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        inputs = ctx.saved_tensors
        x, beta, merged_weight, grad = upcast(*inputs, grad)
        table = summed_area_table(x)
        weights = window_weights(beta)
        grad_merged = (grad * table[:, -1:, -1:]).sum(dim=-1)
        grad_x = (
            (merged_weight.unsqueeze(-1) * grad).sum(dim=(1, 2), keepdim=True).expand_as(x).clone()
        )
        grad_beta = torch.empty_like(beta)
        previous = torch.zeros_like(x)
        for radius in range(beta.shape[-1]):
            window = window_sums(table, radius)
            grad_beta[..., radius] = (grad * (window - previous)).sum(dim=-1)
            previous = window
            grad_x += window_sums(summed_area_table(weights[..., radius, None] * grad), radius)
        return tuple(grad.to(x.dtype) for grad, x in zip((grad_x, grad_beta, grad_merged), inputs))


def vicinal_sum(x: Tensor, beta: Tensor, merged_weight: Tensor) -> Tensor:
    """:class:`VicinalSum` on ``(S, H, W, .)`` maps."""
    return apply_function(VicinalSum, x, beta, merged_weight)


@float32_math  # the window sums of k v^T reach far beyond float16's range
def ripple_attention_sat(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                         tau: float, eps: float) -> Tensor:
    """Ripple attention through :class:`VicinalSum` on ``[phi(k) v^T; phi(k)]`` (Eq. 9)."""
    *lead, tokens, dims = k.shape
    value_dims = v.shape[-1]
    beta, merged_weight = ring_weights(logits, hw_shape, tau)
    pixels = torch.cat([(k.unsqueeze(-1) * v.unsqueeze(-2)).flatten(-2), k], dim=-1)
    grid = (-1, *hw_shape)
    sums = vicinal_sum(pixels.reshape(*grid, pixels.shape[-1]), beta.reshape(*grid, beta.shape[-1]),
                       merged_weight.reshape(grid)).reshape(*lead, tokens, -1)
    key_values = sums[..., :dims * value_dims].unflatten(-1, (dims, value_dims))
    numerator = torch.einsum('...nd,...nde->...ne', q, key_values)
    denominator = (q * sums[..., dims * value_dims:]).sum(dim=-1, keepdim=True)
    return numerator / (denominator + eps)
