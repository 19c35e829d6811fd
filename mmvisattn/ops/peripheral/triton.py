"""Triton kernels of peripheral attention (arXiv:2206.06801, Eq. 5): flash attention with the
batch-shared ``log Phi_p`` bias, forward and backward.

``softmax(tau q k^T + log Phi_p) v`` (:mod:`.pytorch`) by blocks of queries and keys ("FlashAttention-2",
arXiv:2307.08691, Alg. 1 and 2, :mod:`mmvisattn.ops.utils.flash`): the forward folds each block of
scores, its ``log Phi_p`` tile added, into an online softmax and stores the output and each row's
log-sum-exp; neither the scores nor the mixed attention is stored. The backward recomputes each tile's
probabilities from them in three kernels, each of which owns what it writes (nothing is added
atomically):

* ``_grad_queries``, one program per block of queries of an image, over the key blocks;
* ``_grad_keys``, one program per block of keys of an image, over the query blocks;
* ``_grad_bias``, one program per tile of the ``(heads, N, M)`` bias: its gradient summed over the
  images inside the program and written once, so no ``N x M`` gradient is formed per image (autograd
  through SDPA with a bias that takes a gradient writes one per image, then sums them).

Used for CUDA tensors; the tests run the kernels on CPU under ``TRITON_INTERPRET=1``, float64 there
too (``gradcheck``).

Mixed precision (:mod:`mmvisattn.ops.utils.amp`): the kernels read float32, float16 or bfloat16 queries,
keys and values and a bias of any of them; products take their operands in the inputs' precision
(half-precision tensor cores, or TF32 for float32) and accumulate in float32, where the bias is
added and the softmax runs. The output comes back in ``v``'s dtype, gradients in their inputs'.
Autocast is off in the Function.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off
from ..utils.flash import log_sum_exp, online_softmax, precision, query_block, rows, score_grads
from ..utils.triton_launch import check_kernel_inputs, head_block, launch, num_warps

BLOCK = 32  # queries and keys per block (PerViT's maps have thousands of tokens; a 32 x 32 tile keeps registers)
HEAD_SLICE = 32  # head columns per product in _grad_bias, which reads four blocks of every image a step


@triton.jit
def _biased(products, bias_ptr, head, offs_q, offs_k, queries, keys_count, scale, ACC: tl.constexpr):
    """``tau q k^T + log Phi_p`` of a tile from its products ``q k^T``, ``-inf`` outside the keys (and in
    zero-query rows past the queries)."""
    inside = (offs_q[:, None] < queries) & (offs_k[None, :] < keys_count)
    bias = tl.load(bias_ptr + head * queries * keys_count + offs_q[:, None] * keys_count + offs_k[None, :],
                   mask=inside, other=0.0).to(ACC)
    return tl.where(inside, products * scale + bias, float('-inf'))


@triton.jit
def _scores(q, keys, bias_ptr, head, offs_q, offs_k, queries, keys_count, scale, ACC: tl.constexpr):
    return _biased(tl.dot(q, tl.trans(keys), out_dtype=ACC), bias_ptr, head, offs_q, offs_k, queries, keys_count,
                   scale, ACC)


@triton.jit
def _products(a_base, b_base, offs_a, count_a, offs_b, count_b, width, DOT: tl.constexpr, ACC: tl.constexpr,
              BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """``A B^T`` of rows ``offs_a`` of ``(count_a, width)`` A and ``offs_b`` of B, over the width in slices
    of ``BLOCK_C`` columns, so that no whole row of a wide head is held in registers."""
    products = tl.zeros((BLOCK_A, BLOCK_B), ACC)
    for start in range(0, BLOCK_W, BLOCK_C):
        offs_c = start + tl.arange(0, BLOCK_C)
        a = rows(a_base, offs_a, count_a, offs_c, width).to(DOT)
        b = rows(b_base, offs_b, count_b, offs_c, width).to(DOT)
        products += tl.dot(a, tl.trans(b), out_dtype=ACC)
    return products


@triton.jit
def _key_block(q, k_ptr, v_ptr, bias_ptr, bh, heads, offs_q, offs_k, queries, keys_count, offs_d, offs_dv, dims,
               value_dims, scale, DOT: tl.constexpr, ACC: tl.constexpr):
    """The scores of a block of queries against the keys ``offs_k`` of image x head ``bh``, and those keys
    and values."""
    keys = rows(k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims).to(DOT)
    values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims).to(DOT)
    return _scores(q, keys, bias_ptr, bh % heads, offs_q, offs_k, queries, keys_count, scale, ACC), keys, values


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, bias_ptr, out_ptr, lse_ptr, heads, queries, keys_count, dims, value_dims, scale,
             DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale = tl.cast(scale, ACC)  # compiled: a float64 scalar
    offs_q = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = rows(q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims).to(DOT)
    row_max = tl.full((BLOCK_M,), float('-inf'), ACC)
    row_sum = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, keys_count, BLOCK_N):
        scores, _, values = _key_block(q, k_ptr, v_ptr, bias_ptr, bh, heads, offs_q, start + tl.arange(0, BLOCK_N),
                                       queries, keys_count, offs_d, offs_dv, dims, value_dims, scale, DOT, ACC)
        row_max, row_sum, acc = online_softmax(scores, values, row_max, row_sum, acc, DOT, ACC)
    lse, safe_sum = log_sum_exp(row_max, row_sum)
    in_q = offs_q < queries
    tl.store(out_ptr + (bh * queries + offs_q[:, None]) * value_dims + offs_dv[None, :],
             (acc / safe_sum[:, None]).to(out_ptr.dtype.element_ty),
             mask=in_q[:, None] & (offs_dv[None, :] < value_dims))
    tl.store(lse_ptr + bh * queries + offs_q, lse, mask=in_q)


@triton.jit
def _grad_queries(q_ptr, k_ptr, v_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_q_ptr, heads, queries,
                  keys_count, dims, value_dims, scale, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale = tl.cast(scale, ACC)
    offs_q = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q, grad_out, lse, delta = query_block(q_ptr, grad_out_ptr, lse_ptr, delta_ptr, bh, offs_q, queries, offs_d,
                                           offs_dv, dims, value_dims, DOT)
    grad_q = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    for start in range(0, keys_count, BLOCK_N):
        scores, keys, values = _key_block(q, k_ptr, v_ptr, bias_ptr, bh, heads, offs_q, start + tl.arange(0, BLOCK_N),
                                          queries, keys_count, offs_d, offs_dv, dims, value_dims, scale, DOT, ACC)
        grad_scores = score_grads(scores, values, grad_out, lse, delta, ACC)[1]
        grad_q += tl.dot(grad_scores.to(DOT), keys, out_dtype=ACC)
    tl.store(grad_q_ptr + (bh * queries + offs_q[:, None]) * dims + offs_d[None, :],
             (grad_q * scale).to(grad_q_ptr.dtype.element_ty),
             mask=(offs_q[:, None] < queries) & (offs_d[None, :] < dims))


@triton.jit
def _grad_keys(q_ptr, k_ptr, v_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_k_ptr, grad_v_ptr, heads,
               queries, keys_count, dims, value_dims, scale, DOT: tl.constexpr, ACC: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale = tl.cast(scale, ACC)
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
        scores = _scores(q, keys, bias_ptr, bh % heads, offs_q, offs_k, queries, keys_count, scale, ACC)
        probs, grad_scores = score_grads(scores, values, grad_out, lse, delta, ACC)
        grad_v += tl.dot(tl.trans(probs.to(DOT)), grad_out, out_dtype=ACC)
        grad_k += tl.dot(tl.trans(grad_scores.to(DOT)), q, out_dtype=ACC)
    in_k = offs_k[:, None] < keys_count
    tl.store(grad_k_ptr + (bh * keys_count + offs_k[:, None]) * dims + offs_d[None, :],
             (grad_k * scale).to(grad_k_ptr.dtype.element_ty), mask=in_k & (offs_d[None, :] < dims))
    tl.store(grad_v_ptr + (bh * keys_count + offs_k[:, None]) * value_dims + offs_dv[None, :],
             grad_v.to(grad_v_ptr.dtype.element_ty), mask=in_k & (offs_dv[None, :] < value_dims))


@triton.jit
def _grad_bias(q_ptr, k_ptr, v_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_bias_ptr, batch, heads,
               queries, keys_count, dims, value_dims, scale, DOT: tl.constexpr, ACC: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
               BLOCK_C: tl.constexpr):
    head, query_block, key_block = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    scale = tl.cast(scale, ACC)
    offs_q = query_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = key_block * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    for image in range(0, batch):
        bh = image * heads + head
        products = _products(q_ptr + bh * queries * dims, k_ptr + bh * keys_count * dims, offs_q, queries, offs_k,
                             keys_count, dims, DOT, ACC, BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_C)
        scores = _biased(products, bias_ptr, head, offs_q, offs_k, queries, keys_count, scale, ACC)
        grad_probs = _products(grad_out_ptr + bh * queries * value_dims, v_ptr + bh * keys_count * value_dims, offs_q,
                               queries, offs_k, keys_count, value_dims, DOT, ACC, BLOCK_M, BLOCK_N, BLOCK_DV, BLOCK_C)
        lse = tl.load(lse_ptr + bh * queries + offs_q, mask=offs_q < queries, other=0.0)
        delta = tl.load(delta_ptr + bh * queries + offs_q, mask=offs_q < queries, other=0.0)
        total += tl.exp(scores - lse[:, None]) * (grad_probs - delta[:, None])
    tl.store(grad_bias_ptr + head * queries * keys_count + offs_q[:, None] * keys_count + offs_k[None, :],
             total.to(grad_bias_ptr.dtype.element_ty),
             mask=(offs_q[:, None] < queries) & (offs_k[None, :] < keys_count))


# Warps and software-pipelining stages of the backward kernels: settings with which none spilled
# registers on sm_80 or sm_90, at heads 34 to 128 wide (70: rows not 16-byte aligned), float32 and half
# inputs, token counts divisible by 16 and not (compile_kernels.py). 8 warps with 2 stages spilled in
# _grad_queries and _grad_bias, 4 warps with 2 stages in _grad_keys and _grad_bias.
BACKWARD_LAUNCH = {_grad_queries: dict(num_warps=4, num_stages=2), _grad_keys: dict(num_warps=8, num_stages=1),
                   _grad_bias: dict(num_warps=4, num_stages=1)}


def _meta(dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    """Blocks, dtypes and the forward's warps."""
    block_d, block_dv = head_block(dims), head_block(value_dims)
    return dict(BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_D=block_d, BLOCK_DV=block_dv,
                num_warps=num_warps(max(block_d, block_dv)), **precision(dtype))


