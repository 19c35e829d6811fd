"""The spatial weights of ripple attention, which every implementation shares (Eq. 5 with the
modified sigmoid of Appendix C.3, the threshold tau and the merge of Eq. 6), the Chebyshev geometry
of vicinal groups; the per-token weights with their backward written out (:class:`RingWeights`),
which keeps nothing but the logits.

Shapes: ``logits`` ``(..., N, R_max)`` hold the stick logits ``o_r(i, j)`` of every query, one
per stick unit ``r = 0 .. R_max - 1``; ``N = H * W`` tokens in row-major order.
"""
from functools import lru_cache
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import autocast_off, upcast
from ..utils.tracing import apply_function, onnx_constants
from ..utils.token_grid import grid_coordinates


def stick_logits(v: Tensor, blocks: Tensor, bias: Tensor) -> Tensor:
    """``(B, heads, N, d)`` values -> ``(B, heads, N, R_max)`` logits ``v @ blocks[h]^T + bias[h]`` of each
    head's ``(R_max, d)`` block: one linear map with a block per head, reading ``v`` (a view of a ``qkv``
    projection's rows) in place; under ONNX export, which has no ``block_diag``, the same products per head."""
    if torch.onnx.is_in_onnx_export():
        return v @ blocks.transpose(1, 2) + bias[:, None]
    batch, heads, tokens, _ = v.shape
    logits = F.linear(v.transpose(1, 2).flatten(2), torch.block_diag(*blocks), bias.flatten())
    return logits.view(batch, tokens, heads, -1).transpose(1, 2)


def stick_products(logits: Tensor) -> Tuple[Tensor, Tensor]:
    """Stick lengths ``s_r = 1 / (1 + (R_max - r) exp(-o_r))`` of ``(..., R_max)`` logits (C.3) and the
    stick left after each group, ``c_r = prod_{r' <= r} (1 - s_r')``."""
    r_max = logits.shape[-1]
    offsets = torch.arange(r_max, 0, -1, dtype=logits.dtype, device=logits.device)
    shifted = logits - offsets.log()
    sticks = torch.sigmoid(shifted)
    if torch.onnx.is_in_onnx_export():  # ONNX has no cumprod: log(1 - sigmoid(x)) = -softplus(x), summed
        return sticks, torch.exp(torch.cumsum(-F.softplus(shifted), dim=-1))
    return sticks, torch.cumprod(1 - sticks, dim=-1)


def stick_breaking(logits: Tensor) -> Tuple[Tensor, Tensor]:
    """Spatial weights ``alpha_0 .. alpha_{R_max}`` of Eq. 5 from ``R_max`` logits (footnote 12).

    Stick ``r`` has length ``s_r = 1 / (1 + (R_max - r) exp(-o_r))`` (C.3, ``r`` counted from 0 as in
    ``torch.distributions.StickBreakingTransform``), so zero logits give uniform weights;
    ``alpha_r = s_r prod_{r' < r} (1 - s_r')`` and the last weight is the stick left over.
    Returns ``alpha`` ``(..., R_max + 1)`` (on the simplex) and ``remaining`` ``(..., R_max)``,
    the stick left after group ``r``.
    """
    sticks, remaining = stick_products(logits)
    ones = torch.ones_like(sticks[..., :1])
    alpha = torch.cat([sticks, ones], dim=-1) * torch.cat([ones, remaining], dim=-1)
    return alpha, remaining


def truncate(logits: Tensor, tau: float) -> Tuple[Tensor, Tensor, Tensor]:
    """Stick breaking stopped by ``tau`` (§3.2): ``r_hat`` is the first group after which less than
    ``tau`` of the stick is left (at most ``R_max``); groups ``r >= r_hat`` are merged and share the
    stick left before ``r_hat``. Returns ``alpha`` ``(..., R_max + 1)``, ``r_hat`` (long,
    ``(...)``) and that merged mass ``(...)``.
    """
    alpha, remaining = stick_breaking(logits)
    r_hat = (remaining >= tau).sum(dim=-1)  # remaining never grows, so this counts the kept groups
    left_before = torch.cat([torch.ones_like(remaining[..., :1]), remaining], dim=-1)
    merged = left_before.gather(-1, r_hat.unsqueeze(-1)).squeeze(-1)
    return alpha, r_hat, merged


