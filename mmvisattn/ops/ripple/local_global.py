"""The split of ripple attention every backend runs (arXiv:2110.02453, Eq. 4-6): the stick-breaking
weights (Eq. 5, C.3) cut into a local part ``beta_r`` on groups ``r < R_max`` and a merged weight
``w_m`` on every token (:func:`ring_weights_by`)::

    num_ij = w_m(i, j) phi(q_ij) sum_all phi(k) v^T
             + sum_{r < R_max} beta_r(i, j) sum_{N_r(i, j)} (phi(q_ij) . phi(k)) v
    den_ij = the same with v = 1

A backend brings the local part as plain ``forward(q, k, v, beta, hw_shape) -> (num, den)`` and
``backward(..., grad_num, grad_den) -> (dq, dk, dv, dbeta)`` on ``(S, N, C)`` float32 tensors;
:func:`local_plus_global` adds the global sums (Eq. 2) and normalises.

Mixed precision: autocast off, float32 arithmetic (the global sums leave float16's range; the stick
products decide ``r_hat`` too finely for bfloat16); the output in ``v``'s dtype, gradients in their
inputs'.
"""
from functools import lru_cache
from typing import Callable, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import autocast_off, upcast
from ..utils.recompute import runs, step_budget
from ..utils.token_grid import grid_coordinates
from ..utils.tracing import apply_function, onnx_constants

# numbers per step of the token- (and, in the tiles, score-) sized temporaries: bounds memory
CHUNK_ELEMENTS = 2 ** 17


def stick_products(logits: Tensor) -> Tuple[Tensor, Tensor]:
    """Stick lengths ``s_r = 1 / (1 + (R_max - r) exp(-o_r))`` of ``(..., R_max)`` logits (C.3) and
    the stick left after each group, ``c_r = prod_{r' <= r} (1 - s_r')``."""
    r_max = logits.shape[-1]
    offsets = torch.arange(r_max, 0, -1, dtype=logits.dtype, device=logits.device)
    shifted = logits - offsets.log()
    sticks = torch.sigmoid(shifted)
    # ONNX has no cumprod: log(1 - sigmoid(x)) = -softplus(x), summed
    if torch.onnx.is_in_onnx_export():
        return sticks, torch.exp(torch.cumsum(-F.softplus(shifted), dim=-1))
    return sticks, torch.cumprod(1 - sticks, dim=-1)


def stick_breaking(logits: Tensor) -> Tuple[Tensor, Tensor]:
    """Spatial weights ``alpha_0 .. alpha_{R_max}`` of Eq. 5 (footnote 12):
    ``alpha_r = s_r c_{r-1}``, the last the stick left over, so zero logits give uniform weights.
    Returns ``alpha`` ``(..., R_max + 1)`` (on the simplex) and ``c`` ``(..., R_max)``."""
    sticks, remaining = stick_products(logits)
    ones = torch.ones_like(sticks[..., :1])
    alpha = torch.cat([sticks, ones], dim=-1) * torch.cat([ones, remaining], dim=-1)
    return alpha, remaining


def truncate(logits: Tensor, tau: float) -> Tuple[Tensor, Tensor, Tensor]:
    """Stick breaking stopped by ``tau`` (§3.2): ``r_hat`` (at most ``R_max``) is the first group
    after which less than ``tau`` is left, and later groups share the stick left before it. Returns
    ``alpha`` ``(..., R_max + 1)``, ``r_hat`` and that merged mass."""
    alpha, remaining = stick_breaking(logits)
    r_hat = (remaining >= tau).sum(dim=-1)  # remaining never grows, so this counts the kept groups
    left_before = torch.cat([torch.ones_like(remaining[..., :1]), remaining], dim=-1)
    merged = left_before.gather(-1, r_hat.unsqueeze(-1)).squeeze(-1)
    return alpha, r_hat, merged


def chebyshev_distances(hw_shape: Sequence[int], device=None) -> Tensor:
    """``(N, N)`` Chebyshev distances between all tokens: the group index of Eq. 4."""
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


