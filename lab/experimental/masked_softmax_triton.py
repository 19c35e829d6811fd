"""Triton kernels of the masked softmax attention (see :mod:`mmvisattn.ops.masked_softmax`): ``(P *
[P > t]) V``, ``P = softmax(s Q K^T)``, by query and key blocks after "FlashAttention-2"
(arXiv:2307.08691, Alg. 1 and 2), no ``N x M`` weights in memory.

The mask needs the row's final normaliser, so the forward runs over the keys twice: the log-sum-exp
first, then the kept weights times the values (not renormalised, as Castling-ViT). The backward is
FlashAttention's with the mask on the weights' gradient, ``dP = [P > t] (dO V^T)``, ``dS = P (dP -
delta)``, ``delta_i = dO_i . O_i`` (:func:`.flash.grad_queries`, :func:`.flash.grad_keys` with
``MASKED``); recomputed weights give the forward's mask up to a weight a few ulps from ``t``.

Mixed precision: products on the inputs' precision, logits, softmax and mask in float32; output in
``v``'s dtype, gradients in their inputs'; autocast off in the Function.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from lab.experimental.flash import (
    block_offsets,
    grad_keys,
    grad_queries,
    key_rows,
    launch_meta,
    rows,
    store_rows,
)
from mmvisattn.ops.utils.amp import autocast_off
from mmvisattn.ops.utils.flash import log_sum_exp

BLOCK_M = 64  # queries per block
# keys per block: a 64 x 32 tile of scores, its weights and their gradient stay in registers
BLOCK_N = 32


@triton.jit
def _scores(q, keys, offs_k, keys_count, scale, ACC: tl.constexpr):
    """The scaled scores of queries ``q`` against keys ``offs_k``, ``-inf`` past the keys."""
    scores = tl.dot(q, tl.trans(keys), out_dtype=ACC) * scale
    return tl.where(offs_k[None, :] < keys_count, scores, float('-inf'))


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, queries, keys_count, dims, value_dims, scale,
             threshold, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale, threshold = tl.cast(scale, ACC), tl.cast(threshold, ACC)  # compiled: float64 scalars
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q = rows(q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims).to(DOT)
    row_max = tl.full((BLOCK_M,), float('-inf'), ACC)
    row_sum = tl.zeros((BLOCK_M,), ACC)
    for start in range(0, keys_count, BLOCK_N):  # the rows' normalisers
        offs_k = start + tl.arange(0, BLOCK_N)
        keys = rows(k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims).to(DOT)
        scores = _scores(q, keys, offs_k, keys_count, scale, ACC)
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        row_sum = row_sum * tl.exp(row_max
                                   - new_max) + tl.sum(tl.exp(scores - new_max[:, None]), axis=1)
        row_max = new_max
    lse = log_sum_exp(row_max, row_sum)[0]
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, keys_count, BLOCK_N):  # the kept weights times the values
        offs_k = start + tl.arange(0, BLOCK_N)
        keys, values = key_rows(k_ptr, v_ptr, bh, offs_k, keys_count, offs_d, offs_dv, dims,
                                value_dims, DOT)
        scores = _scores(q, keys, offs_k, keys_count, scale, ACC)
        probs = tl.exp(scores - lse[:, None])
        acc += tl.dot(tl.where(probs > threshold, probs, 0.0).to(DOT), values, out_dtype=ACC)
    store_rows(out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv, value_dims, acc)
    tl.store(lse_ptr + bh * queries + offs_q, lse, mask=offs_q < queries)


# launch settings from ptxas's reports (compile_kernels.py): grad_keys 32 queries a tile with 4
# warps (64 spilled on sm_90); heads over 64 wide: _forward at 2 stages, grad_queries over 32
# queries with 4 warps
LAUNCH = {grad_keys: dict(BLOCK_M=32, num_warps=4)}
WIDE_LAUNCH = {_forward: dict(num_stages=2),
               grad_queries: dict(BLOCK_M=32, num_warps=4, num_stages=2)}


def _meta(kernel, dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    """Blocks, dtypes, warps and stages of ``kernel``'s launch."""
    meta = launch_meta(kernel, dims, value_dims, dtype, BLOCK_M, BLOCK_N, LAUNCH, WIDE_LAUNCH)
    if kernel is not _forward:
        meta.update(BIASED=False, MASKED=True)
    return meta


class MaskedSoftmaxTriton(torch.autograd.Function):
    """``(P * [P > t]) V`` of ``(..., N, D)`` queries, ``(..., M, D)`` keys and ``(..., M, E)``
    values; saves the inputs, the output and one log-sum-exp per query."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, scale: float, threshold: float) -> Tensor:
        *lead, queries, dims = q.shape
        keys, value_dims = k.shape[-2], v.shape[-1]
        slices = q.numel() // (queries * dims)  # images x heads
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = v.new_empty(*lead, queries, value_dims)
        lse = q.new_empty(*lead, queries,
                          dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        meta = _meta(_forward, dims, value_dims, q.dtype)
        _forward[(slices, triton.cdiv(queries, meta['BLOCK_M']))](
            q, k, v, out, lse, queries, keys, dims, value_dims, scale, threshold, **meta)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.threshold = scale, threshold
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, out, lse = ctx.saved_tensors
        queries, dims = q.shape[-2:]
        keys, value_dims = k.shape[-2], v.shape[-1]
        slices = q.numel() // (queries * dims)
        grad_out = grad_out.contiguous()
        # sum_j p_ij dp_ij over the kept weights
        delta = (grad_out.to(lse.dtype) * out.to(lse.dtype)).sum(dim=-1)
        # no bias: q stands in for its pointer, never read
        reads = (q, k, v, q, grad_out, lse, delta)
        # 1: the bias's heads, unused
        sizes = (1, queries, keys, dims, value_dims, ctx.scale, ctx.threshold)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        meta = _meta(grad_queries, dims, value_dims, q.dtype)
        grad_queries[(slices, triton.cdiv(queries, meta['BLOCK_M']))](
            *reads, grad_q, *sizes, **meta
        )
        meta = _meta(grad_keys, dims, value_dims, q.dtype)
        grad_keys[(slices, triton.cdiv(keys, meta['BLOCK_N']))](
            *reads, grad_k, grad_v, *sizes, **meta
        )
        return grad_q, grad_k, grad_v, None, None


def masked_softmax_attention_triton(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                                    scale: Optional[float] = None) -> Tensor:
    """:class:`MaskedSoftmaxTriton` with the logits' ``scale`` (``D ** -0.5`` by default)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return MaskedSoftmaxTriton.apply(q, k, v, scale, threshold)
