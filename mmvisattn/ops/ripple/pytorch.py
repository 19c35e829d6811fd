"""Ripple attention as a distance-weighted local attention plus a global linearized attention.

With the weights of :func:`~.common.ring_weights`, every token carries the merged weight ``w_m`` and
the ``(2 R_max - 1)^2`` tokens of groups ``r < R_max`` carry ``beta_r`` on top, so::

    num_ij = w_m(i, j) phi(q_ij) sum_all phi(k) v^T
             + sum_{r < R_max} beta_r(i, j) sum_{N_r(i, j)} (phi(q_ij) . phi(k)) v
    den_ij = the same with v = 1

The global part is Eq. 2 (``D x E`` statistics per head); the local part never forms
``phi(k) v^T`` per position, which is what keeps memory near the inputs' size where the
summed-area tables of :mod:`.sat` need ``D E`` channels per position.

The torch local part (:func:`tiled_forward`, :func:`tiled_backward`) runs on tiles of ``T x T``
queries: each tile's queries meet its halo of ``(T + 2 R_max - 2)^2`` keys in two batched matrix
products, the scores are weighted by ``beta`` of their Chebyshev group (zero beyond ``R_max - 1``),
and slices are processed in chunks. :class:`RippleLocalGlobal` adds the global sums and normalises,
with the backward written out: the scores are recomputed chunk by chunk and only the inputs, the
output and the normaliser are saved -- O(H W R_max^2) time, O(H W) memory. Halos of neighbouring
tiles overlap; their key and value gradients are added back by ``F.fold``.

Mixed precision (:mod:`mmvisattn.ops.amp`): :class:`RippleLocalGlobal` turns autocast off and computes
in float32 whatever the inputs' dtype (the global sums run over every token and leave float16's
range), for the torch and the Triton local parts alike; the output comes back in ``v``'s dtype.
"""
from typing import Callable, NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..amp import autocast_off, upcast
from ..token_grid import from_windows, to_windows, window_grid
from ..tracing import apply_function
from .common import ring_weights

CHUNK_ELEMENTS = 2 ** 20  # score entries per chunk of tiles: bounds the temporaries of one step


def tile_size(r_max: int) -> int:
    """Tile side ``T`` minimising the work per query: ``(T + 2 R_max - 2)^2`` scores, plus gathering
    the halo's keys and values (about four score passes' worth spread over ``T^2`` queries)."""
    costs = [((tile + 2 * r_max - 2) ** 2 * (1 + 4 / tile ** 2), tile) for tile in (1, 2, 4, 8, 16)]
    return min(costs)[1]  # no key=: torch.compile's tracer does not take min(key=...)


def to_tiles(x: Tensor, hw_shape: Sequence[int], tile: int) -> Tensor:
    """``(S, H * W, C) -> (S * L, T * T, C)``, the map zero-padded to whole ``T x T`` tiles."""
    return to_windows(x, hw_shape, tile).flatten(0, 1)