def group_weights(logits: Tensor, hw_shape: Sequence[int], tau: float) -> Tensor:
    """``(..., N, R + 1)`` weight of every group of each query: ``alpha_r`` before ``r_hat``, then
    ``(1 - sum_{r < r_hat} alpha_r) / (reach - r_hat + 1)`` (Eq. 6). Explicit, for the reference and
    attention maps."""
    alpha, r_hat, _ = truncate(logits, tau)
    groups = max(hw_shape)  # R + 1 groups, R = max(H, W) - 1
    padded = torch.cat([alpha, alpha.new_zeros(*alpha.shape[:-1],
                                               max(groups - alpha.shape[-1], 0))], dim=-1)
    index = torch.arange(groups, device=logits.device)
    kept = index < r_hat.unsqueeze(-1)
    merged = 1 - (padded[..., :groups] * kept).sum(dim=-1)
    share = merged / (query_reach(tuple(hw_shape), logits.device) - r_hat + 1).clamp(min=1)
    return torch.where(kept, padded[..., :groups], share.unsqueeze(-1))


def ring_weights_reference(logits: Tensor, reach: Tensor, tau: float) -> Tuple[Tensor, Tensor]:
    """``beta`` ``(..., N, R_max)`` and ``w_m`` ``(..., N, 1)`` of :func:`ring_weights_by` under
    autograd, from the logits and the ``(N, 1)`` reach of every query (:func:`query_reach`)."""
    alpha, r_hat, merged = truncate(upcast(logits)[0], tau)
    # groups counted in floats: a traced integer clamp is ONNX's Clip, float-only in ONNX Runtime
    merged_weight = merged / (reach.squeeze(-1) - r_hat + 1).to(merged.dtype).clamp(min=1)
    rings = torch.arange(logits.shape[-1], device=logits.device)
    beta = torch.where(rings < r_hat.unsqueeze(-1), alpha[..., :-1] - merged_weight.unsqueeze(-1),
                       torch.zeros_like(alpha[..., :-1]))
    return beta, merged_weight.unsqueeze(-1)


def reverse_cumsum(x: Tensor) -> Tensor:
    """``sum_{r' >= r} x_r'`` along the small last axis by a triangle of sums (CUDA's float
    ``cumsum`` is not deterministic)."""
    index = torch.arange(x.shape[-1], device=x.device)
    return torch.where(index[None] >= index[:, None], x.unsqueeze(-2), 0).sum(dim=-1)


def ring_weights_backward(logits: Tensor, reach: Tensor, tau: float, grad_beta: Tensor,
                          grad_merged_weight: Tensor) -> Tensor:
    """The gradient of :func:`ring_weights_reference` for its logits, a reverse sweep over the stick
    products: with ``alpha_r = s_r c_{r-1}`` and the merged mass ``M = c_{r_hat - 1}``, the gradient
    reaching ``c_r`` is ``G_r = (1 / c_r) sum_{j >= r} a_j c_j``, ``a_j = g_alpha_{j+1} s_{j+1}``
    plus ``g_M`` at ``j = r_hat - 1``; then ``dL/ds_r = c_{r-1} (g_alpha_r - G_r)``. Only groups
    ``r < r_hat`` carry gradient, where ``c_r >= tau``."""
    sticks, remaining = stick_products(logits)
    r_hat = (remaining >= tau).sum(dim=-1, keepdim=True)
    rings = torch.arange(logits.shape[-1], device=logits.device)
    kept = rings < r_hat
    grad_alpha = torch.where(kept, grad_beta, 0)
    # w_m = M / max(reach - r_hat + 1, 1), subtracted from every kept beta
    grad_merged = (grad_merged_weight
                   - grad_alpha.sum(dim=-1, keepdim=True)) / (reach - r_hat + 1).clamp(min=1)
    into_next = torch.cat([(grad_alpha * sticks)[..., 1:], torch.zeros_like(sticks[..., :1])],
                          dim=-1)
    into_remaining = into_next + torch.where(rings == r_hat - 1, grad_merged, 0)
    tail_sums = reverse_cumsum(into_remaining * remaining)
    grad_remaining = torch.where(kept, tail_sums / remaining.clamp(min=tau), 0)
    left_before = torch.cat([torch.ones_like(remaining[..., :1]), remaining[..., :-1]], dim=-1)
    grad_sticks = left_before * (grad_alpha - grad_remaining)
    return grad_sticks * sticks * (1 - sticks)


