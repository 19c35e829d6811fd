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
and the work runs in chunks of slices, or of tile rows of one slice on large maps, so the scores
exist for one chunk at a time. :class:`RippleLocalGlobal` adds the global sums and normalises,
with the backward written out: the scores are recomputed chunk by chunk and only the inputs, the
output and the normaliser are saved -- O(H W R_max^2) time, O(H W) memory. Halos of neighbouring
tiles overlap; their key and value gradients are added back by one ``index_add_`` per step.

Mixed precision (:mod:`mmvisattn.ops.amp`): :class:`RippleLocalGlobal` turns autocast off and computes
in float32 whatever the inputs' dtype (the global sums run over every token and leave float16's
range), for the torch and the Triton local parts alike; the output comes back in ``v``'s dtype.
"""
from functools import cached_property, lru_cache
from typing import Callable, List, NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..amp import autocast_off, upcast
from ..recompute import runs
from ..token_grid import add_rows_, from_windows, to_windows, window_grid
from ..tracing import apply_function
from .common import ring_weights

# Score entries per chunk of tiles: bounds the temporaries of one step. On a 32x32 map, R_max 8, the
# module's forward + backward against SDPA's (paired) was 3.21x at 2^15, 2.96x at 2^16, 2.34x at 2^17
# and at 2^18: fewer, larger steps stop paying off here.
CHUNK_ELEMENTS = 2 ** 17


def _tile_costs(r_max: int) -> Tuple[float, int]:
    """The least work per query over the tile sides ``T``, and that ``T``: ``(T + 2 R_max - 2)^2``
    scores, plus gathering the halo's keys and values (about four score passes' worth spread over
    ``T^2`` queries)."""
    costs = [((tile + 2 * r_max - 2) ** 2 * (1 + 4 / tile ** 2), tile) for tile in (1, 2, 4, 8, 16)]
    return min(costs)  # no key=: torch.compile's tracer does not take min(key=...)


def tile_size(r_max: int) -> int:
    """Tile side ``T`` minimising the work per query (:func:`tiled_cost`). The model's ``T = 4`` for
    ``R_max`` 4 and 8 is also the fastest measured: on a 32x32 map the module's forward + backward
    against SDPA's (paired) was 2.93x / 2.35x / 2.73x / 3.96x at ``T`` 2 / 4 / 8 / 16 for ``R_max`` 8,
    1.36x / 1.05x / 1.25x at ``T`` 2 / 4 / 8 for ``R_max`` 4."""
    return _tile_costs(r_max)[1]


def tiled_cost(r_max: int) -> float:
    """Work per query of the tiled local part, in score entries."""
    return _tile_costs(r_max)[0]


class Chunk(NamedTuple):
    slices: slice  # of the S axis, whose tiles and padded maps are made once
    tile_rows: List[slice]  # runs of the map's rows of tiles, one step each


class Geometry:
    """Index tensors of one (map, tile, R_max): the Chebyshev group of every (query, halo key) pair of
    a tile, and the cutting of a map into overlapping halos and the adding of them back, for any
    run of tile rows (a chunk). Built once per (map, R_max, device) and cached (:func:`cached_geometry`)."""

    def __init__(self, hw_shape: Sequence[int], r_max: int, tile: int, device) -> None:
        self.hw_shape, self.tile, self.halo = tuple(hw_shape), tile, r_max - 1
        self.side = tile + 2 * self.halo
        self.rows, self.cols = window_grid(hw_shape, tile)
        self.padded = (self.rows * tile + 2 * self.halo, self.cols * tile + 2 * self.halo)
        local = torch.arange(tile, device=device)
        span = torch.arange(self.side, device=device) - self.halo
        rows_q, cols_q = local.repeat_interleave(tile), local.repeat(tile)
        rows_k, cols_k = span.repeat_interleave(self.side), span.repeat(self.side)
        distance = torch.maximum((rows_q[:, None] - rows_k[None]).abs(), (cols_q[:, None] - cols_k[None]).abs())
        group = distance.clamp(max=r_max)  # (T * T, K); r_max points at a zero weight
        # flat positions in a tile's (T * T, R_max + 1) weights, so gathering them is one index_select
        self.weight_index = (torch.arange(tile * tile, device=device)[:, None] * (r_max + 1) + group).reshape(-1)
        # (T * T, K, R_max) one-hot groups: summing gradients by group is one product per query of a tile
        self.group_masks = (group[..., None] == torch.arange(r_max, device=device)).float()
        self.device = device

    @cached_property
    def halo_index(self) -> Tensor:
        """``(rows * cols * K,)`` flat position in the padded map of every halo key, tile by tile (built
        by the backward only, which adds gradients back through it)."""
        tile_row, tile_col = (torch.arange(n, device=self.device)[:, None] * self.tile
                              + torch.arange(self.side, device=self.device)[None] for n in (self.rows, self.cols))
        return (tile_row[:, None, :, None] * self.padded[1] + tile_col[None, :, None, :]).reshape(-1)

    def chunks(self, slices: int) -> List[Chunk]:
        """Steps whose score matrices hold about :data:`CHUNK_ELEMENTS` entries: whole slices while
        one fits, else runs of tile rows of one slice."""
        per_row = self.cols * self.tile ** 2 * self.side ** 2
        if self.rows * per_row <= CHUNK_ELEMENTS:
            whole = [slice(0, self.rows)]
            return [Chunk(part, whole) for part in runs(slices, CHUNK_ELEMENTS // (self.rows * per_row))]
        tile_rows = runs(self.rows, max(1, CHUNK_ELEMENTS // per_row))
        return [Chunk(slice(index, index + 1), tile_rows) for index in range(slices)]

    def tiles(self, x: Tensor) -> Tensor:
        """``(s, H * W, C) -> (s, rows, cols, T * T, C)``, the map zero-padded to whole tiles."""
        return to_windows(x, self.hw_shape, self.tile).view(x.shape[0], self.rows, self.cols, -1, x.shape[-1])

    def untile(self, tiles: Tensor) -> Tensor:
        """Inverse of :meth:`tiles`."""
        return from_windows(tiles.flatten(1, 2), self.hw_shape, self.tile)

    def pad(self, x: Tensor) -> Tensor:
        """``(s, H * W, C) -> (s, H', W', C)``: the map with ``R_max - 1`` zeros around and whole tiles."""
        (height, width), channels, halo = self.hw_shape, x.shape[-1], self.halo
        return F.pad(x.reshape(-1, height, width, channels),
                     (0, 0, halo, self.padded[1] - width - halo, halo, self.padded[0] - height - halo))

    def halos(self, padded: Tensor, tile_rows: slice) -> Tensor:
        """``(s, H', W', C)`` padded maps -> ``(s * n, K, C)``: the keys of the ``n`` tiles of
        ``tile_rows`` with ``R_max - 1`` around (strided windows, copied once into the layout of the
        matrix products)."""
        band = padded[:, tile_rows.start * self.tile:tile_rows.stop * self.tile + 2 * self.halo]
        windows = band.unfold(1, self.side, self.tile).unfold(2, self.side, self.tile)  # (s, n, cols, C, side, side)
        return windows.permute(0, 1, 2, 4, 5, 3).reshape(-1, self.side ** 2, padded.shape[-1])

    def fold_into(self, padded: Tensor, halos: Tensor, tile_rows: slice) -> None:
        """Adjoint of :meth:`halos`: add ``(s * n, K, C)`` into the ``(s, H', W', C)`` padded maps at
        the halo keys' flat positions (:func:`~mmvisattn.ops.token_grid.add_rows_`)."""
        per_row = self.cols * self.side ** 2
        index = self.halo_index[tile_rows.start * per_row:tile_rows.stop * per_row]
        slices, channels = padded.shape[0], padded.shape[-1]
        add_rows_(padded.view(slices, -1, channels), index, halos.reshape(slices, -1, channels))

    def crop(self, padded: Tensor) -> Tensor:
        """``(s, H', W', C) -> (s, H * W, C)``: the map inside the padding."""
        (height, width), halo = self.hw_shape, self.halo
        return padded[:, halo:halo + height, halo:halo + width].reshape(padded.shape[0], height * width, -1)

    def scores(self, q_tiles: Tensor, keys: Tensor, beta_tiles: Tensor) -> Tuple[Tensor, Tensor]:
        """Scores ``phi(q) . phi(k)`` of tiles against their halos, and the ``beta`` of each pair's group
        (``beta_tiles`` carry a last zero column for groups ``>= R_max``)."""
        count = q_tiles.shape[0]
        weights = beta_tiles.reshape(count, -1).index_select(1, self.weight_index).view(count, self.tile ** 2, -1)
        return q_tiles @ keys.transpose(1, 2), weights