def _backward(kernel, grid: Tuple[int, ...], *args, meta: dict) -> None:
    launch(kernel, grid, *args, **dict(meta, **BACKWARD_LAUNCH[kernel]))


class PeripheralAttentionTriton(torch.autograd.Function):
    """``softmax(scale q k^T + log_phi_p) v`` with ``q`` ``(B, heads, N, d)``, ``k`` ``(B, heads, M, d)``,
    ``v`` ``(B, heads, M, e)`` and ``log_phi_p`` ``(heads, N, M)``."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
        batch, heads, queries, dims = q.shape
        keys, value_dims = k.shape[2], v.shape[-1]
        q, k, v, bias = q.contiguous(), k.contiguous(), v.contiguous(), log_phi_p.contiguous()
        out = v.new_empty(batch, heads, queries, value_dims)
        lse = q.new_empty(batch, heads, queries, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        launch(_forward, (batch * heads, triton.cdiv(queries, BLOCK)), q, k, v, bias, out, lse, heads, queries, keys,
               dims, value_dims, scale, **_meta(dims, value_dims, q.dtype))
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, bias, out, lse = ctx.saved_tensors
        batch, heads, queries, dims = q.shape
        keys, value_dims = k.shape[2], v.shape[-1]
        grad_out = grad_out.contiguous()
        delta = (grad_out.to(lse.dtype) * out.to(lse.dtype)).sum(dim=-1)  # sum_j p_ij dp_ij
        reads = (q, k, v, bias, grad_out, lse, delta)
        sizes = (heads, queries, keys, dims, value_dims, ctx.scale)
        meta = _meta(dims, value_dims, q.dtype)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _backward(_grad_queries, (batch * heads, triton.cdiv(queries, BLOCK)), *reads, grad_q, *sizes, meta=meta)
        _backward(_grad_keys, (batch * heads, triton.cdiv(keys, BLOCK)), *reads, grad_k, grad_v, *sizes, meta=meta)
        grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = torch.empty_like(bias)
            _backward(_grad_bias, (heads, triton.cdiv(queries, BLOCK), triton.cdiv(keys, BLOCK)), *reads, grad_bias,
                      batch, *sizes, meta=dict(meta, BLOCK_C=min(HEAD_SLICE, meta['BLOCK_D'], meta['BLOCK_DV'])))
        return grad_q, grad_k, grad_v, grad_bias, None


def peripheral_attention_triton(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
    check_kernel_inputs('peripheral_attention', (q, k, v))
    return PeripheralAttentionTriton.apply(q, k, v, log_phi_p, scale)
