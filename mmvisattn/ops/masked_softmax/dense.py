"""Masked softmax attention with the whole ``N x N`` weights under autograd (``impl='dense'``; see
:mod:`mmvisattn.ops.masked_softmax`), the form for what the blocks of :mod:`.pytorch` cannot take:
dropout on the kept weights (a block recomputed in the backward would draw another mask) and
``torch.compile`` (whose tracer sees the plain products instead of a hand-written backward).

Mixed precision: autocast off; half ``q`` and ``k`` upcast to float32 for the logits (a product of
two halves is exact in float32, and half logits of large inputs would overflow), softmax, mask and
dropout in float32 (float64 stays float64), the weights cast to ``v``'s dtype for the product with
``v`` (on the tensor cores under AMP), the output in ``v``'s dtype.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import no_autocast, upcast


def masked_softmax_attention_dense(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                                   scale: Optional[float] = None, dropout: float = 0.0) -> Tensor:
    """``dropout((P * [P > t])) V`` with ``P = softmax(scale q k^T)``, every weight at once;
    ``dropout`` is the probability of zeroing a weight (scaled
    as :func:`torch.nn.functional.dropout`)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with no_autocast(q.device.type):
        q, k = upcast(q, k)
        weights = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
        weights = F.dropout(weights * (weights > threshold), dropout, training=dropout > 0)
        return weights.to(v.dtype) @ v