def chebyshev_distances(hw_shape: Sequence[int], device=None) -> Tensor:
    """``(N, N)`` distances ``max(|m - i|, |n - j|)`` between all tokens: the group index of Eq. 4."""
    rows, cols = grid_coordinates(hw_shape, device)
    return torch.maximum((rows[:, None] - rows[None]).abs(), (cols[:, None] - cols[None]).abs())


@lru_cache(maxsize=16)
def query_reach(hw_shape: Tuple[int, int], device=None) -> Tensor:
    """``(N,)`` largest Chebyshev distance from each token to any other: its last non-empty group.
    Cached: a map size recurs in every layer and step."""
    height, width = hw_shape
    with onnx_constants():  # of the map size alone: a constant of an exported graph
        rows, cols = grid_coordinates(hw_shape, device)
        return torch.stack([rows, height - 1 - rows, cols, width - 1 - cols]).amax(dim=0)


class WeightKernels(NamedTuple):
    """A pair of passes of :func:`ring_weights` on float32 (or float64) logits and the ``(N, 1)`` reach of
    every query: ``forward(logits, reach, tau) -> (beta, w_m)`` (``w_m`` ``(..., N, 1)``) and
    ``backward(logits, reach, tau, grad_beta, grad_w_m) -> grad_logits``. The torch pair is
    :data:`TORCH_WEIGHTS`; :mod:`.triton` has one kernel a pass."""
    forward: Callable
    backward: Callable


def ring_weights(logits: Tensor, hw_shape: Sequence[int], tau: float,
                 kernels: Optional[WeightKernels] = None) -> Tuple[Tensor, Tensor]:
    """The weights in the form the fast paths use: every token gets the merged weight ``w_m``, and a
    token in group ``r < R_max`` gets ``beta_r = alpha_r - w_m`` on top when ``r < r_hat`` (0 otherwise),
    so the groups inside ``R_max`` are a distance-weighted local attention and the merged remainder a
    global sum.

    ``w_m`` is Eq. 6: the merged mass shared equally by the ``reach - r_hat + 1`` non-empty groups
    ``r_hat .. reach`` of the query (Eq. 6 prints ``+ 2``; ``+ 1`` keeps the weights of the non-empty
    groups on the simplex). Returns ``beta`` ``(..., N, R_max)`` and ``w_m`` ``(..., N)``, in float32
    (:class:`RingWeights` with ``kernels``, :data:`TORCH_WEIGHTS` by default; its reference under autograd
    is :func:`ring_weights_reference`).
    """
    reach = query_reach(tuple(hw_shape), logits.device).unsqueeze(-1)
    beta, merged_weight = apply_function(RingWeights, logits, reach, tau, kernels or TORCH_WEIGHTS)
    return beta, merged_weight.squeeze(-1)


def ring_weights_reference(logits: Tensor, reach: Tensor, tau: float) -> Tuple[Tensor, Tensor]:
    """``beta`` ``(..., N, R_max)`` and ``w_m`` ``(..., N, 1)`` of :func:`ring_weights` under autograd,
    from the logits and the ``(N, 1)`` reach of every query (:func:`query_reach`)."""
    # float32: the stick products run down to tau (1e-3) and decide r_hat, too close for bfloat16's 8 bits
    alpha, r_hat, merged = truncate(upcast(logits)[0], tau)
    # groups counted in floats: a traced integer clamp is ONNX's Clip, which ONNX Runtime runs on floats only
    merged_weight = merged / (reach.squeeze(-1) - r_hat + 1).to(merged.dtype).clamp(min=1)
    rings = torch.arange(logits.shape[-1], device=logits.device)
    beta = torch.where(rings < r_hat.unsqueeze(-1), alpha[..., :-1] - merged_weight.unsqueeze(-1),
                       torch.zeros_like(alpha[..., :-1]))
    return beta, merged_weight.unsqueeze(-1)


def reverse_cumsum(x: Tensor) -> Tensor:
    """``sum_{r' >= r} x_r'`` along the last (``R_max``, small) axis by sums over a triangle: CUDA's float
    ``cumsum`` has no deterministic kernel (torch refuses it under ``torch.use_deterministic_algorithms``)."""
    index = torch.arange(x.shape[-1], device=x.device)
    return torch.where(index[None] >= index[:, None], x.unsqueeze(-2), 0).sum(dim=-1)


