"""Linear attention with the ``elu(x) + 1`` feature map (Katharopoulos et al., "Transformers are
RNNs", ICML 2020, Eq. 4-6)."""
from typing import Tuple

import torch.nn.functional as F
from torch import Tensor

from mmvisattn.ops.linearized import linearized_attention
from mmvisattn.registry import ATTENTIONS
from .base import QKVAttention


def elu_feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1``: positive, so the normaliser below never vanishes."""
    return F.elu(x) + 1


@ATTENTIONS.register_module()
class LinearAttention(QKVAttention):
    """Multi-head linear attention; ``attn_drop`` is accepted for interface parity but has no
    weights to drop (the mechanism never forms them). Args: see :class:`QKVAttention`."""

    complexity = 'linear'

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        return linearized_attention(elu_feature_map(q), elu_feature_map(k), v)