@lru_cache(maxsize=32)
def cached_geometry(hw_shape: Tuple[int, int], r_max: int, device: torch.device) -> Geometry:
    """The :class:`Geometry` of a map at ``R_max`` on ``device``, with the tile side of :func:`tile_size`:
    the same maps recur every layer and every step, whose index tensors are then neither rebuilt nor
    copied."""
    return Geometry(hw_shape, r_max, tile_size(r_max), device)


def _part(tiles: Tensor, rows: slice) -> Tensor:
    """The ``(s * n, T * T, C)`` tiles of the tile ``rows`` of ``(s, rows, cols, T * T, C)`` tiles."""
    return tiles[:, rows].flatten(0, 2)


def _put(tiles: Tensor, rows: slice, part: Tensor) -> None:
    """Write the ``(s * n, T * T, C)`` tiles of the tile ``rows`` into ``(s, rows, cols, T * T, C)`` tiles."""
    target = tiles[:, rows]
    target.copy_(part.view(target.shape))


def _tiled_inputs(geometry: Geometry, q: Tensor, k: Tensor, v: Tensor, beta: Tensor):
    """Query tiles, ``beta`` tiles with the zero column far groups point at, padded keys and values."""
    return (geometry.tiles(q), geometry.tiles(F.pad(beta, (0, 1))), geometry.pad(k), geometry.pad(v))


