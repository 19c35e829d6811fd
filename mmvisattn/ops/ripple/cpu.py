"""The local part of ripple attention and the feature map of Eq. 13 in C++ on CPU (``cpu.cpp``;
arXiv:2110.02453, Eq. 4-6 and Appendix C.1).

The arithmetic of :data:`.pytorch.TILED` (``tiled_forward`` / ``tiled_backward``) on the same tiles
of :func:`.pytorch.tile_size`, as :class:`.pytorch.LocalKernels` for
:class:`.pytorch.RippleLocalGlobal`, which adds the global sums and normalises: per tile, the
queries' scores against their halo, the ring weights gathered onto them, and the products, with the
halos gathered from the maps in place and their gradients added straight back (one task per (slice,
tile) in the forward; per band of tile rows of a slice in the backward, in two passes so that no two
bands add into the same keys). Module forward + backward, R_max 8, 96 dims, 3 heads, batch 2, two
threads (``configs/smca`` README): 32x32 42 -> 26-29 ms against the torch tiles (SDPA 25-26 ms),
64x64 157 -> 110 ms. Under tracing (ONNX export,
mmengine's FLOP counter) and dispatch modes (``FlopCounterMode``) the torch tiles run instead
(:func:`mmvisattn.ops.cpu_extension.kernels_hidden`).

The feature map's passes (:data:`FEATURES_CPU`) have the arithmetic of
:data:`.feature_map.TORCH` on blocks of rows, for :class:`.feature_map.TrigReLUFeatures`.

Mixed precision: :class:`.pytorch.RippleLocalGlobal` and :class:`.feature_map.TrigReLUFeatures` hand
float32 (or float64) tensors to the kernels, with autocast off.
"""
from typing import List, Sequence, Tuple

import torch
from torch import Tensor

from ..cpu_extension import check_cpu_tensor, kernels_hidden, load_cpu_kernels
from .feature_map import TORCH, FeatureKernels
from .pytorch import TILED, LocalKernels, tile_size


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
def _backward_kernel(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, height: int, width: int, tile: int,
                     grad_num: Tensor, grad_den: Tensor) -> List[Tensor]:
    return list(load_cpu_kernels('ripple').backward(q, k, v, beta, height, width, tile, grad_num, grad_den))


@_backward_kernel.register_fake
def _backward_shapes(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, height: int, width: int, tile: int,
                     grad_num: Tensor, grad_den: Tensor) -> List[Tensor]:
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(beta)]


def _operands(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """The kernels read the maps row-major in place."""
    return tuple(t.contiguous() for t in tensors)


def cpu_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """``(num, den)`` of the local part, as :func:`.pytorch.tiled_forward`."""
    check_cpu_tensor('ripple_attention', q)
    if kernels_hidden():
        return TILED.forward(q, k, v, beta, hw_shape)
    return _forward_kernel(*_operands(q, k, v, beta), *hw_shape, tile_size(beta.shape[-1]))


def cpu_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int], grad_num: Tensor,
                 grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`cpu_forward` for ``q, k, v, beta``, as :func:`.pytorch.tiled_backward`."""
    if kernels_hidden():
        return TILED.backward(q, k, v, beta, hw_shape, grad_num, grad_den)
    grads = _backward_kernel(*_operands(q, k, v, beta), *hw_shape, tile_size(beta.shape[-1]),
                             *_operands(grad_num, grad_den))
    return tuple(grads)


CPU = LocalKernels(cpu_forward, cpu_backward)


@torch.library.custom_op('mmvisattn::ripple_cpu_features_forward', mutates_args=())
def _features_forward_kernel(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    return load_cpu_kernels('ripple').features_forward(x, w1, w2, b2, scale)


@_features_forward_kernel.register_fake
def _features_forward_shapes(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    return x.new_empty(*x.shape[:-1], w2.shape[0])


@torch.library.custom_op('mmvisattn::ripple_cpu_features_backward', mutates_args=())
def _features_backward_kernel(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                              scale: float) -> List[Tensor]:
    return list(load_cpu_kernels('ripple').features_backward(x, w1, w2, features, grad_out, scale))


@_features_backward_kernel.register_fake
def _features_backward_shapes(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                              scale: float) -> List[Tensor]:
    return [x.new_empty(x.shape), torch.empty_like(w1), torch.empty_like(w2), w2.new_empty(w2.shape[0])]


def features_forward(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    """Eq. 13, as :func:`.feature_map.torch_forward`; ``x`` may be a strided view whose last dimension
    is contiguous (the heads of the ``qkv`` projection), read in place."""
    check_cpu_tensor('trig_relu_features', x)
    if kernels_hidden() or x.stride(-1) != 1:
        return TORCH.forward(x, w1, w2, b2, scale)
    return _features_forward_kernel(x, *_operands(w1, w2, b2), scale)


def features_backward(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                      scale: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`features_forward`, as :func:`.feature_map.torch_backward`."""
    if kernels_hidden() or x.stride(-1) != 1:
        return TORCH.backward(x, w1, w2, features, grad_out, scale)
    return tuple(_features_backward_kernel(x, *_operands(w1, w2, features, grad_out), scale))


FEATURES_CPU = FeatureKernels(features_forward, features_backward)
