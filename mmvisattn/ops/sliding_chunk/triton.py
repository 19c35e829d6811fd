"""Triton kernels of the sliding-chunk local attention (arXiv:2103.15358, App. C), forward and backward.

One program per (batch x head, chunk): the chunk's ``w^2`` queries walk over its key slots in
blocks, loading the keys and values the slot table points at (no gathered copy in memory), with an
online softmax; the forward stores the output and the row log-sum-exp only, so the saved tensors
grow with ``N``. The backward recomputes the probabilities block by block, accumulates the query
gradient in registers and adds key, value and bias gradients atomically (a key belongs to the
slots of up to nine chunks). The bias gradient, one ``w^2 x S`` table per head that every chunk of
every image adds to, is spread over :data:`BIAS_COPIES` copies (chunk ``c`` adds to copy
``c mod BIAS_COPIES``) and reduced by one sum after the kernel, so that the chunks of a head do not all
wait on the same addresses. Used for CUDA tensors; the tests run it on CPU under
``TRITON_INTERPRET=1``.

Mixed precision (:mod:`mmvisattn.ops.utils.amp`): the kernels read float32, float16 or bfloat16 (the bias
may differ from the queries). Every ``tl.dot`` takes its operands in the inputs' precision (``DOT``,
:func:`~mmvisattn.ops.utils.triton_launch.dot_operands`), so half inputs run on half-precision tensor cores
and float32 ones as TF32, and accumulates in float32:
probabilities and score gradients are rounded to the inputs' dtype only as product operands, as
FlashAttention-2 does, while scores, softmax statistics and accumulators stay float32. The output
comes back in ``q``'s dtype, gradients in their inputs'. Autocast is off in the Function.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off
from ..utils.triton_launch import dot_operands, head_block, launch, num_warps

BLOCK_S = 16
BIAS_COPIES = 32  # copies of the bias gradient the chunks add to (a few MB at ViL's sizes)


@triton.jit
def _rows(ptr, row_base, offs_l, queries, offs_c, width):
    """A ``(BLOCK_L, BLOCK_C)`` block of rows ``row_base + l`` of a ``(rows, width)`` tensor, in its dtype."""
    return tl.load(ptr + (row_base + offs_l[:, None]) * width + offs_c[None, :],
                   mask=(offs_l[:, None] < queries) & (offs_c[None, :] < width), other=0.0)


@triton.jit
def _gather(base, idx, in_s, offs_c, width):
    """The table rows ``idx`` of one block of slots, ``(BLOCK_S, BLOCK_C)`` in the table's dtype."""
    return tl.load(base + idx[:, None] * width + offs_c[None, :], mask=in_s[:, None] & (offs_c[None, :] < width),
                   other=0.0)


@triton.jit
def _slot_block(q, k_base, v_base, index_ptr, invalid_ptr, bias_ptr, chunk, head, offs_l, offs_s, offs_d, offs_dv,
                queries, slots, dims, value_dims, invalid_rows, HAS_BIAS: tl.constexpr, DOT: tl.constexpr):
    """One block of the chunk's key slots: the scores (``-inf`` where masked), the slots' key
    indices, their keys and values, and which slots exist."""
    in_s = offs_s < slots
    idx = tl.load(index_ptr + chunk * slots + offs_s, mask=in_s, other=0)
    keys = _gather(k_base, idx, in_s, offs_d, dims).to(DOT)
    scores = tl.dot(q, tl.trans(keys))
    in_ls = (offs_l[:, None] < queries) & in_s[None, :]
    if HAS_BIAS:
        scores += tl.load(bias_ptr + head * queries * slots + offs_l[:, None] * slots + offs_s[None, :],
                          mask=in_ls, other=0.0).to(tl.float32)
    # the mask has one row per query (exact windows) or one row for the whole chunk
    masked = tl.load(invalid_ptr + chunk * invalid_rows * slots + offs_l[:, None] * (slots * (invalid_rows > 1))
                     + offs_s[None, :], mask=in_ls, other=1)
    values = _gather(v_base, idx, in_s, offs_dv, value_dims).to(DOT)
    return tl.where((masked != 0) | (~in_ls), float('-inf'), scores), idx, keys, values, in_s


