"""Triton kernels for the linear-angular core, two passes per (batch, head): ``_summarise``
accumulates the means of ``K^T V``, ``k^`` and ``v``; ``_mix`` gives ``(1/2 mean v + 1/pi q^
mean(K^T V)) / (1/2 + 1/pi q^ . mean k^)`` (``N`` divided out, keeping the summary in the values'
range). The backward is :func:`.pytorch.linear_angular_backward`.

Mixed precision: the kernels read float32, float16 or bfloat16 and accumulate in float32, the
products on the inputs' precision (half tensor cores, TF32); the result in ``v``'s dtype; autocast
off in the Function."""
import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..utils.amp import autocast_off, norm_eps
from ..utils.triton_launch import dot_operands, head_block, num_warps
from .pytorch import linear_angular_backward


@triton.jit
def _unit_rows(x, eps):
    """Rows of a float32 block divided by ``max(||row||, eps)``; ``eps`` cast, as ``torch.compile``
    passes a float64 scalar that would break ``tl.dot``."""
    return x / tl.maximum(tl.sqrt(tl.sum(x * x, axis=1)), tl.cast(eps, tl.float32))[:, None]


@triton.jit
def _summarise(k_ptr, v_ptr, kv_ptr, kmean_ptr, vmean_ptr, tokens, dims, value_dims, eps,
               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
               DOT: tl.constexpr):
    head = tl.program_id(0)
    rows = tl.arange(0, BLOCK_N)
    cols_k = tl.arange(0, BLOCK_D)
    cols_v = tl.arange(0, BLOCK_DV)
    k_base = k_ptr + head * tokens * dims
    v_base = v_ptr + head * tokens * value_dims
    key_values = tl.zeros((BLOCK_D, BLOCK_DV), dtype=tl.float32)
    key_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)
    value_sum = tl.zeros((BLOCK_DV,), dtype=tl.float32)
    for start in range(0, tokens, BLOCK_N):
        in_rows = (start + rows) < tokens
        k = _unit_rows(tl.load(k_base + (start + rows)[:, None] * dims + cols_k[None, :],
                               mask=in_rows[:, None] & (cols_k[None, :] < dims),
                               other=0.0).to(tl.float32), eps)
        v = tl.load(v_base + (start + rows)[:, None] * value_dims + cols_v[None, :],
                    mask=in_rows[:, None] & (cols_v[None, :] < value_dims), other=0.0)
        key_values += tl.dot(tl.trans(k.to(DOT)), v.to(DOT))
        key_sum += tl.sum(k, axis=0)
        value_sum += tl.sum(v.to(tl.float32), axis=0)
    tl.store(kv_ptr + head * BLOCK_D * BLOCK_DV + cols_k[:, None] * BLOCK_DV + cols_v[None, :],
             key_values / tokens)
    tl.store(kmean_ptr + head * BLOCK_D + cols_k, key_sum / tokens)
    tl.store(vmean_ptr + head * BLOCK_DV + cols_v, value_sum / tokens)


@triton.jit
def _mix(q_ptr, kv_ptr, kmean_ptr, vmean_ptr, out_ptr, tokens, dims, value_dims, inv_pi, eps,
         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, DOT: tl.constexpr):
    head = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols_k = tl.arange(0, BLOCK_D)
    cols_v = tl.arange(0, BLOCK_DV)
    in_rows = rows < tokens
    q = _unit_rows(tl.load(q_ptr + head * tokens * dims + rows[:, None] * dims + cols_k[None, :],
                           mask=in_rows[:, None] & (cols_k[None, :] < dims),
                           other=0.0).to(tl.float32), eps)
    key_values = tl.load(kv_ptr + head * BLOCK_D * BLOCK_DV + cols_k[:, None] * BLOCK_DV
                         + cols_v[None, :])
    key_mean = tl.load(kmean_ptr + head * BLOCK_D + cols_k)
    value_mean = tl.load(vmean_ptr + head * BLOCK_DV + cols_v)
    inv_pi = tl.cast(inv_pi, tl.float32)  # compiled: a float64 scalar
    numerator = 0.5 * value_mean[None, :] + tl.dot(q.to(DOT), key_values.to(DOT)) * inv_pi
    normaliser = 0.5 + tl.sum(q * key_mean[None, :], axis=1) * inv_pi
    out = numerator / normaliser[:, None]
    tl.store(out_ptr + head * tokens * value_dims + rows[:, None] * value_dims + cols_v[None, :],
             out.to(out_ptr.dtype.element_ty),
             mask=in_rows[:, None] & (cols_v[None, :] < value_dims))


def _forward(q: Tensor, k: Tensor, v: Tensor, block_n: int = 64) -> Tensor:
    *batch, tokens, dims = q.shape
    value_dims = v.shape[-1]
    heads = q.numel() // (tokens * dims)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    block_d, block_dv = head_block(dims), head_block(value_dims)
    sizes = dict(BLOCK_N=block_n, BLOCK_D=block_d, BLOCK_DV=block_dv, DOT=dot_operands(q.dtype),
                 num_warps=num_warps(max(block_d, block_dv)))
    key_values = torch.empty(heads, block_d, block_dv, device=q.device, dtype=torch.float32)
    key_mean = torch.empty(heads, block_d, device=q.device, dtype=torch.float32)
    value_mean = torch.empty(heads, block_dv, device=q.device, dtype=torch.float32)
    # one stage: software pipelining of the token loop made ptxas spill (compile_kernels.py, sm_90)
    _summarise[(heads,)](k, v, key_values, key_mean, value_mean, tokens, dims, value_dims,
                         norm_eps(k.dtype), num_stages=1, **sizes)
    out = torch.empty(*batch, tokens, value_dims, device=q.device, dtype=v.dtype)
    _mix[(heads, triton.cdiv(tokens, block_n))](q, key_values, key_mean, value_mean, out, tokens,
                                                dims, value_dims, 1.0 / math.pi, norm_eps(q.dtype),
                                                **sizes)
    return out


class LinearAngularTriton(torch.autograd.Function):
    """Triton forward; the torch backward, recomputing from the saved inputs. Autocast off inside
    (half inputs stay half, the kernels compute in float32)."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        ctx.save_for_backward(q, k, v)
        return _forward(q, k, v)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        return linear_angular_backward(*ctx.saved_tensors, grad_out)


def linear_angular_attention_triton(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return LinearAngularTriton.apply(q, k, v)
