"""The reference implementation of the masked softmax attention
(:mod:`mmvisattn.ops.masked_softmax`): the whole ``N x N`` weights under autograd, in float32."""
from typing import Optional

import torch
from torch import Tensor

from ..utils.amp import float32_math


@float32_math
def masked_softmax_attention_reference(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                                       scale: Optional[float] = None) -> Tensor:
    """The literal form under autograd, the whole ``N x N`` weights at once, in float32."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    weights = weights * (weights > threshold)
    return weights @ v
