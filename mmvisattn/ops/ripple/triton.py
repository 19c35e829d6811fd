"""Triton kernels for the local part of ripple attention (see :mod:`.pytorch`): every query visits
the ``(2 R_max - 1)^2`` offsets of its groups in registers, so nothing beyond inputs and outputs is
written. ``_forward`` gives ``num`` and ``den``, ``_backward_queries`` ``dq`` and ``dbeta``,
``_backward_keys`` ``dk`` and ``dv`` through the queries ``i = j - offset`` of each key (symmetric
groups, Appendix B: no two programs write one row). ``_ring_weights_forward`` / ``_backward``
compute :func:`.local_global.ring_weights_by` a block of query rows at a time. The kernels get
float32 from :func:`.local_global.local_plus_global`."""
from typing import Sequence, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.triton_launch import num_warps
from .local_global import local_plus_global


@triton.jit
def _rows(base, index, valid, size, BLOCK_C: tl.constexpr):
    """``(BLOCK, BLOCK_C)`` float32 rows ``index`` of a ``(tokens, size)`` array, 0 invalid."""
    cols = tl.arange(0, BLOCK_C)
    return tl.load(base + index[:, None] * size + cols[None, :],
                   mask=valid[:, None] & (cols[None, :] < size), other=0.0).to(tl.float32)


@triton.jit
def _store_rows(base, index, valid, size, value, BLOCK_C: tl.constexpr):
    cols = tl.arange(0, BLOCK_C)
    tl.store(base + index[:, None] * size + cols[None, :], value.to(base.dtype.element_ty),
             mask=valid[:, None] & (cols[None, :] < size))


@triton.jit
def _program(height, width, BLOCK: tl.constexpr):
    """This program's head and the map's token count, then the positions of its block, whether
    they are on the map, their rows and columns."""
    pos = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    return tl.program_id(0), height * width, pos, pos < height * width, pos // width, pos % width


