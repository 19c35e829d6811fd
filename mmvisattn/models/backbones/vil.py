"""Multi-scale Vision Longformer (ViL), "Multi-Scale Vision Longformer: A New Vision Transformer for
High-Resolution Image Encoding" (arXiv:2103.15358): E-ViT stages (Sec. 3.1, Fig. 1), each a patch
embedding with LayerNorm, global tokens and optional 2-D absolute position embedding, then pre-norm
attention and MLP blocks (layouts: Table 8, windows: Table 15)."""
import math
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath
from mmcv.cnn.bricks.transformer import FFN, PatchEmbed
from mmengine.model import BaseModule, ModuleList
from torch import Tensor

from mmvisattn.ops.utils.arguments import check_choice
from mmvisattn.registry import build_attention, register_model

from ..layers.weight_init import init_embedding, init_linear_layers
from .contract import BackboneContract, checkpointed, resolve_arch, stage_attention_options
from .pretrained import CheckpointFormat, LoadsPretrained, any_key

ARCH_KEYS = ('embed_dims', 'depths', 'num_heads', 'patch_sizes', 'windows', 'num_global')
_DETECTION = dict(patch_sizes=(4, 2, 2, 2), windows=(7, 7, 7, 7), num_global=(1, 1, 1, 0))
_SIZES = {
    'tiny': dict(embed_dims=(48, 96, 192, 384), depths=(1, 1, 9, 1), num_heads=(1, 3, 3, 6)),
    'small': dict(embed_dims=(96, 192, 384, 768), depths=(1, 2, 8, 1), num_heads=(3, 3, 6, 12)),
    'medium': dict(embed_dims=(96, 192, 384, 768), depths=(1, 4, 16, 1), num_heads=(3, 3, 6, 12)),
    'base': dict(embed_dims=(96, 192, 384, 768), depths=(1, 8, 24, 1), num_heads=(3, 3, 6, 12)),
}
# Table 8, Table 15 and the official detection layouts (no global token in the last stage);
# ``-cls``: the ImageNet models (Tables 10, 12, 13), whose last stage keeps its class token
ARCH_ZOO = {
    **{name: {**size, **_DETECTION} for name, size in _SIZES.items()},
    **{
        f'{name}-cls': {**size, **_DETECTION, 'num_global': (1, 1, 1, 1)}
        for name, size in _SIZES.items()
    },
}
OUT_TYPES = ('featmap', 'cls_token')


def stage_settings(arch: Union[str, Dict]) -> Dict[str, Tuple[int, ...]]:
    """An ``ARCH_ZOO`` name or a dict with one entry per stage for every key of ``ARCH_KEYS``
    (``abs_pos`` optional)."""
    arch = resolve_arch('ViL', arch, ARCH_ZOO, ARCH_KEYS)
    stages = len(arch['depths'])
    settings = {key: tuple(arch.get(key, (False,) * stages)) for key in ARCH_KEYS + ('abs_pos',)}
    uneven = [key for key, value in settings.items() if len(value) != stages]
    if uneven:
        raise ValueError(f'ViL: arch entries {uneven} do not have one value for each of the '
                         f'{stages} stages')
    return settings


class ViLBlock(BaseModule):
    """Pre-norm attention then pre-norm MLP, each with drop path (one attention block + one MLP
    block of the official ``MsViT``; mmcv's ``FFN`` is the MLP)."""

    def __init__(self, attn: nn.Module, embed_dims: int, drop_path: float, norm_cfg: Dict,
                 with_cp: bool) -> None:
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = attn
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = FFN(embed_dims, 4 * embed_dims, act_cfg=dict(type='GELU'),
                       dropout_layer=dict(type='DropPath', drop_prob=drop_path) if drop_path > 0
                       else None)
        self.with_cp = with_cp

    def _forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
        return self.ffn(self.norm2(x), identity=x)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        return checkpointed(self._forward, self.with_cp, x, hw_shape)


def linear_resize(embed: Tensor, size: int) -> Tensor:
    """``F.interpolate(mode='linear')`` along ``L`` of ``(B, L, C)`` by gathers, whose backward is
    deterministic on CUDA."""
    length = embed.shape[1]
    steps = torch.arange(size, device=embed.device,
                         dtype=torch.promote_types(embed.dtype, torch.float32))
    low_source = ((steps + 0.5) * (length / size) - 0.5).clamp(min=0)
    low = low_source.long()  # the floor: the source is not negative
    weight = (low_source - low).to(embed.dtype)[:, None]
    return torch.lerp(embed[:, low], embed[:, (low + 1).clamp(max=length - 1)], weight)


