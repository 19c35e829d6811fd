"""Triton kernels of peripheral attention (arXiv:2206.06801, Eq. 5): ``softmax(tau q k^T + log
Phi_p) v`` as flash attention with the batch-shared bias ("FlashAttention-2", arXiv:2307.08691).

The forward folds each score block and its bias tile into an online softmax, storing the output and
the row log-sum-exp. The backward recomputes the probabilities in three kernels that each own what
they write: :func:`.flash.grad_queries` and :func:`.flash.grad_keys` with ``BIASED``, and
``_grad_bias``, one program per bias tile summing over the images (SDPA's autograd writes an ``N x
M`` gradient per image).

Mixed precision: float32, float16 or bfloat16 inputs and bias, products on their precision, the bias
and softmax in float32; output in ``v``'s dtype, gradients in their inputs'; autocast off in the
Function.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from lab.experimental.flash import (
    biased,
    block_offsets,
    grad_keys,
    grad_queries,
    key_rows,
    rows,
    store_rows,
)
from mmvisattn.ops.utils.amp import autocast_off
from mmvisattn.ops.utils.flash import log_sum_exp, online_softmax, precision
from mmvisattn.ops.utils.triton_launch import head_block, num_warps

# queries and keys per block (maps of thousands of tokens; a 32 x 32 tile keeps registers)
BLOCK = 32
# head columns per product in _grad_bias, which reads four blocks of every image a step
HEAD_SLICE = 32


@triton.jit
def _products(a_base, b_base, offs_a, count_a, offs_b, count_b, width, DOT: tl.constexpr,
              ACC: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr,
              BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """``A B^T`` of rows ``offs_a`` of ``(count_a, width)`` A and ``offs_b`` of B, over the width in
    slices of ``BLOCK_C`` columns, so that no whole row of a wide head is held in registers."""
    products = tl.zeros((BLOCK_A, BLOCK_B), ACC)
    for start in range(0, BLOCK_W, BLOCK_C):
        offs_c = start + tl.arange(0, BLOCK_C)
        a = rows(a_base, offs_a, count_a, offs_c, width).to(DOT)
        b = rows(b_base, offs_b, count_b, offs_c, width).to(DOT)
        products += tl.dot(a, tl.trans(b), out_dtype=ACC)
    return products


@triton.jit
def _key_block(q, k_ptr, v_ptr, bias_ptr, bh, heads, offs_q, offs_k, queries, keys_count, offs_d,
               offs_dv, dims, value_dims, scale, DOT: tl.constexpr, ACC: tl.constexpr):
    """``tau q k^T + log Phi_p`` of a query block against keys ``offs_k`` of image x head ``bh``
    (``-inf`` outside), and their values."""
    keys, values = key_rows(k_ptr, v_ptr, bh, offs_k, keys_count, offs_d, offs_dv, dims, value_dims,
                            DOT)
    scores = biased(tl.dot(q, tl.trans(keys), out_dtype=ACC), bias_ptr, bh % heads, offs_q, offs_k,
                    queries, keys_count, scale, ACC, True)
    return scores, values


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, bias_ptr, out_ptr, lse_ptr, heads, queries, keys_count, dims,
             value_dims, scale, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    scale = tl.cast(scale, ACC)  # compiled: a float64 scalar
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q = rows(q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims).to(DOT)
    row_max = tl.full((BLOCK_M,), float('-inf'), ACC)
    row_sum = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, keys_count, BLOCK_N):
        scores, values = _key_block(q, k_ptr, v_ptr, bias_ptr, bh, heads, offs_q,
                                    start + tl.arange(0, BLOCK_N), queries, keys_count, offs_d,
                                    offs_dv, dims, value_dims, scale, DOT, ACC)
        row_max, row_sum, acc = online_softmax(scores, values, row_max, row_sum, acc, DOT, ACC)
    lse, safe_sum = log_sum_exp(row_max, row_sum)
    store_rows(out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv, value_dims,
               acc / safe_sum[:, None])
    tl.store(lse_ptr + bh * queries + offs_q, lse, mask=offs_q < queries)


@triton.jit
def _grad_bias(q_ptr, k_ptr, v_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr, grad_bias_ptr,
               batch, heads, queries, keys_count, dims, value_dims, scale, DOT: tl.constexpr,
               ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_C: tl.constexpr):
    head, query_block, key_block = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    scale = tl.cast(scale, ACC)
    offs_q = query_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = key_block * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    for image in range(0, batch):
        bh = image * heads + head
        products = _products(q_ptr + bh * queries * dims, k_ptr + bh * keys_count * dims, offs_q,
                             queries, offs_k,
                             keys_count, dims, DOT, ACC, BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_C)
        scores = biased(products, bias_ptr, head, offs_q, offs_k, queries, keys_count, scale, ACC,
                        True)
        grad_probs = _products(grad_out_ptr + bh * queries * value_dims,
                               v_ptr + bh * keys_count * value_dims, offs_q,
                               queries, offs_k, keys_count, value_dims, DOT, ACC, BLOCK_M, BLOCK_N,
                               BLOCK_DV, BLOCK_C)
        lse = tl.load(lse_ptr + bh * queries + offs_q, mask=offs_q < queries, other=0.0)
        delta = tl.load(delta_ptr + bh * queries + offs_q, mask=offs_q < queries, other=0.0)
        total += tl.exp(scores - lse[:, None]) * (grad_probs - delta[:, None])
    store_rows(grad_bias_ptr + head * queries * keys_count, offs_q, queries, offs_k, keys_count,
               total)


# backward warps and stages with no spills on sm_80 or sm_90 at heads 34 to 128 wide, float32 and
# half (compile_kernels.py); 8 warps x 2 stages spilled in grad_queries and _grad_bias
BACKWARD_LAUNCH = {grad_queries: dict(num_warps=4, num_stages=2),
                   grad_keys: dict(num_warps=8, num_stages=1),
                   _grad_bias: dict(num_warps=4, num_stages=1)}


def _meta(dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    """Blocks, dtypes and the forward's warps."""
    block_d, block_dv = head_block(dims), head_block(value_dims)
    return dict(BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_D=block_d, BLOCK_DV=block_dv,
                num_warps=num_warps(max(block_d, block_dv)), **precision(dtype))


