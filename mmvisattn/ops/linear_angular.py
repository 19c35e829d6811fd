"""Linear-angular attention, "Castling-ViT" (seed 004): the angular kernel between L2-normalised
queries and keys keeps only its constant and linear terms,

    Sim(q, k) = 1/2 + (1/pi) q^ . k^,        q^ = q / ||q||,  k^ = k / ||k||,

which lies in [1/2 - 1/pi, 1/2 + 1/pi] (always positive), so attention normalised by its row sums
is a proper weighted average. Because the kernel is linear in q^ and k^, the ``N x N`` matrix is
never needed::

    out_i = (1/2 sum_j v_j + 1/pi q^_i (K^T V)) / (N/2 + 1/pi q^_i . sum_j k^_j)

* :func:`linear_angular_attention_reference` builds the ``N x N`` kernel (slow twin, tests only);
* :func:`linear_angular_attention` is the O(N d^2) form above.
"""
import math

import torch
import torch.nn.functional as F
from torch import Tensor


def angular_kernel_reference(q: Tensor, k: Tensor) -> Tensor:
    """``(B, heads, N, N)`` matrix ``1/2 + (1/pi) q^ k^T`` of normalised queries and keys."""
    return 0.5 + F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2) / math.pi


def linear_angular_attention_reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Row-normalised angular kernel times ``v`` with the explicit ``N x N`` matrix."""
    kernel = angular_kernel_reference(q, k)
    return kernel @ v / kernel.sum(dim=-1, keepdim=True)


def linear_angular_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The same in linear time: ``(B, heads, N, d)`` inputs, ``(B, heads, N, d_v)`` output."""
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    key_values = k.transpose(-1, -2) @ v  # (B, h, d, d_v)
    numerator = 0.5 * v.sum(dim=-2, keepdim=True) + q @ key_values / math.pi
    normaliser = 0.5 * k.shape[-2] + q @ k.sum(dim=-2).unsqueeze(-1) / math.pi  # (B, h, N, 1)
    return numerator / normaliser
