"""Triton kernels for the local part of ripple attention (see :mod:`.local`): every query visits the
``(2 R_max - 1)^2`` offsets of its groups ``r < R_max`` in registers, so nothing beyond the inputs
and outputs is ever written -- O(H W R_max^2 (D + E)) time, O(H W (D + E)) memory, forward and
backward. The merged groups stay global sums in torch (:func:`.local.local_plus_global`).

Three kernels over blocks of positions of one ``(batch, head)`` slice:

* ``_forward``: ``num_i = sum_j beta_{r(i, j)}(i) (q_i . k_j) v_j`` and ``den_i`` (the same without ``v_j``);
* ``_backward_queries``: ``dq_i`` and ``dbeta_r(i)``, with ``dA_ij = g_i . v_j + g_den_i``;
* ``_backward_keys``: ``dk_j`` and ``dv_j``, visiting the queries ``i = j - offset`` of each key
  (groups are symmetric, Appendix B), so no two programs write the same row.

Used for CUDA tensors; on CPU the tests run them under ``TRITON_INTERPRET=1``.
"""
from typing import Sequence, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .local import local_plus_global


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, beta_ptr, num_ptr, den_ptr, height, width, dims, value_dims, r_max,
             BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    head = tl.program_id(0)
    tokens = height * width
    pos = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = pos < tokens
    row, col = pos // width, pos % width
    cols_d, cols_e = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_E)
    mask_d, mask_e = cols_d[None, :] < dims, cols_e[None, :] < value_dims
    q_base, k_base = q_ptr + head * tokens * dims, k_ptr + head * tokens * dims
    v_base, beta_base = v_ptr + head * tokens * value_dims, beta_ptr + head * tokens * r_max
    q = tl.load(q_base + pos[:, None] * dims + cols_d[None, :], mask=inside[:, None] & mask_d, other=0.0)
    q = q.to(tl.float32)
    num = tl.zeros((BLOCK, BLOCK_E), dtype=tl.float32)
    den = tl.zeros((BLOCK,), dtype=tl.float32)
    for dy in range(1 - r_max, r_max):
        for dx in range(1 - r_max, r_max):
            group = tl.maximum(tl.abs(dy), tl.abs(dx))
            key_row, key_col = row + dy, col + dx
            valid = inside & (key_row >= 0) & (key_row < height) & (key_col >= 0) & (key_col < width)
            key = key_row * width + key_col
            k = tl.load(k_base + key[:, None] * dims + cols_d[None, :], mask=valid[:, None] & mask_d, other=0.0)
            v = tl.load(v_base + key[:, None] * value_dims + cols_e[None, :], mask=valid[:, None] & mask_e,
                        other=0.0)
            weight = tl.load(beta_base + pos * r_max + group, mask=inside, other=0.0).to(tl.float32)
            weighted = tl.sum(q * k.to(tl.float32), axis=1) * weight
            num += weighted[:, None] * v.to(tl.float32)
            den += weighted
    tl.store(num_ptr + head * tokens * value_dims + pos[:, None] * value_dims + cols_e[None, :],
             num.to(num_ptr.dtype.element_ty), mask=inside[:, None] & mask_e)
    tl.store(den_ptr + head * tokens + pos, den.to(den_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _backward_queries(q_ptr, k_ptr, v_ptr, beta_ptr, grad_num_ptr, grad_den_ptr, grad_q_ptr, grad_beta_ptr,
                      height, width, dims, value_dims, r_max,
                      BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    head = tl.program_id(0)
    tokens = height * width
    pos = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = pos < tokens
    row, col = pos // width, pos % width
    cols_d, cols_e = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_E)
    mask_d, mask_e = cols_d[None, :] < dims, cols_e[None, :] < value_dims
    k_base, v_base = k_ptr + head * tokens * dims, v_ptr + head * tokens * value_dims
    beta_base, grad_beta_base = beta_ptr + head * tokens * r_max, grad_beta_ptr + head * tokens * r_max
    q = tl.load(q_ptr + head * tokens * dims + pos[:, None] * dims + cols_d[None, :],
                mask=inside[:, None] & mask_d, other=0.0).to(tl.float32)
    grad_num = tl.load(grad_num_ptr + head * tokens * value_dims + pos[:, None] * value_dims + cols_e[None, :],
                       mask=inside[:, None] & mask_e, other=0.0).to(tl.float32)
    grad_den = tl.load(grad_den_ptr + head * tokens + pos, mask=inside, other=0.0).to(tl.float32)
    grad_q = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    for dy in range(1 - r_max, r_max):
        for dx in range(1 - r_max, r_max):
            group = tl.maximum(tl.abs(dy), tl.abs(dx))
            key_row, key_col = row + dy, col + dx
            valid = inside & (key_row >= 0) & (key_row < height) & (key_col >= 0) & (key_col < width)
            key = key_row * width + key_col
            k = tl.load(k_base + key[:, None] * dims + cols_d[None, :], mask=valid[:, None] & mask_d,
                        other=0.0).to(tl.float32)
            v = tl.load(v_base + key[:, None] * value_dims + cols_e[None, :], mask=valid[:, None] & mask_e,
                        other=0.0).to(tl.float32)
            weight = tl.load(beta_base + pos * r_max + group, mask=inside, other=0.0).to(tl.float32)
            grad_weighted = tl.sum(grad_num * v, axis=1) + grad_den
            grad_q += (grad_weighted * weight)[:, None] * k
            slot = grad_beta_base + pos * r_max + group
            grad_weight = tl.load(slot, mask=inside, other=0.0) + grad_weighted * tl.sum(q * k, axis=1)
            tl.store(slot, grad_weight, mask=inside)
    tl.store(grad_q_ptr + head * tokens * dims + pos[:, None] * dims + cols_d[None, :],
             grad_q.to(grad_q_ptr.dtype.element_ty), mask=inside[:, None] & mask_d)


@triton.jit
def _backward_keys(q_ptr, k_ptr, v_ptr, beta_ptr, grad_num_ptr, grad_den_ptr, grad_k_ptr, grad_v_ptr,
                   height, width, dims, value_dims, r_max,
                   BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    head = tl.program_id(0)
    tokens = height * width
    pos = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = pos < tokens
    row, col = pos // width, pos % width
    cols_d, cols_e = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_E)
    mask_d, mask_e = cols_d[None, :] < dims, cols_e[None, :] < value_dims
    q_base, beta_base = q_ptr + head * tokens * dims, beta_ptr + head * tokens * r_max
    grad_num_base, grad_den_base = grad_num_ptr + head * tokens * value_dims, grad_den_ptr + head * tokens
    k = tl.load(k_ptr + head * tokens * dims + pos[:, None] * dims + cols_d[None, :],
                mask=inside[:, None] & mask_d, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + head * tokens * value_dims + pos[:, None] * value_dims + cols_e[None, :],
                mask=inside[:, None] & mask_e, other=0.0).to(tl.float32)
    grad_k = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    grad_v = tl.zeros((BLOCK, BLOCK_E), dtype=tl.float32)
    for dy in range(1 - r_max, r_max):
        for dx in range(1 - r_max, r_max):
            group = tl.maximum(tl.abs(dy), tl.abs(dx))
            query_row, query_col = row - dy, col - dx
            valid = inside & (query_row >= 0) & (query_row < height) & (query_col >= 0) & (query_col < width)
            query = query_row * width + query_col
            q = tl.load(q_base + query[:, None] * dims + cols_d[None, :], mask=valid[:, None] & mask_d,
                        other=0.0).to(tl.float32)
            grad_num = tl.load(grad_num_base + query[:, None] * value_dims + cols_e[None, :],
                               mask=valid[:, None] & mask_e, other=0.0).to(tl.float32)
            grad_den = tl.load(grad_den_base + query, mask=valid, other=0.0).to(tl.float32)
            weight = tl.load(beta_base + query * r_max + group, mask=valid, other=0.0).to(tl.float32)
            grad_weighted = tl.sum(grad_num * v, axis=1) + grad_den
            grad_k += (grad_weighted * weight)[:, None] * q
            grad_v += (tl.sum(q * k, axis=1) * weight)[:, None] * grad_num
    tl.store(grad_k_ptr + head * tokens * dims + pos[:, None] * dims + cols_d[None, :],
             grad_k.to(grad_k_ptr.dtype.element_ty), mask=inside[:, None] & mask_d)
    tl.store(grad_v_ptr + head * tokens * value_dims + pos[:, None] * value_dims + cols_e[None, :],
             grad_v.to(grad_v_ptr.dtype.element_ty), mask=inside[:, None] & mask_e)


BLOCK = 32


def _launch(kernel, tensors: Sequence[Tensor], hw_shape: Sequence[int], dims: int, value_dims: int,
            r_max: int) -> None:
    slices, tokens = tensors[0].shape[:2]
    kernel[(slices, triton.cdiv(tokens, BLOCK))](*tensors, *hw_shape, dims, value_dims, r_max, BLOCK=BLOCK,
                                                 BLOCK_D=triton.next_power_of_2(dims),
                                                 BLOCK_E=triton.next_power_of_2(value_dims))


class LocalRippleTriton(torch.autograd.Function):
    """The local part of :class:`.local.LocalRipple` in Triton; same arguments and results."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
        q, k, v, beta = (t.contiguous() for t in (q, k, v, beta))
        ctx.save_for_backward(q, k, v, beta)
        ctx.hw_shape = hw_shape
        num, den = torch.empty_like(v), v.new_empty(*v.shape[:-1], 1)
        _launch(_forward, (q, k, v, beta, num, den), hw_shape, q.shape[-1], v.shape[-1], beta.shape[-1])
        return num, den

    @staticmethod
    def backward(ctx, grad_num: Tensor, grad_den: Tensor):
        q, k, v, beta = ctx.saved_tensors
        grad_num, grad_den = grad_num.contiguous(), grad_den.contiguous()
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grad_beta = torch.zeros(beta.shape, device=beta.device, dtype=torch.float32)
        sizes = (ctx.hw_shape, q.shape[-1], v.shape[-1], beta.shape[-1])
        _launch(_backward_queries, (q, k, v, beta, grad_num, grad_den, grad_q, grad_beta), *sizes)
        _launch(_backward_keys, (q, k, v, beta, grad_num, grad_den, grad_k, grad_v), *sizes)
        return grad_q, grad_k, grad_v, grad_beta.to(beta.dtype), None


def ripple_attention_triton(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float,
                            eps: float) -> Tensor:
    """Ripple attention with the local part in Triton (:class:`LocalRippleTriton`)."""
    return local_plus_global(q, k, v, logits, hw_shape, tau, eps, LocalRippleTriton.apply)
