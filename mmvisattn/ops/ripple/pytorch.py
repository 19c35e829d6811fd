"""The local part of ripple attention on torch tiles (``impl='torch'``; arXiv:2110.02453, Eq. 4).

Each tile of ``T x T`` queries meets its halo of ``(T + 2 R_max - 2)^2`` keys in two batched
products, the scores weighted by their group's ``beta``, chunk by chunk, recomputed in the backward:
O(H W R_max^2) time, O(H W) memory. The halos' gradients go back by one ``index_add_`` per step.
:mod:`.cpu` runs the same arithmetic on the same tiles (:func:`~.local_global.tile_size`).
"""
from functools import cached_property, lru_cache
from typing import List, NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.recompute import runs
from ..utils.token_grid import add_rows_, from_windows, to_windows, window_grid
from .local_global import CHUNK_ELEMENTS, local_plus_global, tile_size


class Chunk(NamedTuple):
    slices: slice  # of the S axis, whose tiles and padded maps are made once
    tile_rows: List[slice]  # runs of the map's rows of tiles, one step each


class Geometry:
    """Index tensors of one (map, tile, R_max): every (query, halo key) pair's group, and the
    cutting of a map into halos and adding them back, for any run of tile rows; cached
    (:func:`cached_geometry`)."""

    def __init__(self, hw_shape: Sequence[int], r_max: int, tile: int, device) -> None:
        self.hw_shape, self.tile, self.halo = tuple(hw_shape), tile, r_max - 1
        self.side = tile + 2 * self.halo
        self.rows, self.cols = window_grid(hw_shape, tile)
        self.padded = (self.rows * tile + 2 * self.halo, self.cols * tile + 2 * self.halo)
        local = torch.arange(tile, device=device)
        span = torch.arange(self.side, device=device) - self.halo
        rows_q, cols_q = local.repeat_interleave(tile), local.repeat(tile)
        rows_k, cols_k = span.repeat_interleave(self.side), span.repeat(self.side)
        distance = torch.maximum((rows_q[:, None] - rows_k[None]).abs(),
                                 (cols_q[:, None] - cols_k[None]).abs())
        group = distance.clamp(max=r_max)  # (T * T, K); r_max points at a zero weight
        # flat positions in a tile's (T * T, R_max + 1) weights: one index_select gathers them
        self.weight_index = (torch.arange(tile * tile, device=device)[:, None] * (r_max + 1)
                             + group).reshape(-1)
        # (T * T, K, R_max) one-hot groups: gradients summed by group in one product per tile
        self.group_masks = (group[..., None] == torch.arange(r_max, device=device)).float()
        self.device = device

    @cached_property
    def halo_index(self) -> Tensor:
        """``(rows * cols * K,)`` flat position in the padded map of every halo key, tile by tile
        (built by the backward only, which adds gradients back through it)."""
        tile_row, tile_col = (
            torch.arange(n, device=self.device)[:, None] * self.tile
            + torch.arange(self.side, device=self.device)[None]
            for n in (self.rows, self.cols)
        )
        return (tile_row[:, None, :, None] * self.padded[1]
                + tile_col[None, :, None, :]).reshape(-1)

    def chunks(self, slices: int) -> List[Chunk]:
        """Steps whose score matrices hold about :data:`CHUNK_ELEMENTS` entries: whole slices while
        one fits, else runs of tile rows of one slice."""
        per_row = self.cols * self.tile ** 2 * self.side ** 2
        if self.rows * per_row <= CHUNK_ELEMENTS:
            whole = [slice(0, self.rows)]
            return [Chunk(part,
                          whole) for part in runs(slices, CHUNK_ELEMENTS // (self.rows * per_row))]
        tile_rows = runs(self.rows, max(1, CHUNK_ELEMENTS // per_row))
        return [Chunk(slice(index, index + 1), tile_rows) for index in range(slices)]

    def tiles(self, x: Tensor) -> Tensor:
        """``(s, H * W, C) -> (s, rows, cols, T * T, C)``, the map zero-padded to whole tiles."""
        return to_windows(x, self.hw_shape,
                          self.tile).view(x.shape[0], self.rows, self.cols, -1, x.shape[-1])

    def untile(self, tiles: Tensor) -> Tensor:
        """Inverse of :meth:`tiles`."""
        return from_windows(tiles.flatten(1, 2), self.hw_shape, self.tile)

    def pad(self, x: Tensor) -> Tensor:
        """``(s, H * W, C) -> (s, H', W', C)``: the map padded by ``R_max - 1`` to whole tiles."""
        (height, width), channels, halo = self.hw_shape, x.shape[-1], self.halo
        return F.pad(x.reshape(-1, height, width, channels),
                     (0, 0, halo, self.padded[1] - width - halo, halo,
                      self.padded[0] - height - halo))

    def halos(self, padded: Tensor, tile_rows: slice) -> Tensor:
        """``(s, H', W', C)`` padded maps -> ``(s * n, K, C)``: the halo keys of the ``n`` tiles of
        ``tile_rows``, copied once into the products' layout."""
        band = padded[:, tile_rows.start * self.tile:tile_rows.stop * self.tile + 2 * self.halo]
        # (s, n, cols, C, side, side)
        windows = band.unfold(1, self.side, self.tile).unfold(2, self.side, self.tile)
        return windows.permute(0, 1, 2, 4, 5, 3).reshape(-1, self.side ** 2, padded.shape[-1])

    def fold_into(self, padded: Tensor, halos: Tensor, tile_rows: slice) -> None:
        """Adjoint of :meth:`halos`: add ``(s * n, K, C)`` into the ``(s, H', W', C)`` padded maps
        at the halo keys' flat positions (:func:`~mmvisattn.ops.utils.token_grid.add_rows_`)."""
        per_row = self.cols * self.side ** 2
        index = self.halo_index[tile_rows.start * per_row:tile_rows.stop * per_row]
        slices, channels = padded.shape[0], padded.shape[-1]
        add_rows_(padded.view(slices, -1, channels), index, halos.reshape(slices, -1, channels))

    def crop(self, padded: Tensor) -> Tensor:
        """``(s, H', W', C) -> (s, H * W, C)``: the map inside the padding."""
        (height, width), halo = self.hw_shape, self.halo
        return padded[:, halo : halo + height, halo : halo + width].reshape(
            padded.shape[0], height * width, -1
        )

    def scores(self, q_tiles: Tensor, keys: Tensor, beta_tiles: Tensor) -> Tuple[Tensor, Tensor]:
        """Scores ``phi(q) . phi(k)`` of tiles against their halos, and the ``beta`` of each pair's
        group (``beta_tiles`` carry a last zero column for groups ``>= R_max``)."""
        count = q_tiles.shape[0]
        weights = (
            beta_tiles.reshape(count, -1)
            .index_select(1, self.weight_index)
            .view(count, self.tile**2, -1)
        )
        return q_tiles @ keys.transpose(1, 2), weights


@lru_cache(maxsize=32)
def cached_geometry(hw_shape: Tuple[int, int], r_max: int, device: torch.device) -> Geometry:
    """The :class:`Geometry` of a map at ``R_max`` on ``device``, cached (maps recur)."""
    return Geometry(hw_shape, r_max, tile_size(r_max), device)


def _part(tiles: Tensor, rows: slice) -> Tensor:
    """The ``(s * n, T * T, C)`` tiles of tile ``rows`` of ``(s, rows, cols, T * T, C)`` tiles."""
    return tiles[:, rows].flatten(0, 2)


def _put(tiles: Tensor, rows: slice, part: Tensor) -> None:
    """Write ``(s * n, T * T, C)`` tiles of tile ``rows`` into ``(s, rows, cols, T * T, C)``."""
    target = tiles[:, rows]
    target.copy_(part.view(target.shape))


def _tiled_inputs(geometry: Geometry, q: Tensor, k: Tensor, v: Tensor, beta: Tensor):
    """Query tiles, ``beta`` tiles with the far groups' zero column, padded keys and values."""
    return (geometry.tiles(q), geometry.tiles(F.pad(beta, (0, 1))), geometry.pad(k),
            geometry.pad(v))


def tiled_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
                  hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """Local part: ``num_ij = sum beta_r(i, j) (q_ij . k_mn) v_mn`` and ``den_ij`` without ``v``
    over the groups ``r < R_max``; ``(S, N, D)``, ``(S, N, E)``, ``(S, N, R_max)`` -> ``(S, N, E)``,
    ``(S, N, 1)``, in steps (:meth:`Geometry.chunks`)."""
    geometry = cached_geometry(tuple(hw_shape), beta.shape[-1], q.device)
    num, den = q.new_empty(*v.shape), q.new_empty(*v.shape[:-1], 1)
    for chunk in geometry.chunks(q.shape[0]):
        parts = (t[chunk.slices] for t in (q, k, v, beta))
        q_tiles, beta_tiles, keys, values = _tiled_inputs(geometry, *parts)
        num_tiles = q.new_empty(*q_tiles.shape[:-1], v.shape[-1])
        den_tiles = q.new_empty(*q_tiles.shape[:-1], 1)
        for rows in chunk.tile_rows:
            scores, weights = geometry.scores(_part(q_tiles, rows), geometry.halos(keys, rows),
                                              _part(beta_tiles, rows))
            weighted = scores.mul_(weights)
            _put(num_tiles, rows, weighted @ geometry.halos(values, rows))
            _put(den_tiles, rows, weighted.sum(dim=-1, keepdim=True))
        num[chunk.slices], den[chunk.slices] = (geometry.untile(num_tiles),
                                                geometry.untile(den_tiles),)
    return num, den


def tiled_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int],
                   grad_num: Tensor, grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`tiled_forward` for ``q, k, v, beta``, recomputing the scores step by
    step; score-sized temporaries are updated in place and end with each step."""
    geometry = cached_geometry(tuple(hw_shape), beta.shape[-1], q.device)
    grads = [torch.empty_like(t) for t in (q, k, v, beta)]
    masks = geometry.group_masks.to(q.dtype)
    for chunk in geometry.chunks(q.shape[0]):
        parts = (t[chunk.slices] for t in (q, k, v, beta))
        q_tiles, beta_tiles, keys, values = _tiled_inputs(geometry, *parts)
        num_grad_tiles, den_grad_tiles = (geometry.tiles(grad_num[chunk.slices]),
                                          geometry.tiles(grad_den[chunk.slices]),)
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
        for grad, part in zip(grads, (geometry.untile(grad_q), geometry.crop(grad_keys),
                                      geometry.crop(grad_values), geometry.untile(grad_beta))):
            grad[chunk.slices] = part
    return tuple(grads)


def ripple_attention_torch(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                           tau: float, eps: float) -> Tensor:
    """Ripple attention with the local part on torch tiles."""
    return local_plus_global(q, k, v, logits, hw_shape, tau, eps, tiled_forward, tiled_backward)
