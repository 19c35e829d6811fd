"""The reference feature map: Eq. 13 of arXiv:2110.02453 (Appendix C.1) under autograd."""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import float32_math


@float32_math
def trig_relu_features_reference(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor,
                                 scale: float = 1.0) -> Tensor:
    """Eq. 13 of ``(..., d)`` inputs: ``w1`` ``(m, d)``, ``w2`` ``(d', 2m)``, ``b2`` ``(d',)``."""
    projected = (x * scale) @ w1.t()
    return F.relu(torch.cat([projected.sin(), projected.cos()], dim=-1) @ w2.t() + b2)
