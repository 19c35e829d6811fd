"""Ripple attention in one Triton program per query block, for small maps (arXiv:2110.02453, Eq.
4-6).

With :func:`mmvisattn.ops.ripple.ring_weights` the local and global parts are one ``N x N``
weighting, ``W_ij = w_m(i) + beta_r(i)`` in group ``r < R_max`` and ``w_m(i)`` beyond::

    out_i = sum_j W_ij (q_i . k_j) v_j / (sum_j W_ij (q_i . k_j) + eps)

``W_ij`` is entry ``min(r, R_max)`` of query ``i``'s row of :func:`weight_table`. The forward is
flash attention's loop without a softmax (non-negative weights), one launch where the split takes a
dozen. The backward's :func:`_grad_queries` (``dq`` and the table's gradient, summed per group in
registers) and :func:`_grad_keys` (``dk``, ``dv``) recompute the tiles, with ``dnum_i = dO_i /
den_i``, ``dden_i = -dnum_i . out_i``, ``dA_ij = dnum_i . v_j + dden_i``. The GPU proof times it
beside ``auto``'s choice.

Mixed precision: autocast off; scores on the inputs' precision with float32 accumulation; the
weighted scores meet values, keys and queries (``VALUES``) in bfloat16 for bfloat16 and float32 for
float16 inputs (whose range the scores may pass); table, sums and normaliser float32.
"""
from typing import Sequence

import torch
import triton
import triton.language as tl
from torch import Tensor

from lab.experimental.flash import (
    block_offsets,
    launch_meta,
    normalised_output_grads,
    rows,
    store_rows,
)
from mmvisattn.ops.ripple import ring_weights
from mmvisattn.ops.utils.amp import autocast_off
from mmvisattn.ops.utils.tracing import apply_function

BLOCK_M = 64  # queries per program (per tile in _grad_keys)
BLOCK_N = 32  # keys per tile (per program in _grad_keys)
# software-pipelining stages by warps, as the Castling dense kernel (ptxas, sm_80)
STAGES = {4: 2, 8: 1}


