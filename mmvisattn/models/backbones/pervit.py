"""PerViT backbone, "Peripheral Vision Transformer" (Min et al., NeurIPS 2022; arXiv:2206.06801,
§3.2, Eq. 10, Appendix E Table A5) for detection and segmentation.

A columnar ViT: a convolutional stem makes stride-16 tokens, then 12 blocks ``x' = x +
MPA(LN(CPE(x)))``, ``x'' = res(x') + FFN(LN(x'))`` in four stages, the last block of each changing
the width. Dense heads take a simple feature pyramid (stock ``ChannelMapper`` + ``Feature2Pyramid``
+ ``FPN``). Parameter names follow the official code; ``tools/model_converters/pervit2mmvisattn.py``
maps its checkpoints."""
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from torch import Tensor

from mmvisattn.registry import attention_accepts, build_attention, register_model
from mmvisattn.utils.checkpoint import rename_keys

from ..attentions.peripheral import build_distance_proj, peripheral_initialization
from ..layers.weight_init import init_linear_layers
from .contract import (
    BackboneContract,
    check_out_indices,
    checkpointed,
    resolve_arch,
    stage_attention_options,
)
from .pretrained import CheckpointFormat, LoadsPretrained, any_key

# Table A5 (stem widths of Small and Medium end at the first stage's width, as the official code)
ARCH_ZOO = {
    'tiny': dict(num_heads=4, depths=(2, 2, 6, 2), embed_dims=(128, 192, 224, 280),
                 stem_channels=(48, 64, 96, 128)),
    'small': dict(num_heads=8, depths=(2, 2, 6, 2), embed_dims=(272, 320, 368, 464),
                  stem_channels=(64, 128, 192, 272)),
    'medium': dict(num_heads=12, depths=(2, 2, 6, 2), embed_dims=(312, 468, 540, 684),
                   stem_channels=(64, 192, 256, 312)),
}
STEM_STRIDE = 16


class PerViTBlock(nn.Module):
    """Eq. 10 with the official width change: ``x = x + MPA(LN(CPE(x)))`` then ``x = res_path(x) +
    FFN(LN(x))``. A new class: mmcv's ``FFN`` keeps the width and mmseg's layers have no position
    encoding inside the attention branch."""

    def __init__(self, dims: int, out_dims: int, attn: nn.Module, mlp_ratio: float = 4.0,
                 drop: float = 0.0, drop_path: float = 0.0) -> None:
        super().__init__()
        self.cpe = nn.Conv2d(dims, dims, 3, padding=1, groups=dims)
        self.norm1 = nn.LayerNorm(dims, eps=1e-6)
        self.attn = attn
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dims, eps=1e-6)
        self.res_path = nn.Linear(dims, out_dims) if out_dims != dims else nn.Identity()
        hidden = int(dims * mlp_ratio)
        self.mlp = nn.Sequential(OrderedDict(fc1=nn.Linear(dims, hidden), act=nn.GELU(),
                                             drop1=nn.Dropout(drop),
                                             fc2=nn.Linear(hidden, out_dims),
                                             drop2=nn.Dropout(drop)))

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        batch, tokens, dims = x.shape
        grid = x.transpose(1, 2).reshape(batch, dims, *hw_shape)
        x = x + self.drop_path(self.attn(self.norm1(self.cpe(grid).flatten(2).transpose(1, 2)),
                                         hw_shape))
        return self.res_path(x) + self.drop_path(self.mlp(self.norm2(x)))


