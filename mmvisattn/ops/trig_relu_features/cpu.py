"""The feature map's passes in C++ on CPU (``impl='cpu'``, ``cpu.cpp``; arXiv:2110.02453, Eq. 13):
:func:`.pytorch.torch_forward`'s arithmetic by blocks of 256 rows in cache, the heads read in place.
Float32 (or float64) kernels, autocast off.
"""
from typing import List, Tuple

import torch
from torch import Tensor

from ..utils.cpu_extension import load_cpu_kernels
from .passes import run_passes


def _operands(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """The kernels read the weights row-major in place."""
    return tuple(t.contiguous() for t in tensors)


@torch.library.custom_op('mmvisattn::trig_relu_features_cpu_forward', mutates_args=())
def _forward_kernel(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    return load_cpu_kernels('trig_relu_features').forward(x, w1, w2, b2, scale)


@_forward_kernel.register_fake
def _forward_shapes(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    return x.new_empty(*x.shape[:-1], w2.shape[0])


@torch.library.custom_op('mmvisattn::trig_relu_features_cpu_backward', mutates_args=())
def _backward_kernel(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                              scale: float) -> List[Tensor]:
    return list(
        load_cpu_kernels('trig_relu_features').backward(x, w1, w2, features, grad_out, scale)
    )


@_backward_kernel.register_fake
def _backward_shapes(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                              scale: float) -> List[Tensor]:
    return [x.new_empty(x.shape), torch.empty_like(w1), torch.empty_like(w2),
            w2.new_empty(w2.shape[0])]


def features_forward(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    """Eq. 13, as :func:`.pytorch.torch_forward`; ``x`` may be a strided view whose last dimension
    is contiguous (the heads of the ``qkv`` projection), read in place."""
    return _forward_kernel(x, *_operands(w1, w2, b2), scale)


def features_backward(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                      scale: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`features_forward`, as :func:`.pytorch.torch_backward`."""
    return tuple(_backward_kernel(x, *_operands(w1, w2, features, grad_out), scale))


def trig_relu_features_cpu(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    """Eq. 13 with the C++ passes."""
    return run_passes(x, w1, w2, b2, scale, features_forward, features_backward)
