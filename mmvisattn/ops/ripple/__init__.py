"""Ripple attention, "Ripple attention for visual perception with sub-quadratic complexity" (arXiv:2110.02453,
§3, Eq. 4-9, Algorithm 1, Appendix B): linearized attention in which the tokens of each vicinal
group (same Chebyshev distance ``r`` to the query) share a spatial weight ``alpha_r(i, j)`` given by
a stick-breaking transform; groups from ``r_hat`` (threshold ``tau``, at most ``R_max``) on share
the merged stick equally (Eq. 6)::

    out_ij = phi(q_ij) sum_r alpha_r(i, j) sum_{N_r(i, j)} phi(k) v^T
             / phi(q_ij) sum_r alpha_r(i, j) sum_{N_r(i, j)} phi(k)

Implementations (``impl=``):

* ``reference``: explicit per-token group weights, O(H^2 W^2) (tests and benchmarks only);
* ``sat``: the paper's dynamic programming over summed-area tables (Algorithm 1) with the
  hand-written backward of Appendix B, O(H W R_max D E) time, O(H W D E) memory;
* ``torch``: groups inside ``R_max`` as a distance-weighted local attention on tiles plus the merged
  groups through global sums, hand-written backward, O(H W R_max^2 (D + E)) time, O(H W (D + E)) memory;
* ``dense``: the same split with the local part as ``N x N`` products by blocks of queries
  (:mod:`.dense`), O(H^2 W^2 (D + E)) time, O(H W (D + E)) saved memory plus a cached index of
  ``8 H^2 W^2`` bytes: faster where the window ``(2 R_max - 1)^2`` covers much of the map;
* ``cpu``: the same local/global split with the local part in C++ (:mod:`.cpu`, forward and backward);
* ``triton``: the same local/global split with the local part in Triton kernels (forward and backward);
* ``fused``: both parts as one ``N x N`` weighting of every pair in one Triton program per block of
  queries (:mod:`.fused`, forward and backward): for small maps on a GPU.

``auto`` (:data:`OP`) takes, on CUDA, ``fused`` up to the crossover measured on the GPU
(:mod:`mmvisattn.ops.utils.crossover`; on a GPU without one, never), then ``triton`` where its kernels
take the heads (else ``torch``): the fastest of the local/global forms there at SMCA's size (the GPU
proof's benchmark rows, recorded beside its cases);
on CPU ``dense`` below the crossover measured in :mod:`.dense` (:func:`~.dense.dense_is_faster`) and
``cpu`` above it: with the ``R_max`` of the paper (2-16) the local form needs fewer operations than
the tables and far less memory.
"""
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from ..utils.crossover import dense_on_cuda
from ..utils.dispatch import (DRY_RUN, Op, Request, cpu_kernels, dry_output, reference_only, runs_anywhere,
                              triton_kernels)
from .dense import dense_is_faster, ripple_attention_dense
from .pytorch import ripple_attention_torch
from .reference import ripple_attention_reference
from .sat import ripple_attention_sat, vicinal_sum
from .weights import chebyshev_distances, group_weights, ring_weights, stick_breaking, truncate


def _sat_refusal(request: Request) -> str:
    return ('summed-area tables (Algorithm 1) hold D x E numbers a token; the local/global split is faster and '
            'lighter at R_max 2-16')


def _dense_refusal(request: Request) -> Optional[str]:
    if torch.onnx.is_in_onnx_export():  # the local part that traces right (see _check_exportable)
        return None
    if request.device == 'cuda':
        return "the dense blocks' crossover is measured on CPU; on CUDA impl='fused' takes small maps"
    hw_shape, r_max = request.fact('hw_shape'), request.fact('r_max')
    if dense_is_faster(hw_shape, r_max):
        return None
    return f'a {hw_shape[0]}x{hw_shape[1]} map at R_max {r_max} is past the crossover where the tiles are faster'


