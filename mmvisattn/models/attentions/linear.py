"""Linear attention with the ``elu(x) + 1`` feature map (Katharopoulos et al., "Transformers are
RNNs", ICML 2020, Eq. 4-6)."""
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.registry import ATTENTIONS
from .base import QKVAttention


def elu_feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1``: positive, so the normaliser below never vanishes."""
    return F.elu(x) + 1


def linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """``phi(q) (phi(k)^T v) / (phi(q) sum_j phi(k_j))`` in O(N d^2) (Eq. 6).

    ``q, k, v``: ``(B, heads, N, d)``. The ``d x d`` summary ``phi(k)^T v`` replaces the
    ``N x N`` score matrix of softmax attention.
    """
    q, k = elu_feature_map(q), elu_feature_map(k)
    kv = torch.einsum('bhnd,bhne->bhde', k, v)
    normaliser = torch.einsum('bhnd,bhd->bhn', q, k.sum(dim=2)).unsqueeze(-1)
    return torch.einsum('bhnd,bhde->bhne', q, kv) / (normaliser + eps)


@ATTENTIONS.register_module()
class LinearAttention(QKVAttention):
    """Multi-head linear attention; ``attn_drop`` is accepted for interface parity but has no
    weights to drop (the mechanism never forms them). Args: see :class:`QKVAttention`."""

    complexity = 'linear'

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        return linear_attention(q, k, v)
