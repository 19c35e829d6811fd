"""The flash-attention blocks only the experimental kernels use: tiles of row-major tables, the
batch-shared bias and threshold mask of the scores, and the backward's two kernels, each owning what
it writes: :func:`grad_queries` (per query block) and :func:`grad_keys` (per key block). ``BIASED``
adds a ``(heads, N, M)`` bias (PerViT's ``log Phi_p``); ``MASKED`` drops weights at or below
``threshold`` (Castling), then ``dS = P ([P > t] dO V^T - delta)``, ``delta_i = dO_i . O_i``.
"""
from typing import Dict, Optional

import torch
import triton
import triton.language as tl

from mmvisattn.ops.utils.flash import precision, score_grads
from mmvisattn.ops.utils.triton_launch import head_block, num_warps


def launch_meta(kernel, dims: int, value_dims: int, dtype: torch.dtype, block_m: int, block_n: int,
                launch: Optional[Dict] = None, wide_launch: Optional[Dict] = None,
                stages: Optional[Dict[int, int]] = None) -> dict:
    """Meta-parameters of ``kernel``'s launch for heads ``dims`` and values ``value_dims`` wide:
    blocks, warps (:func:`num_warps`), stages, product dtypes (:func:`precision`), from each op's
    ``launch`` / ``wide_launch`` tables (``compile_kernels.py``)."""
    block_d, block_dv = head_block(dims), head_block(value_dims)
    warps = num_warps(max(block_d, block_dv))
    meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, BLOCK_DV=block_dv,
                num_warps=warps, **precision(dtype))
    if stages:
        meta['num_stages'] = stages[warps]
    meta.update((launch or {}).get(kernel, {}))
    if max(block_d, block_dv) > 64:
        meta.update((wide_launch or {}).get(kernel, {}))
    return meta


@triton.jit
def block_offsets(block, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """The rows of block ``block`` of ``BLOCK`` tokens, and the columns of a head and of a value."""
    return block * BLOCK + tl.arange(0, BLOCK), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)


@triton.jit
def rows(base, offs, count, offs_c, columns):
    """Rows ``offs`` (of ``count``) and columns ``offs_c`` of a row-major ``(count, columns)``
    table, zero outside it."""
    return tl.load(base + offs[:, None] * columns + offs_c[None, :],
                   mask=(offs[:, None] < count) & (offs_c[None, :] < columns), other=0.0)


@triton.jit
def store_rows(base, offs, count, offs_c, columns, block):
    """``block`` into rows ``offs`` and columns ``offs_c`` of a row-major ``(count, columns)``
    table, in the table's dtype, where they lie inside it."""
    tl.store(base + offs[:, None] * columns + offs_c[None, :], block.to(base.dtype.element_ty),
             mask=(offs[:, None] < count) & (offs_c[None, :] < columns))


@triton.jit
def key_rows(k_ptr, v_ptr, bh, offs_k, keys_count, offs_d, offs_dv, dims, value_dims,
             DOT: tl.constexpr):
    """The keys ``offs_k`` of image x head ``bh`` and their values, as product operands."""
    keys = rows(k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims).to(DOT)
    values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv,
                  value_dims).to(DOT)
    return keys, values


@triton.jit
def normalised_output_grads(grad_out_ptr, out_ptr, sums_ptr, bh, offs_q, queries, offs_dv,
                            value_dims, ACC: tl.constexpr):
    """What the backward of a row-normalised ``out = (A V) / r`` reads of a query block: ``dO``,
    ``delta_i = dO_i . O_i`` and ``r`` (1 past the queries)."""
    grad_out = rows(grad_out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv,
                    value_dims).to(ACC)
    out = rows(out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv, value_dims).to(ACC)
    sums = tl.load(sums_ptr + bh * queries + offs_q, mask=offs_q < queries, other=1.0).to(ACC)
    return grad_out, tl.sum(grad_out * out, axis=1), sums


@triton.jit
def query_block(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, offs_q, queries, offs_d, offs_dv, dims,
                value_dims, DOT: tl.constexpr):
    """What a backward reads of a block of queries of image x head ``bh``: the queries, output
    gradients, log-sum-exp and delta (``(B * heads, N, ...)`` row-major tables)."""
    q = rows(q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims).to(DOT)
    grad_out = rows(grad_out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv,
                    value_dims).to(DOT)
    lse = tl.load(lse_ptr + bh * queries + offs_q, mask=offs_q < queries, other=0.0)
    delta = tl.load(delta_ptr + bh * queries + offs_q, mask=offs_q < queries, other=0.0)
    return q, grad_out, lse, delta


