"""Linear-angular attention, "Castling-ViT" (arXiv:2211.10526): the angular kernel between L2-normalised
queries and keys keeps only its constant and linear terms,

    Sim(q, k) = 1/2 + (1/pi) q^ . k^,        q^ = q / ||q||,  k^ = k / ||k||,

which lies in [1/2 - 1/pi, 1/2 + 1/pi] (always positive), so attention normalised by its row sums
is a proper weighted average. Because the kernel is linear in q^ and k^, the ``N x N`` matrix is
never needed::

    out_i = (1/2 sum_j v_j + 1/pi q^_i (K^T V)) / (N/2 + 1/pi q^_i . sum_j k^_j)

Implementations: ``reference`` (explicit N x N kernel, tests only), ``torch`` (the form above),
``triton`` (two fused passes) and ``dense`` (the ``N x N`` kernel tile by tile in one Triton program,
flash-attention style, :mod:`.dense`); ``auto`` (:data:`OP`) takes, on CUDA, ``dense`` up to the
crossover measured on the GPU (:mod:`mmvisattn.ops.utils.crossover`; on a GPU without one, never), then
``triton`` where its kernels take the inputs (measured faster than torch there by the GPU proof,
forward and forward + backward), and torch otherwise.
:func:`linear_angular_unnormalised` is the official module's form without the row-sum division.
"""
from torch import Tensor

from ..utils.crossover import dense_on_cuda
from ..utils.dispatch import DRY_RUN, Op, Request, dry_output, reference_only, runs_anywhere, triton_kernels
from .pytorch import linear_angular_attention_torch, linear_angular_unnormalised
from .reference import angular_kernel_reference, linear_angular_attention_reference

OP = Op('linear_angular_attention',
        dict(reference=reference_only, torch=runs_anywhere, triton=triton_kernels(),
             dense=dense_on_cuda('linear_angular_attention', triton_kernels())),
        dict(cuda=('dense', 'triton', 'torch')))
IMPLS = OP.impls


def linear_angular_attention(q: Tensor, k: Tensor, v: Tensor, impl: str = 'auto') -> Tensor:
    """Row-normalised linear-angular attention.

    Args:
        q, k: ``(B, heads, N, d)`` queries and keys (normalised inside).
        v: ``(B, heads, N, e)`` values.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(B, heads, N, e)``.
    """
    impl = OP.choose(impl, Request.of((q, k, v), tokens=k.shape[-2]))
    if impl == DRY_RUN:
        return dry_output(q, v)
    if impl == 'reference':
        return linear_angular_attention_reference(q, k, v)
    if impl == 'triton':
        from .triton import linear_angular_attention_triton
        return linear_angular_attention_triton(q, k, v)
    if impl == 'dense':
        from .dense import linear_angular_attention_dense
        return linear_angular_attention_dense(q, k, v)
    return linear_angular_attention_torch(q, k, v)


__all__ = ['linear_angular_attention', 'linear_angular_unnormalised', 'linear_angular_attention_reference',
           'angular_kernel_reference', 'IMPLS', 'OP']
