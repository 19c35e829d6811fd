"""Triton kernels of the sliding-chunk attention (arXiv:2103.15358, Sec. 3.2, App. C) as
block-sparse flash attention, forward and backward.

A ``w x w`` chunk's local queries form a query tile; each visited chunk (App. D) is a key tile read
straight from the keys and values, masked from the chunks' coordinates (no slot table, no padded
copy); the ``G`` global keys are one more tile. The forward keeps the output and each row's
log-sum-exp; the backward recomputes the probabilities (FlashAttention-2) in three kernels that each
own what they write, so gradients are deterministic: ``_grad_keys``, ``_grad_queries`` and
``_grad_bias`` (summed over :data:`BIAS_SHARES` by torch). The global queries' rows are torch's
(:func:`.layout.global_rows`).

Mixed precision: ``tl.dot`` operands in the inputs' precision
(:func:`~mmvisattn.ops.utils.triton_launch.dot_operands`), float32 accumulation (float64 for the
interpreter's gradchecks), scores and statistics float32. The output in ``q``'s dtype, gradients in
their inputs'; autocast off in the Function."""
from functools import lru_cache
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off
from ..utils.flash import log_sum_exp, online_softmax, precision, score_grads
from ..utils.token_grid import to_windows, window_grid
from ..utils.triton_launch import head_block, num_warps
from .layout import CENTRE, Mode, global_rows, is_drawn, slot_bias, visited_neighbours

# keys per product: 64 x 32 score blocks spilled registers on sm_80 (compile_kernels.py)
KEY_BLOCK = 16
# programs per (head, neighbour) summing the bias gradient; their partial tables are summed after
BIAS_SHARES = 32


@triton.jit
def _chunk_tile(row, col, offs, height, width, WINDOW: tl.constexpr):
    """Map row and column of each position of chunk ``(row, col)``'s tile, and whether it is a token
    of the map (not the zero padding of the last chunks, not past ``w^2``)."""
    x = row * WINDOW + offs // WINDOW
    y = col * WINDOW + offs % WINDOW
    return x, y, (offs < WINDOW * WINDOW) & (x < height) & (y < width)


@triton.jit
def _tile(base, first, x, y, ok, width, offs_c, columns):
    """Rows ``first + x * width + y`` of a ``(tokens, columns)`` table, zero where not ``ok``."""
    rows = first + x * width + y
    return tl.load(base + rows[:, None] * columns + offs_c[None, :],
                   mask=ok[:, None] & (offs_c[None, :] < columns), other=0.0)