@triton.jit
def biased(products, bias_ptr, head, offs_q, offs_k, queries, keys_count, scale, ACC: tl.constexpr,
           BIASED: tl.constexpr):
    """``scale q k^T`` of a tile, ``head``'s bias tile added where ``BIASED``; ``-inf`` outside the
    keys and past the queries."""
    inside = (offs_q[:, None] < queries) & (offs_k[None, :] < keys_count)
    scores = products * scale
    if BIASED:
        scores += tl.load(bias_ptr + head * queries * keys_count + offs_q[:, None] * keys_count
                          + offs_k[None, :], mask=inside, other=0.0).to(ACC)
    return tl.where(inside, scores, float('-inf'))


@triton.jit
def tile_grads(scores, values, grad_out, lse, delta, threshold, ACC: tl.constexpr,
               MASKED: tl.constexpr):
    """The weights of a tile (those at or below ``threshold`` zeroed where ``MASKED``) and its score
    gradient."""
    if MASKED:
        probs = tl.exp(scores - lse[:, None])
        keep = probs > threshold
        grad_probs = tl.dot(grad_out, tl.trans(values), out_dtype=ACC)
        return tl.where(keep, probs,
                        0.0), probs * (tl.where(keep, grad_probs, 0.0) - delta[:, None])
    return score_grads(scores, values, grad_out, lse, delta, ACC)


@triton.jit
def grad_queries(q_ptr, k_ptr, v_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_q_ptr, heads,
                 queries, keys_count, dims, value_dims, scale, threshold, DOT: tl.constexpr,
                 ACC: tl.constexpr,
                 BIASED: tl.constexpr, MASKED: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale, threshold = tl.cast(scale, ACC), tl.cast(threshold, ACC)  # compiled: float64 scalars
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q, grad_out, lse, delta = query_block(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, offs_q,
                                          queries, offs_d, offs_dv, dims, value_dims, DOT)
    grad_q = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    for start in range(0, keys_count, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        keys, values = key_rows(k_ptr, v_ptr, bh, offs_k, keys_count, offs_d, offs_dv, dims,
                                value_dims, DOT)
        scores = biased(tl.dot(q, tl.trans(keys), out_dtype=ACC), bias_ptr, bh % heads, offs_q,
                        offs_k, queries, keys_count, scale, ACC, BIASED)
        grad_scores = tile_grads(scores, values, grad_out, lse, delta, threshold, ACC, MASKED)[1]
        grad_q += tl.dot(grad_scores.to(DOT), keys, out_dtype=ACC)
    store_rows(grad_q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims, grad_q * scale)


@triton.jit
def grad_keys(q_ptr, k_ptr, v_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_k_ptr,
              grad_v_ptr, heads,
              queries, keys_count, dims, value_dims, scale, threshold, DOT: tl.constexpr,
              ACC: tl.constexpr, BIASED: tl.constexpr, MASKED: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale, threshold = tl.cast(scale, ACC), tl.cast(threshold, ACC)
    offs_k, offs_d, offs_dv = block_offsets(block, BLOCK_N, BLOCK_D, BLOCK_DV)
    keys, values = key_rows(k_ptr, v_ptr, bh, offs_k, keys_count, offs_d, offs_dv, dims, value_dims,
                            DOT)
    grad_k = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    grad_v = tl.zeros((BLOCK_N, BLOCK_DV), ACC)
    for start in range(0, queries, BLOCK_M):
        offs_q = start + tl.arange(0, BLOCK_M)
        q, grad_out, lse, delta = query_block(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, offs_q,
                                              queries, offs_d, offs_dv, dims, value_dims, DOT)
        scores = biased(tl.dot(q, tl.trans(keys), out_dtype=ACC), bias_ptr, bh % heads, offs_q,
                        offs_k, queries, keys_count, scale, ACC, BIASED)
        probs, grad_scores = tile_grads(scores, values, grad_out, lse, delta, threshold, ACC,
                                        MASKED)
        grad_v += tl.dot(tl.trans(probs.to(DOT)), grad_out, out_dtype=ACC)
        grad_k += tl.dot(tl.trans(grad_scores.to(DOT)), q, out_dtype=ACC)
    store_rows(grad_k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims,
               grad_k * scale)
    store_rows(grad_v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims,
               grad_v)
