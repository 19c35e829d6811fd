"""Linear-angular attention in O(N d^2) with torch operations (see the package docstring)."""
import math

import torch.nn.functional as F
from torch import Tensor


def linear_angular_attention_torch(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``(B, heads, N, d)`` queries and keys, ``(B, heads, N, d_v)`` values -> ``(B, heads, N, d_v)``."""
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    key_values = k.transpose(-1, -2) @ v  # (B, h, d, d_v)
    numerator = 0.5 * v.sum(dim=-2, keepdim=True) + q @ key_values / math.pi
    normaliser = 0.5 * k.shape[-2] + q @ k.sum(dim=-2).unsqueeze(-1) / math.pi  # (B, h, N, 1)
    return numerator / normaliser