OP = Op('ripple_attention',
        dict(reference=reference_only, sat=_sat_refusal, dense=_dense_refusal, torch=runs_anywhere, cpu=cpu_kernels,
             triton=triton_kernels(), fused=dense_on_cuda('ripple_attention', triton_kernels(), impl='fused')),
        dict(cpu=('dense', 'cpu', 'torch'), cuda=('fused', 'triton', 'dense', 'torch')))
IMPLS = OP.impls


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float) -> None:
    """One-line errors for bad arguments of :func:`ripple_attention`."""
    height, width = hw_shape
    if height < 1 or width < 1 or q.shape[-2] != height * width:
        raise ValueError(f'ripple_attention: {q.shape[-2]} tokens do not match hw_shape={tuple(hw_shape)}')
    if k.shape != q.shape or v.shape[:-1] != q.shape[:-1] or logits.shape[:-1] != q.shape[:-1]:
        raise ValueError(f'ripple_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} and '
                         f'logits {tuple(logits.shape)} must share (..., N) with k shaped like q')
    if logits.shape[-1] < 1:
        raise ValueError(f'ripple_attention: R_max={logits.shape[-1]} (logits.shape[-1]); expected R_max >= 1')
    check_tau(tau)


def check_tau(tau: float, owner: str = 'ripple_attention') -> float:
    """``tau`` (the stick left over at which groups merge, §3.2) must lie in (0, 1)."""
    if not 0 < tau < 1:
        raise ValueError(f'{owner}: tau={tau!r}; expected 0 < tau < 1')
    return tau


def ripple_attention(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                     tau: float = 1e-3, impl: str = 'auto', eps: float = 1e-6) -> Tensor:
    """Ripple attention of feature-mapped queries and keys.

    Args:
        q, k: ``(..., N, D)`` non-negative features ``phi(q)``, ``phi(k)`` of ``N = H * W`` tokens
            (row-major).
        v: ``(..., N, E)`` values.
        logits: ``(..., N, R_max)`` stick logits ``o_r(i, j)`` of each query (C.3).
        hw_shape: ``(H, W)``; any size, ``R_max >= max(H, W)`` included.
        tau: Threshold of the stick left over, in (0, 1) (§3.2).
        impl: One of :data:`IMPLS`.
        eps: Added to the normaliser.

    Returns:
        ``(..., N, E)``.
    """
    _check_inputs(q, k, v, logits, hw_shape, tau)
    impl = OP.choose(impl, Request.of((q, k, v), hw_shape=tuple(hw_shape), r_max=logits.shape[-1],
                                      tokens=q.shape[-2]))
    if impl == DRY_RUN:
        return dry_output(q, v)
    _check_exportable(impl)
    return _implementation(impl)(q, k, v, logits, hw_shape, tau, eps)


def _check_exportable(impl: str) -> None:
    """Under ONNX export only the dense local part (and the reference) trace right: the tiles write into
    preallocated outputs, and the kernels are opaque calls; ``auto`` takes the dense one there."""
    if torch.onnx.is_in_onnx_export() and impl not in ('dense', 'reference'):
        raise ValueError(f"ripple_attention: impl={impl!r} does not export to ONNX; expected 'auto' or 'dense'")


def _implementation(impl: str) -> Callable[..., Tensor]:
    """The function of ``impl``; the C++ and Triton ones imported on first use (their compilers may be absent)."""
    if impl == 'cpu':
        from .cpu import ripple_attention_cpu
        return ripple_attention_cpu
    if impl == 'triton':
        from .triton import ripple_attention_triton
        return ripple_attention_triton
    if impl == 'fused':
        from .fused import ripple_attention_fused
        return ripple_attention_fused
    return dict(reference=ripple_attention_reference, sat=ripple_attention_sat, dense=ripple_attention_dense,
                torch=ripple_attention_torch)[impl]


# group_weights and chebyshev_distances: the explicit spatial weights, which the modules'
# attention maps (visualisation only) are drawn from.
__all__ = ['ripple_attention', 'check_tau', 'ripple_attention_reference', 'chebyshev_distances',
           'group_weights', 'stick_breaking', 'truncate', 'ring_weights', 'vicinal_sum', 'IMPLS', 'OP']
