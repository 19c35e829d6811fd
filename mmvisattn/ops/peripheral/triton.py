"""Triton kernel of peripheral attention: one pass of online softmax over key blocks with the
``log Phi_p`` bias added to each block of scores (flash-attention style), so neither the scores nor
the mixed attention is stored. The backward recomputes the SDPA form (:mod:`.sdpa`) under autograd.
Used for CUDA tensors; on CPU the tests run it under ``TRITON_INTERPRET=1``.

Mixed precision (:mod:`mmvisattn.ops.utils.amp`): the kernel reads float32, float16 or bfloat16 queries,
keys and values; both products take their operands in that precision (``DOT``: half-precision
tensor cores, or TF32 for float32; the weights rounded to it only as an operand) and accumulate in
float32, where the bias is added and the online softmax runs; it writes the result in ``v``'s
dtype; autocast is off in the Function, and its backward is SDPA's in the inputs' dtype (SDPA
accumulates half inputs in float32).
"""
import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off
from ..utils.triton_launch import check_kernel_inputs, dot_operands, head_block, launch, num_warps
from .pytorch import peripheral_attention_sdpa



@triton.jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, bias_ptr, out_ptr, heads, tokens, dims, value_dims, scale,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_DV: tl.constexpr, DOT: tl.constexpr):
    batch_head = tl.program_id(0)
    head = batch_head % heads
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    cols_v = tl.arange(0, BLOCK_DV)
    in_rows = rows < tokens
    q = tl.load(q_ptr + batch_head * tokens * dims + rows[:, None] * dims + cols_d[None, :],
                mask=in_rows[:, None] & (cols_d[None, :] < dims), other=0.0).to(DOT)
    row_max = tl.full((BLOCK_M,), float('-inf'), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    for start in range(0, tokens, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        in_keys = keys < tokens
        k = tl.load(k_ptr + batch_head * tokens * dims + keys[:, None] * dims + cols_d[None, :],
                    mask=in_keys[:, None] & (cols_d[None, :] < dims), other=0.0).to(DOT)
        v = tl.load(v_ptr + batch_head * tokens * value_dims + keys[:, None] * value_dims + cols_v[None, :],
                    mask=in_keys[:, None] & (cols_v[None, :] < value_dims), other=0.0).to(DOT)
        bias = tl.load(bias_ptr + head * tokens * tokens + rows[:, None] * tokens + keys[None, :],
                       mask=in_rows[:, None] & in_keys[None, :], other=0.0).to(tl.float32)
        scores = tl.dot(q, tl.trans(k)) * tl.cast(scale, tl.float32) + bias  # compiled: a float64 scalar
        scores = tl.where(in_keys[None, :], scores, float('-inf'))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        correction = tl.exp(row_max - new_max)
        weights = tl.exp(scores - new_max[:, None])
        row_sum = row_sum * correction + tl.sum(weights, axis=1)
        acc = acc * correction[:, None] + tl.dot(weights.to(DOT), v)
        row_max = new_max
    out = acc / row_sum[:, None]
    tl.store(out_ptr + batch_head * tokens * value_dims + rows[:, None] * value_dims + cols_v[None, :],
             out.to(out_ptr.dtype.element_ty), mask=in_rows[:, None] & (cols_v[None, :] < value_dims))


def _forward(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float, block: int = 32) -> Tensor:
    check_kernel_inputs('peripheral_attention', (q, k, v))
    batch, heads, tokens, dims = q.shape
    value_dims = v.shape[-1]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    bias = log_phi_p.to(torch.float32).contiguous()
    out = torch.empty(batch, heads, tokens, value_dims, device=q.device, dtype=v.dtype)
    grid = (batch * heads, triton.cdiv(tokens, block))
    block_d, block_dv = head_block(dims), head_block(value_dims)
    launch(_forward_kernel, grid, q, k, v, bias, out, heads, tokens, dims, value_dims, scale, BLOCK_M=block,
           BLOCK_N=block, BLOCK_D=block_d, BLOCK_DV=block_dv, DOT=dot_operands(q.dtype),
           num_warps=num_warps(max(block_d, block_dv)))
    return out


class PeripheralAttentionTriton(torch.autograd.Function):
    """Triton forward; backward through the SDPA form recomputed from the saved inputs."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(q, k, v, log_phi_p)
        ctx.scale = scale
        return _forward(q, k, v, log_phi_p, scale)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        needed = ctx.needs_input_grad[:4]
        inputs = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needed)]
        with torch.enable_grad():
            out = peripheral_attention_sdpa(*inputs, ctx.scale)
        grads = iter(torch.autograd.grad(out, [t for t in inputs if t.requires_grad], grad_out))
        return (*(next(grads) if need else None for need in needed), None)


def peripheral_attention_triton(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
    return PeripheralAttentionTriton.apply(q, k, v, log_phi_p, scale)
