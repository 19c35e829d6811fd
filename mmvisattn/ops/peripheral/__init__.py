"""Peripheral attention, "Peripheral Vision Transformer" (arXiv:2206.06801, Eq. 5-8): content attention
``Phi_c = exp(tau q k^T)`` times a position attention ``Phi_p`` learnt from query-key distances,
normalised over the keys::

    out = Normalize[Phi_c * Phi_p] V = softmax(tau q k^T + log Phi_p) V

Two ops, each with a reference twin:

* :func:`peripheral_attention` mixes and normalises: ``reference`` (explicit ``N x N`` Eq. 5),
  ``torch`` (SDPA with ``log Phi_p`` as additive bias) and ``triton`` (flash attention with the bias,
  forward and backward, the bias gradient summed over the images inside the kernel, :mod:`.triton`);
  ``auto`` (:data:`OP`) takes torch everywhere: on a GPU, SDPA's fused kernels beat the earlier Triton
  forward (backward through SDPA) at PerViT's sizes (the GPU proof's benchmark rows; figures in
  docs/records/gpu_runs.md), and the order changes when a proof measures the kernels faster.
* :func:`position_logits` computes ``Phi_p``'s pre-sigmoid logits (Eq. 7-8): ``torch`` runs the
  first peripheral projection on the map of relative offsets and the rest on each query's window of
  it by chunks of queries (:mod:`.position`), ``triton`` the same with the windows in registers, one
  program per query (:mod:`.position_triton`: five launches a training step where the chunks take
  hundreds), ``reference`` on the full ``HW x HW x D_r`` distance tensor. ``auto`` (:data:`POSITION_OP`)
  takes Triton on CUDA, torch elsewhere.
"""
from typing import Sequence

from torch import Tensor

from ..utils.dispatch import DRY_RUN, Op, Request, dry_output, reference_only, runs_anywhere, triton_kernels
from .position import PositionParams, first_projection, grid_step, key_distances, peripheral_padding
from .position import position_logits as _position_logits_torch
from .reference import mixed_attention_reference, peripheral_attention_reference, position_logits_reference
from .pytorch import mixed_attention_weights, peripheral_attention_sdpa

OP = Op('peripheral_attention', dict(reference=reference_only, torch=runs_anywhere, triton=triton_kernels()),
        dict(cuda=('torch',)))
IMPLS = OP.impls
POSITION_OP = Op('position_logits', dict(reference=reference_only, torch=runs_anywhere, triton=triton_kernels()),
                 dict(cuda=('triton', 'torch')))
POSITION_IMPLS = POSITION_OP.impls


def peripheral_attention(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor, scale: float,
                         impl: str = 'auto') -> Tensor:
    """``Normalize[exp(scale q k^T) * Phi_p] v`` (Eq. 5).

    Args:
        q, k: ``(B, heads, N, d)`` queries and keys.
        v: ``(B, heads, N, e)`` values.
        log_phi_p: ``(heads, N, N)`` log position attention, shared by the batch.
        scale: The content temperature ``tau``.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(B, heads, N, e)``.
    """
    impl = OP.choose(impl, Request.of((q, k, v)))
    if log_phi_p.shape != (q.shape[1], q.shape[2], k.shape[2]):
        raise ValueError(f'peripheral_attention: log_phi_p of shape {tuple(log_phi_p.shape)}; expected '
                         f'(heads, queries, keys) = {(q.shape[1], q.shape[2], k.shape[2])}')
    if impl == DRY_RUN:
        return dry_output(q, v)
    if impl == 'reference':
        return peripheral_attention_reference(q, k, v, log_phi_p, scale)
    if impl == 'triton':
        from .triton import peripheral_attention_triton
        return peripheral_attention_triton(q, k, v, log_phi_p, scale)
    return peripheral_attention_sdpa(q, k, v, log_phi_p, scale)


def position_logits(params: PositionParams, hw_shape: Sequence[int], impl: str = 'auto', eps: float = 1e-5) -> Tensor:
    """Pre-sigmoid ``Phi_p`` logits on an ``H x W`` grid (Eq. 7-8).

    Args:
        params: The peripheral projections and norms of one layer.
        hw_shape: ``(H, W)``.
        impl: One of :data:`POSITION_IMPLS`.
        eps: Of both instance norms.

    Returns:
        ``(heads, H W, H W)``, float32 (float64 stays).
    """
    impl = POSITION_OP.choose(impl, Request.of((params.conv2_weight,)))
    tokens = hw_shape[0] * hw_shape[1]
    if impl == DRY_RUN:
        return params.conv2_weight.new_empty(params.conv2_weight.shape[0], tokens, tokens)
    if impl == 'reference':
        return position_logits_reference(params, hw_shape, eps)
    if impl == 'triton':
        from .position_triton import position_window_logits
        return position_window_logits(first_projection(params, hw_shape), *params.window_params(), hw_shape, eps)
    return _position_logits_torch(params, hw_shape, eps)


__all__ = ['peripheral_attention', 'position_logits', 'PositionParams', 'mixed_attention_weights',
           'mixed_attention_reference', 'peripheral_attention_reference', 'position_logits_reference',
           'key_distances', 'grid_step', 'peripheral_padding', 'IMPLS', 'POSITION_IMPLS', 'OP', 'POSITION_OP']
