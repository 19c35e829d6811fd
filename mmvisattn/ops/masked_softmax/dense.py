"""Masked softmax attention with the whole ``N x N`` weights under autograd (``impl='dense'``), for
what :mod:`.pytorch`'s blocks cannot take: dropout (a recomputed block would draw another mask) and
``torch.compile``.

Mixed precision: autocast off; logits, softmax, mask and dropout in float32 (half ``q`` and ``k``
upcast; float64 stays), the weights cast to ``v``'s dtype for the product, the output in ``v``'s
dtype.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import no_autocast, upcast


def masked_softmax_attention_dense(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                                   scale: Optional[float] = None, dropout: float = 0.0) -> Tensor:
    """``dropout((P * [P > t])) V`` with ``P = softmax(scale q k^T)``, every weight at once."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with no_autocast(q.device.type):
        q, k = upcast(q, k)
        weights = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
        weights = F.dropout(weights * (weights > threshold), dropout, training=dropout > 0)
        return weights.to(v.dtype) @ v
