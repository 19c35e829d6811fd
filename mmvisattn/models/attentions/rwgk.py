"""Random-walk graph kernel attention with learnable anchors (RWGKA) or anchors pooled from the
tokens (RWGKP), "Improving vision attention with random walk graph kernel" (OpenReview, ICLR 2023),
Sec. 3.2, Algorithm 1; the op lives in :mod:`mmvisattn.ops.rwgk`."""
import math
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmvisattn.ops.rwgk import IMPLS, check_lam, rwgk_attention
from mmvisattn.registry import ATTENTIONS

from .base import BaseAttention

ANCHOR_MODES = ('learnable', 'pooled')


def adaptive_pooling_matrix(size: int, bins: int, like: Tensor) -> Tensor:
    """``(bins, size)``: row ``i`` averages
    ``floor(i size / bins) .. ceil((i + 1) size / bins) - 1``, the bins of ``adaptive_avg_pool``."""
    index = torch.arange(size, device=like.device)
    starts = torch.arange(bins, device=like.device) * size // bins
    ends = -(-(torch.arange(bins, device=like.device) + 1) * size // bins)
    inside = (index[None] >= starts[:, None]) & (index[None] < ends[:, None])
    return inside.to(like.dtype) / (ends - starts)[:, None].to(like.dtype)


@ATTENTIONS.register_module()
class RWGKAttention(BaseAttention):
    """Multi-head random-walk graph kernel attention over all ``H * W`` tokens in linear time.
    Parameter names follow SegFormer's attention (``q``, ``kv``, ``proj``), so a MiT checkpoint
    supplies all but the anchors.

    Args:
        embed_dims: Channels ``C``.
        num_heads: Number of heads (Table 5 doubles them at half the anchors).
        num_anchors: Anchors ``M`` per head; ``'pooled'`` rounds it to a square grid, which may
            exceed the map.
        lam: Random-walk decay in (0, 1) (Table 5: 0.1, 0.5, 0.9; 0.5 by default).
        anchor_mode: ``'learnable'`` (RWGKA: ``B_Q``, ``B_K`` parameters of shape
            ``(heads, M, C / heads)``, Xavier-initialised) or ``'pooled'`` (RWGKP: the queries and
            keys average-pooled to a ``sqrt(M) x sqrt(M)`` grid).
        qkv_bias: Whether ``q`` and ``kv`` have a bias.
        attn_drop: Must be 0 (SegFormer's interface): the mechanism forms no ``N x N`` weights.
        proj_drop: Dropout after ``proj``.
        impl: Backend of the op, one of :data:`mmvisattn.ops.rwgk.IMPLS`.
        num_extra_tokens: Tokens in front of the map.
        init_cfg: mmengine initialisation config.
    """

    complexity = 'linear'
    extra_tokens = ('queries and keys like any other (``pooled`` anchors average the map alone): '
                    'every token attends to all through the anchors and is attended by all')
    impls = IMPLS
    attn_drop_unsupported = 'no N x N attention weights are formed'

    def __init__(self, embed_dims: int, num_heads: int, num_anchors: int = 64, lam: float = 0.5,
                 anchor_mode: str = 'learnable', qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0, impl: str = 'auto', num_extra_tokens: int = 0,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, num_extra_tokens, init_cfg=init_cfg)
        if not isinstance(num_anchors, int) or num_anchors <= 0:
            raise ValueError(f'RWGKAttention: num_anchors={num_anchors!r} must be a positive '
                             'integer')
        if anchor_mode not in ANCHOR_MODES:
            raise ValueError(f'RWGKAttention: anchor_mode={anchor_mode!r}; expected one of '
                             f'{ANCHOR_MODES}')
        self.check_attn_drop(attn_drop)
        check_lam(lam)
        self.lam = lam
        self.impl = self.check_impl(impl)
        self.anchor_mode = anchor_mode
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        if anchor_mode == 'learnable':
            self.num_anchors = num_anchors
            self.anchor_q = nn.Parameter(torch.empty(num_heads, num_anchors, self.head_dims))
            self.anchor_k = nn.Parameter(torch.empty(num_heads, num_anchors, self.head_dims))
            for anchors in (self.anchor_q, self.anchor_k):
                for head in anchors.data:
                    nn.init.xavier_uniform_(head)
        else:
            self.pool_size = max(1, round(math.sqrt(num_anchors)))
            self.num_anchors = self.pool_size ** 2

    def pooled_anchors(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """``(B, heads, N, d)`` tokens -> ``(B, heads, M, d)`` anchors, the spatial tokens
        average-pooled by two products with the axes' pooling matrices (``adaptive_avg_pool2d``'s
        bins, exportable at any size)."""
        height, width = (int(side) for side in hw_shape)
        grid = x[:, :, self.num_extra_tokens:].unflatten(2, (height, width))  # (B, heads, H, W, d)
        rows, cols = (adaptive_pooling_matrix(side, self.pool_size, x) for side in (height, width))
        pooled = torch.einsum('ih,bnhwd,jw->bnijd', rows, grid, cols)
        return pooled.flatten(2, 3)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        hw_shape = self.check_tokens(x, hw_shape)
        q = self.split_heads(self.q(x))
        k, v = (self.split_heads(t) for t in self.kv(x).chunk(2, dim=-1))
        if self.anchor_mode == 'learnable':
            anchor_q, anchor_k = self.anchor_q.unsqueeze(0), self.anchor_k.unsqueeze(0)
        else:
            anchor_q, anchor_k = self.pooled_anchors(q, hw_shape), self.pooled_anchors(k, hw_shape)
        out = rwgk_attention(q, k, v, anchor_q, anchor_k, self.lam, impl=self.impl)
        return self.proj_drop(self.proj(self.merge_heads(out)))
