"""The reference implementation: the ``N x N`` angular kernel built explicitly."""
import math

import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import float32_math


def angular_kernel_reference(q: Tensor, k: Tensor) -> Tensor:
    """``(B, heads, N, N)`` matrix ``1/2 + (1/pi) q^ k^T`` of normalised queries and keys."""
    return 0.5 + F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2) / math.pi


@float32_math  # in float32 whatever the dtype (float64 stays)
def linear_angular_attention_reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Row-normalised angular kernel times ``v`` with the explicit ``N x N`` matrix."""
    kernel = angular_kernel_reference(q, k)
    return kernel @ v / kernel.sum(dim=-1, keepdim=True)
