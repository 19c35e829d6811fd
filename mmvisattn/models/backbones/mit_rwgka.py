"""SegFormer's Mix Transformer with random-walk graph kernel attention, "Improving vision attention
with random walk graph kernel" (OpenReview, ICLR 2023), Sec. 4.1: every spatial-reduction attention
of MiT is replaced, and its reduction conv dropped (Table 1: B0 3.4M -> 2.9M encoder parameters)."""
import inspect
import math
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from mmseg.models.backbones.mit import MixVisionTransformer
from mmseg.models.utils import nlc_to_nchw
from torch import Tensor

from mmvisattn.registry import build_attention, register_model

from ..layers import ResidualAttention
from .contract import BackboneContract, Part, check_out_indices, checkpointed
from .pretrained import CheckpointFormat, LoadsPretrained, any_key, strip_prefix

AttnCfg = Union[Dict, Sequence[Dict]]
DEFAULT_ATTN_CFG = dict(type='RWGKAttention', num_anchors=64, lam=0.5)


def stage_attn_cfgs(attn_cfg: AttnCfg, num_stages: int) -> List[Dict]:
    """One attention config per stage, from a dict shared by all stages or a list of them."""
    if isinstance(attn_cfg, dict):
        return [dict(attn_cfg) for _ in range(num_stages)]
    cfgs = [dict(cfg) for cfg in attn_cfg]
    if len(cfgs) != num_stages:
        raise ValueError(f'attn_cfg lists {len(cfgs)} stage settings; the backbone has '
                         f'{num_stages} stages')
    return cfgs


@register_model
class MixVisionTransformerRWGKA(LoadsPretrained, BackboneContract, MixVisionTransformer):
    """MiT (mmseg's ``MixVisionTransformer``) whose attentions come from ``ATTENTIONS``.

    Takes every argument of mmseg's ``MixVisionTransformer``, so a stock SegFormer config switches
    by changing ``type``; all but the attentions is mmseg's, and
    ``init_cfg=dict(type='Pretrained')`` reads mmseg's and NVlabs' weights (:mod:`.pretrained`).

    Args:
        attn_cfg: The attention of every block (any type of ``ATTENTIONS``), one for all stages or
            one per stage (Table 5); ``embed_dims``, ``num_heads``, ``qkv_bias``, ``attn_drop``,
            ``proj_drop`` and, where taken, ``sr_ratio`` are filled in
            (``dict(type='SpatialReductionAttention')`` rebuilds SegFormer). Defaults to
            ``RWGKAttention`` with 64 learnable anchors and ``lam=0.5`` (Table 5).
        frozen_stages: -1 freezes nothing, 0 the first patch embedding, ``k`` that and the first
            ``k`` stages.
        norm_eval: Keep the norm layers in eval mode while training.
        **kwargs: The arguments of mmseg's ``MixVisionTransformer``; ``out_indices`` may count from
            the last.
    """

    attention_args = ('attn_cfg',)
    pretrained_formats = (
        CheckpointFormat('NVlabs SegFormer MiT (block1.0.attn.q ...)',
                         any_key(r'^block\d+\.\d+\.attn\.q\.'),
                         lambda state_dict, backbone: convert_mit_state_dict(
                             convert_segformer_state_dict(state_dict),
                             keeps_spatial_reduction(backbone))[0]),
        CheckpointFormat('mmseg MiT (bare, or a SegFormer under backbone.)',
                         any_key(r'(^|\.)layers\.\d+\.1\.\d+\.attn\.attn\.in_proj_weight$'),
                         lambda state_dict, backbone: convert_mit_state_dict(
                             strip_prefix(state_dict, 'backbone.'),
                             keeps_spatial_reduction(backbone))[0]))

    def __init__(self, attn_cfg: Optional[AttnCfg] = None, frozen_stages: int = -1,
                 norm_eval: bool = False, **kwargs) -> None:
        stock = inspect.signature(MixVisionTransformer).bind(**kwargs)
        stock.apply_defaults()
        options = stock.arguments
        out_indices = check_out_indices(type(self).__name__, options['out_indices'],
                                        options['num_stages'])
        super().__init__(**dict(kwargs, out_indices=out_indices))
        attn_cfg = DEFAULT_ATTN_CFG if attn_cfg is None else attn_cfg
        for stage_index, (stage, cfg) in enumerate(zip(self.layers,
                                                       stage_attn_cfgs(attn_cfg, self.num_stages))):
            defaults = dict(embed_dims=self.embed_dims * self.num_heads[stage_index],
                            num_heads=self.num_heads[stage_index], qkv_bias=options['qkv_bias'],
                            attn_drop=options['attn_drop_rate'], proj_drop=options['drop_rate'])
            optional = dict(sr_ratio=self.sr_ratios[stage_index])
            for block in stage[1]:
                # the stock attention built by mmseg is dropped here; its drop path is kept
                attn = build_attention(cfg, optional, owner=type(self).__name__, num_extra_tokens=0,
                                       **defaults)
                block.attn = ResidualAttention(attn, block.attn.dropout_layer)
                block.with_cp = False  # recomputed by forward instead
        self.with_cp = options['with_cp']
        strides = [math.prod(options['strides'][:index + 1]) for index in range(self.num_stages)]
        self.set_contract(out_indices, frozen_stages, norm_eval,
                          [self.embed_dims * heads for heads in self.num_heads], strides)

    def stem_parts(self) -> List[Part]:
        return [self.layers[0][0]]  # the first patch embedding

    def stage_parts(self, index: int) -> List[Part]:
        return [self.layers[index]]

    def drop_stages_after(self, last: int) -> None:
        del self.layers[last + 1:]

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        """mmseg's forward with the non-reentrant checkpoint and contiguous maps."""
        outs = []
        for index, (patch_embed, blocks, norm) in enumerate(self.layers):
            x, hw_shape = patch_embed(x)
            for block in blocks:
                x = checkpointed(block, self.with_cp, x, hw_shape)
            x = nlc_to_nchw(norm(x), hw_shape)
            if index in self.out_indices:
                outs.append(x.contiguous())
        return tuple(outs)