@triton.jit
def _neighbour(row, col, neighbour, sign, rows, cols, CYCLIC: tl.constexpr):
    """The chunk ``sign`` times neighbour offset ``neighbour`` (0..8) away from ``(row, col)``,
    wrapped when ``CYCLIC``, and whether it is on the grid."""
    row = row + sign * (neighbour // 3 - 1)
    col = col + sign * (neighbour % 3 - 1)
    if CYCLIC:
        row = (row + rows) % rows
        col = (col + cols) % cols
    return row, col, (row >= 0) & (row < rows) & (col >= 0) & (col < cols)


@triton.jit
def _local_scores(q, keys, bias_base, column, slots, qx, qy, q_ok, kx, ky, k_ok, offs_l, offs_k,
                  HAS_BIAS: tl.constexpr, EXACT: tl.constexpr, WINDOW: tl.constexpr,
                  ACC: tl.constexpr):
    """Scores of a query chunk against keys ``offs_k`` of a key chunk whose bias starts at slot
    ``column``, ``-inf`` where masked."""
    scores = tl.dot(q, tl.trans(keys), out_dtype=ACC)
    if HAS_BIAS:
        in_l, in_k = offs_l < WINDOW * WINDOW, offs_k < WINDOW * WINDOW
        scores += tl.load(bias_base + offs_l[:, None] * slots + column + offs_k[None, :],
                          mask=in_l[:, None] & in_k[None, :], other=0.0).to(ACC)
    valid = q_ok[:, None] & k_ok[None, :]
    if EXACT:  # the conv-like window: keys within w of the query along both axes
        valid = (
            valid
            & (tl.abs(kx[None, :] - qx[:, None]) <= WINDOW)
            & (tl.abs(ky[None, :] - qy[:, None]) <= WINDOW)
        )
    return tl.where(valid, scores, float('-inf'))


@triton.jit
def _key_block(q, k_base, v_base, bias_base, key_row, key_col, j, start, slots, num_global, height,
               width, qx, qy, q_ok, offs_l, offs_d, offs_dv, dims, value_dims,
               HAS_BIAS: tl.constexpr, EXACT: tl.constexpr, WINDOW: tl.constexpr, DOT: tl.constexpr,
               ACC: tl.constexpr, BLOCK_K: tl.constexpr):
    """Scores of a query chunk against keys ``start ..`` of chunk ``(key_row, key_col)``, its
    ``j``-th visited neighbour, and those keys and values."""
    offs_k = start + tl.arange(0, BLOCK_K)
    kx, ky, k_ok = _chunk_tile(key_row, key_col, offs_k, height, width, WINDOW)
    keys = _tile(k_base, num_global, kx, ky, k_ok, width, offs_d, dims).to(DOT)
    values = _tile(v_base, num_global, kx, ky, k_ok, width, offs_dv, value_dims).to(DOT)
    scores = _local_scores(q, keys, bias_base, num_global + j * WINDOW * WINDOW, slots, qx, qy,
                           q_ok, kx, ky, k_ok, offs_l, offs_k, HAS_BIAS, EXACT, WINDOW, ACC)
    return scores, keys, values


@triton.jit
def _global_tile(q, k_base, v_base, bias_base, slots, num_global, q_ok, offs_l, offs_d, offs_dv,
                 dims, value_dims, HAS_BIAS: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr,
                 BLOCK_G: tl.constexpr):
    """A query chunk's scores against the global keys (``-inf`` where masked), keys and values."""
    offs_g = tl.arange(0, BLOCK_G)
    g_ok = offs_g < num_global
    keys = tl.load(k_base + offs_g[:, None] * dims + offs_d[None, :],
                   mask=g_ok[:, None] & (offs_d[None, :] < dims), other=0.0).to(DOT)
    values = tl.load(v_base + offs_g[:, None] * value_dims + offs_dv[None, :],
                     mask=g_ok[:, None] & (offs_dv[None, :] < value_dims), other=0.0).to(DOT)
    scores = tl.dot(q, tl.trans(keys), out_dtype=ACC)
    if HAS_BIAS:
        scores += tl.load(bias_base + offs_l[:, None] * slots + offs_g[None, :],
                          mask=q_ok[:, None] & g_ok[None, :], other=0.0).to(ACC)
    return tl.where(q_ok[:, None] & g_ok[None, :], scores, float('-inf')), keys, values


@triton.jit
def _query_chunk(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, row, col, scale, tokens, height,
                 width, num_global, dims, value_dims, offs_l, offs_d, offs_dv, WINDOW: tl.constexpr,
                 DOT: tl.constexpr, ACC: tl.constexpr):
    """What the backward reads of a query chunk: positions, scaled queries, output gradients, the
    rows' log-sum-exp and ``delta = sum_j p_ij dp_ij``."""
    qx, qy, q_ok = _chunk_tile(row, col, offs_l, height, width, WINDOW)
    q = (_tile(q_ptr + bh * tokens * dims, num_global, qx, qy, q_ok, width, offs_d,
               dims).to(ACC) * scale).to(DOT)
    local = height * width
    grad_out = _tile(grad_out_ptr + bh * local * value_dims, 0, qx, qy, q_ok, width, offs_dv,
                     value_dims).to(DOT)
    rows = bh * local + qx * width + qy
    lse = tl.load(lse_ptr + rows, mask=q_ok, other=0.0)
    delta = tl.load(delta_ptr + rows, mask=q_ok, other=0.0)
    return qx, qy, q_ok, q, grad_out, lse, delta


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, bias_ptr, visited_ptr, out_ptr, lse_ptr, scale, heads, tokens,
             height, width, rows, cols, num_global, dims, value_dims, slots,
             NUM_VISITED: tl.constexpr, HAS_GLOBAL: tl.constexpr, HAS_BIAS: tl.constexpr,
             CYCLIC: tl.constexpr, EXACT: tl.constexpr, WINDOW: tl.constexpr, DOT: tl.constexpr,
             ACC: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_G: tl.constexpr,
             BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, chunk = tl.program_id(0), tl.program_id(1)
    row, col = chunk // cols, chunk % cols
    offs_l, offs_d, offs_dv = tl.arange(0, BLOCK_L), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    qx, qy, q_ok = _chunk_tile(row, col, offs_l, height, width, WINDOW)
    k_base, v_base = k_ptr + bh * tokens * dims, v_ptr + bh * tokens * value_dims
    bias_base = bias_ptr + (bh % heads) * WINDOW * WINDOW * slots
    q = (_tile(q_ptr + bh * tokens * dims, num_global, qx, qy, q_ok, width, offs_d,
               dims).to(ACC) * scale).to(DOT)
    row_max = tl.full((BLOCK_L,), float('-inf'), ACC)
    row_sum = tl.zeros((BLOCK_L,), ACC)
    acc = tl.zeros((BLOCK_L, BLOCK_DV), ACC)
    if HAS_GLOBAL:
        # named apart from the local tiles' blocks, which have another shape
        global_scores, _, global_values = _global_tile(q, k_base, v_base, bias_base, slots,
                                                       num_global, q_ok, offs_l,
                                                       offs_d, offs_dv, dims, value_dims, HAS_BIAS,
                                                       DOT, ACC, BLOCK_G)
        row_max, row_sum, acc = online_softmax(global_scores, global_values, row_max, row_sum, acc,
                                               DOT, ACC)
    for j in range(NUM_VISITED):
        key_row, key_col, on_grid = _neighbour(row, col, tl.load(visited_ptr + j), 1, rows, cols,
                                               CYCLIC)
        if on_grid:
            for start in range(0, WINDOW * WINDOW, BLOCK_K):
                scores, _, values = _key_block(q, k_base, v_base, bias_base, key_row, key_col, j,
                                               start, slots, num_global, height, width, qx, qy,
                                               q_ok, offs_l, offs_d, offs_dv, dims, value_dims,
                                               HAS_BIAS, EXACT, WINDOW, DOT, ACC, BLOCK_K)
                row_max, row_sum, acc = online_softmax(scores, values, row_max, row_sum, acc, DOT,
                                                       ACC)
    lse, safe_sum = log_sum_exp(row_max, row_sum)
    local = height * width
    out_rows = qx * width + qy
    tl.store(out_ptr + (bh * local + out_rows[:, None]) * value_dims + offs_dv[None, :],
             (acc / safe_sum[:, None]).to(out_ptr.dtype.element_ty),
             mask=q_ok[:, None] & (offs_dv[None, :] < value_dims))
    tl.store(lse_ptr + bh * local + out_rows, lse, mask=q_ok)


@triton.jit
def _grad_queries(q_ptr, k_ptr, v_ptr, bias_ptr, visited_ptr, grad_out_ptr, lse_ptr, delta_ptr,
                  grad_q_ptr, global_probs_ptr, global_grads_ptr, scale, heads, tokens, height,
                  width, rows, cols, num_global, dims, value_dims, slots, NUM_VISITED: tl.constexpr,
                  HAS_GLOBAL: tl.constexpr, HAS_BIAS: tl.constexpr, CYCLIC: tl.constexpr,
                  EXACT: tl.constexpr, WINDOW: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr,
                  BLOCK_L: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_G: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, chunk = tl.program_id(0), tl.program_id(1)
    row, col = chunk // cols, chunk % cols
    offs_l, offs_d, offs_dv = tl.arange(0, BLOCK_L), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    qx, qy, q_ok, q, grad_out, lse, delta = _query_chunk(
        q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, row, col, scale, tokens, height, width,
        num_global, dims, value_dims, offs_l, offs_d, offs_dv, WINDOW, DOT, ACC)
    k_base, v_base = k_ptr + bh * tokens * dims, v_ptr + bh * tokens * value_dims
    bias_base = bias_ptr + (bh % heads) * WINDOW * WINDOW * slots
    grad_q = tl.zeros((BLOCK_L, BLOCK_D), ACC)
    if HAS_GLOBAL:
        global_scores, global_keys, global_values = _global_tile(
            q, k_base, v_base, bias_base, slots, num_global, q_ok, offs_l, offs_d, offs_dv, dims,
            value_dims, HAS_BIAS, DOT, ACC, BLOCK_G)
        global_probs, global_grads = score_grads(global_scores, global_values, grad_out, lse, delta,
                                                 ACC)
        grad_q += tl.dot(global_grads.to(DOT), global_keys, out_dtype=ACC)
        offs_g = tl.arange(0, BLOCK_G)
        at = (bh * height * width + qx * width + qy)[:, None] * num_global + offs_g[None, :]
        in_lg = q_ok[:, None] & (offs_g[None, :] < num_global)
        tl.store(global_probs_ptr + at, global_probs, mask=in_lg)
        tl.store(global_grads_ptr + at, global_grads, mask=in_lg)
    for j in range(NUM_VISITED):
        key_row, key_col, on_grid = _neighbour(row, col, tl.load(visited_ptr + j), 1, rows, cols,
                                               CYCLIC)
        if on_grid:
            for start in range(0, WINDOW * WINDOW, BLOCK_K):
                scores, keys, values = _key_block(q, k_base, v_base, bias_base, key_row, key_col, j,
                                                  start, slots, num_global, height, width, qx, qy,
                                                  q_ok, offs_l, offs_d, offs_dv, dims, value_dims,
                                                  HAS_BIAS, EXACT, WINDOW, DOT, ACC, BLOCK_K)
                _, grad_scores = score_grads(scores, values, grad_out, lse, delta, ACC)
                grad_q += tl.dot(grad_scores.to(DOT), keys, out_dtype=ACC)
    q_rows = num_global + qx * width + qy
    tl.store(grad_q_ptr + (bh * tokens + q_rows[:, None]) * dims + offs_d[None, :],
             (grad_q * scale).to(grad_q_ptr.dtype.element_ty),
             mask=q_ok[:, None] & (offs_d[None, :] < dims))


@triton.jit
def _grad_keys(q_ptr, k_ptr, v_ptr, bias_ptr, visited_ptr, grad_out_ptr, lse_ptr, delta_ptr,
               grad_k_ptr, grad_v_ptr, scale, heads, tokens, height, width, rows, cols, num_global,
               dims, value_dims, slots, NUM_VISITED: tl.constexpr, HAS_BIAS: tl.constexpr,
               CYCLIC: tl.constexpr, EXACT: tl.constexpr, WINDOW: tl.constexpr, DOT: tl.constexpr,
               ACC: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_K: tl.constexpr,
               BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, chunk, part = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    key_row, key_col = chunk // cols, chunk % cols
    offs_l, offs_d, offs_dv = tl.arange(0, BLOCK_L), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    offs_k = part * BLOCK_K + tl.arange(0, BLOCK_K)
    kx, ky, k_ok = _chunk_tile(key_row, key_col, offs_k, height, width, WINDOW)
    keys = _tile(k_ptr + bh * tokens * dims, num_global, kx, ky, k_ok, width, offs_d, dims).to(DOT)
    values = _tile(v_ptr + bh * tokens * value_dims, num_global, kx, ky, k_ok, width, offs_dv,
                   value_dims).to(DOT)
    bias_base = bias_ptr + (bh % heads) * WINDOW * WINDOW * slots
    grad_k = tl.zeros((BLOCK_K, BLOCK_D), ACC)
    grad_v = tl.zeros((BLOCK_K, BLOCK_DV), ACC)
    for j in range(NUM_VISITED):
        # the query chunk that reaches this key chunk as its j-th visited neighbour
        row, col, on_grid = _neighbour(key_row, key_col, tl.load(visited_ptr + j), -1, rows, cols,
                                       CYCLIC)
        if on_grid:
            qx, qy, q_ok, q, grad_out, lse, delta = _query_chunk(
                q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, row, col, scale, tokens, height, width,
                num_global, dims, value_dims, offs_l, offs_d, offs_dv, WINDOW, DOT, ACC)
            scores = _local_scores(q, keys, bias_base, num_global + j * WINDOW * WINDOW, slots, qx,
                                   qy, q_ok, kx, ky,
                                   k_ok, offs_l, offs_k, HAS_BIAS, EXACT, WINDOW, ACC)
            probs, grad_scores = score_grads(scores, values, grad_out, lse, delta, ACC)
            grad_v += tl.dot(tl.trans(probs.to(DOT)), grad_out, out_dtype=ACC)
            grad_k += tl.dot(tl.trans(grad_scores.to(DOT)), q, out_dtype=ACC)
    k_rows = num_global + kx * width + ky
    tl.store(grad_k_ptr + (bh * tokens + k_rows[:, None]) * dims + offs_d[None, :],
             grad_k.to(grad_k_ptr.dtype.element_ty), mask=k_ok[:, None] & (offs_d[None, :] < dims))
    tl.store(grad_v_ptr + (bh * tokens + k_rows[:, None]) * value_dims + offs_dv[None, :],
             grad_v.to(grad_v_ptr.dtype.element_ty),
             mask=k_ok[:, None] & (offs_dv[None, :] < value_dims))


@triton.jit
def _grad_bias(q_ptr, k_ptr, v_ptr, bias_ptr, visited_ptr, grad_out_ptr, lse_ptr, delta_ptr,
               grad_bias_ptr, scale, batch, heads, tokens, height, width, rows, cols, num_global,
               dims, value_dims, slots, shares, CYCLIC: tl.constexpr, EXACT: tl.constexpr,
               WINDOW: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_L: tl.constexpr,
               BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    head, tile, share = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    parts = tl.cdiv(WINDOW * WINDOW, BLOCK_K)
    j, part = tile // parts, tile % parts
    neighbour = tl.load(visited_ptr + j)
    offs_l, offs_d, offs_dv = tl.arange(0, BLOCK_L), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    offs_k = part * BLOCK_K + tl.arange(0, BLOCK_K)
    bias_base = bias_ptr + head * WINDOW * WINDOW * slots
    total = tl.zeros((BLOCK_L, BLOCK_K), ACC)
    chunks = rows * cols
    for item in range(share, batch * chunks, shares):
        bh, chunk = (item // chunks) * heads + head, item % chunks
        row, col = chunk // cols, chunk % cols
        key_row, key_col, on_grid = _neighbour(row, col, neighbour, 1, rows, cols, CYCLIC)
        if on_grid:
            qx, qy, q_ok, q, grad_out, lse, delta = _query_chunk(
                q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, row, col, scale, tokens, height, width,
                num_global, dims, value_dims, offs_l, offs_d, offs_dv, WINDOW, DOT, ACC)
            scores, _, values = _key_block(q, k_ptr + bh * tokens * dims,
                                           v_ptr + bh * tokens * value_dims, bias_base, key_row,
                                           key_col, j, part * BLOCK_K, slots, num_global, height,
                                           width, qx, qy, q_ok, offs_l, offs_d, offs_dv, dims,
                                           value_dims, True, EXACT, WINDOW, DOT, ACC, BLOCK_K)
            total += score_grads(scores, values, grad_out, lse, delta, ACC)[1]
    in_l, in_k = offs_l < WINDOW * WINDOW, offs_k < WINDOW * WINDOW
    tl.store(grad_bias_ptr + (share * heads + head) * WINDOW * WINDOW * (slots - num_global)
             + offs_l[:, None] * (slots - num_global) + j * WINDOW * WINDOW + offs_k[None, :],
             total, mask=in_l[:, None] & in_k[None, :])


class Layout(NamedTuple):
    """What the kernels take as fixed: the map, the chunk side, the global tokens, the masking."""
    hw_shape: Tuple[int, int]
    window: int
    num_global: int
    masking: str

    @property
    def grid(self) -> Tuple[int, int]:
        """Rows and columns of the chunk grid."""
        return window_grid(self.hw_shape, self.window)

    def args(self) -> Tuple[int, ...]:
        """``height, width, rows, cols, num_global`` as the kernels take them."""
        return (*self.hw_shape, *self.grid, self.num_global)


def _meta(layout: Layout, dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    """The compile-time arguments every kernel takes."""
    block_l, block_d, block_dv = (head_block(layout.window**2), head_block(dims),
                                  head_block(value_dims),)
    return dict(CYCLIC=layout.masking == 'cyclic', EXACT=layout.masking == 'exact',
                WINDOW=layout.window, BLOCK_L=block_l, BLOCK_K=min(block_l, KEY_BLOCK),
                BLOCK_D=block_d, BLOCK_DV=block_dv, **precision(dtype))


def _warps(kernel, meta: dict, dtype: torch.dtype) -> int:
    """Warps per program: the fewest that compile_kernels.py found without register spills on sm_80
    and sm_90."""
    head = max(meta['BLOCK_D'], meta['BLOCK_DV'])
    if meta['BLOCK_L'] < 64 or (kernel is _forward and head <= 32):
        return num_warps(head)
    if kernel is _grad_keys:
        return 8 if head > 32 and dtype == torch.float32 else 4
    return 8


def _key_parts(meta: dict) -> int:
    """Key blocks of a chunk (the programs of a chunk in the key-side kernels)."""
    return -(-meta['WINDOW'] ** 2 // meta['BLOCK_K'])


def _tiles(visited: Tensor, bias: Optional[Tensor]) -> dict:
    """The compile-time arguments of the kernels that walk a chunk's key tiles."""
    return dict(NUM_VISITED=visited.shape[0], HAS_BIAS=bias is not None)


def _global_tile_args(layout: Layout) -> dict:
    return dict(HAS_GLOBAL=layout.num_global > 0, BLOCK_G=head_block(max(layout.num_global, 1)))


class SlidingChunkTriton(torch.autograd.Function):
    """The local queries' attention: ``q``, ``k``, ``v`` ``(B, heads, G + h*w, d)``, ``bias``
    (:func:`.layout.slot_bias`) or ``None``, ``visited`` the int32 neighbour indices -> ``(B, heads,
    h*w, d)``."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], visited: Tensor,
                layout: Layout, scale: float) -> Tensor:
        batch, heads, tokens, dims = q.shape
        value_dims, local = v.shape[-1], layout.hw_shape[0] * layout.hw_shape[1]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        bias_arg = q if bias is None else bias.contiguous()
        out = q.new_empty(batch, heads, local, value_dims)
        lse = q.new_empty(batch, heads, local,
                          dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        slots = bias_arg.shape[-1] if bias is not None else 0
        rows, cols = layout.grid
        meta = _meta(layout, dims, value_dims, q.dtype)
        _forward[(batch * heads, rows * cols)](q, k, v, bias_arg, visited, out, lse, scale, heads,
                                               tokens, *layout.args(), dims, value_dims, slots,
                                               **_tiles(visited, bias), **_global_tile_args(layout),
                                               num_warps=_warps(_forward, meta, q.dtype), **meta)
        ctx.save_for_backward(q, k, v, bias_arg, visited, out, lse)
        ctx.layout, ctx.scale, ctx.has_bias = layout, scale, bias is not None
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, bias_arg, visited, out, lse = ctx.saved_tensors
        layout, scale = ctx.layout, ctx.scale
        batch, heads, tokens, dims = q.shape
        value_dims, num_global = v.shape[-1], layout.num_global
        bias = bias_arg if ctx.has_bias else None
        slots = bias_arg.shape[-1] if ctx.has_bias else 0
        grad_out = grad_out.contiguous()
        delta = (grad_out.to(lse.dtype) * out.to(lse.dtype)).sum(dim=-1)  # sum_j p_ij dp_ij
        rows, cols = layout.grid
        grid = (batch * heads, rows * cols)
        tiles, meta = _tiles(visited, bias), _meta(layout, dims, value_dims, q.dtype)
        reads = (q, k, v, bias_arg, visited, grad_out, lse, delta)
        sizes = (heads, tokens, *layout.args(), dims, value_dims, slots)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        global_probs = lse.new_empty(*lse.shape, num_global)
        global_grads = torch.empty_like(global_probs)
        _grad_queries[grid](*reads, grad_q, global_probs, global_grads, scale, *sizes, **tiles,
                            **_global_tile_args(layout),
                            num_warps=_warps(_grad_queries, meta, q.dtype), **meta)
        _grad_keys[(*grid, _key_parts(meta))](*reads, grad_k, grad_v, scale, *sizes, **tiles,
                                              num_warps=_warps(_grad_keys, meta, q.dtype), **meta)
        grad_q[:, :, :num_global] = 0
        local_q = q[:, :, num_global:].to(lse.dtype) * scale
        grad_k[:, :, :num_global] = torch.einsum('bhng,bhnd->bhgd', global_grads, local_q).to(
            k.dtype
        )
        grad_v[:, :, :num_global] = torch.einsum('bhng,bhnd->bhgd', global_probs,
                                                 grad_out.to(lse.dtype)).to(v.dtype)
        grad_bias = None
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = _bias_grad(reads, global_grads, layout, scale, sizes,
                                   meta).to(bias_arg.dtype)
        return grad_q, grad_k, grad_v, grad_bias, None, None, None


def _bias_grad(reads: Tuple[Tensor, ...], global_grads: Tensor, layout: Layout, scale: float,
               sizes: Tuple[int, ...], meta: dict) -> Tensor:
    """``(heads, w^2, S)``: the global slots' columns summed from the global score gradients by
    chunk position, the neighbours' tiles by :func:`_grad_bias` in shares."""
    q, visited, heads = reads[0], reads[4], sizes[0]
    batch, num_global, window = q.shape[0], layout.num_global, layout.window
    rows, cols = layout.grid
    shares = min(BIAS_SHARES, batch * rows * cols)
    partial = global_grads.new_empty(shares, heads, window ** 2, visited.shape[0] * window ** 2)
    grid = (heads, visited.shape[0] * _key_parts(meta), shares)
    _grad_bias[grid](*reads, partial, scale, batch, *sizes, shares,
                     num_warps=_warps(_grad_bias, meta, q.dtype), **meta)
    local = partial.sum(dim=0)
    if num_global == 0:
        return local
    by_position = to_windows(global_grads.transpose(0, 1).reshape(heads * batch, -1, num_global),
                             layout.hw_shape, window)
    return torch.cat([by_position.view(heads, -1, window ** 2, num_global).sum(dim=1), local],
                     dim=-1)


@lru_cache(maxsize=32)
def _visited(mode: int, device: torch.device) -> Tensor:
    return torch.tensor(visited_neighbours(mode), dtype=torch.int32, device=device)


def visited_on_device(mode: Mode, device: torch.device) -> Tensor:
    """The neighbour indices visited in ``mode``, int32 on ``device``."""
    if not is_drawn(mode):
        return _visited(int(mode), device)
    return torch.stack([torch.full_like(mode, CENTRE),
                        torch.where(mode <= CENTRE, mode - 1, mode)]).int()


def sliding_chunk_attention_triton(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int],
                                   window: int, num_global: int, masking: str, mode: Mode,
                                   rel_pos: Optional[Sequence[Optional[Tensor]]],
                                   scale: float) -> Tensor:
    """Vision Longformer attention with the local queries in the kernels (arguments as
    :func:`mmvisattn.ops.sliding_chunk.sliding_chunk_attention`'s, checked by it)."""
    layout = Layout((int(hw_shape[0]), int(hw_shape[1])), window, num_global, masking)
    bias = slot_bias(rel_pos, window, num_global, mode, q.shape[1])
    local = SlidingChunkTriton.apply(q, k, v, bias, visited_on_device(mode, q.device), layout,
                                     scale)
    if num_global == 0:
        return local
    return torch.cat([global_rows(q[:, :, :num_global] * scale, k, v, rel_pos), local], dim=2)
