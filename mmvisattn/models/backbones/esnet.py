"""ESNet, the "Enhanced ShuffleNet" backbone of PP-PicoDet v1 ("PP-PicoDet: a better real-time
object detector on mobile devices", arXiv:2111.00902, §3.1; PaddleDetection release/2.6), the
detector the Castling-ViT talk (arXiv:2211.10526) reports on COCO.

mmdet 3 has none (mmpretrain's ShuffleNetV2 lacks the SE module, the ghost-style concat and
per-block widths), so the blocks are built from mmcv's ``ConvModule`` and mmdet's ``SELayer``: a 3x3
stride-2 stem to 24 channels, a max-pool, then stages of [3, 7, 3] blocks at strides 8, 16 and 32.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import ConvModule
from mmdet.models.layers import SELayer
from mmengine.model import BaseModule
from torch import Tensor

from mmvisattn.registry import register_model

from .contract import BackboneContract, checkpointed, resolve_arch

STAGE_STRIDES = (8, 16, 32)  # the stem takes 4 (a stride-2 conv and max pooling), each stage 2

HSWISH = dict(type='HSwish')
# PP-PicoDet's SE: squeeze by 4, ReLU, hard sigmoid (torch's, registered in compat)
SE_ACTIVATIONS = (dict(type='ReLU'), dict(type='Hardsigmoid'))

# PaddleDetection's per-block ratios of the middle width to the block width (13 blocks).
RATIOS_S = (0.875, 0.5, 0.5, 0.5, 0.625, 0.5, 0.625, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5)
RATIOS_ML = (0.875, 0.5, 1.0, 0.625, 0.5, 0.75, 0.625, 0.625, 0.5, 0.625, 1.0, 0.625, 0.75)


def make_divisible(value: float, divisor: int = 16) -> int:
    """Round ``value`` to the nearest multiple of ``divisor`` that loses at most 10 % of it."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    """Interleave the channels of ``groups`` groups (ShuffleNet): a block's halves mix."""
    batch, channels, height, width = x.shape
    return x.view(batch, groups, channels // groups, height, width).transpose(1, 2).reshape(
        batch, channels, height, width)


def conv_bn(in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1,
            groups: int = 1, act: Optional[dict] = HSWISH) -> ConvModule:
    """Bias-free convolution, BatchNorm, optional activation (PaddleDetection's ConvBNLayer)."""
    return ConvModule(in_channels, out_channels, kernel_size, stride=stride,
                      padding=kernel_size // 2,
                      groups=groups, norm_cfg=dict(type='BN'), act_cfg=act)