MIT_ATTENTION_KEY = re.compile(r'^(?P<prefix>(?:.*\.)?layers\.\d+\.1\.\d+\.attn\.)(?P<rest>.+)$')


def convert_mit_state_dict(
    state_dict: Dict[str, Tensor], keep_spatial_reduction: bool = False
) -> Tuple['OrderedDict[str, Tensor]', List[str]]:
    """Stock mmseg MiT keys -> MixVisionTransformerRWGKA keys (``in_proj`` split into ``q`` and
    ``kv``, ``out_proj`` as ``proj``); returns the converted dict and the dropped keys.
    ``keep_spatial_reduction`` keeps ``sr`` and ``norm`` for a ``SpatialReductionAttention``
    backbone."""
    converted, dropped = OrderedDict(), []
    for key, value in state_dict.items():
        match = MIT_ATTENTION_KEY.match(key)
        if match is None:
            converted[key] = value
            continue
        prefix, rest = match.group('prefix'), match.group('rest')
        if rest.startswith(('sr.', 'norm.')):
            if keep_spatial_reduction:
                converted[f'{prefix}attn.{rest}'] = value
            else:
                dropped.append(key)
        elif rest in ('attn.in_proj_weight', 'attn.in_proj_bias'):
            kind = rest.rsplit('_', 1)[1]
            query, key_value = value[:value.shape[0] // 3], value[value.shape[0] // 3:]
            converted[f'{prefix}attn.q.{kind}'] = query
            converted[f'{prefix}attn.kv.{kind}'] = key_value
        elif rest.startswith('attn.out_proj.'):
            converted[f'{prefix}attn.proj.{rest.rsplit(".", 1)[1]}'] = value
        else:
            converted[key] = value
    return converted, dropped


def keeps_spatial_reduction(backbone: MixVisionTransformer) -> bool:
    """Whether the backbone's attentions keep mmseg's spatial reduction."""
    return any('.attn.attn.sr.' in key for key in backbone.state_dict())


# NVlabs SegFormer names -> mmseg MiT names, as mmseg's tools/model_converters/mit2mmseg.py
NVLABS_KEY = re.compile(r'^(?P<part>patch_embed|block|norm)(?P<stage>\d+)\.(?P<rest>.+)$')
NVLABS_BLOCK_PARTS = {'attn.proj.': 'attn.attn.out_proj.', 'attn.sr.': 'attn.sr.',
                      'attn.norm.': 'attn.norm.',
                      'mlp.fc1.': 'ffn.layers.0.', 'mlp.dwconv.dwconv.': 'ffn.layers.1.',
                      'mlp.fc2.': 'ffn.layers.4.', 'norm1.': 'norm1.', 'norm2.': 'norm2.'}


def _nvlabs_block(prefix: str, rest: str, value: Tensor, state_dict: Dict[str, Tensor],
                  key: str) -> Optional[Tuple[str, Tensor]]:
    """One NVlabs MiT block tensor as ``(mmseg key, value)``; ``None`` for ``kv`` (joined)."""
    if rest.startswith('attn.q.'):
        kind = rest.rsplit('.', 1)[1]
        return f'{prefix}attn.attn.in_proj_{kind}', torch.cat(
            [value, state_dict[key.replace('.attn.q.', '.attn.kv.')]]
        )
    for old, new in NVLABS_BLOCK_PARTS.items():
        if rest.startswith(old):
            # 1x1 convolutions in mmseg
            linear = old in ('mlp.fc1.', 'mlp.fc2.') and rest.endswith('weight')
            return prefix + new + rest[len(old):], value[..., None, None] if linear else value
    return None


def convert_segformer_state_dict(state_dict: Dict[str, Tensor]) -> 'OrderedDict[str, Tensor]':
    """NVlabs SegFormer MiT keys -> mmseg MiT keys (``q`` and ``kv`` joined into ``in_proj``, MLP
    linears as 1x1 convolutions); the head and anything without a place dropped."""
    converted = OrderedDict()
    for key, value in state_dict.items():
        match = NVLABS_KEY.match(key)
        if match is None:
            continue
        stage, rest = int(match['stage']) - 1, match['rest']
        if match['part'] == 'patch_embed':
            converted[f'layers.{stage}.0.{rest.replace("proj.", "projection.", 1)}'] = value
        elif match['part'] == 'norm':
            converted[f'layers.{stage}.2.{rest}'] = value
        else:
            index, rest = rest.split('.', 1)
            renamed = _nvlabs_block(f'layers.{stage}.1.{index}.', rest, value, state_dict, key)
            if renamed is not None:
                converted[renamed[0]] = renamed[1]
    return converted
