"""A LeViT-style hybrid backbone with castling attention, for PicoDet (arXiv:2211.10526 reports
PicoDet with a LeViT-based castling backbone but publishes no layout).

LeViT's layout (Graham et al. 2021, §4) with three changes for dense, linear-time detection: a stem
of three stride-2 convolutions (stages at strides 8, 16, 32, ESNet's levels); stride-2
depthwise-separable convolutions between stages instead of shrink attention;
:class:`~mmvisattn.models.attentions.LinearAngularAttention` with a 3x3 convolution over the map
(``conv='spatial'``). Each arch's PicoDet is within 2 % of PicoDet with the ESNet of its letter
(0.99 M, 2.15 M, 3.30 M)."""
from typing import List, Optional, Sequence, Tuple

import torch.nn as nn
from mmcv.cnn import ConvModule, DepthwiseSeparableConvModule
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from torch import Tensor

from mmvisattn.registry import build_attention, register_model

from .contract import BackboneContract, checkpointed, resolve_arch, stage_attention_options
from .pretrained import LoadsPretrained

HSWISH = dict(type='HSwish')
STAGE_STRIDES = (8, 16, 32)  # the stem's three stride-2 convolutions, then one per stage
BN = dict(type='BN')


class CastlingBlock(BaseModule):
    """``x + attn(BN(x))`` then ``x + MLP(x)`` on a ``(B, C, H, W)`` map; the MLP is LeViT's pair of
    1x1 convolutions with BatchNorm and hard swish."""

    def __init__(self, channels: int, num_heads: int, mlp_ratio: float, drop_path: float,
                 attn_cfg: dict, options: dict) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        self.attn = build_attention(attn_cfg, options, owner='CastlingLeViT', num_extra_tokens=0,
                                    embed_dims=channels, num_heads=num_heads)
        hidden = int(channels * mlp_ratio)
        self.mlp = nn.Sequential(ConvModule(channels, hidden, 1, norm_cfg=BN, act_cfg=HSWISH),
                                 ConvModule(hidden, channels, 1, norm_cfg=BN, act_cfg=None))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        batch, channels, height, width = x.shape
        tokens = self.attn(self.norm(x).flatten(2).transpose(1, 2), (height, width))
        x = x + self.drop_path(tokens.transpose(1, 2).reshape(batch, channels, height, width))
        return x + self.drop_path(self.mlp(x))


@register_model
class CastlingLeViT(LoadsPretrained, BackboneContract, BaseModule):
    """Three stages of castling blocks at strides 8, 16 and 32 (see the module docstring).

    Args:
        arch: ``'s' | 'm' | 'l'`` or a dict with ``widths``, ``depths`` and ``num_heads`` (3 each).
        out_indices: Stages to return.
        frozen_stages: -1 freezes nothing, 0 the stem, ``k`` the stem and the first ``k`` stages
            (with the downsampling convolution before each).
        norm_eval: Keep BatchNorm statistics frozen in training.
        with_cp: Recompute each block in the backward pass instead of keeping its activations.
        mlp_ratio: Hidden width of the MLPs over the block width (LeViT: 2).
        drop_path_rate: Stochastic depth, rising linearly over the blocks.
        attn_cfg: The attention of every block, any type of ``ATTENTIONS`` (no extra tokens);
            ``embed_dims``, ``num_heads`` and, where taken, ``conv='spatial'`` (the 3x3 depthwise
            convolution over the map
            of :class:`~mmvisattn.models.attentions.LinearAngularAttention`) and the stage's
            ``sr_ratio`` (:func:`~.contract.stage_attention_options`) are filled in.
        init_cfg: mmengine initialisation config; ``dict(type='Pretrained', checkpoint=...)`` reads
            this class's weights, bare or as the backbone of an mmpretrain classifier
            (:mod:`.pretrained`).
    """

    attention_args = ('attn_cfg',)
    arch_zoo = {'s': dict(widths=(48, 96, 160), depths=(1, 2, 2), num_heads=(2, 3, 5)),
                'm': dict(widths=(64, 128, 256), depths=(1, 2, 2), num_heads=(2, 4, 8)),
                'l': dict(widths=(80, 160, 320), depths=(1, 2, 2), num_heads=(2, 5, 10)),}

    def __init__(self, arch='s', out_indices: Sequence[int] = (0, 1, 2), frozen_stages: int = -1,
                 norm_eval: bool = False, with_cp: bool = False, mlp_ratio: float = 2.0,
                 drop_path_rate: float = 0.0,
                 attn_cfg: Optional[dict] = None, init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        layout = self._layout(arch)
        widths, depths, heads = layout['widths'], layout['depths'], layout['num_heads']
        self.with_cp = with_cp
        self.stem = nn.Sequential(ConvModule(3, widths[0] // 4, 3, stride=2, padding=1, norm_cfg=BN,
                                             act_cfg=HSWISH),
                                  ConvModule(widths[0] // 4, widths[0] // 2, 3, stride=2, padding=1,
                                             norm_cfg=BN, act_cfg=HSWISH),
                                  ConvModule(widths[0] // 2, widths[0], 3, stride=2, padding=1,
                                             norm_cfg=BN, act_cfg=None))
        rates = iter([drop_path_rate * i / max(sum(depths) - 1, 1) for i in range(sum(depths))])
        self.downsamples = nn.ModuleList(
            DepthwiseSeparableConvModule(widths[i - 1], widths[i], 3, stride=2, padding=1,
                                         norm_cfg=BN,
                                         act_cfg=HSWISH) for i in range(1, len(widths)))
        attn_cfg = dict(type='LinearAngularAttention') if attn_cfg is None else attn_cfg
        options = [dict(conv='spatial',
                        **stage_attention_options(stride)) for stride in STAGE_STRIDES]
        self.stages = nn.ModuleList(
            nn.Sequential(*(CastlingBlock(width, num_heads, mlp_ratio, next(rates), attn_cfg,
                                          stage_options)
                            for _ in range(depth)))
            for width, depth, num_heads, stage_options in zip(widths, depths, heads, options))
        self.set_contract(out_indices, frozen_stages, norm_eval, widths, STAGE_STRIDES)

    def stage_parts(self, index: int) -> List[nn.Module]:
        return [*self.downsamples[index - 1:index], self.stages[index]]

    def drop_stages_after(self, last: int) -> None:
        del self.stages[last + 1:], self.downsamples[last:]

    def _layout(self, arch) -> dict:
        keys = ('widths', 'depths', 'num_heads')
        layout = resolve_arch('CastlingLeViT', arch, self.arch_zoo, keys)
        if any(len(layout[k]) != 3 for k in keys):
            raise ValueError(f'CastlingLeViT: arch={arch!r}; expected three entries (one per '
                             f'stage) in each of {keys}')
        return layout

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x = self.stem(x)
        outs: List[Tensor] = []
        for index, stage in enumerate(self.stages):
            if index:
                x = self.downsamples[index - 1](x)
            for block in stage:
                x = checkpointed(block, self.with_cp, x)
            if index in self.out_indices:
                outs.append(x)
        return tuple(outs)
