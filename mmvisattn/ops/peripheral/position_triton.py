"""Triton kernels of PerViT's position network after the first projection (arXiv:2206.06801, Eq.
7-8): per query, its window cropped from the first projection's map
(:func:`.position.query_windows`), the first norm, ReLU, the second ``K x K`` projection and its
norm, one program per query, the windows never written.

Kernels: ``_window_stats`` (first-norm statistics), ``_logits_forward`` (the second projection as
weights times a tile of neighbourhoods, its norm), ``_logits_backward``, ``_window_grad_sums`` and
``_window_grad`` (window gradients added onto the map per query row and tile: ``H`` atomic adds a
cell, or with deterministic algorithms a row buffer summed by ``index_add_``). Parameter gradients
are summed by torch.

Mixed precision: the map comes in float32 (:func:`.position.first_projection`); products in the
autocast dtype where on, else the second projection's weights'; statistics, accumulators and logits
float32. Autocast off in the Function; each gradient in its input's dtype."""
from typing import Sequence, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off, autocast_state
from ..utils.triton_launch import dot_operands, head_block
from .position import PositionParams, first_projection

# Tiles and warps: the largest that compile without register spills for sm_80 and sm_90 at every
# PerViT size, one pipeline stage (the loops gather; deeper pipelines hold more registers).
BLOCK_KEYS = 128  # keys (output positions) a tile of the second projection
FORWARD_WARPS = 8
# the same in its backward, whose three passes hold more (64 spilled on sm_90 at 2 heads)
BACKWARD_KEYS = 32
BLOCK_TAPS = 16  # (channel, dy, dx) taps a product step: tl.dot's smallest side
# numbers (channels x cells) a tile of the statistics and gradient sums holds: 128 cells of 16
# channels, fewer for more, so registers hold at every size
WINDOW_TILE = 2048
# _window_grad's map tiles hold GRAD_TILE / channels^2 cells (256 at 16 channels): its registers per
# cell grow with the channels too (the accumulated gradient and its recomputed factors)
GRAD_TILE = 65536
# map columns one program of _window_grad accumulates (its cells span several map rows)
MAP_TILE_COLS = 32
WARPS = 4
STAGES = 1


