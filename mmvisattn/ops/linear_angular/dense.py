"""Linear-angular attention in dense form, for small maps (arXiv:2211.10526, Eq. 3): Castling's deploy
kernel ``phi(Q) phi(K)^T V`` in one Triton program per block of queries.

The program normalises its queries, then for each block of keys normalises them, forms that tile of
the angular kernel ``1/2 + q^ k^T / pi`` by one product and adds the tile times the values, and its
row sums, to float32 accumulators; the output is their ratio. Like a flash-attention forward, with
the kernel's entries (in [0.18, 0.82]) needing no running maximum, and nothing ``N x M`` in memory.
Quadratic: meant for small maps, where one launch of tensor-core products may beat the summaries of
:mod:`.pytorch` / :mod:`.triton`; up to where it does is measured per GPU
(:mod:`mmvisattn.ops.utils.crossover`).

The backward recomputes the kernel from the inputs by batched products (cuBLAS on a GPU): with
``r_i`` the forward's row sums and ``delta_i = dO_i . O_i``,

    dV = (A / r)^T dO,    dA_ij = (dO_i . v_j - delta_i) / r_i,    dq^ = dA k^ / pi,    dk^ = dA^T q^ / pi,

then through the normalisation (:func:`.pytorch.normalise_backward`); it holds the kernel and its
gradient for the step, as autograd through the products would.

Used for CUDA tensors; the tests run the kernel on CPU under ``TRITON_INTERPRET=1``, float64 there too
(``gradcheck``).

Mixed precision (:mod:`mmvisattn.ops.utils.flash`): the kernel normalises in float32 and takes its
products' operands in the inputs' precision (half-precision tensor cores, TF32 for float32),
accumulating in float32; the backward's products take the kernel, its gradient and the normalised
rows in ``v``'s dtype, their row scalings and the normalisation in float32. The output comes back in
``v``'s dtype, each gradient in its input's. Autocast is off in the Function.
"""
import math
from typing import Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off, norm_eps
from ..utils.flash import block_offsets, precision, rows, store_rows
from ..utils.triton_launch import check_kernel_inputs, head_block, launch, num_warps
from .pytorch import normalise, normalise_backward
from .triton import unit_rows

BLOCK_M = 64  # queries per program
BLOCK_N = 32  # keys per tile
# Software-pipelining stages by warps (compile_kernels.py, sm_80): Triton's default of 3 spilled at
# heads 32 wide in half precision (4 warps) and, with 2 stages too, 128 wide in float32 (8 warps)
STAGES = {4: 2, 8: 1}


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, out_ptr, sums_ptr, queries, keys_count, dims, value_dims, inv_pi, eps,
             DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    inv_pi = tl.cast(inv_pi, ACC)  # compiled: a float64 scalar
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q = unit_rows(rows(q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims).to(ACC), eps).to(DOT)
    row_sum = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, keys_count, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        keys = unit_rows(rows(k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims).to(ACC), eps)
        values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims).to(DOT)
        kernel = 0.5 + tl.dot(q, tl.trans(keys.to(DOT)), out_dtype=ACC) * inv_pi
        kernel = tl.where(offs_k[None, :] < keys_count, kernel, 0.0)
        acc += tl.dot(kernel.to(DOT), values, out_dtype=ACC)
        row_sum += tl.sum(kernel, axis=1)
    store_rows(out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv, value_dims, acc / row_sum[:, None])
    tl.store(sums_ptr + bh * queries + offs_q, row_sum, mask=offs_q < queries)


def _backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, sums: Tensor,
              grad_out: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """The gradients above, each in its input's dtype."""
    (q_hat, q_norm), (k_hat, k_norm) = normalise(q), normalise(k)
    wide, operands = sums.dtype, v.dtype
    sums = sums.unsqueeze(-1)
    grad_out = grad_out.to(wide)
    kernel = (q_hat.to(operands) @ k_hat.to(operands).transpose(-1, -2)).to(wide).mul_(1 / math.pi).add_(0.5)
    grad_v = kernel.div_(sums).to(operands).transpose(-1, -2) @ grad_out.to(operands)
    delta = (grad_out * out.to(wide)).sum(dim=-1, keepdim=True)
    grad_kernel = (grad_out.to(operands) @ v.transpose(-1, -2)).to(wide).sub_(delta).div_(sums * math.pi)
    grad_kernel = grad_kernel.to(operands)
    grad_q_hat = (grad_kernel @ k_hat.to(operands)).to(wide)
    grad_k_hat = (grad_kernel.transpose(-1, -2) @ q_hat.to(operands)).to(wide)
    return (normalise_backward(grad_q_hat, q_hat, q_norm).to(q.dtype),
            normalise_backward(grad_k_hat, k_hat, k_norm).to(k.dtype), grad_v.to(v.dtype))


class DenseAngular(torch.autograd.Function):
    """``(A V) / (A 1)`` with ``A = 1/2 + q^ k^T / pi`` of ``(..., N, d)`` queries, ``(..., M, d)`` keys
    and ``(..., M, e)`` values; saves the inputs, the output and the row sums."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        *lead, queries, dims = q.shape
        keys, value_dims = k.shape[-2], v.shape[-1]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = v.new_empty(*lead, queries, value_dims)
        sums = q.new_empty(*lead, queries, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        block_d, block_dv = head_block(dims), head_block(value_dims)
        warps = num_warps(max(block_d, block_dv))
        launch(_forward, (q.numel() // (queries * dims), triton.cdiv(queries, BLOCK_M)), q, k, v, out, sums, queries,
               keys, dims, value_dims, 1 / math.pi, norm_eps(q.dtype), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
               BLOCK_D=block_d, BLOCK_DV=block_dv, num_warps=warps, num_stages=STAGES[warps], **precision(q.dtype))
        ctx.save_for_backward(q, k, v, out, sums)
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        return _backward(*ctx.saved_tensors, grad_out)


def linear_angular_attention_dense(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``(B, heads, N, d)`` queries and keys, ``(B, heads, N, d_v)`` values -> ``(B, heads, N, d_v)``."""
    check_kernel_inputs('linear_angular_attention', (q, k, v), impl='dense')
    return DenseAngular.apply(q, k, v)
