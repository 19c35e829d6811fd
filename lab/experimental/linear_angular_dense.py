"""Linear-angular attention in dense form for small maps (arXiv:2211.10526, Eq. 3): ``phi(Q)
phi(K)^T V`` in one Triton program per query block.

Each program normalises its queries, then per key block forms the kernel tile ``1/2 + q^ k^T / pi``
and accumulates tile times values and row sums in float32 (entries in [0.18, 0.82]: no running
maximum), nothing ``N x M`` in memory. The backward's :func:`_grad_queries` (``dq^ = dA k^ / pi``)
and :func:`_grad_keys` (``dk^ = dA^T q^ / pi``, ``dV = (A / r)^T dO``), with ``dA_ij = (dO_i . v_j -
delta_i) / r_i``, recompute the tiles and go through the normalisation (:func:`_unit_backward`). The
GPU proof times it beside ``auto``'s choice.

Mixed precision: normalisation, accumulators and row scalings float32, products on the inputs'
precision; output in ``v``'s dtype, gradients in their inputs'; autocast off in the Function.
"""
import math
from typing import Tuple

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
from mmvisattn.ops.utils.amp import autocast_off, norm_eps

BLOCK_M = 64  # queries per program
BLOCK_N = 32  # keys per tile
# Software-pipelining stages by warps (compile_kernels.py, sm_80): Triton's default of 3 spilled at
# heads 32 wide in half precision (4 warps) and, with 2 stages too, 128 wide in float32 (8 warps)
STAGES = {4: 2, 8: 1}


@triton.jit
def _unit(x_ptr, bh, offs, count, offs_d, dims, eps, ACC: tl.constexpr):
    """Rows ``offs`` of image x head ``bh`` of a ``(B * heads, count, dims)`` table divided by their
    clamped norms ``max(||x||, eps)``, and those norms."""
    x = rows(x_ptr + bh * count * dims, offs, count, offs_d, dims).to(ACC)
    norm = tl.maximum(tl.sqrt(tl.sum(x * x, axis=1)), tl.cast(eps, ACC))
    return x / norm[:, None], norm


@triton.jit
def _unit_backward(grad_hat, x_hat, norm):
    """Through ``x / ||x||``: the component of ``grad_hat`` orthogonal to ``x^``, over ``||x||`` (as
    :func:`.pytorch.normalise_backward`)."""
    return (grad_hat - x_hat * tl.sum(x_hat * grad_hat, axis=1)[:, None]) / norm[:, None]


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, out_ptr, sums_ptr, queries, keys_count, dims, value_dims, inv_pi,
             eps, DOT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    inv_pi = tl.cast(inv_pi, ACC)  # compiled: a float64 scalar
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    q = _unit(q_ptr, bh, offs_q, queries, offs_d, dims, eps, ACC)[0].to(DOT)
    row_sum = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), ACC)
    for start in range(0, keys_count, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        keys = _unit(k_ptr, bh, offs_k, keys_count, offs_d, dims, eps, ACC)[0]
        values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv,
                      value_dims).to(DOT)
        kernel = 0.5 + tl.dot(q, tl.trans(keys.to(DOT)), out_dtype=ACC) * inv_pi
        kernel = tl.where(offs_k[None, :] < keys_count, kernel, 0.0)
        acc += tl.dot(kernel.to(DOT), values, out_dtype=ACC)
        row_sum += tl.sum(kernel, axis=1)
    store_rows(out_ptr + bh * queries * value_dims, offs_q, queries, offs_dv, value_dims,
               acc / row_sum[:, None])
    tl.store(sums_ptr + bh * queries + offs_q, row_sum, mask=offs_q < queries)


