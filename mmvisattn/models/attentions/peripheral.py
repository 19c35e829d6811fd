"""Multi-head peripheral attention (MPA), "Peripheral Vision Transformer" (Min et al., NeurIPS 2022;
arXiv:2206.06801): Eq. 4-5 mix content attention ``exp(tau q k^T)`` with a position attention
``Phi_p`` learnt from Euclidean query-key distances (Eq. 6) through two ``3 x 3`` peripheral
projections, each followed by instance norm (Eq. 7-8); peripheral initialization (Eq. 9) sets the
second norm by layer depth.

Attention maps (``visualize_attention.py``): ``attention_maps(x, hw_shape, query)`` returns
``'position'`` and ``'mixed'`` ``(heads, H, W)`` maps of the first image's token at ``query``, and
``position_attention(hw_shape)`` the full ``Phi_p`` (Eq. 11, 13)."""
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.ops.peripheral import (
    IMPLS,
    POSITION_IMPLS,
    PositionParams,
    log_position_attention,
    mixed_attention_weights,
    peripheral_attention,
)
from mmvisattn.registry import ATTENTIONS

from .base import QKVAttention

# Eq. 9: weights of the peripheral projections and of the distance weighting w_r (c1 = c2 = 0.02)
PROJECTION_INIT = 0.02
DISTANCE_INIT = -0.02
# Eq. 9: the second instance norm's bias s_l (attention size) and weight v_l (strength) from the
# first to the last layer
NORM_BIAS_RANGE = (-5.0, 4.0)
NORM_WEIGHT_RANGE = (3.0, 0.01)


def peripheral_initialization(num_layers: int) -> List[Tuple[float, float]]:
    """``(bias, weight)`` of the second instance norm for layers ``1..L`` (Eq. 9): uniform steps
    from local and strong (``-5, 3``) to global and weak (``4, 0.01``)."""
    biases = torch.linspace(*NORM_BIAS_RANGE, steps=num_layers, device='cpu').tolist()
    weights = torch.linspace(*NORM_WEIGHT_RANGE, steps=num_layers, device='cpu').tolist()
    return list(zip(biases, weights))


def build_distance_proj(distance_dims: int) -> nn.Linear:
    """Eq. 6's ``D_r`` weights ``w_r`` of the distance (and a bias, as the official code)."""
    proj = nn.Linear(1, distance_dims)
    nn.init.constant_(proj.weight, DISTANCE_INIT)
    nn.init.zeros_(proj.bias)
    return proj