@register_model
class PerViT(LoadsPretrained, BackboneContract, BaseModule):
    """Peripheral Vision Transformer for dense prediction (mmdet and mmseg).

    Args:
        arch: ``'tiny'``, ``'small'``, ``'medium'`` (Table A5) or a dict with ``num_heads``,
            ``depths``, ``embed_dims`` and ``stem_channels``.
        in_channels: Image channels.
        mlp_ratio: FFN expansion.
        drop_rate: Dropout in the FFNs and after each attention's projection.
        drop_path_rate: Stochastic depth, rising linearly over the blocks (paper: 0 / 0.1 / 0.2).
        out_indices: Stages whose ``(B, C_i, H / 16, W / 16)`` outputs are returned.
        frozen_stages: -1 freezes nothing, 0 the stem, ``k`` the stem and the first ``k`` stages
            (the shared distance projection stays trainable).
        norm_eval: Keep the norm layers in eval mode while training.
        attn_cfg: Attention of every block, any type of ``ATTENTIONS`` (no extra tokens);
            ``embed_dims``, ``num_heads`` and, where taken, the shared distance weighting, the
            layer's peripheral initialization (Eq. 9) and ``sr_ratio``
            (:func:`~.contract.stage_attention_options`) are filled in.
        norm_cfg: Norm of the stem convolutions (BatchNorm; SyncBN for distributed training).
        with_cp: Recompute each block in the backward (training ``Phi_p`` keeps several
            ``N x 4 N_h x (H + 2) x (W + 2)`` maps a layer; the COCO configs set it).
        init_cfg: mmengine initialisation config, e.g. ``Pretrained`` with an official PerViT
            checkpoint (converted while loading, :mod:`.pretrained`).
    """

    arch_zoo = ARCH_ZOO
    attention_args = ('attn_cfg',)
    pretrained_formats = (
        CheckpointFormat('official PerViT (juhongm999/pervit)',
                         any_key(r'^blocks\.\d+\.attn\.activation\.'),
                         lambda state_dict, backbone: convert_pervit_state_dict(
                             state_dict, len(backbone.stem) - 1, len(backbone.stage_ends) - 1)[0]),)

    def __init__(self, arch: Union[str, Dict] = 'tiny', in_channels: int = 3,
                 mlp_ratio: float = 4.0, drop_rate: float = 0.0, drop_path_rate: float = 0.0,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 frozen_stages: int = -1, norm_eval: bool = False, attn_cfg: Optional[Dict] = None,
                 norm_cfg: Optional[Dict] = None, with_cp: bool = False,
                 init_cfg: Optional[Dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.with_cp = with_cp
        settings = self.stage_settings(arch)
        depths, embed_dims = settings['depths'], settings['embed_dims']
        self.num_heads = settings['num_heads']
        out_indices = check_out_indices('PerViT', out_indices, len(depths))
        widths = [w for w, d in zip(embed_dims, depths) for _ in range(d)] + [embed_dims[-1]]
        self.stage_ends = [sum(depths[:i + 1]) - 1 for i in range(len(depths))]
        stage_channels = [widths[end + 1] for end in self.stage_ends]
        self.stem = self._stem(in_channels, settings['stem_channels'], norm_cfg or dict(type='BN'))
        attn_cfg = dict(type='PeripheralAttention') if attn_cfg is None else attn_cfg
        # one distance projection shared by every block (§3.2), for attentions that take it
        shared = attention_accepts(attn_cfg, 'distance_proj')
        self.rpe_proj = build_distance_proj(4 * self.num_heads) if shared else None
        schedule = peripheral_initialization(len(widths) - 1)
        rates = torch.linspace(0, drop_path_rate, len(widths) - 1, device='cpu').tolist()
        self.blocks = nn.ModuleList()
        for i, (dims, out_dims) in enumerate(zip(widths[:-1], widths[1:])):
            optional = dict(distance_proj=self.rpe_proj, norm_init=schedule[i],
                            **stage_attention_options(STEM_STRIDE))
            attn = build_attention(attn_cfg, optional, owner='PerViT', num_extra_tokens=0,
                                   embed_dims=dims, num_heads=self.num_heads, proj_drop=drop_rate)
            self.blocks.append(PerViTBlock(dims, out_dims, attn, mlp_ratio, drop_rate, rates[i]))
        for i in out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(stage_channels[i], eps=1e-6))
        self._init_linear_layers()
        self.set_contract(out_indices, frozen_stages, norm_eval, stage_channels,
                          [STEM_STRIDE] * len(depths))

    def drop_stages_after(self, last: int) -> None:
        del self.blocks[self.stage_ends[last] + 1:]

    def stage_parts(self, index: int) -> List[nn.Module]:
        first = self.stage_ends[index - 1] + 1 if index else 0
        norm = [getattr(self, f'norm{index}')] if index in self.out_indices else []
        return [*self.blocks[first:self.stage_ends[index] + 1], *norm]

    @staticmethod
    def stage_settings(arch: Union[str, Dict]) -> Dict:
        arch = resolve_arch('PerViT', arch, ARCH_ZOO,
                            ('num_heads', 'depths', 'embed_dims', 'stem_channels'))
        if len(arch['depths']) != len(arch['embed_dims']):
            raise ValueError(f'PerViT: arch depths {arch["depths"]} and embed_dims '
                             f'{arch["embed_dims"]} have '
                             'different lengths; expected one entry per stage in each')
        return arch

    @staticmethod
    def _stem(in_channels: int, channels: Sequence[int], norm_cfg: Dict) -> nn.Sequential:
        """§3.2: four ``3 x 3`` stride-2 conv-norm-ReLU (conv biases kept, as the official code)
        and a ``1 x 1`` conv."""
        layers, previous = [], in_channels
        for width in channels:
            layers.append(nn.Sequential(nn.Conv2d(previous, width, 3, stride=2, padding=1),
                                        build_norm_layer(norm_cfg, width)[1],
                                        nn.ReLU(inplace=True)))
            previous = width
        layers.append(nn.Conv2d(previous, previous, 1))
        return nn.Sequential(*layers)

    def _init_linear_layers(self) -> None:
        """The official init: truncated normal (std 0.02) linear layers with zero biases, except the
        peripheral parameters, which keep Eq. 9."""
        init_linear_layers(self,
                           keep=lambda name: name.endswith('rpe_proj') or 'distance_proj' in name)

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        if x.shape[-2] < STEM_STRIDE or x.shape[-1] < STEM_STRIDE:
            raise ValueError(f'PerViT: image of {x.shape[-2]}x{x.shape[-1]} is smaller than the '
                             'stem stride '
                             f'{STEM_STRIDE}; expected at least {STEM_STRIDE}x{STEM_STRIDE}')
        x = self.stem(x)
        batch, _, height, width = x.shape
        hw_shape = (height, width)
        x = x.flatten(2).transpose(1, 2)
        outs = []
        for i, block in enumerate(self.blocks):
            x = checkpointed(block, self.with_cp, x, hw_shape)
            stage = self.stage_ends.index(i) if i in self.stage_ends else None
            if stage in self.out_indices:
                out = getattr(self, f'norm{stage}')(x)
                outs.append(out.transpose(1, 2).reshape(batch, -1, height, width).contiguous())
        return tuple(outs)


# official pervit keys -> PerViT keys; the first matching rule applies, None drops the tensor
OFFICIAL_TO_PERVIT = [
    (r'^conv_layers\.conv_layers\.(\d+)\.', r'stem.\1.'),
    (r'^conv_layers\.conv1x1\.', 'stem.{stem_proj}.'),
    (r'^blocks\.(\d+)\.conv\.proj\.', r'blocks.\1.cpe.'),
    (r'^blocks\.(\d+)\.attn\.to_qkv\.', r'blocks.\1.attn.qkv.'),
    (r'^blocks\.(\d+)\.attn\.activation\.gn(\d)\.', r'blocks.\1.attn.position.norm\2.'),
    (r'^blocks\.(\d+)\.attn\.activation\.conv(\d)\.', r'blocks.\1.attn.position.conv\2.'),
    (r'^blocks\.(\d+)\.(norm1|norm2|res_path|attn\.proj|mlp\.fc1|mlp\.fc2)\.', r'blocks.\1.\2.'),
    (r'^rpe_proj\.', 'rpe_proj.'), (r'^norm\.', 'norm{last_stage}.'), (r'^head\.', None),
]
OFFICIAL_KEY = re.compile(r'^blocks\.\d+\.attn\.activation\.')


def convert_pervit_state_dict(state_dict: Dict[str, Tensor], num_stem_convs: int = 4,
                              last_stage: int = 3) -> Tuple[Dict[str, Tensor], List[str]]:
    """Rename an official PerViT checkpoint to :class:`PerViT` keys; returns the converted dict and
    the dropped keys (the ImageNet head). ``KeyError`` for a key no rule knows."""
    rules = [(pattern, target if target is None
              else target.format(stem_proj=num_stem_convs, last_stage=last_stage))
             for pattern, target in OFFICIAL_TO_PERVIT]
    return rename_keys(state_dict, rules, complete='official PerViT')