class RingWeights(torch.autograd.Function):
    """The ring weights by ``forward(logits, reach, tau) -> (beta, w_m)`` and ``backward(...,
    grad_beta, grad_w_m) -> grad_logits``, saving only the logits. Autocast off, float32 arithmetic
    (float64 stays)."""

    @staticmethod
    @autocast_off
    def forward(ctx, logits: Tensor, reach: Tensor, tau: float, passes: Tuple[Callable, Callable]):
        ctx.save_for_backward(logits, reach)
        ctx.tau, ctx.passes = tau, passes
        return passes[0](upcast(logits)[0], reach, tau)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_beta: Tensor, grad_merged_weight: Tensor):
        logits, reach = ctx.saved_tensors
        grad_logits = ctx.passes[1](upcast(logits)[0], reach, ctx.tau, grad_beta,
                                    grad_merged_weight)
        return grad_logits.to(logits.dtype), None, None, None


TORCH_PASSES = (ring_weights_reference, ring_weights_backward)


def ring_weights_by(logits: Tensor, hw_shape: Sequence[int], tau: float,
                    passes: Tuple[Callable, Callable] = TORCH_PASSES) -> Tuple[Tensor, Tensor]:
    """The backends' form of the weights: every token gets ``w_m``, and one in group ``r <
    min(r_hat, R_max)`` gets ``beta_r = alpha_r - w_m`` on top.

    ``w_m`` is Eq. 6's merged mass shared by the ``reach - r_hat + 1`` non-empty groups (Eq. 6
    prints ``+ 2``; ``+ 1`` keeps the weights on the simplex). Returns float32 ``beta`` ``(..., N,
    R_max)`` and ``w_m`` ``(..., N)`` by :class:`RingWeights`'s passes, torch's unless given.
    """
    reach = query_reach(tuple(hw_shape), logits.device).unsqueeze(-1)
    beta, merged_weight = apply_function(RingWeights, logits, reach, tau, passes)
    return beta, merged_weight.squeeze(-1)


def _tile_costs(r_max: int) -> Tuple[float, int]:
    """The least work per query over tile sides ``T`` (``(T + 2 R_max - 2)^2`` scores plus about
    four score passes of halo gathering over ``T^2`` queries), and that ``T``."""
    costs = [((tile + 2 * r_max - 2) ** 2 * (1 + 4 / tile ** 2), tile) for tile in (1, 2, 4, 8, 16)]
    return min(costs)  # no key=: torch.compile's tracer does not take min(key=...)


def tile_size(r_max: int) -> int:
    """Tile side ``T`` of the torch and C++ local parts, minimising the work per query."""
    return _tile_costs(r_max)[1]


def tiled_cost(r_max: int) -> float:
    """Work per query of the tiled local part, in score entries."""
    return _tile_costs(r_max)[0]


