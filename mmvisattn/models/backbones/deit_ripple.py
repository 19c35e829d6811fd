"""DeiT-Ripple backbone, "Ripple attention for visual perception with sub-quadratic complexity"
(arXiv:2110.02453, C.4-C.5, Table 1: 5.78M parameters with the 1000-class head, Table 7: 9 ripple
layers): DeiT-Tiny (12 layers, 192 dims) with 6 heads, ripple attention in the lower layers,
linearized attention with the same feature map in the upper ones, and no class token (mean
pooling)."""
from typing import Dict, Optional, Tuple

from torch import Tensor

from mmvisattn.ops.utils.arguments import check_choice
from mmvisattn.registry import register_model

from .castling_vit import CastlingViT

OUT_TYPES = ('featmap', 'avg_featmap')


@register_model
class DeiTRipple(CastlingViT):
    """mmseg's ``VisionTransformer`` (through :class:`CastlingViT`) with DeiT-Tiny's sizes and C.5's
    hybrid attention. No class token by default: classification mean-pools
    (``out_type='avg_featmap'``), dense heads take the maps of ``out_indices``. A tool swapping the
    attention sets ``ripple_cfg`` and ``attn_cfg`` (``attention_args``).

    Args:
        num_ripple_layers: How many of the lowest layers use ``ripple_cfg`` (9, C.5 and Table 7);
            the rest use ``attn_cfg``.
        ripple_cfg: Attention of the lower layers.
        attn_cfg: Attention of the upper layers.
        out_type: ``'featmap'`` or ``'avg_featmap'``.
        embed_dims, num_layers, num_heads: DeiT-Tiny's 192, 12, 6 (C.4).
        qkv_bias, drop_rate, attn_drop_rate: as in mmseg's ``VisionTransformer``.
        drop_path_rate: Stochastic depth, DeiT-Tiny's 0.1.
        with_cls_token, final_norm, norm_cfg: as in mmseg's ``VisionTransformer`` (LayerNorm eps
            1e-6).
        **kwargs: The other arguments of mmseg's ``VisionTransformer``.
    """

    attention_args = ('ripple_cfg', 'attn_cfg')

    def __init__(self, num_ripple_layers: int = 9, ripple_cfg: Optional[Dict] = None,
                 attn_cfg: Optional[Dict] = None, out_type: str = 'featmap', embed_dims: int = 192,
                 num_layers: int = 12, num_heads: int = 6, qkv_bias: bool = True,
                 drop_rate: float = 0.0, attn_drop_rate: float = 0.0, drop_path_rate: float = 0.1,
                 with_cls_token: bool = False,
                 final_norm: bool = True, norm_cfg: Optional[Dict] = None, **kwargs) -> None:
        if not 0 <= num_ripple_layers <= num_layers:
            raise ValueError(f'DeiTRipple: num_ripple_layers={num_ripple_layers}; expected 0 .. '
                             f'{num_layers}')
        check_choice('DeiTRipple', out_type, OUT_TYPES, 'out_type')
        super().__init__(attn_cfg=attn_cfg or dict(type='RippleLinearAttention'),
                         embed_dims=embed_dims, num_layers=num_layers, num_heads=num_heads,
                         qkv_bias=qkv_bias, drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                         drop_path_rate=drop_path_rate, with_cls_token=with_cls_token,
                         final_norm=final_norm, norm_cfg=norm_cfg or dict(type='LN', eps=1e-6),
                         **kwargs)
        self.out_type = out_type
        self.num_ripple_layers = num_ripple_layers
        for layer in self.layers[:num_ripple_layers]:
            layer.attn.attn = self.build_layer_attention(ripple_cfg or dict(type='RippleAttention'))

    def forward(self, inputs: Tensor) -> Tuple[Tensor, ...]:
        outs = super().forward(inputs)
        if self.out_type == 'avg_featmap':
            return tuple(out.mean(dim=(2, 3)) for out in outs)
        return outs