class Geometry:
    """Index tensors of one (map, tile, R_max): the Chebyshev group of every (query, halo key) pair of
    a tile, and the cutting of a map into overlapping halos and the adding of them back."""

    def __init__(self, hw_shape: Sequence[int], r_max: int, tile: int, device) -> None:
        self.hw_shape, self.r_max, self.tile, self.halo = tuple(hw_shape), r_max, tile, r_max - 1
        self.side = tile + 2 * self.halo
        rows, cols = window_grid(hw_shape, tile)
        self.tiles = rows * cols
        self.padded = (rows * tile + 2 * self.halo, cols * tile + 2 * self.halo)
        local = torch.arange(tile, device=device)
        span = torch.arange(self.side, device=device) - self.halo
        rows_q, cols_q = local.repeat_interleave(tile), local.repeat(tile)
        rows_k, cols_k = span.repeat_interleave(self.side), span.repeat(self.side)
        distance = torch.maximum((rows_q[:, None] - rows_k[None]).abs(), (cols_q[:, None] - cols_k[None]).abs())
        group = distance.clamp(max=r_max)  # (T * T, K); r_max points at a zero weight
        # flat positions in a tile's (T * T, R_max + 1) weights, so gathering them is one index_select
        self.weight_index = (torch.arange(tile * tile, device=device)[:, None] * (r_max + 1) + group).reshape(-1)
        # (T * T, K, R_max) one-hot groups: summing gradients by group is one product per query of a tile
        self.group_masks = F.one_hot(group, r_max + 1)[..., :r_max].float()

    def halos(self, x: Tensor) -> Tensor:
        """``(s, H * W, C) -> (s * L, K, C)``: each tile's keys with ``R_max - 1`` around, zeros outside
        (strided windows of the padded map, copied once into the layout of the matrix products)."""
        (height, width), channels, halo = self.hw_shape, x.shape[-1], self.halo
        grid = F.pad(x.reshape(-1, height, width, channels),
                     (0, 0, halo, self.padded[1] - width - halo, halo, self.padded[0] - height - halo))
        windows = grid.unfold(1, self.side, self.tile).unfold(2, self.side, self.tile)  # (s, nH, nW, C, side, side)
        return windows.permute(0, 1, 2, 4, 5, 3).reshape(-1, self.side ** 2, channels)

    def fold(self, halos: Tensor) -> Tensor:
        """Adjoint of :meth:`halos`: ``(s * L, K, C) -> (s, H * W, C)``, overlapping halos added."""
        (height, width), channels, halo = self.hw_shape, halos.shape[-1], self.halo
        columns = halos.view(-1, self.tiles, self.side ** 2, channels).permute(0, 3, 2, 1).reshape(
            -1, channels * self.side ** 2, self.tiles)
        grid = F.fold(columns, self.padded, self.side, stride=self.tile)[..., halo:halo + height, halo:halo + width]
        return grid.reshape(-1, channels, height * width).transpose(1, 2)

    def chunks(self, slices: int):
        """Ranges of whole slices whose score matrices hold about :data:`CHUNK_ELEMENTS` entries."""
        step = max(1, CHUNK_ELEMENTS // (self.tiles * self.tile ** 2 * self.side ** 2))
        for start in range(0, slices, step):
            yield start, min(start + step, slices)

    def scores(self, q_tiles: Tensor, keys: Tensor, beta_tiles: Tensor) -> Tuple[Tensor, Tensor]:
        """Scores ``phi(q) . phi(k)`` of tiles against their halos, and the ``beta`` of each pair's group
        (``beta_tiles`` carry a last zero column for groups ``>= R_max``)."""
        count = q_tiles.shape[0]
        weights = beta_tiles.reshape(count, -1).index_select(1, self.weight_index).view(count, self.tile ** 2, -1)
        return q_tiles @ keys.transpose(1, 2), weights

    def query_tiles(self, q: Tensor, beta: Tensor) -> Tuple[Tensor, Tensor]:
        """Query tiles and their ``beta`` with the zero column that far groups point at."""
        return to_tiles(q, self.hw_shape, self.tile), F.pad(to_tiles(beta, self.hw_shape, self.tile), (0, 1))


def tiled_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """Local part: ``num_ij = sum beta_r(i, j) (q_ij . k_mn) v_mn`` and ``den_ij = sum beta_r(i, j) (q_ij . k_mn)``
    over the tokens ``(m, n)`` of groups ``r < R_max``; ``q, k`` ``(S, N, D)``, ``v`` ``(S, N, E)``,
    ``beta`` ``(S, N, R_max)`` -> ``(S, N, E)``, ``(S, N, 1)``. Runs over chunks of whole slices."""
    geometry = Geometry(hw_shape, beta.shape[-1], tile_size(beta.shape[-1]), q.device)
    num, den = q.new_empty(*v.shape), q.new_empty(*v.shape[:-1], 1)
    for start, stop in geometry.chunks(q.shape[0]):
        num[start:stop], den[start:stop] = _forward_chunk(geometry, q[start:stop], k[start:stop], v[start:stop],
                                                          beta[start:stop])
    return num, den


def _forward_chunk(geometry: Geometry, q: Tensor, k: Tensor, v: Tensor, beta: Tensor) -> Tuple[Tensor, Tensor]:
    """One chunk of :func:`tiled_forward`; its temporaries end with the call."""
    q_tiles, beta_tiles = geometry.query_tiles(q, beta)
    scores, weights = geometry.scores(q_tiles, geometry.halos(k), beta_tiles)
    weighted = scores.mul_(weights)
    tile = geometry.tile
    return (from_windows(weighted @ geometry.halos(v), geometry.hw_shape, tile),
            from_windows(weighted.sum(dim=-1, keepdim=True), geometry.hw_shape, tile))


def tiled_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int], grad_num: Tensor,
                   grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`tiled_forward` for ``q, k, v, beta``, recomputing the scores chunk by chunk."""
    geometry = Geometry(hw_shape, beta.shape[-1], tile_size(beta.shape[-1]), q.device)
    grads = [torch.empty_like(t) for t in (q, k, v, beta)]
    for start, stop in geometry.chunks(q.shape[0]):
        chunk = [t[start:stop] for t in (q, k, v, beta, grad_num, grad_den)]
        for grad, part in zip(grads, _backward_chunk(geometry, *chunk)):
            grad[start:stop] = part
    return tuple(grads)


def _backward_chunk(geometry: Geometry, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, grad_num: Tensor,
                    grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """One chunk of :func:`tiled_backward`; score-sized temporaries are updated in place and end with
    the call."""
    hw_shape, tile = geometry.hw_shape, geometry.tile
    q_tiles, beta_tiles = geometry.query_tiles(q, beta)
    keys = geometry.halos(k)
    out_grad = to_tiles(grad_num, hw_shape, tile)
    scores, weights = geometry.scores(q_tiles, keys, beta_tiles)
    grad_weighted = (out_grad @ geometry.halos(v).transpose(1, 2)).add_(to_tiles(grad_den, hw_shape, tile))
    by_group = grad_weighted * scores
    masks = geometry.group_masks.to(q.dtype)
    grad_beta = torch.einsum('bqk,qkr->bqr', by_group, masks)  # per query of the tile: its keys summed by group
    del by_group
    grad_scores = grad_weighted.mul_(weights)
    grad_q = from_windows(grad_scores @ keys, hw_shape, tile)
    grad_k = geometry.fold(grad_scores.transpose(1, 2) @ q_tiles)
    del grad_scores, grad_weighted
    grad_v = geometry.fold(scores.mul_(weights).transpose(1, 2) @ out_grad)
    return grad_q, grad_k, grad_v, from_windows(grad_beta, hw_shape, tile)


class LocalKernels(NamedTuple):
    """A local part: ``forward(q, k, v, beta, hw_shape) -> (num, den)`` and
    ``backward(q, k, v, beta, hw_shape, grad_num, grad_den) -> (dq, dk, dv, dbeta)``."""
    forward: Callable
    backward: Callable


TILED = LocalKernels(tiled_forward, tiled_backward)


class RippleLocalGlobal(torch.autograd.Function):
    """``out = (w_m q (K^T V) + num_local) / (w_m q . sum k + den_local + eps)`` on ``(S, N, .)`` tensors,
    with the backward written out: only the inputs, the output and the normaliser are saved
    (no token-sized intermediates of the sum and the division). Float32 arithmetic with autocast off."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor, hw_shape: Sequence[int],
                eps: float, kernels: LocalKernels) -> Tensor:
        inputs = (q, k, v, beta, merged_weight)
        q, k, v, beta, merged_weight = upcast(*inputs)
        num, den = kernels.forward(q, k, v, beta, hw_shape)
        weight = merged_weight.unsqueeze(-1)
        num += weight * (q @ (k.transpose(1, 2) @ v))
        den += weight * (q @ k.sum(dim=1).unsqueeze(-1)) + eps
        out = num.div_(den)
        ctx.save_for_backward(*inputs, out, den)
        ctx.hw_shape, ctx.kernels = hw_shape, kernels
        return out.to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        *inputs, out, den = ctx.saved_tensors
        q, k, v, beta, merged_weight, grad_out = upcast(*inputs, grad_out)
        grad_num = grad_out / den
        grad_den = -(grad_num * out).sum(dim=-1, keepdim=True)
        key_values, key_sum = k.transpose(1, 2) @ v, k.sum(dim=1).unsqueeze(-1)  # (S, D, E), (S, D, 1)
        grad_merged = (grad_num * (q @ key_values)).sum(dim=-1) + (grad_den * (q @ key_sum)).squeeze(-1)
        weight = merged_weight.unsqueeze(-1)
        weighted_num, weighted_den = weight * grad_num, weight * grad_den
        grad_key_values, grad_key_sum = q.transpose(1, 2) @ weighted_num, q.transpose(1, 2) @ weighted_den
        grad_q, grad_k, grad_v, grad_beta = ctx.kernels.backward(q, k, v, beta, ctx.hw_shape, grad_num, grad_den)
        grad_q += weighted_num @ key_values.transpose(1, 2) + weighted_den @ key_sum.transpose(1, 2)
        grad_k += v @ grad_key_values.transpose(1, 2) + grad_key_sum.transpose(1, 2)
        grad_v += k @ grad_key_values
        grads = (grad_q, grad_k, grad_v, grad_beta, grad_merged)
        return (*(grad.to(x.dtype) for grad, x in zip(grads, inputs)), None, None, None)


def local_plus_global(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float,
                      eps: float, kernels: LocalKernels) -> Tensor:
    """Ripple attention from a local part (``kernels``) and the global sums weighted by ``w_m``."""
    *lead, tokens, dims = q.shape
    beta, merged_weight = ring_weights(logits, hw_shape, tau)
    out = apply_function(RippleLocalGlobal, q.reshape(-1, tokens, dims), k.reshape(-1, tokens, dims),
                                  v.reshape(-1, tokens, v.shape[-1]), beta.reshape(-1, tokens, beta.shape[-1]),
                                  merged_weight.reshape(-1, tokens), tuple(hw_shape), eps, kernels)
    return out.reshape(*lead, tokens, -1)


def ripple_attention_local(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float,
                           eps: float) -> Tensor:
    """Ripple attention with the tiled torch local part."""
    return local_plus_global(q, k, v, logits, hw_shape, tau, eps, TILED)