def tiled_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """Local part: ``num_ij = sum beta_r(i, j) (q_ij . k_mn) v_mn`` and ``den_ij = sum beta_r(i, j) (q_ij . k_mn)``
    over the tokens ``(m, n)`` of groups ``r < R_max``; ``q, k`` ``(S, N, D)``, ``v`` ``(S, N, E)``,
    ``beta`` ``(S, N, R_max)`` -> ``(S, N, E)``, ``(S, N, 1)``. Runs in steps (:meth:`Geometry.chunks`),
    whose temporaries end with each step."""
    geometry = cached_geometry(tuple(hw_shape), beta.shape[-1], q.device)
    num, den = q.new_empty(*v.shape), q.new_empty(*v.shape[:-1], 1)
    for chunk in geometry.chunks(q.shape[0]):
        parts = (t[chunk.slices] for t in (q, k, v, beta))
        q_tiles, beta_tiles, keys, values = _tiled_inputs(geometry, *parts)
        num_tiles = q.new_empty(*q_tiles.shape[:-1], v.shape[-1])
        den_tiles = q.new_empty(*q_tiles.shape[:-1], 1)
        for rows in chunk.tile_rows:
            scores, weights = geometry.scores(_part(q_tiles, rows), geometry.halos(keys, rows), _part(beta_tiles, rows))
            weighted = scores.mul_(weights)
            _put(num_tiles, rows, weighted @ geometry.halos(values, rows))
            _put(den_tiles, rows, weighted.sum(dim=-1, keepdim=True))
        num[chunk.slices], den[chunk.slices] = geometry.untile(num_tiles), geometry.untile(den_tiles)
    return num, den


