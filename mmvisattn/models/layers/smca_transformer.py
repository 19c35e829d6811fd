"""Transformer of single-scale SMCA ("Fast convergence of DETR with spatially modulated
co-attention", arXiv:2101.07448, Eq. 2-5), as the ripple-attention paper uses it (arXiv:2110.02453,
C.4), the encoder attention from ``ATTENTIONS``: softmax (SMCA), linearized (SMCA-LA) or ripple
(SMCA-Ripple).

Decoder: each object query predicts a normalised centre in the first layer; every layer adds
per-head offsets and scales, and head ``h``'s cross-attention logits get the log of a Gaussian-like
map over the cell indices ``g`` (Eq. 3-4), in cells of each image's unpadded size as the official
code::

    log G_h(i, j) = -sum_d s_{h,d} (p_{h,d} - g_d(i, j))^2 / smooth
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import FFN
from mmdet.models.layers.transformer import (
    DetrTransformerDecoder,
    DetrTransformerDecoderLayer,
    DetrTransformerEncoder,
    DetrTransformerEncoderLayer,
)
from mmdet.models.layers.transformer.utils import MLP
from mmengine.model import ModuleList
from torch import Tensor

from mmvisattn.ops.utils.token_grid import grid_coordinates
from mmvisattn.registry import build_attention

# Official ``dynamic_scale`` types 1-4 -> scale channels per head: none (scale 1), one for x and y,
# one each for x and y, and x, y plus a term on the product of the squared x and y distances.
SCALE_CHANNELS = {'fixed': 0, 'per_head': 1, 'per_head_xy': 2, 'per_head_cov': 3}


def check_scale_type(scale_type: str) -> int:
    """Scale channels per head of ``scale_type``; one-line ValueError for an unknown type."""
    if scale_type not in SCALE_CHANNELS:
        raise ValueError(f'scale_type={scale_type!r}; expected one of {sorted(SCALE_CHANNELS)}')
    return SCALE_CHANNELS[scale_type]


def cell_grid(hw_shape: Sequence[int], device: torch.device, dtype: torch.dtype) -> Tensor:
    """``(H * W, 2)`` integer ``(x, y)`` indices of the cells in row-major token order."""
    ys, xs = grid_coordinates(hw_shape, device)
    return torch.stack((xs, ys), dim=-1).to(dtype)


def gaussian_log_weights(centres: Tensor, scales: Optional[Tensor], hw_shape: Sequence[int],
                         smooth: float) -> Tensor:
    """Log of the spatial modulation of SMCA (Eq. 3-4, official form).

    Args:
        centres: ``(B, Q, heads, 2)`` centres ``(x, y)`` in feature cells.
        scales: ``(B, Q, heads, k)`` non-negative scales, ``k`` = 1 (shared by x and y), 2 (x, y) or
            3 (x, y and the product of the squared distances); ``None`` for scale 1.
        hw_shape: ``(H, W)`` of the feature map.
        smooth: The divisor ``beta`` of the exponent (8 in the official code).

    Returns:
        ``(B, heads, Q, H * W)`` logits to add to the cross-attention scores.
    """
    grid = cell_grid(hw_shape, centres.device, centres.dtype)
    squared = (centres.unsqueeze(-2) - grid).square()  # (B, Q, heads, HW, 2)
    if scales is not None and scales.shape[-1] == 3:
        squared = torch.cat([squared, squared.prod(dim=-1, keepdim=True)], dim=-1)
    if scales is not None:
        squared = squared * scales.unsqueeze(-2)
    return -(squared.sum(dim=-1) / smooth).permute(0, 2, 1, 3)


def valid_sizes(key_padding_mask: Optional[Tensor],
                hw_shape: Sequence[int]) -> Optional[List[Tuple[int, int]]]:
    """Unpadded ``(h, w)`` of each image's feature map from DETR's padding mask (True = padded, a
    top-left rectangle stays valid); ``None`` when nothing is padded."""
    if key_padding_mask is None or not key_padding_mask.any():
        return None
    valid = ~key_padding_mask.view(-1, *hw_shape)
    heights, widths = valid[:, :, 0].sum(dim=1), valid[:, 0, :].sum(dim=1)
    return list(zip(heights.tolist(), widths.tolist()))


class SMCATransformerEncoderLayer(DetrTransformerEncoderLayer):
    """DETR's post-norm encoder layer whose self-attention comes from ``ATTENTIONS`` (mmcv's
    ``MultiheadAttention`` cannot hold a linearized or ripple one). The positional encoding is added
    to the tokens first, and a padded batch runs each image's unpadded grid on its own.

    Args:
        attn_cfg: Config of the attention (any type of ``ATTENTIONS``); ``embed_dims``,
            ``num_heads``, ``attn_drop`` and ``proj_drop`` are filled in, and ``sr_ratio`` 1 where
            taken (the map is at stride 32).
        embed_dims: Token channels.
        num_heads: Attention heads.
        dropout: Dropout on the attention weights (where the attention has them) and on its output.
        ffn_cfg: The stock FFN config.
        norm_cfg: The stock norm config.
        init_cfg: mmengine initialisation config.
    """

    def __init__(self, attn_cfg: dict, embed_dims: int = 256, num_heads: int = 8,
                 dropout: float = 0.1, ffn_cfg: Optional[dict] = None,
                 norm_cfg: Optional[dict] = None, init_cfg: Optional[dict] = None) -> None:
        self.attn_cfg = attn_cfg
        self.attn_defaults = dict(embed_dims=embed_dims, num_heads=num_heads, attn_drop=dropout,
                                  proj_drop=dropout)
        ffn_cfg = ffn_cfg or dict(embed_dims=embed_dims, feedforward_channels=2048, num_fcs=2,
                                  ffn_drop=dropout, act_cfg=dict(type='ReLU', inplace=True))
        super().__init__(self_attn_cfg=dict(batch_first=True), ffn_cfg=ffn_cfg,
                         norm_cfg=norm_cfg or dict(type='LN'), init_cfg=init_cfg)

    def _init_layers(self) -> None:
        self.self_attn = build_attention(self.attn_cfg, dict(sr_ratio=1), owner=type(self).__name__,
                                         num_extra_tokens=0, **self.attn_defaults)
        self.embed_dims = self.self_attn.embed_dims
        self.ffn = FFN(**self.ffn_cfg)
        self.norms = ModuleList([build_norm_layer(self.norm_cfg,
                                                  self.embed_dims)[1] for _ in range(2)])

    def attend(self, x: Tensor, hw_shape: Sequence[int],
               sizes: Optional[List[Tuple[int, int]]]) -> Tensor:
        """The attention on the batch, or image by image on the unpadded cells (zero on padding)."""
        if sizes is None:
            return self.self_attn(x, hw_shape)
        out = x.new_zeros(x.shape)
        grid_out = out.view(x.shape[0], *hw_shape, -1)
        grid_in = x.view(x.shape[0], *hw_shape, -1)
        for i, (height, width) in enumerate(sizes):
            tokens = grid_in[i, :height, :width].reshape(1, height * width, -1)
            grid_out[i, :height, :width] = self.self_attn(tokens, (height, width)).view(
                height, width, -1
            )
        return out

    def forward(self, query: Tensor, query_pos: Tensor, key_padding_mask: Optional[Tensor],
                hw_shape: Sequence[int], sizes: Optional[List[Tuple[int, int]]] = None,
                **kwargs) -> Tensor:
        query = self.norms[0](query + self.attend(query + query_pos, hw_shape, sizes))
        return self.norms[1](self.ffn(query))


class SMCATransformerEncoder(DetrTransformerEncoder):
    """DETR's encoder made of :class:`SMCATransformerEncoderLayer` (attention from ``ATTENTIONS``);
    ``forward`` also takes the feature grid ``hw_shape``."""

    def _init_layers(self) -> None:
        self.layers = ModuleList(
            [SMCATransformerEncoderLayer(**self.layer_cfg) for _ in range(self.num_layers)]
        )
        self.embed_dims = self.layers[0].embed_dims

    def forward(self, query: Tensor, query_pos: Tensor, key_padding_mask: Optional[Tensor],
                hw_shape: Sequence[int], **kwargs) -> Tensor:
        sizes = valid_sizes(key_padding_mask, hw_shape)
        for layer in self.layers:
            query = layer(query, query_pos, key_padding_mask, hw_shape, sizes)
        return query


class SMCATransformerDecoderLayer(DetrTransformerDecoderLayer):
    """DETR's post-norm decoder layer with SMCA's spatially modulated co-attention: from
    ``LayerNorm(query + query_pos)`` it predicts per-head centre offsets (``offset_proj``, official
    ``point2``), scales (``scale_proj``, ``point3``) and, first, the reference centre
    (``ref_point_head``, ``point1``); the Gaussian log-weights reach the stock cross-attention as
    its ``attn_mask``.

    Args:
        scale_type: ``'fixed'`` (official ``type1``), ``'per_head'`` (``type2``), ``'per_head_xy'``
            (``type3``, the official training command) or ``'per_head_cov'`` (``type4``).
        smooth: The divisor of the Gaussian exponent (official 8).
        predict_reference: Whether this layer predicts the reference centres (the first layer).
        **kwargs: The arguments of mmdet's ``DetrTransformerDecoderLayer``.
    """

    def __init__(self, scale_type: str = 'per_head_xy', smooth: float = 8.0,
                 predict_reference: bool = False, **kwargs) -> None:
        self.scale_channels = check_scale_type(scale_type)
        if smooth <= 0:
            raise ValueError(f'smooth={smooth}; expected a positive divisor of the Gaussian '
                             'exponent')
        self.scale_type = scale_type
        self.smooth = smooth
        self.predict_reference = predict_reference
        super().__init__(**kwargs)

    def _init_layers(self) -> None:
        super()._init_layers()
        self.num_heads = self.cross_attn.num_heads
        self.norm_query = build_norm_layer(self.norm_cfg, self.embed_dims)[1]
        self.offset_proj = nn.Linear(self.embed_dims, 2 * self.num_heads)
        self.scale_proj = (nn.Linear(self.embed_dims, self.scale_channels * self.num_heads)
                           if self.scale_channels else None)
        self.ref_point_head = MLP(self.embed_dims, self.embed_dims, 2,
                                  3) if self.predict_reference else None

    def init_weights(self) -> None:
        super().init_weights()
        self.init_scales()

    def init_scales(self) -> None:
        """Scales start at 1 for every query (weight 0, bias 1), as the official code; the detector
        calls this again after its Xavier pass."""
        if self.scale_proj is not None:
            nn.init.zeros_(self.scale_proj.weight)
            nn.init.ones_(self.scale_proj.bias)

    def spatial_prior(self, normed: Tensor, reference: Tensor, ref_scale: Tensor,
                      hw_shape: Sequence[int], key_padding_mask: Optional[Tensor]) -> Tensor:
        """``(B * heads, Q, H * W)`` Gaussian log-weights of every head, ``-inf`` on padded keys."""
        batch, queries, _ = normed.shape
        centres = (reference * ref_scale.unsqueeze(1)).unsqueeze(2)
        centres = centres + self.offset_proj(normed).view(batch, queries, self.num_heads, 2)
        scales = None
        if self.scale_proj is not None:
            scales = self.scale_proj(normed).view(batch, queries, self.num_heads, -1).square()
        log_weights = gaussian_log_weights(centres, scales, hw_shape, self.smooth)
        if key_padding_mask is not None:
            log_weights = log_weights.masked_fill(key_padding_mask[:, None, None, :], float('-inf'))
        return log_weights.flatten(0, 1)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, query_pos: Tensor, key_pos: Tensor,
                key_padding_mask: Optional[Tensor], hw_shape: Sequence[int], ref_scale: Tensor,
                reference: Optional[Tensor] = None, **kwargs) -> Tuple[Tensor, Tensor]:
        """Returns the updated queries and the ``(B, Q, 2)`` normalised reference centres (this
        layer's prediction if it makes one, else ``reference`` as given)."""
        normed = self.norm_query(query + query_pos)
        if self.ref_point_head is not None:
            reference = self.ref_point_head(normed).sigmoid()
        elif reference is None:
            raise ValueError('SMCATransformerDecoderLayer: no reference centres given to a layer '
                             'that does not predict them (predict_reference=False)')
        prior = self.spatial_prior(normed, reference, ref_scale, hw_shape, key_padding_mask)
        query = self.norms[0](self.self_attn(query=query, key=query, value=query,
                                             query_pos=query_pos, key_pos=query_pos))
        query = self.norms[1](self.cross_attn(query=query, key=key, value=value,
                                              query_pos=query_pos,
                                              key_pos=key_pos, attn_mask=prior))
        return self.norms[2](self.ffn(query)), reference


class SMCATransformerDecoder(DetrTransformerDecoder):
    """DETR's decoder of :class:`SMCATransformerDecoderLayer`s; ``forward`` returns every layer's
    hidden states and the ``(B, Q, 2)`` normalised references, which ``ConditionalDETRHead`` adds to
    the box-centre logits."""

    def _init_layers(self) -> None:
        self.layers = ModuleList(
            [
                SMCATransformerDecoderLayer(**self.layer_cfg, predict_reference=i == 0)
                for i in range(self.num_layers)
            ]
        )
        self.embed_dims = self.layers[0].embed_dims
        self.post_norm = build_norm_layer(self.post_norm_cfg, self.embed_dims)[1]

    def forward(self, query: Tensor, key: Tensor, value: Tensor, query_pos: Tensor, key_pos: Tensor,
                key_padding_mask: Optional[Tensor], hw_shape: Sequence[int], ref_scale: Tensor,
                **kwargs) -> Tuple[Tensor, Tensor]:
        intermediate, reference = [], None
        for layer in self.layers:
            query, reference = layer(query, key, value, query_pos, key_pos, key_padding_mask,
                                     hw_shape, ref_scale, reference)
            if self.return_intermediate:
                intermediate.append(self.post_norm(query))
        hidden_states = (
            torch.stack(intermediate)
            if self.return_intermediate
            else self.post_norm(query).unsqueeze(0)
        )
        return hidden_states, reference
