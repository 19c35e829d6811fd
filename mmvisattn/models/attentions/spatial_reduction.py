"""Spatial-reduction attention (PVT: Wang et al., ICCV 2021, Sec. 3.3; SegFormer: Xie et al.,
NeurIPS 2021, Eq. 2): keys and values come from the token map shrunk ``sr_ratio`` times per side."""
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.registry import ATTENTIONS

from .base import BaseAttention


@ATTENTIONS.register_module()
class SpatialReductionAttention(BaseAttention):
    """Softmax attention of all queries against ``(H / r) * (W / r)`` reduced keys and values:
    mmseg's ``EfficientMultiheadAttention`` without its inner residual and
    ``nn.MultiheadAttention``, in the project's interface. Parameter names follow mmseg (``sr``,
    ``norm``), ``q`` and ``kv`` split.

    Args:
        embed_dims: Channels ``C``.
        num_heads: Number of heads.
        sr_ratio: Reduction ratio ``r`` of the key/value map (a stride-``r`` conv and LayerNorm); 1
            means plain softmax attention.
        qkv_bias: Whether the ``q`` and ``kv`` projections have a bias.
        attn_drop: Dropout on the attention weights.
        proj_drop: Dropout after the output projection.
        norm_eps: Epsilon of the LayerNorm after the reduction (SegFormer and mmseg's MiT: 1e-6).
        num_extra_tokens: Tokens in front of the map.
        init_cfg: mmengine initialisation config.
    """

    complexity = 'quadratic'
    extra_tokens = ('queries like any other, and keys and values beside the reduced map, '
                    'unreduced: they attend '
                    'to the reduced map and to each other, and every query attends to them')

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int = 8, qkv_bias: bool = True,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, norm_eps: float = 1e-6,
                 num_extra_tokens: int = 0, init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, num_extra_tokens, init_cfg=init_cfg)
        if not isinstance(sr_ratio, int) or sr_ratio < 1:
            raise ValueError(f'SpatialReductionAttention: sr_ratio={sr_ratio!r} must be a positive '
                             'integer')
        self.sr_ratio = sr_ratio
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * embed_dims, bias=qkv_bias)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(embed_dims, eps=norm_eps)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def reduce(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """Shrink the spatial tokens ``r`` times per side (rounding down, as mmseg), extra tokens
        kept; a side shorter than ``r`` is zero-padded to one cell."""
        if self.sr_ratio == 1:
            return x
        extra, spatial = x[:, :self.num_extra_tokens], x[:, self.num_extra_tokens:]
        height, width = hw_shape
        grid = spatial.transpose(1, 2).reshape(x.shape[0], self.embed_dims, height, width)
        grid = F.pad(grid, (0, max(0, self.sr_ratio - width), 0, max(0, self.sr_ratio - height)))
        reduced = self.norm(self.sr(grid).flatten(2).transpose(1, 2))
        return torch.cat([extra, reduced], dim=1)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        hw_shape = self.check_tokens(x, hw_shape)
        k, v = self.kv(self.reduce(x, hw_shape)).chunk(2, dim=-1)
        out = F.scaled_dot_product_attention(
            self.split_heads(self.q(x)), self.split_heads(k), self.split_heads(v),
            dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(self.merge_heads(out)))