def tiled_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int], grad_num: Tensor,
                   grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`tiled_forward` for ``q, k, v, beta``, recomputing the scores step by step;
    score-sized temporaries are updated in place and end with each step."""
    geometry = cached_geometry(tuple(hw_shape), beta.shape[-1], q.device)
    grads = [torch.empty_like(t) for t in (q, k, v, beta)]
    masks = geometry.group_masks.to(q.dtype)
    for chunk in geometry.chunks(q.shape[0]):
        parts = (t[chunk.slices] for t in (q, k, v, beta))
        q_tiles, beta_tiles, keys, values = _tiled_inputs(geometry, *parts)
        num_grad_tiles, den_grad_tiles = geometry.tiles(grad_num[chunk.slices]), geometry.tiles(grad_den[chunk.slices])
        grad_q, grad_beta = torch.empty_like(q_tiles), torch.empty_like(beta_tiles[..., :-1])
        grad_keys, grad_values = torch.zeros_like(keys), torch.zeros_like(values)
        for rows in chunk.tile_rows:
            q_part, out_grad = _part(q_tiles, rows), _part(num_grad_tiles, rows)
            key_halos = geometry.halos(keys, rows)
            scores, weights = geometry.scores(q_part, key_halos, _part(beta_tiles, rows))
            grad_weighted = out_grad @ geometry.halos(values, rows).transpose(1, 2)
            grad_weighted += _part(den_grad_tiles, rows)
            by_group = grad_weighted * scores
            # per query of the tile: its keys' gradients summed by group
            _put(grad_beta, rows, torch.einsum('bqk,qkr->bqr', by_group, masks))
            del by_group
            grad_scores = grad_weighted.mul_(weights)
            _put(grad_q, rows, grad_scores @ key_halos)
            geometry.fold_into(grad_keys, grad_scores.transpose(1, 2) @ q_part, rows)
            del grad_scores, grad_weighted
            geometry.fold_into(grad_values, scores.mul_(weights).transpose(1, 2) @ out_grad, rows)
        for grad, part in zip(grads, (geometry.untile(grad_q), geometry.crop(grad_keys), geometry.crop(grad_values),
                                      geometry.untile(grad_beta))):
            grad[chunk.slices] = part
    return tuple(grads)


class LocalKernels(NamedTuple):
    """A local part: ``forward(q, k, v, beta, hw_shape) -> (num, den)`` and
    ``backward(q, k, v, beta, hw_shape, grad_num, grad_den) -> (dq, dk, dv, dbeta)``."""
    forward: Callable
    backward: Callable


TILED = LocalKernels(tiled_forward, tiled_backward)


def _flat(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """``(..., N, C)`` tensors as ``(S, N, C)`` and ``(..., N)`` as ``(S, N)``: the layout of the kernels
    (a copy where the input is a permuted view; made in each pass, never kept)."""
    return tuple(t.reshape(-1, *t.shape[-2:]) if t.dim() > 2 else t for t in tensors)


def _slice_groups(q: Tensor, v: Tensor) -> List[slice]:
    """Groups of slices whose token-sized temporaries hold about :data:`CHUNK_ELEMENTS` numbers each."""
    return runs(q.shape[0], max(1, CHUNK_ELEMENTS // (q.shape[1] * max(q.shape[-1], v.shape[-1]))))


class RippleLocalGlobal(torch.autograd.Function):
    """``out = (w_m q (K^T V) + num_local) / (w_m q . sum k + den_local + eps)`` on ``(..., N, .)``
    tensors (``merged_weight`` ``(S, N)``), with the backward written out: only the inputs as given
    (views of the caller's projections), the output and the normaliser are saved (no token-sized
    intermediates of the sum and the division, no copies into the kernels' layout). Both passes
    run over groups of slices, so their token-sized temporaries exist for one group at a time.
    Float32 arithmetic with autocast off."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor, hw_shape: Sequence[int],
                eps: float, kernels: LocalKernels) -> Tensor:
        inputs = (q, k, v, beta, merged_weight)
        q, k, v, beta = _flat(*upcast(q, k, v, beta))
        merged_weight = upcast(merged_weight)[0]
        outs, dens = [], []  # joined by cat, not written into slices: traced with gradients, this runs as is
        for part in _slice_groups(q, v):
            num, den = kernels.forward(q[part], k[part], v[part], beta[part], hw_shape)
            weight = merged_weight[part].unsqueeze(-1)
            num += weight * (q[part] @ (k[part].transpose(1, 2) @ v[part]))
            den += weight * (q[part] @ k[part].sum(dim=1).unsqueeze(-1)) + eps
            outs.append(num.div_(den))
            dens.append(den)
        out, den = (torch.cat(parts) if len(parts) > 1 else parts[0] for parts in (outs, dens))
        ctx.save_for_backward(*inputs, out, den)
        ctx.hw_shape, ctx.kernels = hw_shape, kernels
        return out.view(*inputs[2].shape[:-1], -1).to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        *inputs, out, den = ctx.saved_tensors
        q, k, v, beta, grad_out = _flat(*upcast(*inputs[:4], grad_out))
        merged_weight = upcast(inputs[4])[0]
        grads = [torch.empty_like(t) for t in (q, k, v, beta, merged_weight)]
        for part in _slice_groups(q, v):
            parts = _backward_slices(q[part], k[part], v[part], beta[part], merged_weight[part], out[part], den[part],
                                     grad_out[part], ctx.hw_shape, ctx.kernels)
            for grad, value in zip(grads, parts):
                grad[part] = value
        return (*(grad.view(x.shape).to(x.dtype) for grad, x in zip(grads, inputs)), None, None, None)