@triton.jit
def _weighted_scores(q, keys, table, offs_q, offs_k, tokens, width, groups, ACC: tl.constexpr):
    """A tile's scores ``q k^T``, its pairs' groups ``min(r, groups - 1)`` and their ``table``
    weights (0 off the map)."""
    group = tl.minimum(tl.maximum(tl.abs(offs_q[:, None] // width - offs_k[None, :] // width),
                                  tl.abs(offs_q[:, None] % width - offs_k[None, :] % width)),
                       groups - 1)
    inside = (offs_q[:, None] < tokens) & (offs_k[None, :] < tokens)
    weights = tl.load(table + offs_q[:, None] * groups + group, mask=inside, other=0.0).to(ACC)
    return tl.dot(q, tl.trans(keys), out_dtype=ACC), group, weights


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, table_ptr, out_ptr, den_ptr, tokens, width, dims, value_dims,
             groups, eps,
             DOT: tl.constexpr, ACC: tl.constexpr, VALUES: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q = rows(q_ptr + bh * tokens * dims, offs_q, tokens, offs_d, dims).to(DOT)
    table = table_ptr + bh * tokens * groups
    den = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, tokens, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        keys = rows(k_ptr + bh * tokens * dims, offs_k, tokens, offs_d, dims).to(DOT)
        values = rows(v_ptr + bh * tokens * value_dims, offs_k, tokens, offs_dv,
                      value_dims).to(VALUES)
        scores, _, weights = _weighted_scores(q, keys, table, offs_q, offs_k, tokens, width, groups,
                                              ACC)
        weighted = scores * weights
        acc += tl.dot(weighted.to(VALUES), values, out_dtype=ACC)
        den += tl.sum(weighted, axis=1)
    den += tl.cast(eps, ACC)  # compiled: a float64 scalar
    store_rows(out_ptr + bh * tokens * value_dims, offs_q, tokens, offs_dv, value_dims,
               acc / den[:, None])
    tl.store(den_ptr + bh * tokens + offs_q, den, mask=offs_q < tokens)


@triton.jit
def _output_grads(grad_out_ptr, out_ptr, den_ptr, bh, offs_q, tokens, offs_dv, value_dims,
                  ACC: tl.constexpr):
    """What the loss sends a query block's sums: ``dnum = dO / den``, ``dden = -dnum . out``."""
    grad_out, delta, den = normalised_output_grads(grad_out_ptr, out_ptr, den_ptr, bh, offs_q,
                                                   tokens, offs_dv, value_dims, ACC)
    return grad_out / den[:, None], -delta / den


@triton.jit
def _grad_queries(q_ptr, k_ptr, v_ptr, table_ptr, out_ptr, den_ptr, grad_out_ptr, grad_q_ptr,
                  grad_table_ptr,
                  tokens, width, dims, value_dims, groups, DOT: tl.constexpr, ACC: tl.constexpr,
                  VALUES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_G: tl.constexpr):
    """``dq`` and the table's gradient of a block of queries, over the key blocks: with
    ``dA = dnum v^T + dden``, ``dq = (dA * W) k`` and ``dW = dA * (q k^T)`` summed by group."""
    bh, block = tl.program_id(0), tl.program_id(1)
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q = rows(q_ptr + bh * tokens * dims, offs_q, tokens, offs_d, dims).to(DOT)
    table = table_ptr + bh * tokens * groups
    grad_num, grad_den = _output_grads(grad_out_ptr, out_ptr, den_ptr, bh, offs_q, tokens, offs_dv,
                                       value_dims, ACC)
    grad_num = grad_num.to(VALUES)
    cols = tl.arange(0, BLOCK_G)
    grad_q = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    grad_table = tl.zeros((BLOCK_M, BLOCK_G), ACC)
    for start in range(0, tokens, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        keys = rows(k_ptr + bh * tokens * dims, offs_k, tokens, offs_d, dims)
        values = rows(v_ptr + bh * tokens * value_dims, offs_k, tokens, offs_dv,
                      value_dims).to(VALUES)
        scores, group, weights = _weighted_scores(q, keys.to(DOT), table, offs_q, offs_k, tokens,
                                                  width, groups, ACC)
        grad_weighted = tl.dot(grad_num, tl.trans(values), out_dtype=ACC) + grad_den[:, None]
        grad_weights = grad_weighted * scores  # zero past the map: its keys load as zero
        for g in range(0, groups):
            in_group = tl.sum(tl.where(group == g, grad_weights, 0.0), axis=1)
            grad_table += tl.where(cols[None, :] == g, in_group[:, None], 0.0)
        grad_q += tl.dot((grad_weighted * weights).to(VALUES), keys.to(VALUES), out_dtype=ACC)
    store_rows(grad_q_ptr + bh * tokens * dims, offs_q, tokens, offs_d, dims, grad_q)
    store_rows(grad_table_ptr + bh * tokens * groups, offs_q, tokens, cols, groups, grad_table)


@triton.jit
def _grad_keys(q_ptr, k_ptr, v_ptr, table_ptr, out_ptr, den_ptr, grad_out_ptr, grad_k_ptr,
               grad_v_ptr, tokens, width, dims, value_dims, groups, DOT: tl.constexpr,
               ACC: tl.constexpr, VALUES: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dk = (dA * W)^T q`` and ``dv = A^T dnum`` of a block of ``BLOCK_N`` keys, over blocks of
    ``BLOCK_M`` queries."""
    bh, block = tl.program_id(0), tl.program_id(1)
    offs_k, offs_d, offs_dv = block_offsets(block, BLOCK_N, BLOCK_D, BLOCK_DV)
    keys = rows(k_ptr + bh * tokens * dims, offs_k, tokens, offs_d, dims).to(DOT)
    values = rows(v_ptr + bh * tokens * value_dims, offs_k, tokens, offs_dv, value_dims).to(VALUES)
    table = table_ptr + bh * tokens * groups
    grad_k = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    grad_v = tl.zeros((BLOCK_N, BLOCK_DV), ACC)
    for start in range(0, tokens, BLOCK_M):
        offs_q = start + tl.arange(0, BLOCK_M)
        q = rows(q_ptr + bh * tokens * dims, offs_q, tokens, offs_d, dims)
        grad_num, grad_den = _output_grads(grad_out_ptr, out_ptr, den_ptr, bh, offs_q, tokens,
                                           offs_dv, value_dims, ACC)
        grad_num = grad_num.to(VALUES)
        scores, _, weights = _weighted_scores(q.to(DOT), keys, table, offs_q, offs_k, tokens, width,
                                              groups, ACC)
        grad_v += tl.dot(tl.trans((scores * weights).to(VALUES)), grad_num, out_dtype=ACC)
        grad_weighted = tl.dot(grad_num, tl.trans(values), out_dtype=ACC) + grad_den[:, None]
        grad_k += tl.dot(tl.trans((grad_weighted * weights).to(VALUES)), q.to(VALUES),
                         out_dtype=ACC)
    store_rows(grad_k_ptr + bh * tokens * dims, offs_k, tokens, offs_d, dims, grad_k)
    store_rows(grad_v_ptr + bh * tokens * value_dims, offs_k, tokens, offs_dv, value_dims, grad_v)


# launch settings from ptxas's reports (compile_kernels.py): _grad_keys over 64 keys spilled on
# sm_90 in float32; _grad_queries over 64 queries took 122880 B at 128-wide heads
LAUNCH = {_grad_keys: dict(BLOCK_M=32, BLOCK_N=32)}
WIDE_LAUNCH = {_grad_keys: dict(BLOCK_M=16), _grad_queries: dict(BLOCK_M=32)}


def _meta(kernel, dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    """Blocks, dtypes (``VALUES``: see the module), warps and stages of ``kernel``'s launch."""
    meta = launch_meta(kernel, dims, value_dims, dtype, BLOCK_M, BLOCK_N, LAUNCH, WIDE_LAUNCH,
                       STAGES)
    meta['VALUES'] = tl.float32 if dtype == torch.float16 else meta['DOT']
    return meta


def _launch(kernel, tensors: Sequence[Tensor], hw_shape: Sequence[int], groups: int, *scalars,
            **extra) -> None:
    """``kernel`` over the ``(..., N, .)`` ``tensors`` (queries, keys and values first), one program
    per slice and block of tokens (keys for :func:`_grad_keys`, else queries)."""
    q, v = tensors[0], tensors[2]
    tokens, dims = q.shape[-2:]
    meta = dict(_meta(kernel, dims, v.shape[-1], q.dtype), **extra)
    block = meta['BLOCK_N'] if kernel is _grad_keys else meta['BLOCK_M']
    kernel[(q.numel() // (tokens * dims), triton.cdiv(tokens, block))](
        *tensors, tokens, hw_shape[1], dims, v.shape[-1], groups, *scalars, **meta)


class FusedRipple(torch.autograd.Function):
    """``(A V) / (A 1 + eps)``, ``A_ij = (q_i . k_j) W_ij``, with the float32 :func:`weight_table`;
    saves the inputs, output and normaliser."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, table: Tensor, hw_shape: Sequence[int],
                eps: float) -> Tensor:
        q, k, v, table = q.contiguous(), k.contiguous(), v.contiguous(), table.contiguous()
        out, den = torch.empty_like(v), table.new_empty(table.shape[:-1])
        _launch(_forward, (q, k, v, table, out, den), hw_shape, table.shape[-1], eps)
        ctx.save_for_backward(q, k, v, table, out, den)
        ctx.hw_shape = tuple(hw_shape)
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        q, k, v, table, out, den = saved = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_q, grad_k, grad_v, grad_table = (torch.empty_like(t) for t in (q, k, v, table))
        groups = table.shape[-1]
        _launch(_grad_queries, (*saved, grad_out, grad_q, grad_table), ctx.hw_shape, groups,
                BLOCK_G=triton.next_power_of_2(groups))
        _launch(_grad_keys, (*saved, grad_out, grad_k, grad_v), ctx.hw_shape, groups)
        return grad_q, grad_k, grad_v, grad_table, None, None


def weight_table(beta: Tensor, merged_weight: Tensor) -> Tensor:
    """``(..., N, R_max + 1)`` weights of groups ``0 .. R_max - 1`` and of every farther token, from
    ``ring_weights``' ``beta`` and ``w_m``."""
    merged = merged_weight.unsqueeze(-1)
    return torch.cat([beta + merged, merged], dim=-1)


def ripple_attention_fused(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                           tau: float, eps: float) -> Tensor:
    """Ripple attention with its ``N x N`` weighting in one Triton program per block of queries."""
    beta, merged_weight = ring_weights(logits, hw_shape, tau, triton=True)
    return apply_function(FusedRipple, q, k, v, weight_table(beta, merged_weight), tuple(hw_shape),
                          eps)