class ViLStage(BaseModule):
    """Patch embedding, global tokens, optional absolute position embedding, then the blocks;
    returns the tokens, global ones first."""

    def __init__(self, in_channels: int, embed_dims: int, patch_size: int, num_global: int,
                 abs_pos: bool, blocks: List[ViLBlock], norm_cfg: Dict, pos_size: int) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(in_channels, embed_dims, kernel_size=patch_size,
                                      stride=patch_size, norm_cfg=norm_cfg)
        self.num_global = num_global
        if num_global:
            self.cls_token = nn.Parameter(torch.zeros(1, num_global, embed_dims))
        self.abs_pos = abs_pos
        if abs_pos:
            self.x_pos_embed = nn.Parameter(torch.zeros(1, pos_size, embed_dims // 2))
            self.y_pos_embed = nn.Parameter(torch.zeros(1, pos_size, embed_dims - embed_dims // 2))
            self.cls_pos_embed = nn.Parameter(torch.zeros(1, num_global, embed_dims))
        self.blocks = ModuleList(blocks)

    def init_weights(self) -> None:
        super().init_weights()
        for embedding in self.embeddings():
            init_embedding(embedding)

    def embeddings(self) -> List[nn.Parameter]:
        """The global tokens and absolute position embeddings the stage has."""
        names = ('cls_token', 'x_pos_embed', 'y_pos_embed', 'cls_pos_embed')
        return [getattr(self, name) for name in names if hasattr(self, name)]

    @staticmethod
    def _resize(embed: Tensor, size: int) -> Tensor:
        return embed if embed.shape[1] == size else linear_resize(embed, size)

    def _position(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        height, width = hw_shape
        along_x = self._resize(self.x_pos_embed, height)[:, :, None].expand(-1, -1, width, -1)
        along_y = self._resize(self.y_pos_embed, width)[:, None].expand(-1, height, -1, -1)
        grid = torch.cat([along_x, along_y], dim=-1).flatten(1, 2)
        return x + torch.cat([self.cls_pos_embed, grid], dim=1)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        x, hw_shape = self.patch_embed(x)
        if self.num_global:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        if self.abs_pos:
            x = self._position(x, hw_shape)
        for block in self.blocks:
            x = block(x, hw_shape)
        return x, hw_shape


@register_model
class ViL(LoadsPretrained, BackboneContract, BaseModule):
    """Multi-scale Vision Longformer backbone for mmdet and mmseg: no stock backbone stacks E-ViT
    stages with global tokens (patch embedding, MLP, norms and drop path are mmcv's). Returns ``(B,
    C_i, H / s_i, W / s_i)`` maps of ``out_indices`` (global tokens dropped), strides 4 to 32.

    Args:
        arch: ``'tiny' | 'small' | 'medium' | 'base'`` (Table 8, Table 15 windows, one global token
            in the first three stages as the official detection models) or a dict with per-stage
            ``embed_dims``, ``depths``, ``num_heads``, ``patch_sizes``, ``windows``, ``num_global``
            and optionally ``abs_pos``.
        in_channels: Image channels.
        drop_path_rate: Stochastic depth, rising linearly over the blocks (Table 9).
        attn_cfg: Attention of every block, any type of ``ATTENTIONS``; ``embed_dims``,
            ``num_heads``, the stage's global tokens as ``num_extra_tokens`` and, where taken,
            ``window``, ``rel_pos`` (off with an absolute position embedding, the official ``rpe =
            not ape``) and ``sr_ratio`` (:func:`~.contract.stage_attention_options`) are filled in.
        out_indices: Stages whose maps are returned (default: all).
        frozen_stages: -1 freezes nothing, 0 the stem (the first patch embedding, global tokens and
            position embeddings), ``k`` the stem and the first ``k`` stages.
        norm_eval: Keep the norm layers in eval mode while training.
        with_cp: Activation checkpointing of every block.
        pos_size: Length of the absolute position embeddings (resized to each map).
        norm_eps: LayerNorm epsilon (1e-6 as the official code).
        out_type: ``'featmap'`` or ``'cls_token'`` (the last stage's first global token after the
            final LayerNorm, ``(B, C)``; needs ``out_indices`` of the last stage alone).
        init_cfg: mmengine init config, e.g. ``Pretrained`` with an official MsViT or detectron2
            checkpoint (:mod:`.pretrained`).
    """

    arch_zoo = ARCH_ZOO
    attention_args = ('attn_cfg',)
    pretrained_formats = (
        CheckpointFormat('official MsViT (classification, under net with module.) or its '
                         'detectron2 port (backbone.bottom_up.)',
                         any_key(r'^(module\.|backbone\.bottom_up\.)?layer\d+\.\d+\.'),
                         lambda state_dict,
                         backbone: convert_vil_state_dict(state_dict, backbone.state_dict())[0]),)

    def __init__(self, arch: Union[str, Dict] = 'small', in_channels: int = 3,
                 drop_path_rate: float = 0.1, attn_cfg: Optional[Dict] = None,
                 out_indices: Optional[Sequence[int]] = None, frozen_stages: int = -1,
                 norm_eval: bool = False, with_cp: bool = False, pos_size: int = 56,
                 norm_eps: float = 1e-6, out_type: str = 'featmap',
                 init_cfg: Optional[Dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.arch = stage_settings(arch)
        num_stages = len(self.arch['depths'])
        attn_cfg = dict(type='LongformerAttention') if attn_cfg is None else attn_cfg
        norm_cfg = dict(type='LN', eps=norm_eps)
        rates = torch.linspace(0, drop_path_rate, sum(self.arch['depths']), device='cpu').tolist()
        self.stages = ModuleList()
        channels, stride, strides = in_channels, 1, []
        for index in range(num_stages):
            dims, heads = self.arch['embed_dims'][index], self.arch['num_heads'][index]
            num_global = self.arch['num_global'][index]
            stride *= self.arch['patch_sizes'][index]
            strides.append(stride)
            # the official model learns relative-position biases only where it has no absolute
            # embedding (rpe = not ape); an attn_cfg that sets rel_pos keeps its own choice
            stage_options = dict(window=self.arch['windows'][index],
                                 rel_pos=not self.arch['abs_pos'][index],
                                 **stage_attention_options(stride))
            blocks = []
            for _ in range(self.arch['depths'][index]):
                attn = build_attention(attn_cfg, stage_options, owner='ViL',
                                       num_extra_tokens=num_global,
                                       embed_dims=dims, num_heads=heads)
                blocks.append(ViLBlock(attn, dims, rates.pop(0), norm_cfg, with_cp))
            self.stages.append(ViLStage(channels, dims, self.arch['patch_sizes'][index], num_global,
                                        self.arch['abs_pos'][index], blocks, norm_cfg,
                                        max(1, math.ceil(pos_size * 4 / stride))))
            channels = dims
        self.in_channels = in_channels
        self.set_contract(range(num_stages) if out_indices is None else out_indices, frozen_stages,
                          norm_eval, self.arch['embed_dims'], strides)
        self.out_type = self._check_out_type(out_type)
        if out_type == 'cls_token':
            self.norm = build_norm_layer(norm_cfg, self.arch['embed_dims'][-1])[1]

    def _check_out_type(self, out_type: str) -> str:
        check_choice('ViL', out_type, OUT_TYPES, 'out_type')
        last = len(self.arch['depths']) - 1
        if out_type == 'cls_token' and (tuple(self.out_indices) != (last,)
                                        or not self.stages[last].num_global):
            raise ValueError("ViL: out_type='cls_token' reads the last stage's global token; "
                             "expected "
                             f'out_indices=({last},) and a global token there (the -cls archs), '
                             f'got out_indices={tuple(self.out_indices)}, '
                             f'num_global={self.stages[last].num_global}')
        return out_type

    def stem_parts(self) -> List[Union[nn.Module, nn.Parameter]]:
        return [self.stages[0].patch_embed, *self.stages[0].embeddings()]

    def init_weights(self) -> None:
        if self.init_cfg is None:
            init_linear_layers(self)
        super().init_weights()

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f'ViL: input of shape {tuple(x.shape)}; expected (B, '
                             f'{self.in_channels}, H, W) images')
        outs = []
        for index, stage in enumerate(self.stages):
            tokens, (height, width) = stage(x)
            if self.out_type == 'cls_token' and index == len(self.stages) - 1:
                return (self.norm(tokens[:, 0]),)
            x = (
                tokens[:, stage.num_global:]
                .transpose(1, 2)
                .reshape(tokens.shape[0], -1, height, width)
            )
            if index in self.out_indices:
                outs.append(x.contiguous())
        return tuple(outs)


# official MsViT names (after the 'module.' / 'backbone.bottom_up.' prefix) -> ViL names
_OFFICIAL_KEY = re.compile(r'^layer(?P<stage>\d+)\.(?P<index>\d+)\.(?P<rest>.+)$')
_EMBED_NAMES = {'proj.': 'patch_embed.projection.', 'norm_embed.': 'patch_embed.norm.'}
_MLP_NAMES = {'norm.': 'norm2.', 'mlp.fc1.': 'ffn.layers.0.0.', 'mlp.fc2.': 'ffn.layers.1.'}


def _official_name(key: str) -> Optional[str]:
    """The ViL name of one official key, or ``None`` without a place (head, final norm, FPN)."""
    match = _OFFICIAL_KEY.match(key)
    if match is None:
        return None
    stage, index, rest = int(match['stage']) - 1, int(match['index']), match['rest']
    if index == 0:
        for old, new in _EMBED_NAMES.items():
            if rest.startswith(old):
                return f'stages.{stage}.{new}{rest[len(old):]}'
        return f'stages.{stage}.{rest}'
    block = f'stages.{stage}.blocks.{(index - 1) // 2}.'
    if index % 2:
        return block + ('norm1.' + rest[len('norm.'):] if rest.startswith('norm.') else rest)
    for old, new in _MLP_NAMES.items():
        if rest.startswith(old):
            return block + new + rest[len(old):]
    return None


def _resize_tokens(value: Tensor, size: int, dim: int) -> Tensor:
    """Global-token entries along ``dim``: the first one repeated, or the first ``size`` kept."""
    if value.shape[dim] >= size:
        return value.narrow(dim, 0, size)
    first = value.narrow(dim, 0, 1)
    return torch.cat([value, first.expand(*[size - value.shape[dim] if d == dim else -1
                                            for d in range(value.dim())])], dim=dim)


def _recentre_table(name: str, table: Tensor, entries: int) -> Tensor:
    """A ``((2a - 1)^2, heads)`` relative-position table re-centred to ``entries`` rows.

    Both tables are indexed by token offsets, so the offsets both cover keep their bias exactly (a
    full-attention stage's ``(2n - 1)^2`` table lands inside a sliding-chunk table of side ``4w -
    1``, and the converted model equals the official one where it is defined); offsets only the
    larger table covers take the nearest edge value. Stretching would move every bias to another
    offset."""
    old, new = math.isqrt(table.shape[0]), math.isqrt(entries)
    if old * old != table.shape[0] or new * new != entries or (new - old) % 2:
        raise ValueError(f'{name}: a relative-position table of {table.shape[0]} rows does not '
                         f're-centre to {entries} (expected square tables of odd sides)')
    grid = table.t().reshape(1, -1, old, old)
    margin = (new - old) // 2
    if margin >= 0:
        grid = F.pad(grid, (margin,) * 4, mode='replicate')
    else:
        grid = grid[..., -margin:old + margin, -margin:old + margin]
    return grid[0].flatten(1).t().contiguous()


def _fit(name: str, value: Tensor, shape: torch.Size) -> Tensor:
    """``value`` resized to ``shape``: relative-position tables re-centred, position embeddings 1-D,
    global-token parameters by repeating the first token; anything else must already fit."""
    if value.shape == shape:
        return value
    leaf = name.rsplit('.', 1)[-1]
    if leaf == 'local_relative_position_bias_table':
        return _recentre_table(name, value, shape[0])
    if leaf in ('x_pos_embed', 'y_pos_embed') and value.shape[2] == shape[2]:
        return ViLStage._resize(value, shape[1])
    if leaf in ('cls_token', 'cls_pos_embed'):
        return _resize_tokens(value, shape[1], 1)
    if leaf == 'g2l_relative_position_bias':
        return _resize_tokens(value, shape[2], 2)
    if leaf == 'g2g_relative_position_bias':
        return _resize_tokens(_resize_tokens(value, shape[1], 1), shape[2], 2)
    raise ValueError(f'{name}: checkpoint shape {tuple(value.shape)} does not fit {tuple(shape)} '
                     '(a checkpoint of another layout?)')


def _expand_attention(name: str, value: Tensor, target: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """Full-attention ``qkv`` split into ``query`` / ``kv``, and the local projections copied to
    their ``*_global`` twins when the target has separate ones and the checkpoint does not."""
    out = {}
    if '.attn.qkv.' in name:
        dims = value.shape[0] // 3
        out[name.replace('.attn.qkv.', '.attn.query.')] = value[:dims]
        out[name.replace('.attn.qkv.', '.attn.kv.')] = value[dims:]
    else:
        out[name] = value
    for local in list(out):
        for part in ('query', 'kv', 'proj'):
            twin = local.replace(f'.attn.{part}.', f'.attn.{part}_global.')
            if twin != local and twin in target:
                out.setdefault(twin, out[local])
    return out


def convert_vil_state_dict(
    state_dict: Dict[str, Tensor], target: Dict[str, Tensor]
) -> Tuple['OrderedDict[str, Tensor]', List[str]]:
    """Official ViL weights (``module.*`` or detectron2 ``backbone.bottom_up.*``) -> the backbone of
    state dict ``target``; returns the converted dict and the keys without a place."""
    converted, unmapped = OrderedDict(), []
    for key, value in state_dict.items():
        short = key[len('module.'):] if key.startswith('module.') else key
        short = (
            short[len('backbone.bottom_up.'):]
            if short.startswith('backbone.bottom_up.')
            else short
        )
        # the final norm
        name = _official_name(short) or (short if short.startswith('norm.') else None)
        if name is None:
            unmapped.append(key)
            continue
        for new, tensor in _expand_attention(name, value, target).items():
            if new not in target:
                unmapped.append(key)
                continue
            # a key of the checkpoint wins over a derived copy
            if new == name or new not in converted:
                converted[new] = _fit(new, tensor, target[new].shape)
    return converted, sorted(set(unmapped))