def _backward_slices(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor, out: Tensor, den: Tensor,
                     grad_out: Tensor, hw_shape: Sequence[int], kernels: LocalKernels) -> Tuple[Tensor, ...]:
    """Gradients of :class:`RippleLocalGlobal` for a group of slices: ``q, k, v, beta, merged_weight``."""
    grad_num = grad_out / den
    grad_den = -(grad_num * out).sum(dim=-1, keepdim=True)
    key_values, key_sum = k.transpose(1, 2) @ v, k.sum(dim=1).unsqueeze(-1)  # (S, D, E), (S, D, 1)
    grad_merged = (grad_num * (q @ key_values)).sum(dim=-1) + (grad_den * (q @ key_sum)).squeeze(-1)
    weight = merged_weight.unsqueeze(-1)
    weighted_num, weighted_den = weight * grad_num, weight * grad_den
    grad_key_values, grad_key_sum = q.transpose(1, 2) @ weighted_num, q.transpose(1, 2) @ weighted_den
    grad_q, grad_k, grad_v, grad_beta = kernels.backward(q, k, v, beta, hw_shape, grad_num, grad_den)
    grad_q += weighted_num @ key_values.transpose(1, 2) + weighted_den @ key_sum.transpose(1, 2)
    grad_k += v @ grad_key_values.transpose(1, 2) + grad_key_sum.transpose(1, 2)
    grad_v += k @ grad_key_values
    return grad_q, grad_k, grad_v, grad_beta, grad_merged


def local_plus_global(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float,
                      eps: float, kernels: LocalKernels) -> Tensor:
    """Ripple attention from a local part (``kernels``) and the global sums weighted by ``w_m``."""
    tokens = q.shape[-2]
    beta, merged_weight = ring_weights(logits, hw_shape, tau)
    return apply_function(RippleLocalGlobal, q, k, v, beta, merged_weight.reshape(-1, tokens), tuple(hw_shape), eps,
                          kernels)

