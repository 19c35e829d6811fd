"""Ripple attention and its linearized form, "Ripple attention for visual perception with
sub-quadratic complexity" (arXiv:2110.02453): §3 (Eq. 4-6), Appendix C.1 (the feature map of Eq.
13), C.2 (``R_max``, ``tau = 0.001``) and C.3 (stick-unit embeddings). No stock module has a
linearized attention with a learnable trig+ReLU feature map; the operator is
:func:`mmvisattn.ops.ripple.ripple_attention`.

Parameters (``C`` channels, ``h`` heads, ``d = C / h``, ``m`` features, with ``qkv_bias``):
:class:`RippleLinearAttention` ``4C^2 + 4C + 3md + d``; :class:`RippleAttention` adds ``d^2 + d + C
R_max``. E.g. DeiT-Ripple's ``C = 192, h = 6, R_max = 4``: 151,328 and 153,152."""
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmvisattn.ops.linearized import linearized_attention
from mmvisattn.ops.ripple import (
    IMPLS,
    chebyshev_distances,
    check_tau,
    group_weights,
    ripple_attention,
    stick_logits,
)
from mmvisattn.ops.trig_relu_features import trig_relu_features
from mmvisattn.registry import ATTENTIONS

from .base import QKVAttention


class TrigReLUFeatureMap(nn.Module):
    """``phi(x) = ReLU(W2 [sin(W1 x); cos(W1 x)] + b2)`` (Eq. 13), ``W1`` Gaussian-initialised and
    learnt (C.1); a bare parameter, so initialisers aimed at ``nn.Linear`` leave it alone.

    Args:
        dims: Input (and output) dimension ``d``.
        num_features: Rows ``m`` of ``W1``.
    """

    def __init__(self, dims: int, num_features: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(num_features, dims))
        self.fc = nn.Linear(2 * num_features, dims)

    def forward(self, x: Tensor, scale: float = 1.0) -> Tensor:
        """``phi(scale x)``, float32 inside so ``sin`` and ``cos`` keep their digits."""
        return trig_relu_features(x, self.w1, self.fc.weight, self.fc.bias, scale)


