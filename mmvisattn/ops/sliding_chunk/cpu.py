"""Sliding-chunk local attention in C++ on CPU (``cpu.cpp``; App. C of arXiv:2103.15358).

The arithmetic of :class:`.pytorch.SlidingChunkAttention` on the same tensors, fused per query
chunk: the live slots' keys and values gathered, the scores, bias, mask, softmax and products
computed while the chunk's ``w^2 x S`` scores are in cache, one task per (row of ``B*H``, chunk) in
the forward and per row in the backward. The forward keeps the log-sum-exp of every query beside the
output, so the backward rebuilds the probabilities without storing them, and the saved tensors grow
with ``N * d`` as SDPA's do. Measured against the torch path (module forward + backward, 96 dims, 3
heads, batch 2, 2 threads, paired in one process; ``configs/vil/README.md``): 28x28 20.9 -> 16.6 ms
(SDPA 15.8-18.4 ms), 56x56 70 -> 53 ms. Under tracing (ONNX export, mmengine's FLOP counter) and
under a dispatch mode (torch's ``FlopCounterMode``, which :func:`mmvisattn.utils.count_flops` uses)
the torch path runs instead: those see its ops one by one and count the live slots, which an opaque
kernel call would hide.

Mixed precision (:mod:`mmvisattn.ops.amp`): autocast is off inside the Function and the kernels
compute in float32 (float64 stays float64, for ``gradcheck``); the output comes back in ``v``'s
dtype, each gradient in its input's.
"""
import functools
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from ..amp import autocast_off, upcast
from ..cpu_extension import load_cpu_kernels
from .pytorch import sliding_chunk_local_torch


@functools.lru_cache(maxsize=None)
def kernels() -> Any:
    """``torch.ops.mmvisattn_sliding_chunk``, compiled on first use, with the shape functions
    ``torch.compile`` traces it by."""
    ops = load_cpu_kernels('sliding_chunk')
    torch.library.register_fake('mmvisattn_sliding_chunk::forward')(_fake_forward)
    torch.library.register_fake('mmvisattn_sliding_chunk::backward')(_fake_backward)
    return ops


def _fake_forward(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                  bias: Optional[Tensor]) -> List[Tensor]:
    """Output and ``(B*H, C, w^2)`` log-sum-exp."""
    return [torch.empty_like(q), q.new_empty(q.shape[:3])]


def _fake_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                   bias: Optional[Tensor], out: Tensor, lse: Tensor) -> List[Tensor]:
    """Gradients of ``q, k, v`` and the ``(B*H, w^2, S)`` bias rows (none without a bias)."""
    rows = 0 if bias is None else q.shape[0]
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            q.new_empty(rows, q.shape[2], index.shape[1])]


def _float_inputs(*tensors: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
    """The kernels' operands: float32 for half inputs, contiguous; ``None`` stays ``None``."""
    return tuple(None if t is None else upcast(t)[0].contiguous() for t in tensors)


class SlidingChunkCpu(torch.autograd.Function):
    """``softmax(q k_slots^T + bias, masked) v_slots`` per chunk, with the inputs and output of
    :class:`.pytorch.SlidingChunkAttention`. Saves the inputs, the output and the ``(B*H, C, w^2)``
    log-sum-exp."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                bias: Optional[Tensor]) -> Tensor:
        out, lse = kernels().forward(*_float_inputs(q, k, v), index, invalid, *_float_inputs(bias))
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.index, ctx.invalid = index, invalid  # slot_tables' cached tables, not memory of this call
        return out.to(v.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, bias, out, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v, grad_bias = kernels().backward(
            *_float_inputs(grad_out, q, k, v), ctx.index, ctx.invalid, *_float_inputs(bias), out, lse)
        # the kernels add per row of B*H; a head's rows are summed here
        grad_bias = None if bias is None else grad_bias.view(-1, *bias.shape).sum(dim=0).to(bias.dtype)
        return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), None, None, grad_bias


def sliding_chunk_local_cpu(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                            bias: Optional[Tensor]) -> Tensor:
    """The local attention of every chunk (:class:`SlidingChunkCpu`) for CPU tensors; traced, the
    torch path's plain ops (see the module docstring)."""
    if q.device.type != 'cpu':
        raise ValueError(f"sliding_chunk_attention: impl='cpu' needs CPU tensors; got {q.device}")
    if torch.jit.is_tracing() or torch._C._len_torch_dispatch_stack():
        return sliding_chunk_local_torch(q, k, v, index, invalid, bias)
    return SlidingChunkCpu.apply(q, k, v, index, invalid, bias)
