"""Linear attention with the ``elu(x) + 1`` feature map (Katharopoulos et al., "Transformers are
RNNs: Fast Autoregressive Transformers with Linear Attention", ICML 2020, arXiv:2006.16236, Eq. 4-6
and Sec. 3.2.1)."""
from typing import Tuple

from torch import Tensor

from mmvisattn.ops.linearized import linear_attention
from mmvisattn.registry import ATTENTIONS

from .base import QKVAttention


@ATTENTIONS.register_module()
class LinearAttention(QKVAttention):
    """Multi-head linear attention; ``attn_drop`` must be 0 (the mechanism never forms the weights).
    Args: see :class:`QKVAttention`."""

    complexity = 'linear'
    extra_tokens = 'tokens like any other: every token attends to all and is attended by all'
    attn_drop_unsupported = 'the linearized form never forms attention weights'

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        return linear_attention(q, k, v)
