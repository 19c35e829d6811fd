"""What every implementation of ripple attention shares: the spatial weights (Eq. 5 with the
modified sigmoid of Appendix C.3, the threshold tau and the merge of Eq. 6), the Chebyshev geometry
of vicinal groups; the per-token weights are computed by chunks of tokens, each recomputed in the
backward (:mod:`mmvisattn.ops.recompute`), which keeps them small.

Shapes: ``logits`` ``(..., N, R_max)`` hold the stick logits ``o_r(i, j)`` of every query, one
per stick unit ``r = 0 .. R_max - 1``; ``N = H * W`` tokens in row-major order.
"""
from typing import Sequence, Tuple

import torch
from torch import Tensor

from ..amp import upcast
from ..recompute import CHUNK_TOKENS, checkpointed_chunks
from ..token_grid import grid_coordinates


def check_inputs(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float) -> None:
    """One-line errors for bad arguments of :func:`ripple_attention`."""
    height, width = hw_shape
    if height < 1 or width < 1 or q.shape[-2] != height * width:
        raise ValueError(f'ripple_attention: {q.shape[-2]} tokens do not match hw_shape={tuple(hw_shape)}')
    if k.shape != q.shape or v.shape[:-1] != q.shape[:-1] or logits.shape[:-1] != q.shape[:-1]:
        raise ValueError(f'ripple_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} and '
                         f'logits {tuple(logits.shape)} must share (..., N) with k shaped like q')
    if logits.shape[-1] < 1:
        raise ValueError(f'ripple_attention: R_max={logits.shape[-1]} (logits.shape[-1]); expected R_max >= 1')
    if not 0 < tau < 1:
        raise ValueError(f'ripple_attention: tau={tau}; expected 0 < tau < 1')


def stick_breaking(logits: Tensor) -> Tuple[Tensor, Tensor]:
    """Spatial weights ``alpha_0 .. alpha_{R_max}`` of Eq. 5 from ``R_max`` logits (footnote 12).

    Stick ``r`` has length ``s_r = 1 / (1 + (R_max - r) exp(-o_r))`` (C.3, ``r`` counted from 0 as in
    ``torch.distributions.StickBreakingTransform``), so zero logits give uniform weights;
    ``alpha_r = s_r prod_{r' < r} (1 - s_r')`` and the last weight is the stick left over.
    Returns ``alpha`` ``(..., R_max + 1)`` (on the simplex) and ``remaining`` ``(..., R_max)``,
    the stick left after group ``r``.
    """
    r_max = logits.shape[-1]
    offsets = torch.arange(r_max, 0, -1, dtype=logits.dtype, device=logits.device)
    sticks = torch.sigmoid(logits - offsets.log())
    remaining = torch.cumprod(1 - sticks, dim=-1)
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


def query_reach(hw_shape: Sequence[int], device=None) -> Tensor:
    """``(N,)`` largest Chebyshev distance from each token to any other: its last non-empty group."""
    height, width = hw_shape
    rows, cols = grid_coordinates(hw_shape, device)
    return torch.stack([rows, height - 1 - rows, cols, width - 1 - cols]).amax(dim=0)


def ring_weights(logits: Tensor, hw_shape: Sequence[int], tau: float) -> Tuple[Tensor, Tensor]:
    """The weights in the form the fast paths use: every token gets the merged weight ``w_m``, and a
    token in group ``r < R_max`` gets ``beta_r = alpha_r - w_m`` on top when ``r < r_hat`` (0 otherwise),
    so the groups inside ``R_max`` are a distance-weighted local attention and the merged remainder a
    global sum.

    ``w_m`` is Eq. 6: the merged mass shared equally by the ``reach - r_hat + 1`` non-empty groups
    ``r_hat .. reach`` of the query (Eq. 6 prints ``+ 2``; ``+ 1`` keeps the weights of the non-empty
    groups on the simplex). Returns ``beta`` ``(..., N, R_max)`` and ``w_m`` ``(..., N)``. Computed
    over chunks of tokens, each recomputed in the backward (:func:`checkpointed_chunks`).
    """
    reach = query_reach(hw_shape, logits.device).unsqueeze(-1)
    beta, merged_weight = checkpointed_chunks(_ring_weights, (logits, reach), CHUNK_TOKENS, tau)
    return beta, merged_weight.squeeze(-1)


def _ring_weights(logits: Tensor, reach: Tensor, tau: float) -> Tuple[Tensor, Tensor]:
    # float32: the stick products run down to tau (1e-3) and decide r_hat, too close for bfloat16's 8 bits
    alpha, r_hat, merged = truncate(upcast(logits)[0], tau)
    merged_weight = merged / (reach.squeeze(-1) - r_hat + 1).clamp(min=1)
    rings = torch.arange(logits.shape[-1], device=logits.device)
    beta = torch.where(rings < r_hat.unsqueeze(-1), alpha[..., :-1] - merged_weight.unsqueeze(-1),
                       torch.zeros_like(alpha[..., :-1]))
    return beta, merged_weight.unsqueeze(-1)
