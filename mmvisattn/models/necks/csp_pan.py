"""CSP-PAN, the neck of PP-PicoDet v1 (arXiv:2111.00902, §3.2; PaddleDetection release/2.6).

mmdet's PAFPNs with CSP blocks (``YOLOXPAFPN``, ``CSPNeXtPAFPN``) lack PicoDet's layout: every level
mapped to one width by a 1x1 conv, depthwise-separable 5x5 convolutions (mmdet's
``DarknetBottleneck`` fixes 3) and a P6 from two stride-2 convolutions. The CSP blocks are mmdet's
``CSPLayer``.
"""
from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule, DepthwiseSeparableConvModule
from mmdet.models.layers import CSPLayer
from mmengine.model import BaseModule
from torch import Tensor

from mmvisattn.registry import register_model


@register_model
class CSPPAN(BaseModule):
    """Top-down then bottom-up path aggregation with CSP blocks and an optional extra top level.

    Args:
        in_channels: Channels of the backbone levels (strides 8, 16, 32).
        out_channels: Width of every output level (PicoDet: 96 / 128 / 160 for s / m / l).
        kernel_size: Kernel of the depthwise convolutions.
        num_csp_blocks: Bottlenecks per CSP block.
        num_extra_levels: 1 adds P6 (PicoDet v1), 0 returns the input levels only.
        norm_cfg: Norm layers.
        act_cfg: Activations (PicoDet: hard swish).
        init_cfg: mmengine initialisation config.
    """

    def __init__(self, in_channels: Sequence[int], out_channels: int, kernel_size: int = 5,
                 num_csp_blocks: int = 1, num_extra_levels: int = 1,
                 norm_cfg: dict = dict(type='BN'),  # noqa: B006
                 act_cfg: dict = dict(type='HSwish'),  # noqa: B006
                 init_cfg=None) -> None:
        super().__init__(init_cfg=init_cfg)
        if num_extra_levels not in (0, 1):
            raise ValueError(f'CSPPAN: num_extra_levels={num_extra_levels}; expected 0 or 1 (P6)')
        conv = dict(norm_cfg=norm_cfg, act_cfg=act_cfg)
        num_levels = len(in_channels)

        def downsample() -> DepthwiseSeparableConvModule:
            return DepthwiseSeparableConvModule(out_channels, out_channels, kernel_size, stride=2,
                                                padding=kernel_size // 2, **conv)

        def csp_block() -> CSPLayer:
            block = CSPLayer(2 * out_channels, out_channels, num_blocks=num_csp_blocks,
                             add_identity=False, use_depthwise=True, **conv)
            for bottleneck in block.blocks:
                width = bottleneck.conv2.pointwise_conv.conv.out_channels
                bottleneck.conv2 = DepthwiseSeparableConvModule(
                    width, width, kernel_size, padding=kernel_size // 2, **conv
                )
            return block

        self.reduce_layers = nn.ModuleList(ConvModule(channels, out_channels, 1,
                                                      **conv) for channels in in_channels)
        self.top_down_blocks = nn.ModuleList(csp_block() for _ in range(num_levels - 1))
        self.downsamples = nn.ModuleList(downsample() for _ in range(num_levels - 1))
        self.bottom_up_blocks = nn.ModuleList(csp_block() for _ in range(num_levels - 1))
        self.extra_from_input = nn.ModuleList(downsample() for _ in range(num_extra_levels))
        self.extra_from_output = nn.ModuleList(downsample() for _ in range(num_extra_levels))

    def forward(self, inputs: Sequence[Tensor]) -> Tuple[Tensor, ...]:
        if len(inputs) != len(self.reduce_layers):
            raise ValueError(
                f'CSPPAN: got {len(inputs)} levels; expected {len(self.reduce_layers)}'
            )
        inputs = [reduce(x) for reduce, x in zip(self.reduce_layers, inputs)]
        inner: List[Tensor] = [inputs[-1]]
        for block, lower in zip(self.top_down_blocks, reversed(inputs[:-1])):
            upsampled = F.interpolate(inner[0], size=lower.shape[-2:], mode='nearest')
            inner.insert(0, block(torch.cat([upsampled, lower], dim=1)))
        outs = [inner[0]]
        for downsample, block, higher in zip(self.downsamples, self.bottom_up_blocks, inner[1:]):
            outs.append(block(torch.cat([downsample(outs[-1]), higher], dim=1)))
        for from_input, from_output in zip(self.extra_from_input, self.extra_from_output):
            outs.append(from_input(inputs[-1]) + from_output(outs[-1]))
        return tuple(outs)
