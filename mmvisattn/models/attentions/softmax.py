"""Multi-head softmax attention (Vaswani et al., "Attention is all you need", NeurIPS 2017, Eq. 1),
the quadratic baseline every efficient attention of the project is compared against."""
from typing import Tuple

import torch.nn.functional as F
from torch import Tensor

from mmvisattn.registry import ATTENTIONS

from .base import QKVAttention


@ATTENTIONS.register_module()
class SoftmaxAttention(QKVAttention):
    """``softmax(q k^T / sqrt(d)) v`` over all tokens through ``F.scaled_dot_product_attention`` (a
    fused kernel where there is one).

    Args: see :class:`QKVAttention`.
    """

    complexity = 'quadratic'
    extra_tokens = 'tokens like any other: every token attends to all and is attended by all'

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v,
                                              dropout_p=self.attn_drop if self.training else 0.0)