class ESBlock(BaseModule):
    """Stride-1 ES block: half the channels pass through; the other half go through a 1x1 conv, a
    depthwise 3x3 whose output is concatenated with its input (ghost style), SE and a 1x1 conv;
    the halves are concatenated and shuffled."""

    def __init__(self, channels: int, mid_channels: int) -> None:
        super().__init__()
        self.conv_pw = conv_bn(channels // 2, mid_channels // 2)
        self.conv_dw = conv_bn(mid_channels // 2, mid_channels // 2, 3, groups=mid_channels // 2,
                               act=None)
        self.se = SELayer(mid_channels, ratio=4, act_cfg=SE_ACTIVATIONS)
        self.conv_linear = conv_bn(mid_channels, channels // 2)

    def forward(self, x: Tensor) -> Tensor:
        passed, transformed = x.chunk(2, dim=1)
        transformed = self.conv_pw(transformed)
        transformed = torch.cat([transformed, self.conv_dw(transformed)], dim=1)
        transformed = self.conv_linear(self.se(transformed))
        return channel_shuffle(torch.cat([passed, transformed], dim=1), 2)


class ESDownBlock(BaseModule):
    """Stride-2 ES block: a depthwise-then-1x1 branch and a 1x1-depthwise-SE-1x1 branch, both
    halving the resolution, concatenated and fused by a depthwise 3x3 and a 1x1 conv."""

    def __init__(self, in_channels: int, mid_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv_dw_1 = conv_bn(in_channels, in_channels, 3, stride=2, groups=in_channels,
                                 act=None)
        self.conv_linear_1 = conv_bn(in_channels, out_channels // 2)
        self.conv_pw_2 = conv_bn(in_channels, mid_channels // 2)
        self.conv_dw_2 = conv_bn(mid_channels // 2, mid_channels // 2, 3, stride=2,
                                 groups=mid_channels // 2, act=None)
        self.se = SELayer(mid_channels // 2, ratio=4, act_cfg=SE_ACTIVATIONS)
        self.conv_linear_2 = conv_bn(mid_channels // 2, out_channels // 2)
        self.conv_dw_mv1 = conv_bn(out_channels, out_channels, 3, groups=out_channels)
        self.conv_pw_mv1 = conv_bn(out_channels, out_channels)

    def forward(self, x: Tensor) -> Tensor:
        shortcut = self.conv_linear_1(self.conv_dw_1(x))
        branch = self.conv_linear_2(self.se(self.conv_dw_2(self.conv_pw_2(x))))
        return self.conv_pw_mv1(self.conv_dw_mv1(torch.cat([shortcut, branch], dim=1)))


@register_model
class ESNet(BackboneContract, BaseModule):
    """ESNet backbone of PP-PicoDet v1, for mmdet (and mmseg) configs.

    Args:
        arch: ``'s'`` (width x0.75), ``'m'`` (x1.0) or ``'l'`` (x1.25), with PaddleDetection's
            block widths, or a dict with ``scale`` and the 13 per-block ``ratios``.
        out_indices: Which of the three stages (strides 8, 16, 32) to return.
        frozen_stages: -1 freezes nothing, 0 the stem, ``k`` the stem and the first ``k`` stages.
        norm_eval: Keep BatchNorm statistics frozen in training.
        with_cp: Recompute each ES block in the backward pass instead of keeping its activations.
        init_cfg: mmengine initialisation config (e.g. a ``Pretrained`` checkpoint).
    """

    arch_zoo = {'s': dict(scale=0.75, ratios=RATIOS_S), 'm': dict(scale=1.0, ratios=RATIOS_ML),
                'l': dict(scale=1.25, ratios=RATIOS_ML)}
    stage_blocks = (3, 7, 3)

    def __init__(self, arch: Union[str, dict] = 's', out_indices: Sequence[int] = (0, 1, 2),
                 frozen_stages: int = -1, norm_eval: bool = False, with_cp: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        layout = resolve_arch('ESNet', arch, self.arch_zoo, ('scale', 'ratios'))
        scale, ratios = layout['scale'], layout['ratios']
        self.with_cp = with_cp
        self.stage_channels = [make_divisible(width * scale) for width in (128, 256, 512)]
        self.stem = nn.Sequential(conv_bn(3, 24, 3, stride=2), nn.MaxPool2d(3, stride=2, padding=1))
        self.stages = nn.ModuleList(self._make_stages(ratios))
        self.set_contract(out_indices, frozen_stages, norm_eval, self.stage_channels, STAGE_STRIDES)

    def _make_stages(self, ratios: Sequence[float]) -> List[nn.Sequential]:
        stages, in_channels, ratio_iter = [], 24, iter(ratios)
        for channels, num_blocks in zip(self.stage_channels, self.stage_blocks):
            mids = [make_divisible(int(channels * next(ratio_iter)),
                                   divisor=8) for _ in range(num_blocks)]
            blocks = [ESDownBlock(in_channels, mids[0], channels)]
            blocks += [ESBlock(channels, mid) for mid in mids[1:]]
            stages.append(nn.Sequential(*blocks))
            in_channels = channels
        return stages

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x = self.stem(x)
        outs = []
        for index, stage in enumerate(self.stages):
            for block in stage:
                x = checkpointed(block, self.with_cp, x)
            if index in self.out_indices:
                outs.append(x)
        return tuple(outs)
