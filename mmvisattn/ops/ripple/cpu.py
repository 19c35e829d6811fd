"""The local part of ripple attention in C++ on CPU (``impl='cpu'``, ``cpu.cpp``; arXiv:2110.02453,
Eq. 4-6): :data:`.pytorch.TILED`'s arithmetic on the same tiles, halos read in place and their
gradients added back, one task per (slice, tile) forward and per band of tile rows backward (two
passes, so no two bands add into the same keys). Float32 (or float64), autocast off.
"""
from typing import List, Sequence, Tuple

import torch
from torch import Tensor

from ..utils.cpu_extension import load_cpu_kernels
from .local_global import local_plus_global, tile_size


@torch.library.custom_op('mmvisattn::ripple_cpu_forward', mutates_args=())
def _forward_kernel(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, height: int, width: int,
                    tile: int) -> Tuple[Tensor, Tensor]:
    num, den = load_cpu_kernels('ripple').forward(q, k, v, beta, height, width, tile)
    return num, den


@_forward_kernel.register_fake
def _forward_shapes(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, height: int, width: int,
                    tile: int) -> Tuple[Tensor, Tensor]:
    return torch.empty_like(v), q.new_empty(*q.shape[:2], 1)


@torch.library.custom_op('mmvisattn::ripple_cpu_backward', mutates_args=())
def _backward_kernel(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, height: int, width: int,
                     tile: int, grad_num: Tensor, grad_den: Tensor) -> List[Tensor]:
    return list(load_cpu_kernels('ripple').backward(q, k, v, beta, height, width, tile, grad_num,
                                                    grad_den))


@_backward_kernel.register_fake
def _backward_shapes(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, height: int, width: int,
                     tile: int, grad_num: Tensor, grad_den: Tensor) -> List[Tensor]:
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(beta)]


def _operands(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """The kernels read the maps row-major in place."""
    return tuple(t.contiguous() for t in tensors)


def cpu_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
                hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """``(num, den)`` of the local part, as :func:`.pytorch.tiled_forward`."""
    return _forward_kernel(*_operands(q, k, v, beta), *hw_shape, tile_size(beta.shape[-1]))


def cpu_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int],
                 grad_num: Tensor, grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`cpu_forward` (``q, k, v, beta``), as :func:`.pytorch.tiled_backward`."""
    grads = _backward_kernel(*_operands(q, k, v, beta), *hw_shape, tile_size(beta.shape[-1]),
                             *_operands(grad_num, grad_den))
    return tuple(grads)


def ripple_attention_cpu(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                         tau: float, eps: float) -> Tensor:
    """Ripple attention with the local part in C++."""
    return local_plus_global(q, k, v, logits, hw_shape, tau, eps, cpu_forward, cpu_backward)
