"""Castling attention, "Castling-ViT: Compressing self-attention via switching towards
linear-angular attention during vision transformer inference" (arXiv:2211.10526): linear-angular
attention (:mod:`mmvisattn.ops.linear_angular`), a depthwise convolution over the values for the
kernel's high-order residual, and an auxiliary masked softmax attention used in training only and
removed at inference ("castling").

No source gives the schedule that makes the auxiliary masks "gradually become zeros":
:class:`mmvisattn.engine.CastlingScheduleHook` ramps ``aux_weight`` from 1 to 0 over a span of
training, then :meth:`LinearAngularAttention.switch_to_deploy` removes the branch.
"""
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.ops.linear_angular import (
    IMPLS,
    linear_angular_attention,
    linear_angular_unnormalised,
)
from mmvisattn.ops.masked_softmax import IMPLS as AUX_IMPLS
from mmvisattn.ops.masked_softmax import masked_softmax_attention
from mmvisattn.ops.utils.amp import norm_eps, upcast
from mmvisattn.registry import ATTENTIONS

from .base import QKVAttention

CONV_KINDS = ('tokens', 'spatial')
DEFAULT_KERNEL_SIZES = dict(tokens=9, spatial=3)
NORMALISATIONS = ('kernel', 'token')


@ATTENTIONS.register_module()
class LinearAngularAttention(QKVAttention):
    """Multi-head linear-angular attention with a depthwise-conv residual and a train-only masked
    softmax branch. Parameter names follow the official module (``qkv``, ``proj``, ``dconv``).

    Args:
        embed_dims: Channels ``C``.
        num_heads: Number of heads.
        qkv_bias: Whether ``qkv`` has a bias (the official default is False).
        attn_drop: Dropout on the weights of the auxiliary softmax branch.
        proj_drop: Dropout after ``proj``.
        conv: The depthwise convolution on V: ``'tokens'`` (the official ``(kernel_size, 1)`` one
            along the token axis, a channel per head) or ``'spatial'``
            (``kernel_size x kernel_size`` over the map).
        kernel_size: Its size; by default 9 along the tokens (official) and 3 over the map.
        normalisation: ``'kernel'`` divides by the kernel's row sums (a weighted average of the
            values); ``'token'`` follows the official code: ``0.5 v + (1/pi) q^ (k^T v)``, each
            output token L2-normalised, then the convolution added.
        aux_branch: Build the auxiliary masked softmax attention (training only).
        mask_threshold: Softmax weights at or below this are masked out of the auxiliary branch
            (official 0.02).
        impl: Backend of the linear-angular op, one of :data:`mmvisattn.ops.linear_angular.IMPLS`.
        aux_impl: Backend of the auxiliary branch, one
            of :data:`mmvisattn.ops.masked_softmax.IMPLS`.
        num_extra_tokens: Tokens in front of the map.
        init_cfg: mmengine initialisation config.

    Mixed precision: the attention terms in float32 whatever the inputs' dtype, the convolution in
    theirs.
    """

    complexity = 'linear'
    impls = IMPLS
    extra_tokens = ('tokens like any other in both attention terms (every token attends to all and '
                    'is attended '
                    "by all); ``conv='tokens'`` runs over them as over the map (the official class "
                    "token), ``conv='spatial'`` gives them no convolution")

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, conv: str = 'tokens',
                 kernel_size: Optional[int] = None, normalisation: str = 'kernel',
                 aux_branch: bool = True, mask_threshold: float = 0.02, impl: str = 'auto',
                 aux_impl: str = 'auto', num_extra_tokens: int = 0,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                         proj_drop=proj_drop, num_extra_tokens=num_extra_tokens, init_cfg=init_cfg)
        if conv not in CONV_KINDS:
            raise ValueError(f'LinearAngularAttention: conv={conv!r}; expected one of {CONV_KINDS}')
        if normalisation not in NORMALISATIONS:
            raise ValueError(f'LinearAngularAttention: normalisation={normalisation!r}; expected '
                             f'one of {NORMALISATIONS}')
        if kernel_size is None:
            kernel_size = DEFAULT_KERNEL_SIZES[conv]
        if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f'LinearAngularAttention: kernel_size={kernel_size!r} must be a '
                             'positive odd integer')
        self.impl = self.check_impl(impl)
        self.aux_impl = self.check_impl(aux_impl, AUX_IMPLS, 'aux_impl')
        self.conv = conv
        self.normalisation = normalisation
        self.mask_threshold = mask_threshold
        if conv == 'tokens':
            self.dconv = nn.Conv2d(num_heads, num_heads, (kernel_size, 1),
                                   padding=(kernel_size // 2, 0), groups=num_heads, bias=False)
        else:
            self.dconv = nn.Conv2d(embed_dims, embed_dims, kernel_size, padding=kernel_size // 2,
                                   groups=embed_dims, bias=False)
        self.has_aux_branch = aux_branch
        self.register_buffer('aux_weight', torch.tensor(1.0 if aux_branch else 0.0),
                             persistent=False)

    def switch_to_deploy(self) -> None:
        """Remove the auxiliary softmax branch for good; the module is then linear in the tokens."""
        if not self.has_aux_branch:
            raise RuntimeError(
                'LinearAngularAttention.switch_to_deploy() called twice (or on a module built '
                'with aux_branch=False): there is no auxiliary branch left to remove'
            )
        self.has_aux_branch = False
        self.aux_weight.fill_(0.0)

    def auxiliary(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Masked softmax attention (:func:`mmvisattn.ops.masked_softmax.masked_softmax_attention`):
        weights at or below ``mask_threshold`` dropped, ``attn_drop`` on the kept ones in
        training."""
        return masked_softmax_attention(q, k, v, self.mask_threshold,
                                        dropout=self.attn_drop if self.training else 0.0,
                                        impl=self.aux_impl)

    def conv_residual(self, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """Depthwise conv of the values; over the map, extra tokens (a class token) get none."""
        if self.conv == 'tokens':
            return self.token_conv(v)
        extra, spatial = v[:, :, :self.num_extra_tokens], v[:, :, self.num_extra_tokens:]
        grid = (
            self.merge_heads(spatial)
            .transpose(1, 2)
            .reshape(v.shape[0], self.embed_dims, *hw_shape)
        )
        mixed = self.split_heads(self.dconv(grid).flatten(2).transpose(1, 2))
        return torch.cat([torch.zeros_like(extra), mixed], dim=2)

    def token_conv(self, v: Tensor) -> Tensor:
        """``dconv`` (a ``(kernel_size, 1)`` kernel per head along the tokens) as a 1-D depthwise
        convolution over ``heads x d`` rows: the same weights, cheaper than a one-wide ``conv2d`` on
        CPU."""
        batch, heads, tokens, dims = v.shape
        rows = v.transpose(-1, -2).reshape(batch, heads * dims, tokens)
        # the module's sizes, not the input's: a traced weight keeps a constant shape (ONNX Conv)
        kernel = self.dconv.weight.shape[-2]
        weight = self.dconv.weight.view(self.num_heads, 1, 1,
                                        kernel).expand(-1, self.head_dims, -1, -1)
        weight = weight.reshape(self.num_heads * self.head_dims, 1, kernel)
        mixed = F.conv1d(rows, weight, padding=self.dconv.padding[0], groups=heads * dims)
        return mixed.view(batch, heads, dims, tokens).transpose(-1, -2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        if self.normalisation == 'kernel':
            out = linear_angular_attention(q, k, v, self.impl)
        else:
            out = linear_angular_unnormalised(q, k, v)
        if self.has_aux_branch:
            out = out + self.aux_weight * self.auxiliary(q, k, v)
        if self.normalisation == 'token':
            out = F.normalize(upcast(out)[0], dim=-1, eps=norm_eps(out.dtype)).to(out.dtype)
        return out + self.conv_residual(v, hw_shape)
