"""The auxiliary masked softmax attention of Castling-ViT, "Castling-ViT: Compressing self-attention via
switching towards linear-angular attention during vision transformer inference" (arXiv:2211.10526):
softmax weights at or below a threshold ``t`` dropped, the rest kept as they are (not renormalised)::

    P = softmax(s Q K^T),    out = (P * [P > t]) V

It trains beside the linear-angular branch and is removed for inference.

Implementations (``impl=``): ``torch`` (:mod:`.pytorch`) by blocks of queries with the backward written
out: it saves only the inputs and recomputes a block's weights in the backward, so no ``N x N`` matrix
outlives its block; ``triton`` (:mod:`.triton`), flash-attention kernels (tiles of weights in registers,
the output and one log-sum-exp per query saved), which ``auto`` takes on CUDA once a GPU proof has
measured them faster than ``torch`` (``FASTEST_ON_CUDA`` in :mod:`mmvisattn.proof.cases`; not yet);
``dense`` (:mod:`.dense`), the whole weights under autograd, which ``auto`` takes for dropout on the
weights (a recomputed block would draw another mask) and under ``torch.compile``; ``reference``
(:mod:`.reference`), the literal form in float32, for tests.

Mixed precision (the ``torch`` path; :mod:`.dense` says its own): the products take the inputs' dtype as
operands (float16/bfloat16 under AMP, on the tensor cores) and give float32 (:func:`.pytorch.product`):
half logits of large inputs would overflow before the softmax. Logits, softmax, mask and the softmax's
backward are float32; the weights and their gradient enter the next products in the inputs' dtype, as in
FlashAttention. Autocast is off in both passes; the output comes back in ``v``'s dtype, each gradient in
its input's.
"""
from typing import Optional

import torch
from torch import Tensor

from ..utils.dispatch import DRY_RUN, Op, Request, dry_output, reference_only, runs_anywhere, triton_kernels
from .dense import masked_softmax_attention_dense
from .pytorch import masked_softmax_attention_torch, query_block
from .reference import masked_softmax_attention_reference


def _dense_refusal(request: Request) -> Optional[str]:
    if request.fact('dropout') > 0 or request.fact('compiling'):
        return None
    return 'no dropout on the weights and not compiled: the blocks of the torch path hold no N x N matrix'


_ORDER = ('dense', 'torch')
OP = Op('masked_softmax_attention',
        dict(reference=reference_only, dense=_dense_refusal, triton=triton_kernels(), torch=runs_anywhere),
        dict(cpu=_ORDER, cuda=_ORDER, meta=_ORDER))
IMPLS = OP.impls


def masked_softmax_attention(q: Tensor, k: Tensor, v: Tensor, threshold: float, scale: Optional[float] = None,
                             dropout: float = 0.0, impl: str = 'auto') -> Tensor:
    """Masked softmax attention: weights ``softmax(scale q k^T)`` at or below ``threshold`` dropped.

    Args:
        q, k: ``(..., N, D)`` queries and keys (``k`` may have another length ``M``).
        v: ``(..., M, E)`` values.
        threshold: Weights at or below it are dropped.
        scale: Of the logits; ``D ** -0.5`` by default.
        dropout: Probability of zeroing a kept weight (training); only ``dense`` takes it.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(..., N, E)`` in ``v``'s dtype.
    """
    impl = OP.choose(impl, Request.of((q, k, v), dropout=dropout, compiling=torch.compiler.is_compiling()))
    if impl == DRY_RUN:
        return dry_output(q, v)
    if impl == 'dense':
        return masked_softmax_attention_dense(q, k, v, threshold, scale, dropout)
    if dropout > 0:
        raise ValueError(f"masked_softmax_attention: dropout={dropout} with impl={impl!r}; only impl='dense' "
                         "(or 'auto') draws a dropout mask")
    if impl == 'reference':
        return masked_softmax_attention_reference(q, k, v, threshold, scale)
    if impl == 'triton':
        from .triton import masked_softmax_attention_triton
        return masked_softmax_attention_triton(q, k, v, threshold, scale)
    return masked_softmax_attention_torch(q, k, v, threshold, scale)


__all__ = ['masked_softmax_attention', 'masked_softmax_attention_reference', 'query_block', 'IMPLS', 'OP']
