"""Sliding-chunk local attention in C++ on CPU (``cpu.cpp``; arXiv:2103.15358, App. C):
:class:`.pytorch.SlidingChunkAttention`'s arithmetic fused per query chunk while its scores are in
cache; the forward keeps each query's log-sum-exp for the backward.

Mixed precision: autocast off, float32 kernels (float64 stays); the output in ``v``'s dtype,
gradients in their inputs'.
"""
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..utils.amp import autocast_off, upcast
from ..utils.cpu_extension import load_cpu_kernels
from .layout import Mode
from .local_global import local_plus_global


@torch.library.custom_op('mmvisattn::sliding_chunk_cpu_forward', mutates_args=())
def _forward_kernel(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                bias: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """The forward kernel: output and ``(B*H, C, w^2)`` log-sum-exp."""
    out, lse = load_cpu_kernels('sliding_chunk').forward(q, k, v, index, invalid, bias)
    return out, lse


@_forward_kernel.register_fake
def _forward_shapes(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                    bias: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    return torch.empty_like(q), q.new_empty(q.shape[:3])


@torch.library.custom_op('mmvisattn::sliding_chunk_cpu_backward', mutates_args=())
def _backward_kernel(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, index: Tensor,
                     invalid: Tensor,
                 bias: Optional[Tensor], out: Tensor, lse: Tensor) -> List[Tensor]:
    """The backward kernel: gradients of ``q, k, v`` and the ``(B*H, w^2, S)`` bias rows (none
    without a bias)."""
    return list(
        load_cpu_kernels('sliding_chunk').backward(
            grad_out, q, k, v, index, invalid, bias, out, lse
        )
    )


@_backward_kernel.register_fake
def _backward_shapes(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, index: Tensor,
                     invalid: Tensor,
                     bias: Optional[Tensor], out: Tensor, lse: Tensor) -> List[Tensor]:
    rows = 0 if bias is None else q.shape[0]
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            q.new_empty(rows, q.shape[2], index.shape[1])]


def _float_inputs(*tensors: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
    """The kernels' operands: float32 for half inputs, contiguous; ``None`` stays ``None``."""
    return tuple(None if t is None else upcast(t)[0].contiguous() for t in tensors)


class SlidingChunkCpu(torch.autograd.Function):
    """``softmax(q k_slots^T + bias, masked) v_slots`` per chunk; saves the inputs, the output and
    the log-sum-exp."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                bias: Optional[Tensor]) -> Tensor:
        out, lse = _forward_kernel(*_float_inputs(q, k, v), index, invalid, *_float_inputs(bias))
        ctx.save_for_backward(q, k, v, bias, out, lse)
        # slot_tables' cached tables, not memory of this call
        ctx.index, ctx.invalid = index, invalid
        return out.to(v.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, bias, out, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v, grad_bias = _backward_kernel(
            *_float_inputs(grad_out, q, k, v),
            ctx.index,
            ctx.invalid,
            *_float_inputs(bias),
            out,
            lse,
        )
        # the kernels add per row of B*H; a head's rows are summed here
        grad_bias = (
            None if bias is None else grad_bias.view(-1, *bias.shape).sum(dim=0).to(bias.dtype)
        )
        return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), None, None, grad_bias


def sliding_chunk_local_cpu(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                            bias: Optional[Tensor], groups: object = None) -> Tensor:
    """The local attention of every chunk (:class:`SlidingChunkCpu`); the kernels find each chunk's
    live slots themselves, so they take no ``groups``."""
    return SlidingChunkCpu.apply(q, k, v, index, invalid, bias)


def sliding_chunk_attention_cpu(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int],
                                window: int, num_global: int, masking: str, mode: Mode,
                                rel_pos: Optional[Sequence[Optional[Tensor]]],
                                scale: float) -> Tensor:
    """Vision Longformer attention with the local queries by the C++ kernels."""
    return local_plus_global(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale,
                             sliding_chunk_local_cpu)