def torch_weights_backward(logits: Tensor, reach: Tensor, tau: float, grad_beta: Tensor,
                           grad_merged_weight: Tensor) -> Tensor:
    """The gradient of :func:`ring_weights_reference`'s weights for its logits: the reverse sweep of
    :class:`RingWeights`, in torch."""
    sticks, remaining = stick_products(logits)
    r_hat = (remaining >= tau).sum(dim=-1, keepdim=True)
    rings = torch.arange(logits.shape[-1], device=logits.device)
    kept = rings < r_hat
    grad_alpha = torch.where(kept, grad_beta, 0)
    # w_m = M / max(reach - r_hat + 1, 1), subtracted from every kept beta
    grad_merged = (grad_merged_weight - grad_alpha.sum(dim=-1, keepdim=True)) / (reach - r_hat + 1).clamp(min=1)
    into_next = torch.cat([(grad_alpha * sticks)[..., 1:], torch.zeros_like(sticks[..., :1])], dim=-1)
    into_remaining = into_next + torch.where(rings == r_hat - 1, grad_merged, 0)
    tail_sums = reverse_cumsum(into_remaining * remaining)
    grad_remaining = torch.where(kept, tail_sums / remaining.clamp(min=tau), 0)
    left_before = torch.cat([torch.ones_like(remaining[..., :1]), remaining[..., :-1]], dim=-1)
    grad_sticks = left_before * (grad_alpha - grad_remaining)
    return grad_sticks * sticks * (1 - sticks)


TORCH_WEIGHTS = WeightKernels(ring_weights_reference, torch_weights_backward)


class RingWeights(torch.autograd.Function):
    """:func:`ring_weights_reference` with the backward written out (a pair of :class:`WeightKernels`):
    it saves only the logits and recomputes the sticks.

    The backward is a reverse sweep over the stick products ``c_r = prod_{r' <= r} (1 - s_r')`` (Eq. 5):
    with ``alpha_r = s_r c_{r-1}`` and the merged mass ``M = c_{r_hat - 1}``, the gradient reaching ``c_r``
    is ``G_r = (1 / c_r) sum_{j >= r} a_j c_j``, ``a_j = g_alpha_{j+1} s_{j+1}`` plus ``g_M`` at
    ``j = r_hat - 1``; then ``dL/ds_r = c_{r-1} (g_alpha_r - G_r)``. Only groups ``r < r_hat`` carry gradient,
    where ``c_r >= tau``. Autocast off in both passes, float32 arithmetic (float64 stays); the weights come
    back in float32 (float64 for float64 logits), the logits' gradient in their dtype."""

    @staticmethod
    @autocast_off
    def forward(ctx, logits: Tensor, reach: Tensor, tau: float, kernels: WeightKernels) -> Tuple[Tensor, Tensor]:
        ctx.save_for_backward(logits, reach)
        ctx.tau, ctx.kernels = tau, kernels
        return kernels.forward(upcast(logits)[0], reach, tau)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_beta: Tensor, grad_merged_weight: Tensor) -> Tuple[Optional[Tensor], None, None, None]:
        logits, reach = ctx.saved_tensors
        grad_logits = ctx.kernels.backward(upcast(logits)[0], reach, ctx.tau, grad_beta, grad_merged_weight)
        return grad_logits.to(logits.dtype), None, None, None


def group_weights(logits: Tensor, hw_shape: Sequence[int], tau: float) -> Tensor:
    """``(..., N, R + 1)`` weight of every group ``r = 0 .. R`` (``R = max(H, W) - 1``) of each query:
    ``alpha_r`` before ``r_hat``, and from ``r_hat`` on ``(1 - sum_{r < r_hat} alpha_r) / (reach - r_hat + 1)``
    (Eq. 6; ``reach`` is the query's farthest non-empty group). Explicit, for the reference and the
    attention maps; the backends weight the groups without it."""
    alpha, r_hat, _ = truncate(logits, tau)
    groups = max(hw_shape)  # R + 1 groups, R = max(H, W) - 1
    padded = torch.cat([alpha, alpha.new_zeros(*alpha.shape[:-1], max(groups - alpha.shape[-1], 0))], dim=-1)
    index = torch.arange(groups, device=logits.device)
    kept = index < r_hat.unsqueeze(-1)
    merged = 1 - (padded[..., :groups] * kept).sum(dim=-1)
    share = merged / (query_reach(tuple(hw_shape), logits.device) - r_hat + 1).clamp(min=1)
    return torch.where(kept, padded[..., :groups], share.unsqueeze(-1))