@triton.jit
def _shifted(row, col, dy, dx, inside, height, width):
    """The token ``(dy, dx)`` away: its index, whether on the map, its group ``max(|dy|, |dx|)``."""
    shifted_row, shifted_col = row + dy, col + dx
    valid = (
        inside
        & (shifted_row >= 0)
        & (shifted_row < height)
        & (shifted_col >= 0)
        & (shifted_col < width)
    )
    return shifted_row * width + shifted_col, valid, tl.maximum(tl.abs(dy), tl.abs(dx))


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, beta_ptr, num_ptr, den_ptr, height, width, dims, value_dims,
             r_max, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    head, tokens, pos, inside, row, col = _program(height, width, BLOCK)
    k_base, v_base = k_ptr + head * tokens * dims, v_ptr + head * tokens * value_dims
    beta_base = beta_ptr + head * tokens * r_max
    q = _rows(q_ptr + head * tokens * dims, pos, inside, dims, BLOCK_D)
    num = tl.zeros((BLOCK, BLOCK_E), dtype=tl.float32)
    den = tl.zeros((BLOCK,), dtype=tl.float32)
    for dy in range(1 - r_max, r_max):
        for dx in range(1 - r_max, r_max):
            key, valid, group = _shifted(row, col, dy, dx, inside, height, width)
            weight = tl.load(beta_base + pos * r_max + group, mask=inside, other=0.0).to(tl.float32)
            weighted = tl.sum(q * _rows(k_base, key, valid, dims, BLOCK_D), axis=1) * weight
            num += weighted[:, None] * _rows(v_base, key, valid, value_dims, BLOCK_E)
            den += weighted
    _store_rows(num_ptr + head * tokens * value_dims, pos, inside, value_dims, num, BLOCK_E)
    tl.store(den_ptr + head * tokens + pos, den.to(den_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _backward_queries(q_ptr, k_ptr, v_ptr, beta_ptr, grad_num_ptr, grad_den_ptr, grad_q_ptr,
                      grad_beta_ptr, height, width, dims, value_dims, r_max,
                      BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    head, tokens, pos, inside, row, col = _program(height, width, BLOCK)
    k_base, v_base = k_ptr + head * tokens * dims, v_ptr + head * tokens * value_dims
    beta_base, grad_beta_base = (beta_ptr + head * tokens * r_max,
                                 grad_beta_ptr + head * tokens * r_max)
    q = _rows(q_ptr + head * tokens * dims, pos, inside, dims, BLOCK_D)
    grad_num = _rows(grad_num_ptr + head * tokens * value_dims, pos, inside, value_dims, BLOCK_E)
    grad_den = tl.load(grad_den_ptr + head * tokens + pos, mask=inside, other=0.0).to(tl.float32)
    grad_q = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    for dy in range(1 - r_max, r_max):
        for dx in range(1 - r_max, r_max):
            key, valid, group = _shifted(row, col, dy, dx, inside, height, width)
            k = _rows(k_base, key, valid, dims, BLOCK_D)
            weight = tl.load(beta_base + pos * r_max + group, mask=inside, other=0.0).to(tl.float32)
            grad_weighted = tl.sum(grad_num * _rows(v_base, key, valid, value_dims, BLOCK_E),
                                   axis=1) + grad_den
            grad_q += (grad_weighted * weight)[:, None] * k
            slot = grad_beta_base + pos * r_max + group  # this program's rows only: no race
            tl.store(slot, tl.load(slot, mask=inside, other=0.0)
                     + grad_weighted * tl.sum(q * k, axis=1), mask=inside)
    _store_rows(grad_q_ptr + head * tokens * dims, pos, inside, dims, grad_q, BLOCK_D)


@triton.jit
def _backward_keys(q_ptr, k_ptr, v_ptr, beta_ptr, grad_num_ptr, grad_den_ptr, grad_k_ptr,
                   grad_v_ptr, height, width, dims, value_dims, r_max,
                   BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    head, tokens, pos, inside, row, col = _program(height, width, BLOCK)
    # this program's keys and values; the queries that reach them are gathered in the loop
    k = _rows(k_ptr + head * tokens * dims, pos, inside, dims, BLOCK_D)
    v = _rows(v_ptr + head * tokens * value_dims, pos, inside, value_dims, BLOCK_E)
    q_base, beta_base = q_ptr + head * tokens * dims, beta_ptr + head * tokens * r_max
    grad_num_base, grad_den_base = (grad_num_ptr + head * tokens * value_dims,
                                    grad_den_ptr + head * tokens)
    grad_k = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    grad_v = tl.zeros((BLOCK, BLOCK_E), dtype=tl.float32)
    for dy in range(1 - r_max, r_max):
        for dx in range(1 - r_max, r_max):
            query, valid, group = _shifted(row, col, -dy, -dx, inside, height, width)
            q = _rows(q_base, query, valid, dims, BLOCK_D)
            grad_num = _rows(grad_num_base, query, valid, value_dims, BLOCK_E)
            grad_den = tl.load(grad_den_base + query, mask=valid, other=0.0).to(tl.float32)
            weight = tl.load(beta_base + query * r_max + group, mask=valid,
                             other=0.0).to(tl.float32)
            grad_k += ((tl.sum(grad_num * v, axis=1) + grad_den) * weight)[:, None] * q
            grad_v += (tl.sum(q * k, axis=1) * weight)[:, None] * grad_num
    _store_rows(grad_k_ptr + head * tokens * dims, pos, inside, dims, grad_k, BLOCK_D)
    _store_rows(grad_v_ptr + head * tokens * value_dims, pos, inside, value_dims, grad_v, BLOCK_E)


@triton.jit
def _stick_lengths(logits_ptr, rows, live, cols, r_max):
    """``s_r = sigmoid(o_r - log(R_max - r))`` (C.3) of columns ``cols`` of the rows, 0 outside
    ``0 .. R_max - 1``."""
    inside = live[:, None] & (cols[None, :] >= 0) & (cols[None, :] < r_max)
    logits = tl.load(logits_ptr + rows[:, None] * r_max + cols[None, :], mask=inside, other=0.0)
    offsets = tl.log(tl.maximum(r_max - cols, 1).to(logits.dtype))
    return tl.where(inside, tl.sigmoid(logits - offsets[None, :]), 0.0)


@triton.jit
def _sticks(logits_ptr, rows, live, r_max, tau, BLOCK_R: tl.constexpr):
    """The groups ``r``, sticks ``s_r``, the stick left before (``c_{r-1}``) and after (``c_r``)
    each group, ``r_hat`` and ``tau`` in the logits' dtype."""
    cols = tl.arange(0, BLOCK_R)
    sticks = _stick_lengths(logits_ptr, rows, live, cols, r_max)
    # torch.compile passes a float64 scalar; torch compares in the logits' dtype
    tau = tl.cast(tau, sticks.dtype)
    left_before = tl.cumprod(1 - _stick_lengths(logits_ptr, rows, live, cols - 1, r_max), axis=1)
    remaining = left_before * (1 - sticks)
    r_hat = tl.sum(((remaining >= tau) & (cols[None, :] < r_max)).to(tl.int32), axis=1)
    return cols, sticks, left_before, remaining, r_hat, tau


@triton.jit
def _shared_groups(reach_ptr, rows, live, tokens, r_hat):
    """``max(reach - r_hat + 1, 1)``: how many non-empty groups share the merged mass (Eq. 6)."""
    reach = tl.load(reach_ptr + rows % tokens, mask=live, other=0)
    return tl.maximum(reach - r_hat + 1, 1)


@triton.jit
def _ring_weights_forward(logits_ptr, reach_ptr, beta_ptr, merged_weight_ptr, rows_count, tokens,
                          r_max, tau, BLOCK: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = rows < rows_count
    cols, sticks, left_before, remaining, r_hat, _ = _sticks(
        logits_ptr, rows, live, r_max, tau, BLOCK_R)
    # the merged mass c_{r_hat - 1} (the whole stick when r_hat = 0)
    merged = (tl.sum(tl.where(cols[None, :] == r_hat[:, None] - 1, remaining, 0.0), axis=1)
              + tl.where(r_hat == 0, 1.0, 0.0))
    merged_weight = merged / _shared_groups(reach_ptr, rows, live, tokens, r_hat)
    beta = tl.where(cols[None, :] < r_hat[:, None], sticks * left_before - merged_weight[:, None],
                    0.0)
    tl.store(beta_ptr + rows[:, None] * r_max + cols[None, :], beta,
             mask=live[:, None] & (cols[None, :] < r_max))
    tl.store(merged_weight_ptr + rows, merged_weight, mask=live)


@triton.jit
def _kept_grads(grad_beta_ptr, rows, live, cols, r_max, r_hat):
    """The weights' gradient at columns ``cols`` where the group is kept (``r < r_hat``), else 0."""
    kept = live[:, None] & (cols[None, :] >= 0) & (cols[None, :] < r_hat[:, None])
    return tl.load(grad_beta_ptr + rows[:, None] * r_max + cols[None, :], mask=kept, other=0.0)


@triton.jit
def _ring_weights_backward(logits_ptr, reach_ptr, grad_beta_ptr, grad_merged_weight_ptr,
                           grad_logits_ptr, rows_count, tokens, r_max, tau, BLOCK: tl.constexpr,
                           BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = rows < rows_count
    cols, sticks, left_before, remaining, r_hat, tau = _sticks(
        logits_ptr, rows, live, r_max, tau, BLOCK_R)
    grad_alpha = _kept_grads(grad_beta_ptr, rows, live, cols, r_max, r_hat)
    grad_merged = ((tl.load(grad_merged_weight_ptr + rows, mask=live, other=0.0)
                    - tl.sum(grad_alpha, axis=1))
                   / _shared_groups(reach_ptr, rows, live, tokens, r_hat))
    into_remaining = (_kept_grads(grad_beta_ptr, rows, live, cols + 1, r_max, r_hat)
                      * _stick_lengths(logits_ptr, rows, live, cols + 1, r_max)
                        + tl.where(cols[None, :] == r_hat[:, None] - 1, grad_merged[:, None], 0.0))
    tail_sums = tl.cumsum(into_remaining * remaining, axis=1, reverse=True)
    grad_remaining = tl.where(cols[None, :] < r_hat[:, None],
                              tail_sums / tl.maximum(remaining, tau), 0.0)
    grad_sticks = left_before * (grad_alpha - grad_remaining)
    tl.store(grad_logits_ptr + rows[:, None] * r_max + cols[None, :],
             grad_sticks * sticks * (1 - sticks), mask=live[:, None] & (cols[None, :] < r_max))


WEIGHT_ROWS = 128  # query rows per program of the ring-weight kernels


def _launch_weights(kernel, logits: Tensor, reach: Tensor, tau: float, *tensors: Tensor) -> None:
    rows, r_max = logits.numel() // logits.shape[-1], logits.shape[-1]
    kernel[(triton.cdiv(rows, WEIGHT_ROWS),)](logits, reach, *tensors, rows, reach.shape[0], r_max,
                                              tau, BLOCK=WEIGHT_ROWS,
                                              BLOCK_R=triton.next_power_of_2(r_max))


def triton_weights_forward(logits: Tensor, reach: Tensor, tau: float) -> Tuple[Tensor, Tensor]:
    """:func:`.local_global.ring_weights_reference` in one launch: ``beta`` and ``w_m``."""
    logits = logits.contiguous()
    beta, merged_weight = torch.empty_like(logits), logits.new_empty(*logits.shape[:-1], 1)
    _launch_weights(_ring_weights_forward, logits, reach.contiguous(), tau, beta, merged_weight)
    return beta, merged_weight


def triton_weights_backward(logits: Tensor, reach: Tensor, tau: float, grad_beta: Tensor,
                            grad_merged_weight: Tensor) -> Tensor:
    """:func:`.local_global.ring_weights_backward` in one launch."""
    logits = logits.contiguous()
    grad_logits = torch.empty_like(logits)
    _launch_weights(_ring_weights_backward, logits, reach.contiguous(), tau,
                    grad_beta.to(logits.dtype).contiguous(),
                    grad_merged_weight.to(logits.dtype).contiguous(), grad_logits)
    return grad_logits


WEIGHT_PASSES = (triton_weights_forward, triton_weights_backward)
BLOCK = 16  # positions per program: 32 made ptxas spill at 64-wide heads (compile_kernels.py)


def _launch(kernel, tensors: Sequence[Tensor], hw_shape: Sequence[int], dims: int, value_dims: int,
            r_max: int) -> None:
    slices, tokens = tensors[0].shape[:2]
    # no tl.dot: no minimum
    block_d, block_e = triton.next_power_of_2(dims), triton.next_power_of_2(value_dims)
    grid = (slices, triton.cdiv(tokens, BLOCK))
    kernel[grid](*tensors, *hw_shape, dims, value_dims, r_max, BLOCK=BLOCK, BLOCK_D=block_d,
                 BLOCK_E=block_e, num_warps=num_warps(max(block_d, block_e)))


def triton_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
                   hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """The local part of :func:`.pytorch.tiled_forward` in Triton; same arguments and results."""
    q, k, v, beta = (t.contiguous() for t in (q, k, v, beta))
    num, den = torch.empty_like(v), v.new_empty(*v.shape[:-1], 1)
    _launch(_forward, (q, k, v, beta, num, den), hw_shape, q.shape[-1], v.shape[-1], beta.shape[-1])
    return num, den


def triton_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int],
                    grad_num: Tensor, grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`triton_forward` for ``q, k, v, beta``."""
    q, k, v, beta, grad_num, grad_den = (
        t.contiguous() for t in (q, k, v, beta, grad_num, grad_den)
    )
    grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    grad_beta = torch.zeros(beta.shape, device=beta.device, dtype=torch.float32)
    sizes = (hw_shape, q.shape[-1], v.shape[-1], beta.shape[-1])
    _launch(_backward_queries, (q, k, v, beta, grad_num, grad_den, grad_q, grad_beta), *sizes)
    _launch(_backward_keys, (q, k, v, beta, grad_num, grad_den, grad_k, grad_v), *sizes)
    return grad_q, grad_k, grad_v, grad_beta.to(beta.dtype)


def ripple_attention_triton(q: Tensor, k: Tensor, v: Tensor, logits: Tensor,
                            hw_shape: Sequence[int], tau: float, eps: float) -> Tensor:
    """Ripple attention with the local part in Triton."""
    return local_plus_global(q, k, v, logits, hw_shape, tau, eps,
                             triton_forward, triton_backward, WEIGHT_PASSES)