def _backward(kernel, grid: Tuple[int, ...], *args, meta: dict) -> None:
    kernel[grid](*args, **dict(meta, **BACKWARD_LAUNCH[kernel]))


class PeripheralAttentionTriton(torch.autograd.Function):
    """``softmax(scale q k^T + log_phi_p) v`` with ``q`` ``(B, heads, N, d)``, ``k``
    ``(B, heads, M, d)``, ``v`` ``(B, heads, M, e)`` and ``log_phi_p`` ``(heads, N, M)``."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
        batch, heads, queries, dims = q.shape
        keys, value_dims = k.shape[2], v.shape[-1]
        q, k, v, bias = q.contiguous(), k.contiguous(), v.contiguous(), log_phi_p.contiguous()
        out = v.new_empty(batch, heads, queries, value_dims)
        lse = q.new_empty(batch, heads, queries,
                          dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        _forward[(batch * heads, triton.cdiv(queries, BLOCK))](
            q,
            k,
            v,
            bias,
            out,
            lse,
            heads,
            queries,
            keys,
            dims,
            value_dims,
            scale,
            **_meta(dims, value_dims, q.dtype),
        )
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
        flash = dict(meta, BIASED=True, MASKED=False)  # threshold (0.0) unused
        _backward(grad_queries, (batch * heads, triton.cdiv(queries, BLOCK)), *reads, grad_q,
                  *sizes, 0.0, meta=flash)
        _backward(grad_keys, (batch * heads, triton.cdiv(keys, BLOCK)), *reads, grad_k, grad_v,
                  *sizes, 0.0, meta=flash)
        grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = torch.empty_like(bias)
            _backward(_grad_bias, (heads, triton.cdiv(queries, BLOCK), triton.cdiv(keys, BLOCK)),
                      *reads, grad_bias, batch, *sizes,
                      meta=dict(meta, BLOCK_C=min(HEAD_SLICE, meta['BLOCK_D'], meta['BLOCK_DV'])))
        return grad_q, grad_k, grad_v, grad_bias, None


def peripheral_attention_triton(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor,
                                scale: float) -> Tensor:
    return PeripheralAttentionTriton.apply(q, k, v, log_phi_p, scale)