@triton.jit
def _grad_queries(q_ptr, k_ptr, v_ptr, out_ptr, sums_ptr, grad_out_ptr, grad_q_ptr, queries,
                  keys_count, dims, value_dims, inv_pi, eps, DOT: tl.constexpr, ACC: tl.constexpr,
                  BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dq`` of a query block over the key blocks: ``dq^ = dA k^ / pi``, then through the norm."""
    bh, block = tl.program_id(0), tl.program_id(1)
    inv_pi = tl.cast(inv_pi, ACC)  # compiled: a float64 scalar
    offs_q, offs_d, offs_dv = block_offsets(block, BLOCK_M, BLOCK_D, BLOCK_DV)
    grad_out, delta, sums = normalised_output_grads(grad_out_ptr, out_ptr, sums_ptr, bh, offs_q,
                                                    queries, offs_dv, value_dims, ACC)
    grad_out = grad_out.to(DOT)
    grad_hat = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    for start in range(0, keys_count, BLOCK_N):
        offs_k = start + tl.arange(0, BLOCK_N)
        # zero past the keys
        k_hat, _ = _unit(k_ptr, bh, offs_k, keys_count, offs_d, dims, eps, ACC)
        values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv,
                      value_dims).to(DOT)
        grad_kernel = (tl.dot(grad_out, tl.trans(values), out_dtype=ACC)
                       - delta[:, None]) / sums[:, None]
        grad_hat += tl.dot(grad_kernel.to(DOT), k_hat.to(DOT), out_dtype=ACC)
    # loaded here: fewer live registers
    q_hat, q_norm = _unit(q_ptr, bh, offs_q, queries, offs_d, dims, eps, ACC)
    store_rows(grad_q_ptr + bh * queries * dims, offs_q, queries, offs_d, dims,
               _unit_backward(grad_hat * inv_pi, q_hat, q_norm))


@triton.jit
def _grad_keys(q_ptr, k_ptr, v_ptr, out_ptr, sums_ptr, grad_out_ptr, grad_k_ptr, grad_v_ptr,
               queries, keys_count, dims, value_dims, inv_pi, eps, DOT: tl.constexpr,
               ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dk`` and ``dv`` of a block of ``BLOCK_N`` keys over blocks of ``BLOCK_M`` queries:
    ``dk^ = dA^T q^ / pi`` (then through the norm) and ``dv = (A / r)^T dO``."""
    bh, block = tl.program_id(0), tl.program_id(1)
    inv_pi = tl.cast(inv_pi, ACC)
    offs_k, offs_d, offs_dv = block_offsets(block, BLOCK_N, BLOCK_D, BLOCK_DV)
    keys = _unit(k_ptr, bh, offs_k, keys_count, offs_d, dims, eps, ACC)[0].to(DOT)
    values = rows(v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv,
                  value_dims).to(DOT)
    grad_hat = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    grad_v = tl.zeros((BLOCK_N, BLOCK_DV), ACC)
    for start in range(0, queries, BLOCK_M):
        offs_q = start + tl.arange(0, BLOCK_M)
        q_hat, _ = _unit(q_ptr, bh, offs_q, queries, offs_d, dims, eps, ACC)
        q_hat = q_hat.to(DOT)
        # rows past the queries: zero output gradients and delta, so they add nothing
        grad_out, delta, sums = normalised_output_grads(grad_out_ptr, out_ptr, sums_ptr, bh, offs_q,
                                                        queries, offs_dv, value_dims, ACC)
        grad_out = grad_out.to(DOT)
        kernel = 0.5 + tl.dot(q_hat, tl.trans(keys), out_dtype=ACC) * inv_pi
        grad_v += tl.dot(tl.trans((kernel / sums[:, None]).to(DOT)), grad_out, out_dtype=ACC)
        grad_kernel = (tl.dot(grad_out, tl.trans(values), out_dtype=ACC)
                       - delta[:, None]) / sums[:, None]
        grad_hat += tl.dot(tl.trans(grad_kernel.to(DOT)), q_hat, out_dtype=ACC)
    # in float32 again, as above
    k_hat, k_norm = _unit(k_ptr, bh, offs_k, keys_count, offs_d, dims, eps, ACC)
    store_rows(grad_k_ptr + bh * keys_count * dims, offs_k, keys_count, offs_d, dims,
               _unit_backward(grad_hat * inv_pi, k_hat, k_norm))
    store_rows(grad_v_ptr + bh * keys_count * value_dims, offs_k, keys_count, offs_dv, value_dims,
               grad_v)


# launch settings from ptxas's reports (compile_kernels.py): _grad_keys takes 16 queries a tile (32
# spilled on sm_90 in float32) and heads over 64 wide 16 keys a block; _grad_queries 32 queries for
# wide heads
LAUNCH = {_grad_keys: dict(BLOCK_M=16, BLOCK_N=32)}
WIDE_LAUNCH = {_grad_keys: dict(BLOCK_N=16), _grad_queries: dict(BLOCK_M=32)}


def _launch(kernel, q: Tensor, k: Tensor, v: Tensor, *tensors: Tensor) -> None:
    """``kernel`` on ``(..., N, d)`` queries, ``(..., M, d)`` keys and ``(..., M, e)`` values, one
    program per image x head and block of tokens (keys for :func:`_grad_keys`, else queries)."""
    queries, dims = q.shape[-2:]
    keys, value_dims = k.shape[-2], v.shape[-1]
    meta = launch_meta(kernel, dims, value_dims, q.dtype, BLOCK_M, BLOCK_N, LAUNCH, WIDE_LAUNCH,
                       STAGES)
    blocks = (
        triton.cdiv(keys, meta['BLOCK_N'])
        if kernel is _grad_keys
        else triton.cdiv(queries, meta['BLOCK_M'])
    )
    kernel[(q.numel() // (queries * dims), blocks)](q, k, v, *tensors,
           queries, keys, dims, value_dims, 1 / math.pi, norm_eps(q.dtype), **meta)


class DenseAngular(torch.autograd.Function):
    """``(A V) / (A 1)`` with ``A = 1/2 + q^ k^T / pi`` of ``(..., N, d)`` queries, ``(..., M, d)``
    keys and ``(..., M, e)`` values; saves the inputs, the output and the row sums."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = v.new_empty(*q.shape[:-1], v.shape[-1])
        sums = q.new_empty(q.shape[:-1],
                           dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        _launch(_forward, q, k, v, out, sums)
        ctx.save_for_backward(q, k, v, out, sums)
        return out

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        q, k, v, out, sums = saved = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _launch(_grad_queries, *saved, grad_out, grad_q)
        _launch(_grad_keys, *saved, grad_out, grad_k, grad_v)
        return grad_q, grad_k, grad_v


def linear_angular_attention_dense(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``(B, heads, N, d)`` queries and keys, ``(..., e)`` values -> ``(B, heads, N, e)``."""
    return DenseAngular.apply(q, k, v)