def _flat(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """``(..., N, C)`` as ``(S, N, C)`` and ``(..., N)`` as ``(S, N)``, the kernels' layout (copied
    per pass where permuted)."""
    return tuple(t.reshape(-1, *t.shape[-2:]) if t.dim() > 2 else t for t in tensors)


def _slice_groups(q: Tensor, v: Tensor) -> List[slice]:
    """Groups of slices whose token-sized temporaries hold about :data:`CHUNK_ELEMENTS` numbers each
    on CPU (:func:`~mmvisattn.ops.utils.recompute.step_budget` elsewhere)."""
    budget = step_budget(CHUNK_ELEMENTS, q.device)
    return runs(q.shape[0], max(1, budget // (q.shape[1] * max(q.shape[-1], v.shape[-1]))))


def _by_groups(fn: Callable, groups: List[slice], tensors: Sequence[Tensor],
               *args) -> Tuple[Tensor, ...]:
    """``fn(*tensors, *args)`` over groups of slices of ``tensors``, joined by ``cat``; one group
    runs on the tensors as given."""
    if len(groups) == 1:
        return fn(*tensors, *args)
    results = [fn(*(t[part] for t in tensors), *args) for part in groups]
    return tuple(torch.cat(parts) for parts in zip(*results))


class RippleLocalGlobal(torch.autograd.Function):
    """``out = (w_m q (K^T V) + num_local) / (w_m q . sum k + den_local + eps)`` with a local part's
    ``(forward, backward)`` pair. Saves the inputs as given, the output and the normaliser; both
    passes run over groups of slices to bound temporaries. Float32 arithmetic, autocast off."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor,
                hw_shape: Sequence[int], eps: float, local: Tuple[Callable, Callable]) -> Tensor:
        inputs = (q, k, v, beta, merged_weight)
        flat = (*_flat(*upcast(q, k, v, beta)), upcast(merged_weight)[0])
        out, den = _by_groups(_forward_slices, _slice_groups(flat[0], flat[2]), flat, hw_shape, eps,
                              local[0])
        ctx.save_for_backward(*inputs, out, den)
        ctx.hw_shape, ctx.local = hw_shape, local
        return out.view(*inputs[2].shape[:-1], -1).to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        *inputs, out, den = ctx.saved_tensors
        flat = (*_flat(*upcast(*inputs[:4])), upcast(inputs[4])[0], out, den,
                _flat(*upcast(grad_out))[0])
        grads = _by_groups(_backward_slices, _slice_groups(flat[0], flat[2]), flat, ctx.hw_shape,
                           ctx.local[1])
        return (*(grad.view(x.shape).to(x.dtype) for grad, x in zip(grads, inputs)), None, None,
                None)


def _forward_slices(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor,
                    hw_shape: Sequence[int],
                    eps: float, local_forward: Callable) -> Tuple[Tensor, Tensor]:
    """The output and normaliser of :class:`RippleLocalGlobal` for a group of slices."""
    num, den = local_forward(q, k, v, beta, hw_shape)
    weighted_q = merged_weight.unsqueeze(-1) * q
    num.baddbmm_(weighted_q, torch.bmm(k.transpose(1, 2), v))
    den.baddbmm_(weighted_q, k.sum(dim=1).unsqueeze(-1)).add_(eps)
    return num.div_(den), den


def _backward_slices(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor,
                     out: Tensor, den: Tensor, grad_out: Tensor, hw_shape: Sequence[int],
                     local_backward: Callable) -> Tuple[Tensor, ...]:
    """Gradients of :class:`RippleLocalGlobal` for a group of slices (q, k, v, beta, w_m)."""
    grad_num = grad_out / den
    grad_den = -(grad_num * out).sum(dim=-1, keepdim=True)
    # (S, D, E), (S, D, 1)
    key_values, key_sum = torch.bmm(k.transpose(1, 2), v), k.sum(dim=1).unsqueeze(-1)
    # what reaches w_m q: grad_num (K^T V)^T + grad_den (sum k)^T
    grad_weighted_q = torch.baddbmm(torch.bmm(grad_num, key_values.transpose(1, 2)), grad_den,
                                    key_sum.transpose(1, 2))
    grad_merged = (q * grad_weighted_q).sum(dim=-1)
    weight = merged_weight.unsqueeze(-1)
    weighted_q = (weight * q).transpose(1, 2)
    grad_key_values, grad_key_sum = torch.bmm(weighted_q, grad_num), torch.bmm(weighted_q, grad_den)
    grad_q, grad_k, grad_v, grad_beta = local_backward(q, k, v, beta, hw_shape, grad_num, grad_den)
    grad_q.addcmul_(weight, grad_weighted_q)
    grad_k.baddbmm_(v, grad_key_values.transpose(1, 2)).add_(grad_key_sum.transpose(1, 2))
    grad_v.baddbmm_(k, grad_key_values)
    return grad_q, grad_k, grad_v, grad_beta, grad_merged


def local_plus_global(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                      tau: float, eps: float, local_forward: Callable, local_backward: Callable,
                      weight_passes: Tuple[Callable, Callable] = TORCH_PASSES) -> Tensor:
    """Ripple attention from a local part's passes and the global sums weighted by ``w_m`` (the ring
    weights by ``weight_passes``)."""
    beta, merged_weight = ring_weights_by(logits, hw_shape, tau, weight_passes)
    return apply_function(RippleLocalGlobal, q, k, v, beta, merged_weight.reshape(-1, q.shape[-2]),
                          tuple(hw_shape), eps, (local_forward, local_backward))
