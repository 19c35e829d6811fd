"""Triton kernels of the masked softmax attention (``impl='triton'``; see :mod:`mmvisattn.ops.masked_softmax`):
``(P * [P > t]) V`` with ``P = softmax(s Q K^T)`` by blocks of queries and keys, after "FlashAttention-2"
(arXiv:2307.08691, Alg. 1 and 2), so no ``N x M`` weights exist in memory in either pass.

The mask compares each weight with ``t``, so it needs the row's final normaliser before any weight is
kept: the forward runs over the keys twice in one program, first for each row's log-sum-exp (the
online maximum and sum, no values read), then for the kept weights ``exp(s q.k - lse)`` times the
values; it stores the output and the log-sum-exp. The weights are not renormalised after masking
(Castling-ViT keeps them as they are), so the output is the accumulated sum itself.

The backward is FlashAttention's with the mask on the weights' gradient: ``dP = [P > t] (dO V^T)``
and ``dS = P (dP - delta)``, where ``delta_i = sum_j P_ij dP_ij = dO_i . O_i`` as in the unmasked
case (the kept weights are exactly what formed ``O``). Two kernels, each owning what it writes (no
atomics): ``_grad_queries`` per block of queries, ``_grad_keys`` per block of keys (key and value
gradients). The mask is piecewise constant, so it has no gradient of its own.

Used for CUDA tensors; the tests run the kernels on CPU under ``TRITON_INTERPRET=1``, float64 there
too (``gradcheck``).

Mixed precision (:mod:`mmvisattn.ops.utils.flash`): products take the inputs' precision as operands
(half-precision tensor cores, TF32 for float32) and accumulate in float32, where the logits, the
softmax and the mask are; the output comes back in ``v``'s dtype, each gradient in its input's.
Autocast is off in the Function.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off
from ..utils.flash import log_sum_exp, precision, query_block, rows
from ..utils.triton_launch import check_kernel_inputs, head_block, launch, num_warps

BLOCK_M = 64  # queries per block
BLOCK_N = 32  # keys per block: a 64 x 32 tile of scores, its weights and their gradient stay in registers


@triton.jit
def _scores(q, k_ptr, bh, offs_k, keys_count, offs_d, dims, scale, DOT: tl.constexpr, ACC: tl.constexpr):
    """The keys ``offs_k`` of image x head ``bh`` and the scaled scores of the queries ``q`` against them,
    ``-inf`` past the keys."""
    keys = rows(k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims).to(DOT)
    scores = tl.dot(q, tl.trans(keys), out_dtype=ACC) * scale
    return tl.where(offs_k[None, :] < keys_count, scores, float('-inf')), keys


@triton.jit
def _kept(scores, lse, threshold):
    """The weights of a tile from the rows' log-sum-exp, whether each is kept (above ``threshold``), and
    the kept weights (the rest zero)."""
    probs = tl.exp(scores - lse[:, None])
    keep = probs > threshold
    return probs, keep, tl.where(keep, probs, 0.0)


@triton.jit
def _grads(scores, values, grad_out, lse, delta, threshold, ACC: tl.constexpr):
    """The kept weights of a tile and the gradient of its scores, ``P ([P > t] dO V^T - delta)``."""
    probs, keep, kept = _kept(scores, lse, threshold)
    grad_probs = tl.dot(grad_out, tl.trans(values), out_dtype=ACC)
    return kept, probs * (tl.where(keep, grad_probs, 0.0) - delta[:, None])


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, queries, keys_count, dims, value_dims, scale, threshold,
             DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale, threshold = tl.cast(scale, ACC), tl.cast(threshold, ACC)  # compiled: float64 scalars
    offs_q = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = rows(q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims).to(DOT)
    row_max = tl.full((BLOCK_M,), float('-inf'), ACC)
    row_sum = tl.zeros((BLOCK_M,), ACC)
    for start in range(0, keys_count, BLOCK_N):  # the rows' normalisers
        scores = _scores(q, k_ptr, bh, start + tl.arange(0, BLOCK_N), keys_count, offs_d, dims, scale, DOT, ACC)[0]
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(scores - new_max[:, None]), axis=1)
        row_max = new_max
    lse = log_sum_exp(row_max, row_sum)[0]
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, keys_count, BLOCK_N):  # the kept weights times the values
        offs_k = start + tl.arange(0, BLOCK_N)
        scores = _scores(q, k_ptr, bh, offs_k, keys_count, offs_d, dims, scale, DOT, ACC)[0]
        values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims).to(DOT)
        acc += tl.dot(_kept(scores, lse, threshold)[2].to(DOT), values, out_dtype=ACC)
    in_q = offs_q < queries
    tl.store(out_ptr + (bh * queries + offs_q[:, None]) * value_dims + offs_dv[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=in_q[:, None] & (offs_dv[None, :] < value_dims))
    tl.store(lse_ptr + bh * queries + offs_q, lse, mask=in_q)


@triton.jit
def _grad_queries(q_ptr, k_ptr, v_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_q_ptr, queries, keys_count, dims,
                  value_dims, scale, threshold, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale, threshold = tl.cast(scale, ACC), tl.cast(threshold, ACC)
    offs_q = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q, grad_out, lse, delta = query_block(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, offs_q, queries, offs_d,
                                           offs_dv, dims, value_dims, DOT)
    grad_q = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    for start in range(0, keys_count, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        scores, keys = _scores(q, k_ptr, bh, offs_k, keys_count, offs_d, dims, scale, DOT, ACC)
        values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims).to(DOT)
        grad_scores = _grads(scores, values, grad_out, lse, delta, threshold, ACC)[1]
        grad_q += tl.dot(grad_scores.to(DOT), keys, out_dtype=ACC)
    tl.store(grad_q_ptr + (bh * queries + offs_q[:, None]) * dims + offs_d[None, :],
             (grad_q * scale).to(grad_q_ptr.dtype.element_ty),
             mask=(offs_q[:, None] < queries) & (offs_d[None, :] < dims))


@triton.jit
def _grad_keys(q_ptr, k_ptr, v_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_k_ptr, grad_v_ptr, queries, keys_count,
               dims, value_dims, scale, threshold, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale, threshold = tl.cast(scale, ACC), tl.cast(threshold, ACC)
    offs_k = block * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    keys = rows(k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims).to(DOT)
    values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims).to(DOT)
    grad_k = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    grad_v = tl.zeros((BLOCK_N, BLOCK_DV), ACC)
    for start in range(0, queries, BLOCK_M):
        offs_q = start + tl.arange(0, BLOCK_M)
        q, grad_out, lse, delta = query_block(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, offs_q, queries, offs_d,
                                               offs_dv, dims, value_dims, DOT)
        scores = tl.dot(q, tl.trans(keys), out_dtype=ACC) * scale
        scores = tl.where((offs_q[:, None] < queries) & (offs_k[None, :] < keys_count), scores, float('-inf'))
        kept, grad_scores = _grads(scores, values, grad_out, lse, delta, threshold, ACC)
        grad_v += tl.dot(tl.trans(kept.to(DOT)), grad_out, out_dtype=ACC)
        grad_k += tl.dot(tl.trans(grad_scores.to(DOT)), q, out_dtype=ACC)
    in_k = offs_k[:, None] < keys_count
    tl.store(grad_k_ptr + (bh * keys_count + offs_k[:, None]) * dims + offs_d[None, :],
             (grad_k * scale).to(grad_k_ptr.dtype.element_ty), mask=in_k & (offs_d[None, :] < dims))
    tl.store(grad_v_ptr + (bh * keys_count + offs_k[:, None]) * value_dims + offs_dv[None, :],
             grad_v.to(grad_v_ptr.dtype.element_ty), mask=in_k & (offs_dv[None, :] < value_dims))


# Launches for heads over 64 wide, from ptxas's reports (compile_kernels.py; sm_86 and sm_89 allow 101376 B of
# shared memory a block): with 8 warps, _grad_queries spilled on sm_80 in half precision at 2 or 3 software-
# pipelining stages and on sm_90 in float32 at 1; in float32, _grad_keys over blocks of 64 queries took 164864 B
# (98816 over blocks of 32) and _forward at Triton's 3 stages 131072 B (98304 at 2).
WIDE_LAUNCH = {_forward: dict(num_stages=2), _grad_queries: dict(num_warps=4, num_stages=1),
               _grad_keys: dict(BLOCK_M=32, num_warps=4)}


def _meta(kernel, dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    """Blocks, dtypes, warps and stages of ``kernel``'s launch."""
    block_d, block_dv = head_block(dims), head_block(value_dims)
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=block_d, BLOCK_DV=block_dv,
                num_warps=num_warps(max(block_d, block_dv)), **precision(dtype))
    return dict(meta, **WIDE_LAUNCH[kernel]) if max(block_d, block_dv) > 64 else meta


