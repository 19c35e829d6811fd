"""The auxiliary masked softmax attention of Castling-ViT (arXiv:2211.10526): softmax weights at or
below a threshold ``t`` dropped, the rest kept as they are (not renormalised)::

    P = softmax(s Q K^T),    out = (P * [P > t]) V

It trains beside the linear-angular branch and is removed for inference (ONNX export refuses it).
Backends in ``auto``'s order (:data:`OP`): ``dense`` (the whole weights under autograd, for dropout
and ``torch.compile``) and ``torch`` (blocks of queries recomputed in the backward, no ``N x N``
matrix kept); :func:`masked_softmax_attention_reference` is the literal form."""
from typing import NamedTuple, Optional

from torch import Tensor

from ..utils.dispatch import Backend, Op, Request, UnsupportedInput
from .dense import masked_softmax_attention_dense
from .pytorch import masked_softmax_attention_torch
from .reference import masked_softmax_attention_reference


class Options(NamedTuple):
    """What of a call decides the backend beside its tensors."""
    dropout: float


def _dense_passed_over(request: Request) -> Optional[str]:
    if request.options.dropout > 0 or request.context == 'compile':
        return None
    return ('no dropout on the weights and not compiled: the blocks of the torch path hold no N x '
            'N matrix')


def _torch_unsupported(request: Request) -> Optional[str]:
    if request.options.dropout > 0:
        return (f"dropout={request.options.dropout} on the weights: a recomputed block would draw "
                "another mask")
    return None


OP = Op('masked_softmax_attention', [
    Backend('dense', masked_softmax_attention_dense, passed_over=_dense_passed_over),
    Backend('torch', masked_softmax_attention_torch, _torch_unsupported),
])
IMPLS = OP.impls
# an exported graph would be the training network: the branch is removed for inference, never traced
EXPORT_REFUSAL = ('masked_softmax_attention: the training-only softmax branch is still in place: '
                  'call model.backbone.switch_to_deploy() (mmdeploy does) or '
                  'mmvisattn.deploy.switch_to_deploy(model) before exporting')


def masked_softmax_attention(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                             scale: Optional[float] = None,
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
    request = Request.of((q, k, v), Options(dropout))
    if request.context == 'export':
        raise UnsupportedInput(EXPORT_REFUSAL)
    return OP(impl, request, q, k, v, threshold, scale, dropout)


__all__ = ['masked_softmax_attention', 'masked_softmax_attention_reference', 'IMPLS', 'OP',
           'Options']