@ATTENTIONS.register_module()
class PeripheralAttention(QKVAttention):
    """``Normalize[exp(tau q k^T) * Phi_p] V`` per head (Eq. 5), ``tau = d^-1/2``.

    ``Phi_p = sigmoid(IN(PP(ReLU(IN(PP(R))))))`` on the grid's distances ``R`` weighted ``D_r`` ways
    (Eq. 6-8), the longer side spanning ``[-1, 1]``; cached per resolution in eval mode (and with
    ``freeze_position``). Extra tokens are at no distance: ``Phi_p = 1`` for every pair with one.
    Ops: :mod:`mmvisattn.ops.peripheral`.

    Args:
        embed_dims: Channels ``C``.
        num_heads: Heads ``N_h``.
        qkv_bias: Bias of the ``qkv`` projection (PerViT has none).
        attn_drop: Must be 0: the op fuses the weights with the value product (the official ``MPA``
            never applies it).
        proj_drop: Dropout after the output projection.
        kernel_size: ``K`` of the peripheral projections (odd; 1 drops the neighbourhoods, Eq. 6).
        hidden_dims: ``D_hid`` (and ``D_r`` when the distance weighting is this module's own);
            defaults to ``4 N_h`` (Appendix E).
        norm_init: ``(bias, weight)`` of the second instance norm (Eq. 9's ``s_l, v_l``); see
            :func:`peripheral_initialization`.
        distance_proj: A ``Linear(1, D_r)`` shared across layers (the paper's ``w_r``), owned by the
            backbone; ``None`` builds this module's own.
        freeze_position: Keep ``Phi_p`` fixed, the ablation of Table A4.
        impl: Backend of the mixing, one of :data:`mmvisattn.ops.peripheral.IMPLS`.
        position_impl: Backend of ``Phi_p``, one of :data:`mmvisattn.ops.peripheral.POSITION_IMPLS`.
        max_cached: Resolutions kept in the ``Phi_p`` cache (least recently used dropped).
        num_extra_tokens: Tokens in front of the map.
        init_cfg: mmengine initialisation config.
    """

    complexity = 'quadratic'
    impls = IMPLS
    extra_tokens = ('at no distance (position attention 1 for every pair with one): they attend to '
                    'every token and are attended by all, by content alone')
    attn_drop_unsupported = 'the peripheral op never holds the attention weights'

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, kernel_size: int = 3,
                 hidden_dims: Optional[int] = None, norm_init: Tuple[float, float] = (0.0, 1.0),
                 distance_proj: Optional[nn.Linear] = None, freeze_position: bool = False,
                 impl: str = 'auto', position_impl: str = 'auto', max_cached: int = 4,
                 num_extra_tokens: int = 0, init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                         proj_drop=proj_drop, num_extra_tokens=num_extra_tokens, init_cfg=init_cfg)
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f'PeripheralAttention: kernel_size={kernel_size}; expected a positive '
                             'odd number')
        hidden_dims = 4 * num_heads if hidden_dims is None else hidden_dims
        self.scale = self.head_dims ** -0.5
        self.impl = self.check_impl(impl)
        self.position_impl = self.check_impl(position_impl, POSITION_IMPLS, 'position_impl')
        self.freeze_position = freeze_position
        self.max_cached = max_cached
        self._cache: 'OrderedDict[tuple, Tensor]' = OrderedDict()
        self.distance_proj = build_distance_proj(hidden_dims) if distance_proj is None else None
        # a shared projection is held outside the module tree so that its owner alone saves it
        self._shared_distance_proj = (distance_proj,) if distance_proj is not None else ()
        distance_dims = self._distance().out_features
        self.position = nn.ModuleDict(dict(
            conv1=nn.Conv2d(distance_dims, hidden_dims, kernel_size),
            norm1=nn.GroupNorm(hidden_dims, hidden_dims),
            conv2=nn.Conv2d(hidden_dims, num_heads, kernel_size),
            norm2=nn.GroupNorm(num_heads, num_heads)))
        self.reset_position(norm_init)
        if freeze_position:
            self.position.requires_grad_(False)
            if self.distance_proj is not None:
                self.distance_proj.requires_grad_(False)

    def reset_position(self, norm_init: Tuple[float, float]) -> None:
        """Eq. 9: constant projections, unit first norm, ``norm_init = (s_l, v_l)`` second norm."""
        for conv in (self.position.conv1, self.position.conv2):
            nn.init.constant_(conv.weight, PROJECTION_INIT)
            nn.init.zeros_(conv.bias)
        nn.init.ones_(self.position.norm1.weight)
        nn.init.zeros_(self.position.norm1.bias)
        nn.init.constant_(self.position.norm2.bias, norm_init[0])
        nn.init.constant_(self.position.norm2.weight, norm_init[1])
        self._cache.clear()

    def _distance(self) -> nn.Linear:
        return (
            self.distance_proj if self.distance_proj is not None else self._shared_distance_proj[0]
        )

    def position_params(self) -> PositionParams:
        p, distance = self.position, self._distance()
        return PositionParams(distance.weight, distance.bias, p.conv1.weight, p.conv1.bias,
                              p.norm1.weight, p.norm1.bias, p.conv2.weight, p.conv2.bias,
                              p.norm2.weight, p.norm2.bias)

    def log_position_attention(self, hw_shape: Sequence[int]) -> Tensor:
        """``log Phi_p``, ``(heads, HW, HW)``; cached unless it is being trained."""
        params = self.position_params()
        if self.training and not self.freeze_position:
            return log_position_attention(params, hw_shape, self.position_impl)
        first = params.conv1_weight
        # inference-mode tensors cannot be saved for a later backward, so they are kept apart
        key = (tuple(hw_shape), first.device, first.dtype, torch.is_inference_mode_enabled(),
               tuple(p._version for p in params))
        if key not in self._cache:
            self._cache[key] = log_position_attention(params, hw_shape, self.position_impl,
                                                      frozen=True)
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]

    def position_attention(self, hw_shape: Sequence[int]) -> Tensor:
        """``Phi_p`` itself, ``(heads, HW, HW)`` (for pictures and the measures of Eq. 11-13)."""
        return self.log_position_attention(hw_shape).exp()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        log_phi_p = self.log_position_attention(hw_shape)
        if self.num_extra_tokens:  # log 1 for the rows and columns of the extra tokens
            log_phi_p = F.pad(log_phi_p, (self.num_extra_tokens, 0, self.num_extra_tokens, 0))
        return peripheral_attention(q, k, v, log_phi_p, self.scale, self.impl)

    @torch.no_grad()
    def attention_maps(self, x: Tensor, hw_shape: Sequence[int],
                       query: Tuple[int, int]) -> Dict[str, Tensor]:
        """The attention-map protocol: ``Phi_p`` and the mixed attention of ``query`` over the grid
        for the first image of ``x``, each ``(heads, H, W)``."""
        height, width = self.check_tokens(x, hw_shape)
        row = query[0] * width + query[1]
        q, k, _ = self.qkv(x[:1, self.num_extra_tokens:]).chunk(3, dim=-1)
        log_phi_p = self.log_position_attention((height, width))
        mixed = mixed_attention_weights(self.split_heads(q[:, row:row + 1]), self.split_heads(k),
                                        log_phi_p[:, row:row + 1], self.scale)
        return dict(position=log_phi_p[:, row].exp().view(-1, height, width),
                    mixed=mixed[0, :, 0].view(-1, height, width))