def _window_cells(channels: int, numbers: int) -> int:
    """Window cells a tile of ``channels`` takes to hold ``numbers``, from 32 to 256."""
    return min(256, max(32, numbers // head_block(channels)))


@triton.jit
def _window_origin(query, height, width, map_cols):
    """Offset in a map channel of the first cell of ``query``'s window (row ``H - 1 - i``, column
    ``W - 1 - j``)."""
    return (height - 1 - query // width) * map_cols + (width - 1 - query % width)


@triton.jit
def _window_values(rel_ptr, origin, chans, in_chan, start, area, map_rows, map_cols, window_cols,
                   BLOCK_W: tl.constexpr):
    """``(channels, BLOCK_W)`` float32 map values at window cells ``start ...`` (0 outside), and
    where valid."""
    cells = start + tl.arange(0, BLOCK_W)
    valid = in_chan[:, None] & (cells < area)[None, :]
    cell_offsets = origin + cells // window_cols * map_cols + cells % window_cols
    offsets = chans[:, None] * map_rows * map_cols + cell_offsets[None, :]
    return tl.load(rel_ptr + offsets, mask=valid, other=0.0).to(tl.float32), valid


@triton.jit
def _window_stats(rel_ptr, mean_ptr, rstd_ptr, height, width, channels, map_rows, map_cols,
                  window_rows, window_cols, eps, BLOCK_C: tl.constexpr, BLOCK_W: tl.constexpr):
    query = tl.program_id(0)
    origin = _window_origin(query, height, width, map_cols)
    chans = tl.arange(0, BLOCK_C)
    in_chan = chans < channels
    area = window_rows * window_cols
    total = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for start in range(0, area, BLOCK_W):
        values, _ = _window_values(rel_ptr, origin, chans, in_chan, start, area, map_rows, map_cols,
                                   window_cols, BLOCK_W)
        total += tl.sum(values, axis=1)
    mean = total / area
    squares = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for start in range(0, area, BLOCK_W):  # a second pass: no cancellation where the mean is large
        values, valid = _window_values(rel_ptr, origin, chans, in_chan, start, area, map_rows,
                                       map_cols, window_cols, BLOCK_W)
        centred = tl.where(valid, values - mean[:, None], 0.0)
        squares += tl.sum(centred * centred, axis=1)
    tl.store(mean_ptr + query * channels + chans, mean, mask=in_chan)
    tl.store(rstd_ptr + query * channels + chans,
             1.0 / tl.sqrt(squares / area + tl.cast(eps, tl.float32)), mask=in_chan)


@triton.jit
def _normalised(rel_ptr, mean_ptr, rstd_ptr, g1_ptr, b1_ptr, query, offsets, chans, valid,
                channels):
    """The first norm's ``x_hat`` and its affine output before the ReLU at map ``offsets`` of
    channels ``chans`` (both 0 where not ``valid``)."""
    in_chan = chans < channels
    mean = tl.load(mean_ptr + query * channels + chans, mask=in_chan, other=0.0)
    rstd = tl.load(rstd_ptr + query * channels + chans, mask=in_chan, other=0.0)
    gain = tl.load(g1_ptr + chans, mask=in_chan, other=0.0).to(tl.float32)
    shift = tl.load(b1_ptr + chans, mask=in_chan, other=0.0).to(tl.float32)
    x_hat = tl.where(valid, (tl.load(rel_ptr + offsets, mask=valid, other=0.0).to(tl.float32)
                             - mean) * rstd, 0.0)
    return x_hat, tl.where(valid, gain * x_hat + shift, 0.0)


@triton.jit
def _neighbourhoods(rel_ptr, mean_ptr, rstd_ptr, g1_ptr, b1_ptr, query, origin, taps, keys, tokens,
                    width, channels, map_plane, map_cols, K: tl.constexpr):
    """``(taps, keys)``: the first norm's ReLU at tap ``(c, dy, dx)`` of each key's neighbourhood in
    ``query``'s window. The innermost loop: the norm folded into a scale and shift per tap, no masks
    (indices past the end clamped; the caller masks their weights)."""
    taps = tl.minimum(taps, channels * K * K - 1)
    keys = tl.minimum(keys, tokens - 1)
    chans, tap = taps // (K * K), taps % (K * K)
    rstd = tl.load(rstd_ptr + query * channels + chans)
    scale = tl.load(g1_ptr + chans).to(tl.float32) * rstd
    shift = tl.load(b1_ptr
                    + chans).to(tl.float32) - scale * tl.load(mean_ptr + query * channels + chans)
    cells = origin + keys // width * map_cols + keys % width
    values = tl.load(rel_ptr + (chans * map_plane + tap // K * map_cols + tap % K)[:, None]
                     + cells[None, :])
    return tl.maximum(scale[:, None] * values.to(tl.float32) + shift[:, None], 0.0)


@triton.jit
def _projection(rel_ptr, mean_ptr, rstd_ptr, g1_ptr, b1_ptr, w2_ptr, query, origin, keys, tokens,
                width, channels, heads, map_plane, map_cols, K: tl.constexpr, BLOCK_K: tl.constexpr,
                BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, DOT: tl.constexpr):
    """The second projection (without its bias) at ``keys``: ``(BLOCK_H, BLOCK_K)``, the
    ``(heads, taps)`` weights times the keys' neighbourhoods ``(taps, keys)``, ``BLOCK_T`` taps a
    step."""
    heads_ = tl.arange(0, BLOCK_H)
    taps_total = channels * K * K
    acc = tl.zeros((BLOCK_H, BLOCK_K), dtype=tl.float32)
    for start in range(0, taps_total, BLOCK_T):
        taps = start + tl.arange(0, BLOCK_T)
        hidden = _neighbourhoods(rel_ptr, mean_ptr, rstd_ptr, g1_ptr, b1_ptr, query, origin, taps,
                                 keys, tokens, width, channels, map_plane, map_cols, K)
        weights = tl.load(w2_ptr + heads_[:, None] * taps_total + taps[None, :],
                          mask=(heads_ < heads)[:, None] & (taps < taps_total)[None, :], other=0.0)
        acc += tl.dot(weights.to(DOT), hidden.to(DOT))
    return acc


@triton.jit
def _logits_forward(rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, b2_ptr, g2_ptr, bb2_ptr,
                    out_ptr, mean2_ptr, rstd2_ptr, height, width, channels, heads, map_rows,
                    map_cols, eps, K: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_H: tl.constexpr, DOT: tl.constexpr):
    query = tl.program_id(0)
    origin = _window_origin(query, height, width, map_cols)
    tokens = height * width
    heads_ = tl.arange(0, BLOCK_H)
    in_heads = heads_ < heads
    rows = out_ptr + heads_.to(tl.int64)[:, None] * tokens * tokens + query.to(tl.int64) * tokens
    bias = tl.load(b2_ptr + heads_, mask=in_heads, other=0.0).to(tl.float32)
    total = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for start in range(0, tokens, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        valid = in_heads[:, None] & (keys < tokens)[None, :]
        z = _projection(rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, query, origin, keys,
                        tokens, width, channels, heads, map_rows * map_cols, map_cols, K, BLOCK_K,
                        BLOCK_T, BLOCK_H, DOT)
        z = tl.where(valid, z + bias[:, None], 0.0)
        tl.store(rows + keys[None, :], z, mask=valid)
        total += tl.sum(z, axis=1)
    mean = total / tokens
    tl.debug_barrier()  # the raw projection is read back by other threads than wrote it
    squares = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for start in range(0, tokens, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        valid = in_heads[:, None] & (keys < tokens)[None, :]
        centred = tl.where(valid, tl.load(rows + keys[None, :], mask=valid, other=0.0)
                           - mean[:, None], 0.0)
        squares += tl.sum(centred * centred, axis=1)
    rstd = 1.0 / tl.sqrt(squares / tokens + tl.cast(eps, tl.float32))
    gain = tl.load(g2_ptr + heads_, mask=in_heads, other=0.0).to(tl.float32)
    shift = tl.load(bb2_ptr + heads_, mask=in_heads, other=0.0).to(tl.float32)
    for start in range(0, tokens, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        valid = in_heads[:, None] & (keys < tokens)[None, :]
        z = tl.load(rows + keys[None, :], mask=valid, other=0.0)
        tl.store(rows + keys[None, :],
                 gain[:, None] * (z - mean[:, None]) * rstd[:, None] + shift[:, None], mask=valid)
    tl.store(mean2_ptr + query * heads + heads_, mean, mask=in_heads)
    tl.store(rstd2_ptr + query * heads + heads_, rstd, mask=in_heads)


@triton.jit
def _logits_backward(grad_ptr, rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, b2_ptr,
                     g2_ptr, mean2_ptr, rstd2_ptr, dz_ptr, dw2_ptr, dhead_ptr, height, width,
                     channels, heads, map_rows, map_cols, K: tl.constexpr, BLOCK_K: tl.constexpr,
                     BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, DOT: tl.constexpr):
    query = tl.program_id(0)
    origin = _window_origin(query, height, width, map_cols)
    tokens = height * width
    map_plane = map_rows * map_cols
    heads_ = tl.arange(0, BLOCK_H)
    in_heads = heads_ < heads
    offset = heads_.to(tl.int64)[:, None] * tokens * tokens + query.to(tl.int64) * tokens
    grad_rows, dz_rows = grad_ptr + offset, dz_ptr + offset
    bias = tl.load(b2_ptr + heads_, mask=in_heads, other=0.0).to(tl.float32)
    gain = tl.load(g2_ptr + heads_, mask=in_heads, other=0.0).to(tl.float32)
    mean = tl.load(mean2_ptr + query * heads + heads_, mask=in_heads, other=0.0)
    rstd = tl.load(rstd2_ptr + query * heads + heads_, mask=in_heads, other=0.0)
    # pass 1: z_hat recomputed and kept in the scratch; the sums of the norm's backward
    sum_dz_hat = tl.zeros((BLOCK_H,), dtype=tl.float32)
    sum_dz_hat_z_hat = tl.zeros((BLOCK_H,), dtype=tl.float32)
    grad_gain = tl.zeros((BLOCK_H,), dtype=tl.float32)
    grad_shift = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for start in range(0, tokens, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        valid = in_heads[:, None] & (keys < tokens)[None, :]
        z = _projection(rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, query, origin, keys,
                        tokens, width, channels, heads, map_plane, map_cols, K, BLOCK_K, BLOCK_T,
                        BLOCK_H, DOT)
        z_hat = tl.where(valid, (z + bias[:, None] - mean[:, None]) * rstd[:, None], 0.0)
        grad = tl.load(grad_rows + keys[None, :], mask=valid, other=0.0).to(tl.float32)
        sum_dz_hat += tl.sum(grad * gain[:, None], axis=1)
        sum_dz_hat_z_hat += tl.sum(grad * gain[:, None] * z_hat, axis=1)
        grad_gain += tl.sum(grad * z_hat, axis=1)
        grad_shift += tl.sum(grad, axis=1)
        tl.store(dz_rows + keys[None, :], z_hat, mask=valid)
    tl.debug_barrier()
    # pass 2: dz = rstd (dz_hat - mean(dz_hat) - z_hat mean(dz_hat z_hat)) over the scratch
    grad_bias = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for start in range(0, tokens, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        valid = in_heads[:, None] & (keys < tokens)[None, :]
        z_hat = tl.load(dz_rows + keys[None, :], mask=valid, other=0.0)
        grad = tl.load(grad_rows + keys[None, :], mask=valid, other=0.0).to(tl.float32)
        dz = rstd[:, None] * (grad * gain[:, None] - sum_dz_hat[:, None] / tokens
                              - z_hat * sum_dz_hat_z_hat[:, None] / tokens)
        dz = tl.where(valid, dz, 0.0)
        grad_bias += tl.sum(dz, axis=1)
        tl.store(dz_rows + keys[None, :], dz, mask=valid)
    tl.debug_barrier()
    # pass 3: the weight gradient, dw2[heads, taps] = dz neighbourhoods^T, a block of taps at a time
    taps_total = channels * K * K
    for tap_start in range(0, taps_total, BLOCK_T):
        taps = tap_start + tl.arange(0, BLOCK_T)
        acc = tl.zeros((BLOCK_H, BLOCK_T), dtype=tl.float32)
        for start in range(0, tokens, BLOCK_K):
            keys = start + tl.arange(0, BLOCK_K)
            hidden = _neighbourhoods(rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, query, origin,
                                     taps, keys, tokens, width, channels, map_plane, map_cols, K)
            dz = tl.load(dz_rows + keys[None, :], mask=in_heads[:, None] & (keys < tokens)[None, :],
                         other=0.0)
            acc += tl.dot(dz.to(DOT), tl.trans(hidden.to(DOT)))
        tl.store(dw2_ptr + query * heads * taps_total + heads_[:, None] * taps_total
                 + taps[None, :], acc, mask=in_heads[:, None] & (taps < taps_total)[None, :])
    head_grads = dhead_ptr + query * 3 * heads + heads_
    tl.store(head_grads, grad_gain, mask=in_heads)
    tl.store(head_grads + heads, grad_shift, mask=in_heads)
    tl.store(head_grads + 2 * heads, grad_bias, mask=in_heads)


@triton.jit
def _window_grad_tile(dz_ptr, rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, query, win_row,
                      win_col, inside, height, width, channels, heads, map_plane, map_cols,
                      K: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_J: tl.constexpr,
                      BLOCK_C: tl.constexpr, DOT: tl.constexpr):
    """At ``BLOCK_P`` window cells of ``query`` (where ``inside``): the gradient of the first norm's
    affine output through the ReLU, ``(BLOCK_C, BLOCK_P)``, and ``x_hat``; ``dh[c, cell] = sum_{h,
    dy, dx} w2[h, c, dy, dx] dz[h, cell - (dy, dx)]``, ``BLOCK_J`` at a time."""
    tokens = height * width
    chans = tl.arange(0, BLOCK_C)
    in_chan = chans < channels
    taps_total = channels * K * K
    acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
    for start in range(0, heads * K * K, BLOCK_J):
        js = start + tl.arange(0, BLOCK_J)
        in_js = js < heads * K * K
        head, tap = js // (K * K), js % (K * K)
        key_row = win_row[None, :] - (tap // K)[:, None]
        key_col = win_col[None, :] - (tap % K)[:, None]
        valid = (
            in_js[:, None]
            & inside[None, :]
            & (key_row >= 0)
            & (key_row < height)
            & (key_col >= 0)
            & (key_col < width)
        )
        dz = tl.load(dz_ptr + head.to(tl.int64)[:, None] * tokens * tokens
                     + query.to(tl.int64) * tokens
                     + key_row * width + key_col, mask=valid, other=0.0)
        weights = tl.load(w2_ptr + chans[:, None] * K * K + (head * taps_total + tap)[None, :],
                          mask=in_chan[:, None] & in_js[None, :], other=0.0)
        acc += tl.dot(weights.to(DOT), dz.to(DOT))
    offsets = chans[:, None] * map_plane + (_window_origin(query, height, width, map_cols)
                                            + win_row * map_cols
                                            + win_col)[None, :]
    x_hat, pre = _normalised(rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, query, offsets,
                             chans[:, None], in_chan[:, None] & inside[None, :], channels)
    return tl.where(pre > 0.0, acc, 0.0), x_hat


@triton.jit
def _window_grad_sums(dz_ptr, rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, sums_ptr,
                      height, width, channels, heads, map_rows, map_cols, window_rows, window_cols,
                      K: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_J: tl.constexpr,
                      BLOCK_C: tl.constexpr, DOT: tl.constexpr):
    """Per query and channel: the first norm's weight and bias gradients ``sum dpre x_hat``, ``sum
    dpre`` (times ``g1``, its backward's sums)."""
    query = tl.program_id(0)
    chans = tl.arange(0, BLOCK_C)
    area = window_rows * window_cols
    sum_dpre = tl.zeros((BLOCK_C,), dtype=tl.float32)
    sum_dpre_x_hat = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for start in range(0, area, BLOCK_P):
        cells = start + tl.arange(0, BLOCK_P)
        dpre, x_hat = _window_grad_tile(dz_ptr, rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr,
                                        w2_ptr, query, cells // window_cols, cells % window_cols,
                                        cells < area, height, width, channels, heads,
                                        map_rows * map_cols, map_cols, K, BLOCK_P, BLOCK_J, BLOCK_C,
                                        DOT)
        sum_dpre += tl.sum(dpre, axis=1)
        sum_dpre_x_hat += tl.sum(dpre * x_hat, axis=1)
    row = sums_ptr + query * 2 * channels + chans
    tl.store(row, sum_dpre_x_hat, mask=chans < channels)
    tl.store(row + channels, sum_dpre, mask=chans < channels)


@triton.jit
def _window_grad(dz_ptr, rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr, w2_ptr, sums_ptr, grad_ptr,
                 height, width, channels, heads, map_rows, map_cols, window_rows, window_cols,
                 K: tl.constexpr, TILE_R: tl.constexpr, TILE_C: tl.constexpr, BLOCK_J: tl.constexpr,
                 BLOCK_C: tl.constexpr, DOT: tl.constexpr, ORDERED: tl.constexpr):
    """The first norm's backward, ``dx = rstd (dx_hat - mean(dx_hat) - x_hat mean(dx_hat x_hat))``,
    for query row ``i`` on a tile of map rows and columns: the row's windows share map rows, so the
    tile sums them before one atomic add (or, ``ORDERED``, one store into row ``i`` of a buffer)."""
    query_row = tl.program_id(0)
    cells = tl.arange(0, TILE_R * TILE_C)
    win_row = tl.program_id(1) * TILE_R + cells // TILE_C
    map_col = tl.program_id(2) * TILE_C + cells % TILE_C
    chans = tl.arange(0, BLOCK_C)
    in_chan = chans < channels
    area = window_rows * window_cols
    gain = tl.load(g1_ptr + chans, mask=in_chan, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_C, TILE_R * TILE_C), dtype=tl.float32)
    # the queries whose window reaches the tile's columns: column j's starts at W - 1 - j
    first_col = tl.program_id(2) * TILE_C
    first = tl.maximum(0, width - first_col - TILE_C)
    last = tl.minimum(width, width - 1 - first_col + window_cols)
    for query_col in range(first, last):
        query = query_row * width + query_col
        win_col = map_col - (width - 1 - query_col)
        inside = (win_row < window_rows) & (win_col >= 0) & (win_col < window_cols)
        dpre, x_hat = _window_grad_tile(dz_ptr, rel_ptr, mean1_ptr, rstd1_ptr, g1_ptr, b1_ptr,
                                        w2_ptr, query, win_row, win_col, inside, height, width,
                                        channels, heads, map_rows * map_cols, map_cols, K,
                                        TILE_R * TILE_C, BLOCK_J, BLOCK_C, DOT)
        sums = sums_ptr + query * 2 * channels + chans
        mean_dx_hat_x_hat = gain * tl.load(sums, mask=in_chan, other=0.0) / area
        mean_dx_hat = gain * tl.load(sums + channels, mask=in_chan, other=0.0) / area
        rstd = tl.load(rstd1_ptr + query * channels + chans, mask=in_chan, other=0.0)
        dx = rstd[:, None] * (gain[:, None] * dpre - mean_dx_hat[:, None]
                              - x_hat * mean_dx_hat_x_hat[:, None])
        acc += tl.where(in_chan[:, None] & inside[None, :], dx, 0.0)
    in_tile = in_chan[:, None] & ((win_row < window_rows) & (map_col < map_cols))[None, :]
    if ORDERED:
        rows = grad_ptr + (query_row * channels + chans[:, None]) * window_rows * map_cols
        tl.store(rows + (win_row * map_cols + map_col)[None, :], acc, mask=in_tile)
    else:
        map_row = height - 1 - query_row + win_row
        tl.atomic_add(grad_ptr + chans[:, None] * map_rows * map_cols
                      + (map_row * map_cols + map_col)[None, :], acc, mask=in_tile)


def _geometry(relative: Tensor, hw_shape: Sequence[int], kernel_size: int) -> Tuple[int, ...]:
    """``H, W, channels, map rows, map columns, window rows, window columns``."""
    height, width = hw_shape
    channels, map_rows, map_cols = relative.shape
    return height, width, channels, map_rows, map_cols, map_rows - height + 1, map_cols - width + 1


class PositionLogitsTriton(torch.autograd.Function):
    """The position network after the first projection, one program per query forward and backward;
    saves the map, the parameters and both norms' per-query statistics. Autocast: off inside (see
    the module)."""

    @staticmethod
    @autocast_off
    def forward(ctx, relative: Tensor, norm1_weight: Tensor, norm1_bias: Tensor,
                conv2_weight: Tensor, conv2_bias: Tensor, norm2_weight: Tensor, norm2_bias: Tensor,
                hw_shape: Tuple[int, int], eps: float, operands: torch.dtype) -> Tensor:
        relative = relative.contiguous()
        heads, kernel_size = conv2_weight.shape[0], conv2_weight.shape[-1]
        height, width, channels, map_rows, map_cols, window_rows, window_cols = _geometry(
            relative, hw_shape, kernel_size
        )
        tokens = height * width
        params = [
            p.detach().float().contiguous()
            for p in (norm1_weight, norm1_bias, conv2_weight, conv2_bias, norm2_weight, norm2_bias)
        ]
        mean1, rstd1 = (relative.new_empty(tokens, channels, dtype=torch.float32) for _ in range(2))
        mean2, rstd2 = (relative.new_empty(tokens, heads, dtype=torch.float32) for _ in range(2))
        _window_stats[(tokens,)](relative, mean1, rstd1, height, width, channels, map_rows,
                                 map_cols, window_rows,
                                 window_cols, eps, BLOCK_C=triton.next_power_of_2(channels),
                                 BLOCK_W=_window_cells(channels, WINDOW_TILE), num_warps=WARPS,
                                 num_stages=STAGES)
        logits = relative.new_empty(heads, tokens, tokens, dtype=torch.float32)
        g1, b1, w2, b2, g2, bb2 = params
        _logits_forward[(tokens,)](relative, mean1, rstd1, g1, b1, w2, b2, g2, bb2, logits, mean2,
                                   rstd2, height, width, channels, heads, map_rows, map_cols, eps,
                                   K=kernel_size, BLOCK_K=BLOCK_KEYS, BLOCK_T=BLOCK_TAPS,
                                   BLOCK_H=head_block(heads), DOT=dot_operands(operands),
                                   num_warps=FORWARD_WARPS, num_stages=STAGES)
        ctx.save_for_backward(relative, *params, mean1, rstd1, mean2, rstd2)
        ctx.hw_shape, ctx.operands = hw_shape, operands
        ctx.param_dtypes = [
            p.dtype
            for p in (norm1_weight, norm1_bias, conv2_weight, conv2_bias, norm2_weight, norm2_bias)
        ]
        return logits

    @staticmethod
    @autocast_off
    def backward(ctx, grad_logits: Tensor):
        relative, g1, b1, w2, b2, g2, bb2, mean1, rstd1, mean2, rstd2 = ctx.saved_tensors
        heads, kernel_size = w2.shape[0], w2.shape[-1]
        height, width, channels, map_rows, map_cols, window_rows, window_cols = _geometry(
            relative, ctx.hw_shape, kernel_size
        )
        tokens = height * width
        dot = dict(K=kernel_size, DOT=dot_operands(ctx.operands), num_warps=WARPS,
                   num_stages=STAGES)
        grad_logits = grad_logits.float().contiguous()
        dz = torch.empty_like(grad_logits)
        dw2 = relative.new_empty(tokens, *w2.shape, dtype=torch.float32)
        dhead = relative.new_empty(tokens, 3, heads, dtype=torch.float32)
        _logits_backward[(tokens,)](grad_logits, relative, mean1, rstd1, g1, b1, w2, b2, g2, mean2,
                                    rstd2, dz, dw2, dhead, height, width, channels, heads, map_rows,
                                    map_cols, BLOCK_K=BACKWARD_KEYS, BLOCK_T=BLOCK_TAPS,
                                    BLOCK_H=head_block(heads), **dot)
        sums = relative.new_empty(tokens, 2, channels, dtype=torch.float32)
        window = dict(BLOCK_J=BLOCK_TAPS, BLOCK_C=head_block(channels), **dot)
        _window_grad_sums[(tokens,)](dz, relative, mean1, rstd1, g1, b1, w2, sums, height, width,
                                     channels, heads, map_rows, map_cols, window_rows, window_cols,
                                     BLOCK_P=_window_cells(channels, WINDOW_TILE), **window)
        grad_relative = torch.zeros(relative.shape, device=relative.device, dtype=torch.float32)
        ordered = torch.are_deterministic_algorithms_enabled()
        grad_rows = relative.new_empty(height, channels, window_rows, map_cols,
                                       dtype=torch.float32) if ordered \
            else grad_relative
        tile_cols = MAP_TILE_COLS
        tile_rows = _window_cells(channels, GRAD_TILE // head_block(channels)) // tile_cols
        grid = (height, triton.cdiv(window_rows, tile_rows), triton.cdiv(map_cols, tile_cols))
        _window_grad[grid](dz, relative, mean1, rstd1, g1, b1, w2, sums, grad_rows, height, width,
                           channels, heads, map_rows, map_cols, window_rows, window_cols,
                           TILE_R=tile_rows, TILE_C=tile_cols, ORDERED=ordered, **window)
        # row i's windows start at map row H - 1 - i; index_add_ is deterministic under the mode
        if ordered:
            starts = height - 1 - torch.arange(height, device=relative.device)
            map_rows_of = (starts[:, None]
                           + torch.arange(window_rows, device=relative.device)).flatten()
            grad_relative.index_add_(1, map_rows_of, grad_rows.transpose(0, 1).flatten(1, 2))
        head_grads = dhead.sum(0)
        norm1_grads = sums.sum(0)
        grads = (norm1_grads[0], norm1_grads[1], dw2.sum(0), head_grads[2], head_grads[0],
                 head_grads[1])
        return (grad_relative.to(relative.dtype),
                *(g.to(dtype) for g, dtype in zip(grads, ctx.param_dtypes)), None, None, None)


def position_window_logits(relative: Tensor, norm1_weight: Tensor, norm1_bias: Tensor,
                           conv2_weight: Tensor, conv2_bias: Tensor, norm2_weight: Tensor,
                           norm2_bias: Tensor, hw_shape: Sequence[int], eps: float) -> Tensor:
    """``(heads, HW, HW)`` logits from the first projection's map, the products in the autocast
    dtype where on, else the second projection's weights'."""
    _, autocast_dtype, autocast = autocast_state(relative.device.type)
    operands = autocast_dtype if autocast else conv2_weight.dtype
    return PositionLogitsTriton.apply(relative, norm1_weight, norm1_bias, conv2_weight, conv2_bias,
                                      norm2_weight, norm2_bias, tuple(hw_shape), eps, operands)


def position_logits_triton(params: PositionParams, hw_shape: Sequence[int], eps: float) -> Tensor:
    """:func:`.position.position_logits` with the windows in the kernels."""
    return position_window_logits(first_projection(params, hw_shape), *params.window_params(),
                                  hw_shape, eps)
