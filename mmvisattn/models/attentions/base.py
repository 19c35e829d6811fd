"""The one attention interface of mmvisattn: tokens ``x`` ``(B, num_extra_tokens + H * W, C)``,
extra tokens (global, class) first, and the grid ``hw_shape = (H, W)``, in; the same shape out.

The extra-token contract: a backbone passes each attention it builds ``num_extra_tokens`` and offers
its per-stage settings (window, reduction ratio), taken where the constructor has the argument
(:func:`mmvisattn.registry.build_attention`); an attention states in ``extra_tokens`` how it treats
them. So any attention goes into any backbone through ``attn_cfg=dict(type=...)``.
"""
from typing import Optional, Sequence, Tuple

import torch.nn as nn
from mmengine.model import BaseModule
from torch import Tensor

from mmvisattn.ops.utils.arguments import check_choice

COMPLEXITIES = ('linear', 'quadratic')


class BaseAttention(BaseModule):
    """Base class of every attention in ``ATTENTIONS``.

    Subclasses set ``complexity`` (``'linear'`` or ``'quadratic'`` after ``switch_to_deploy()``) and
    ``extra_tokens`` (one sentence, listed on the docs' attentions page). A module with several
    backends takes ``impl=`` and lists them in ``impls``; one that cannot drop attention weights
    says why in ``attn_drop_unsupported`` (:meth:`check_attn_drop`).

    Args:
        embed_dims: Channels ``C`` of the tokens.
        num_heads: Number of attention heads; must divide ``embed_dims``.
        num_extra_tokens: Tokens in front of the ``H * W`` map (the backbone's global or class
            tokens).
        init_cfg: mmengine initialisation config.
    """

    complexity: str = ''
    extra_tokens: str = ''
    impls: Tuple[str, ...] = ()
    attn_drop_unsupported: str = ''

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.complexity and cls.complexity not in COMPLEXITIES:
            raise TypeError(f'{cls.__name__}.complexity is {cls.complexity!r}; expected one of '
                            f'{COMPLEXITIES}')

    def check_impl(self, impl: str, choices: Optional[Sequence[str]] = None,
                   name: str = 'impl') -> str:
        """``impl`` if it is one of ``choices`` (the ``impls``), else a one-line ``ValueError``."""
        return check_choice(type(self).__name__, impl, self.impls if choices is None else choices,
                            name)

    def check_attn_drop(self, attn_drop: float) -> float:
        """``attn_drop``, or a one-line ``ValueError`` where it is non-zero and the module cannot
        drop attention weights."""
        if attn_drop and self.attn_drop_unsupported:
            raise ValueError(f'{type(self).__name__}: attn_drop={attn_drop} is not supported; '
                             f'expected 0, {self.attn_drop_unsupported} (use proj_drop)')
        return attn_drop

    def __init__(self, embed_dims: int, num_heads: int, num_extra_tokens: int = 0,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if embed_dims <= 0 or num_heads <= 0 or embed_dims % num_heads:
            raise ValueError(f'{type(self).__name__}: embed_dims={embed_dims} must be a positive '
                             f'multiple of num_heads={num_heads}')
        if isinstance(num_extra_tokens,
                      bool) or not isinstance(num_extra_tokens, int) or num_extra_tokens < 0:
            raise ValueError(f'{type(self).__name__}: num_extra_tokens={num_extra_tokens!r}; '
                             'expected an integer >= 0')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.num_extra_tokens = num_extra_tokens

    def check_tokens(self, x: Tensor, hw_shape: Sequence[int]) -> Tuple[int, int]:
        """Validate ``x`` against ``hw_shape``; returns ``(H, W)``."""
        if x.dim() != 3 or x.shape[-1] != self.embed_dims:
            raise ValueError(f'{type(self).__name__}: expected tokens of shape (B, N, '
                             f'{self.embed_dims}), got {tuple(x.shape)}')
        height, width = hw_shape
        expected = self.num_extra_tokens + height * width
        if x.shape[1] != expected:
            raise ValueError(f'{type(self).__name__}: {x.shape[1]} tokens do not match '
                             f'hw_shape={tuple(hw_shape)} '
                             f'(expected {self.num_extra_tokens} extra + {height}x{width} = '
                             f'{expected})')
        return height, width

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, N, C) -> (B, heads, N, C / heads)``."""
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, self.num_heads, self.head_dims).transpose(1, 2)

    @staticmethod
    def merge_heads(x: Tensor) -> Tensor:
        """``(B, heads, N, d) -> (B, N, heads * d)``."""
        batch, heads, tokens, dims = x.shape
        return x.transpose(1, 2).reshape(batch, tokens, heads * dims)


class QKVAttention(BaseAttention):
    """Attention with a fused ``qkv`` projection and an output ``proj``; subclasses define
    :meth:`attend` on per-head ``(B, heads, N, d)`` tensors.

    Args:
        embed_dims: Channels ``C``.
        num_heads: Number of heads.
        qkv_bias: Whether the ``qkv`` projection has a bias.
        attn_drop: Dropout on the attention weights; must be 0 where ``attn_drop_unsupported`` says
            why.
        proj_drop: Dropout after the output projection.
        num_extra_tokens: Tokens in front of the map.
        init_cfg: mmengine initialisation config.
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, num_extra_tokens: int = 0,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, num_extra_tokens, init_cfg=init_cfg)
        self.qkv = nn.Linear(embed_dims, 3 * embed_dims, bias=qkv_bias)
        self.attn_drop = self.check_attn_drop(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        raise NotImplementedError

    def heads_of_qkv(self, x: Tensor) -> Tensor:
        """``(B, N, C)`` tokens -> ``(3, B, heads, N, d)`` q, k, v, views of one projection."""
        batch, tokens, _ = x.shape
        return self.qkv(x).view(batch, tokens, 3, self.num_heads,
                                self.head_dims).permute(2, 0, 3, 1, 4)

    def attend_heads(self, qkv: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """:meth:`attend` on the views of :meth:`heads_of_qkv`; a subclass that maps queries and
        keys alike overrides it to map both views in one call."""
        return self.attend(*qkv.unbind(0), hw_shape)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        hw_shape = self.check_tokens(x, hw_shape)
        out = self.attend_heads(self.heads_of_qkv(x), hw_shape)
        return self.proj_drop(self.proj(self.merge_heads(out)))


def switch_to_deploy(model: nn.Module) -> int:
    """Remove every train-only branch inside ``model`` (Castling's auxiliary softmax), leaving the
    modules already in their deploy form as they are; returns how many were removed."""
    switched = 0
    for module in model.modules():
        if getattr(module, 'has_aux_branch', False):
            module.switch_to_deploy()
            switched += 1
    return switched
