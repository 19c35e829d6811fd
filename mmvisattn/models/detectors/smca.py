"""SMCA detector (Gao et al., "Fast convergence of DETR with spatially modulated co-attention",
ICCV 2021), single scale, with the encoder attention chosen by config: softmax (SMCA), linearized
(SMCA-LA) or ripple (SMCA-Ripple) as in the ripple-attention paper (arXiv:2110.02453, C.4, Table
3)."""
import math
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmdet.models.detectors import DETR
from mmdet.models.layers import SinePositionalEncoding
from mmdet.structures import OptSampleList
from torch import Tensor

from mmvisattn.registry import register_model

from ..layers.smca_transformer import SMCATransformerDecoder, SMCATransformerEncoder


def reference_scale(batch_data_samples: OptSampleList, feat: Tensor) -> Tensor:
    """``(B, 2)`` unpadded width and height of each image in feature cells, ``(W, H) / stride``: the
    span of SMCA's normalised centres (the official ``h_w / 32``). Dividing by the backbone's
    stride, not the padded map's ratio, keeps an image's centres the same whatever it is batched
    with."""
    batch_h, batch_w = batch_data_samples[0].batch_input_shape
    stride = 2 ** round(math.log2(max(batch_h, batch_w) / max(feat.shape[-2:])))
    # (H, W) each; a traced tensor under mmdeploy's dynamic-shape export, which must stay one
    shapes = [torch.as_tensor(s.img_shape, dtype=feat.dtype,
                              device=feat.device) for s in batch_data_samples]
    return torch.stack(shapes).flip(-1) / stride


@register_model
class SMCA(DETR):
    """Single-scale SMCA: DETR whose decoder modulates its co-attention with a Gaussian-like map
    around centres and scales predicted from every object query
    (:mod:`mmvisattn.models.layers.smca_transformer`).

    mmdet has no SMCA: ``DETR`` supplies the backbone, neck, positional encoding and query flow,
    ``ConditionalDETRHead`` is SMCA's head unchanged. New: the encoder's attention comes from
    ``ATTENTIONS`` (``encoder.layer_cfg.attn_cfg``), and the decoder gets each image's grid and
    reference span.

    Args: those of mmdet's ``DETR``; ``encoder`` configures :class:`SMCATransformerEncoder`,
    ``decoder`` :class:`SMCATransformerDecoder`.
    """

    def _init_layers(self) -> None:
        self.positional_encoding = SinePositionalEncoding(**self.positional_encoding)
        self.encoder = SMCATransformerEncoder(**self.encoder)
        self.decoder = SMCATransformerDecoder(**self.decoder)
        self.embed_dims = self.encoder.embed_dims
        self.query_embedding = nn.Embedding(self.num_queries, self.embed_dims)
        if 2 * self.positional_encoding.num_feats != self.embed_dims:
            raise ValueError(f'positional_encoding.num_feats={self.positional_encoding.num_feats}; '
                             f'expected half of embed_dims={self.embed_dims}')

    def init_weights(self) -> None:
        """DETR's Xavier initialisation (C.6) of linear layers and the stock attentions' input
        projections; other attention parameters (ripple's feature maps and stick embeddings) keep
        their own start."""
        super(DETR, self).init_weights()
        for coder in self.encoder, self.decoder:
            for module in coder.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                elif isinstance(module, nn.MultiheadAttention):
                    nn.init.xavier_uniform_(module.in_proj_weight)
        for layer in self.decoder.layers:
            layer.init_scales()

    def pre_transformer(self, img_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        encoder_inputs, decoder_inputs = super().pre_transformer(img_feats, batch_data_samples)
        hw_shape = tuple(img_feats[-1].shape[-2:])
        encoder_inputs.update(hw_shape=hw_shape)
        decoder_inputs.update(hw_shape=hw_shape,
                              ref_scale=reference_scale(batch_data_samples, img_feats[-1]))
        return encoder_inputs, decoder_inputs

    def forward_encoder(self, feat: Tensor, feat_mask: Optional[Tensor], feat_pos: Tensor,
                        hw_shape: Sequence[int]) -> Dict:
        return dict(memory=self.encoder(query=feat, query_pos=feat_pos, key_padding_mask=feat_mask,
                                        hw_shape=hw_shape))

    def forward_decoder(self, query: Tensor, query_pos: Tensor, memory: Tensor,
                        memory_mask: Optional[Tensor],
                        memory_pos: Tensor, hw_shape: Sequence[int], ref_scale: Tensor) -> Dict:
        hidden_states, references = self.decoder(query=query, key=memory, value=memory,
                                                 query_pos=query_pos,
                                                 key_pos=memory_pos, key_padding_mask=memory_mask,
                                                 hw_shape=hw_shape, ref_scale=ref_scale)
        return dict(hidden_states=hidden_states, references=references)