@triton.jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, index_ptr, invalid_ptr, bias_ptr, out_ptr, lse_ptr, chunks, queries,
                    slots, dims, value_dims, tokens, heads, invalid_rows, HAS_BIAS: tl.constexpr, DOT: tl.constexpr,
                    BLOCK_L: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, chunk = tl.program_id(0), tl.program_id(1)
    head = bh % heads
    offs_l, offs_d, offs_dv = tl.arange(0, BLOCK_L), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    row_base = (bh * chunks + chunk) * queries
    q = _rows(q_ptr, row_base, offs_l, queries, offs_d, dims).to(DOT)
    k_base, v_base = k_ptr + bh * tokens * dims, v_ptr + bh * tokens * value_dims
    row_max = tl.full((BLOCK_L,), float('-inf'), tl.float32)
    row_sum = tl.zeros((BLOCK_L,), tl.float32)
    acc = tl.zeros((BLOCK_L, BLOCK_DV), tl.float32)
    for start in range(0, slots, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        scores, idx, _, values, in_s = _slot_block(q, k_base, v_base, index_ptr, invalid_ptr, bias_ptr, chunk, head,
                                                   offs_l, offs_s, offs_d, offs_dv, queries, slots, dims, value_dims,
                                                   invalid_rows, HAS_BIAS, DOT)
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        shift = tl.where(new_max == float('-inf'), 0.0, new_max)  # rows with nothing seen yet
        probs = tl.exp(scores - shift[:, None])
        rescale = tl.exp(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        acc = acc * rescale[:, None] + tl.dot(probs.to(DOT), values)
        row_max = new_max
    in_l = offs_l < queries
    safe_sum = tl.where(row_sum > 0, row_sum, 1.0)
    tl.store(out_ptr + (row_base + offs_l[:, None]) * value_dims + offs_dv[None, :],
             (acc / safe_sum[:, None]).to(out_ptr.dtype.element_ty),
             mask=in_l[:, None] & (offs_dv[None, :] < value_dims))
    tl.store(lse_ptr + row_base + offs_l, row_max + tl.log(safe_sum), mask=in_l)


@triton.jit
def _backward_kernel(q_ptr, k_ptr, v_ptr, index_ptr, invalid_ptr, bias_ptr, grad_out_ptr, lse_ptr, delta_ptr,
                     grad_q_ptr, grad_k_ptr, grad_v_ptr, grad_bias_ptr, chunks, queries, slots, dims, value_dims,
                     tokens, heads, invalid_rows, bias_copies, HAS_BIAS: tl.constexpr, DOT: tl.constexpr,
                     BLOCK_L: tl.constexpr,
                     BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, chunk = tl.program_id(0), tl.program_id(1)
    head = bh % heads
    offs_l, offs_d, offs_dv = tl.arange(0, BLOCK_L), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    in_l = offs_l < queries
    row_base = (bh * chunks + chunk) * queries
    q = _rows(q_ptr, row_base, offs_l, queries, offs_d, dims).to(DOT)
    grad_out = _rows(grad_out_ptr, row_base, offs_l, queries, offs_dv, value_dims).to(DOT)
    lse = tl.load(lse_ptr + row_base + offs_l, mask=in_l, other=0.0)
    delta = tl.load(delta_ptr + row_base + offs_l, mask=in_l, other=0.0)
    k_base, v_base = k_ptr + bh * tokens * dims, v_ptr + bh * tokens * value_dims
    grad_q = tl.zeros((BLOCK_L, BLOCK_D), tl.float32)
    for start in range(0, slots, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        scores, idx, keys, values, in_s = _slot_block(q, k_base, v_base, index_ptr, invalid_ptr, bias_ptr, chunk,
                                                      head, offs_l, offs_s, offs_d, offs_dv, queries, slots, dims,
                                                      value_dims, invalid_rows, HAS_BIAS, DOT)
        probs = tl.exp(scores - lse[:, None])
        grad_scores = probs * (tl.dot(grad_out, tl.trans(values)) - delta[:, None])
        grad_q += tl.dot(grad_scores.to(DOT), keys)
        tl.atomic_add(grad_k_ptr + bh * tokens * dims + idx[:, None] * dims + offs_d[None, :],
                      tl.dot(tl.trans(grad_scores.to(DOT)), q), mask=in_s[:, None] & (offs_d[None, :] < dims))
        tl.atomic_add(grad_v_ptr + bh * tokens * value_dims + idx[:, None] * value_dims + offs_dv[None, :],
                      tl.dot(tl.trans(probs.to(DOT)), grad_out),
                      mask=in_s[:, None] & (offs_dv[None, :] < value_dims))
        if HAS_BIAS:
            copy = (chunk % bias_copies) * heads + head
            tl.atomic_add(grad_bias_ptr + copy * queries * slots + offs_l[:, None] * slots + offs_s[None, :],
                          grad_scores, mask=in_l[:, None] & in_s[None, :])
    tl.store(grad_q_ptr + (row_base + offs_l[:, None]) * dims + offs_d[None, :], grad_q,
             mask=in_l[:, None] & (offs_d[None, :] < dims))


def _blocks(queries: int, dims: int, value_dims: int, dtype: torch.dtype) -> dict:
    block_d, block_dv = head_block(dims), head_block(value_dims)
    return dict(BLOCK_L=head_block(queries), BLOCK_S=BLOCK_S, BLOCK_D=block_d, BLOCK_DV=block_dv,
                DOT=dot_operands(dtype), num_warps=num_warps(max(block_d, block_dv)))


class SlidingChunkTriton(torch.autograd.Function):
    """The arithmetic of :class:`mmvisattn.ops.sliding_chunk.pytorch.SlidingChunkAttention` on the same
    tensors, taking the slot tables themselves: ``index`` ``(C, S)`` rows of the flat key tables ``k``,
    ``v`` ``(B*H, M, d)`` and ``invalid`` ``(C, 1 or w^2, S)`` the masked slots."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                bias: Optional[Tensor]) -> Tensor:
        batch_heads, chunks, queries, dims = q.shape
        tokens, value_dims, slots = k.shape[1], v.shape[-1], index.shape[1]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        index32, invalid8 = index.to(torch.int32).contiguous(), invalid.to(torch.int8).contiguous()
        heads = 1 if bias is None else bias.shape[0]
        bias_arg = q if bias is None else bias.contiguous()
        out = q.new_empty(batch_heads, chunks, queries, value_dims)
        lse = torch.empty(batch_heads, chunks, queries, device=q.device, dtype=torch.float32)
        launch(_forward_kernel, (batch_heads, chunks), q, k, v, index32, invalid8, bias_arg, out, lse, chunks, queries,
               slots, dims, value_dims, tokens, heads, invalid.shape[1], HAS_BIAS=bias is not None,
               **_blocks(queries, dims, value_dims, q.dtype))
        ctx.save_for_backward(q, k, v, index32, invalid8, bias_arg, out, lse)
        ctx.has_bias, ctx.heads = bias is not None, heads
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, index32, invalid8, bias_arg, out, lse = ctx.saved_tensors
        batch_heads, chunks, queries, dims = q.shape
        tokens, value_dims, slots = k.shape[1], v.shape[-1], index32.shape[1]
        grad_out = grad_out.contiguous()
        delta = (grad_out.float() * out.float()).sum(dim=-1)  # sum_j p_ij dp_ij
        grad_q = torch.empty(q.shape, device=q.device, dtype=torch.float32)
        grad_k = torch.zeros(k.shape, device=q.device, dtype=torch.float32)
        grad_v = torch.zeros(v.shape, device=q.device, dtype=torch.float32)
        copies = min(chunks, BIAS_COPIES) if ctx.has_bias else 1
        grad_bias = torch.zeros(copies, ctx.heads, queries, slots, device=q.device, dtype=torch.float32)
        launch(_backward_kernel, (batch_heads, chunks), q, k, v, index32, invalid8, bias_arg, grad_out, lse, delta,
               grad_q, grad_k, grad_v, grad_bias, chunks, queries, slots, dims, value_dims, tokens, ctx.heads,
               invalid8.shape[1], copies, HAS_BIAS=ctx.has_bias, **_blocks(queries, dims, value_dims, q.dtype))
        bias_grad = grad_bias.sum(dim=0).to(bias_arg.dtype) if ctx.has_bias else None
        return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), None, None, bias_grad


def sliding_chunk_local_triton(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                               bias: Optional[Tensor], drawn: bool = False) -> Tensor:
    """The local attention of every chunk; the kernels mask each slot from ``invalid``, so tables
    picked for a drawn mode (``drawn``) need nothing more. Inputs checked by the op
    (:func:`mmvisattn.ops.sliding_chunk.check_triton_inputs`)."""
    return SlidingChunkTriton.apply(q, k, v, index, invalid, bias)