class MaskedSoftmaxTriton(torch.autograd.Function):
    """``(P * [P > t]) V`` of ``(..., N, D)`` queries, ``(..., M, D)`` keys and ``(..., M, E)`` values; saves
    the inputs, the output and one log-sum-exp per query."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, scale: float, threshold: float) -> Tensor:
        *lead, queries, dims = q.shape
        keys, value_dims = k.shape[-2], v.shape[-1]
        heads = q.numel() // (queries * dims)  # images x heads
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = v.new_empty(*lead, queries, value_dims)
        lse = q.new_empty(*lead, queries, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        launch(_forward, (heads, triton.cdiv(queries, BLOCK_M)), q, k, v, out, lse, queries, keys, dims, value_dims,
               scale, threshold, **_meta(_forward, dims, value_dims, q.dtype))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.threshold = scale, threshold
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, out, lse = ctx.saved_tensors
        queries, dims = q.shape[-2:]
        keys, value_dims = k.shape[-2], v.shape[-1]
        heads = q.numel() // (queries * dims)
        grad_out = grad_out.contiguous()
        delta = (grad_out.to(lse.dtype) * out.to(lse.dtype)).sum(dim=-1)  # sum_j p_ij dp_ij over the kept weights
        reads = (q, k, v, grad_out, lse, delta)
        sizes = (queries, keys, dims, value_dims, ctx.scale, ctx.threshold)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        launch(_grad_queries, (heads, triton.cdiv(queries, BLOCK_M)), *reads, grad_q, *sizes,
               **_meta(_grad_queries, dims, value_dims, q.dtype))
        launch(_grad_keys, (heads, triton.cdiv(keys, BLOCK_N)), *reads, grad_k, grad_v, *sizes,
               **_meta(_grad_keys, dims, value_dims, q.dtype))
        return grad_q, grad_k, grad_v, None, None


def masked_softmax_attention_triton(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                                    scale: Optional[float] = None) -> Tensor:
    """:class:`MaskedSoftmaxTriton` with the logits' ``scale`` (``D ** -0.5`` by default)."""
    check_kernel_inputs('masked_softmax_attention', (q, k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return MaskedSoftmaxTriton.apply(q, k, v, scale, threshold)