@ATTENTIONS.register_module()
class RippleLinearAttention(QKVAttention):
    """Linearized attention with the feature map of Eq. 13 (no spatial weighting): SMCA-LA's encoder
    and DeiT-Ripple's upper layers (C.5). Queries and keys are scaled by ``d^{-1/4}`` before the map
    (the temperature footnote 1 omits, split between the two).

    Args:
        embed_dims, num_heads, qkv_bias, attn_drop, proj_drop, init_cfg: see :class:`QKVAttention`;
            ``attn_drop`` must be 0: no attention weights are formed to drop.
        num_features: Rows of ``W1`` (default ``head_dims``).
        eps: Added to the normaliser.
        num_extra_tokens: Tokens in front of the map.
    """

    complexity = 'linear'
    extra_tokens = 'tokens like any other: every token attends to all and is attended by all'
    attn_drop_unsupported = 'the linearized form never forms attention weights'

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 attn_drop: float = 0.0,
                 proj_drop: float = 0.0, num_features: Optional[int] = None, eps: float = 1e-6,
                 num_extra_tokens: int = 0, init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                         proj_drop=proj_drop, num_extra_tokens=num_extra_tokens, init_cfg=init_cfg)
        num_features = self.head_dims if num_features is None else num_features
        if num_features < 1:
            raise ValueError(f'{type(self).__name__}: num_features={num_features}; expected a '
                             'positive integer')
        self.feature_map = TrigReLUFeatureMap(self.head_dims, num_features)
        self.eps = eps

    def attend_heads(self, qkv: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """``phi(q), phi(k)`` of the ``d^{-1/4}``-scaled queries and keys in one call on their joint
        view of the projection, then :meth:`attend_features`."""
        features_q, features_k = self.feature_map(qkv[:2], self.head_dims ** -0.25).unbind(0)
        return self.attend_features(features_q, features_k, qkv[2], hw_shape)

    def attend_features(self, features_q: Tensor, features_k: Tensor, v: Tensor,
                        hw_shape: Tuple[int, int]) -> Tensor:
        return linearized_attention(features_q, features_k, v, self.eps)


@ATTENTIONS.register_module()
class RippleAttention(RippleLinearAttention):
    """Multi-head ripple attention (Eq. 4) with stick-unit spatial weights (C.3): each value is
    projected (``stick_proj``, shared) and dotted with its head's ``R_max`` embeddings
    (``stick_embeds``), giving per-head spatial weights (C.5). Extra tokens attend to every token by
    the linearized attention (Eq. 2), and every spatial token attends to them as to keys of spatial
    weight 1, under one normaliser with its ripple attention. Other arguments:
    :class:`RippleLinearAttention`'s.

    Args:
        r_max: Groups ``0 .. r_max - 1`` get their own weight, farther ones are merged (C.2).
        tau: Threshold of the stick left over, in (0, 1) (§3.2; C.2 uses 0.001).
        impl: Operator implementation, one of :data:`mmvisattn.ops.ripple.IMPLS`.
    """

    impls = IMPLS
    extra_tokens = ('attend to every token by the linearized attention (no spatial weight); '
                    'spatial tokens attend to them as to keys of spatial weight 1, beside their '
                    'ripple attention over the grid')

    def __init__(self, embed_dims: int, num_heads: int, r_max: int = 4, tau: float = 1e-3,
                 qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 num_features: Optional[int] = None, eps: float = 1e-6, impl: str = 'auto',
                 num_extra_tokens: int = 0, init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                         proj_drop=proj_drop, num_features=num_features, eps=eps,
                         num_extra_tokens=num_extra_tokens, init_cfg=init_cfg)
        if not isinstance(r_max, int) or r_max < 1:
            raise ValueError(f'RippleAttention: r_max={r_max!r}; expected an integer >= 1')
        check_tau(tau, 'RippleAttention')
        self.r_max = r_max
        self.tau = tau
        self.impl = self.check_impl(impl)
        self.stick_proj = nn.Linear(self.head_dims, self.head_dims)
        self.stick_embeds = nn.Parameter(torch.randn(num_heads, r_max, self.head_dims) * 0.02)

    def stick_logits(self, v: Tensor) -> Tensor:
        """``(B, heads, N, d)`` values -> ``(B, heads, N, R_max)`` logits ``o_r(i, j) = e_{h,r} . (W
        v_ij + b)`` (C.3), the projection folded into the embeddings (``(E_h W) v + E_h b``): the
        projected values are never formed and autograd keeps only ``v``, a view of ``qkv``."""
        return stick_logits(v, self.stick_embeds @ self.stick_proj.weight,
                            self.stick_embeds @ self.stick_proj.bias)

    def attend_features(self, features_q: Tensor, features_k: Tensor, v: Tensor,
                        hw_shape: Sequence[int]) -> Tensor:
        extra = self.num_extra_tokens
        if not extra:
            return ripple_attention(features_q, features_k, v, self.stick_logits(v), hw_shape,
                                    self.tau, self.impl, self.eps)
        extra_rows = linearized_attention(features_q[..., :extra, :], features_k, v, self.eps)
        return torch.cat([extra_rows, self.spatial_rows(features_q[..., extra:, :], features_k, v,
                                                        hw_shape)], dim=-2)

    def spatial_rows(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """Spatial queries over the grid (ripple) and the extra tokens (weight 1) under one
        normaliser, ``(num_i + n_i) / (den_i + d_i)``: the op on ``q_i / d_i`` with ``eps = 1``
        returns ``num_i / (den_i + d_i)``, and on a column of ones ``den_i / (den_i + d_i)``."""
        extra = self.num_extra_tokens
        k_extra, v_extra, k_grid, v_grid = (
            k[..., :extra, :],
            v[..., :extra, :],
            k[..., extra:, :],
            v[..., extra:, :],
        )
        extra_den = q @ k_extra.sum(dim=-2).unsqueeze(-1) + self.eps
        extra_mean = q @ (k_extra.transpose(-1, -2) @ v_extra) / extra_den
        values = torch.cat([v_grid, torch.ones_like(v_grid[..., :1])], dim=-1)
        out = ripple_attention(q / extra_den, k_grid, values, self.stick_logits(v_grid), hw_shape,
                               self.tau, self.impl, eps=1.0)
        grid_rows, grid_share = out[..., :-1], out[..., -1:]
        return grid_rows + (1 - grid_share) * extra_mean

    def attention_maps(self, x: Tensor, hw_shape: Sequence[int],
                       query: Tuple[int, int]) -> Dict[str, Tensor]:
        """The attention-map protocol (``visualize_attention.py``): the spatial weight (Eq. 5-6) of
        every token for the first image's query at ``(row, col)``, ``(heads, H, W)``; the content
        term multiplies these per key."""
        height, width = self.check_tokens(x, hw_shape)
        v = self.split_heads(self.qkv(x[:1, self.num_extra_tokens:]).chunk(3, dim=-1)[2])
        index = query[0] * width + query[1]
        weights = group_weights(self.stick_logits(v), (height, width), self.tau)[0, :, index]
        rings = weights[:, chebyshev_distances((height, width), x.device)[index]]
        return dict(spatial_weights=rings.reshape(self.num_heads, height, width))
