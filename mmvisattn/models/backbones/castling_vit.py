"""Castling-ViT backbone (arXiv:2211.10526): mmseg's plain ViT with castling (linear-angular)
attention in every block, for Mask2Former / UperNet-style dense heads."""
import inspect
import math
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import torch.nn as nn
from mmseg.models.backbones.vit import TransformerEncoderLayer, VisionTransformer
from torch import Tensor

from mmvisattn.registry import build_attention, register_model
from mmvisattn.utils.checkpoint import rename_keys

from ..layers import ResidualAttention, TokenGrid
from .contract import (
    BackboneContract,
    Part,
    check_out_indices,
    checkpointed,
    stage_attention_options,
)
from .pretrained import CheckpointFormat, LoadsPretrained, any_key, strip_prefix

DEFAULT_ATTN_CFG = dict(type='LinearAngularAttention')


class RecomputedLayer(TransformerEncoderLayer):
    """mmseg's ViT layer recomputed in the backward by the non-reentrant checkpoint (mmseg's
    reentrant one breaks under DDP with ``find_unused_parameters=True``); :class:`CastlingViT` uses
    it when ``with_cp`` is set."""

    def forward(self, x: Tensor) -> Tensor:
        return checkpointed(super().forward, True, x)


@register_model
class CastlingViT(LoadsPretrained, BackboneContract, VisionTransformer):
    """mmseg's ``VisionTransformer`` whose attentions come from ``ATTENTIONS``.

    Takes every argument of mmseg's ``VisionTransformer``, so a stock ViT config switches by
    changing ``type``; all but the attentions is mmseg's. The class token reaches every attention as
    its one extra token; the token grid is recorded from the patch embedding.
    ``init_cfg=dict(type='Pretrained')`` reads timm / DeiT / MAE, mmseg and mmpretrain ViT weights
    (:mod:`.pretrained`). ``out_indices`` counts layers.

    Args:
        attn_cfg: The attention of every layer, any type of ``ATTENTIONS``; ``embed_dims``,
            ``num_heads``, ``qkv_bias``, ``attn_drop``, ``proj_drop``, ``num_extra_tokens`` and,
            where taken, ``sr_ratio`` (:func:`~.contract.stage_attention_options`) are filled in.
            Defaults to ``LinearAngularAttention``.
        frozen_stages: -1 freezes nothing, 0 the embeddings, ``k`` the embeddings and the first
            ``k`` layers.
        **kwargs: The arguments of mmseg's ``VisionTransformer``.
    """

    attention_args = ('attn_cfg',)
    pretrained_formats = (
        # its own weights, as an mmpretrain classifier's backbone too, at any trained input size
        CheckpointFormat('CastlingViT (this project, position embedding resized)',
                         any_key(r'^layers\.\d+\.attn\.attn\.(qkv|dconv)\.'),
                         lambda state_dict, backbone: backbone.fit_pos_embed(state_dict)),
        CheckpointFormat('timm / DeiT / MAE ViT (blocks.0.attn.qkv ...)',
                         any_key(r'^blocks\.\d+\.attn\.qkv\.'), lambda state_dict,
                         backbone: backbone.fit_pos_embed(convert_vit_state_dict(state_dict)[0])),
        CheckpointFormat('mmseg ViT (layers.0.attn.attn.in_proj_weight ...)',
                         any_key(r'^(backbone\.)?layers\.\d+\.attn\.attn\.in_proj_weight$'),
                         lambda state_dict, backbone: backbone.fit_pos_embed(rename_keys(
                             strip_prefix(state_dict, 'backbone.'), MMSEG_TO_CASTLING)[0])),
        CheckpointFormat('mmpretrain ViT (layers.0.attn.qkv ...)',
                         any_key(r'^(backbone\.)?layers\.\d+\.attn\.qkv\.'),
                         lambda state_dict, backbone: backbone.fit_pos_embed(rename_keys(
                             strip_prefix(state_dict, 'backbone.'), MMPRETRAIN_TO_CASTLING)[0])))

    def __init__(self, attn_cfg: Optional[Dict] = None, frozen_stages: int = -1, **kwargs) -> None:
        stock = inspect.signature(VisionTransformer).bind(**kwargs)
        stock.apply_defaults()
        options = stock.arguments
        num_layers = options['num_layers']
        out_indices = check_out_indices(type(self).__name__, options['out_indices'], num_layers)
        super().__init__(**dict(kwargs, out_indices=list(out_indices)))
        self.token_grid = TokenGrid()
        self.patch_embed.register_forward_hook(self.token_grid.record)
        self.layer_options = dict(embed_dims=options['embed_dims'], num_heads=options['num_heads'],
                                  qkv_bias=options['qkv_bias'], attn_drop=options['attn_drop_rate'],
                                  proj_drop=options['drop_rate'],
                                  num_extra_tokens=int(options['with_cls_token']))
        cfg = DEFAULT_ATTN_CFG if attn_cfg is None else attn_cfg
        for layer in self.layers:
            # mmseg's attention is dropped here; its residual dropout is kept
            layer.attn = ResidualAttention(self.build_layer_attention(cfg),
                                           layer.attn.dropout_layer, self.token_grid)
            if layer.with_cp:
                layer.with_cp, layer.__class__ = False, RecomputedLayer
        self.set_contract(out_indices, frozen_stages, options['norm_eval'],
                          [options['embed_dims']] * num_layers,
                          [options['patch_size']] * num_layers)

    def build_layer_attention(self, cfg: Dict) -> nn.Module:
        """The attention ``cfg`` describes, for the tokens of every layer (class token included)."""
        return build_attention(cfg, stage_attention_options(self.patch_size),
                               owner=type(self).__name__, **self.layer_options)

    def stem_parts(self) -> List[Part]:
        return [self.patch_embed, self.pos_embed, self.cls_token,
                *([self.pre_ln] if self.pre_norm else [])]

    def fit_pos_embed(self, state_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """``state_dict`` with its position embedding resized to this model's grid, as mmseg's
        ``VisionTransformer.init_weights`` does for its own checkpoints."""
        pos_embed = state_dict.get('pos_embed')
        if pos_embed is not None and pos_embed.shape != self.pos_embed.shape:
            side = int(math.sqrt(pos_embed.shape[1] - 1))
            grid = (self.img_size[0] // self.patch_size, self.img_size[1] // self.patch_size)
            state_dict = dict(state_dict,
                              pos_embed=self.resize_pos_embed(pos_embed, grid, (side, side),
                                                                          self.interpolate_mode))
        return state_dict

    def stage_parts(self, index: int) -> List[Part]:
        final = [self.norm1] if self.final_norm and index == len(self.layers) - 1 else []
        return [self.layers[index], *final]

    def drop_stages_after(self, last: int) -> None:
        # the final norm follows the last layer only
        if last + 1 < len(self.layers) and self.final_norm:
            self.final_norm = False
            delattr(self, self.norm1_name)
        del self.layers[last + 1:]


# parts of a timm / MAE block -> parts of an mmseg ViT layer
TIMM_BLOCK_PARTS = {'norm1': 'ln1', 'norm2': 'ln2', 'attn.qkv': 'attn.attn.qkv',
                    'attn.proj': 'attn.attn.proj',
                    'mlp.fc1': 'ffn.layers.0.0', 'mlp.fc2': 'ffn.layers.1'}
# timm / MAE ViT names -> CastlingViT (mmseg ViT) names; the first matching rule applies
TIMM_TO_CASTLING = [(r'^patch_embed\.proj\.', 'patch_embed.projection.'),
                    *[(rf'^blocks\.(\d+)\.{re.escape(part)}\.', rf'layers.\1.{ours}.')
                      for part, ours in TIMM_BLOCK_PARTS.items()],
                    (r'^norm\.', 'ln1.'), (r'^(cls_token|pos_embed)$', r'\1')]


# mmseg ViT (mmcv MultiheadAttention) and mmpretrain ViT names -> CastlingViT's; others kept
MMSEG_TO_CASTLING = [(r'^layers\.(\d+)\.attn\.attn\.in_proj_(weight|bias)$',
                      r'layers.\1.attn.attn.qkv.\2'),
                     (r'^layers\.(\d+)\.attn\.attn\.out_proj\.', r'layers.\1.attn.attn.proj.'),
                     (r'^', '')]
MMPRETRAIN_TO_CASTLING = [(r'^layers\.(\d+)\.attn\.(qkv|proj)\.', r'layers.\1.attn.attn.\2.'),
                          (r'^', '')]


def convert_vit_state_dict(
    state_dict: Dict[str, Tensor],
) -> Tuple['OrderedDict[str, Tensor]', List[str]]:
    """timm / MAE ViT keys -> CastlingViT keys; returns the converted dict and the dropped keys
    (classification head, ``fc_norm``, MAE decoder and anything else without a place)."""
    return rename_keys(state_dict, TIMM_TO_CASTLING)
