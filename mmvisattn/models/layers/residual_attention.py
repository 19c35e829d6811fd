"""Adapter that puts a project attention (``forward(x, hw_shape)``, no residual) into the attention
slot of mmseg's transformer layers, whose attentions add their residual themselves."""
from typing import Optional, Sequence, Tuple

import torch.nn as nn
from torch import Tensor


class TokenGrid:
    """The ``(H, W)`` token grid of the image being processed: mmseg's ViT layers call their
    attention without it, so the backbone records it from its patch embedding (a forward hook)."""

    def __init__(self) -> None:
        self.hw_shape: Optional[Tuple[int, int]] = None

    def record(self, module: nn.Module, inputs, output) -> None:
        self.hw_shape = tuple(output[1])


class ResidualAttention(nn.Module):
    """``identity + drop_path(attn(x, hw_shape))``, called like mmseg's attentions.

    Args:
        attn: An attention of ``ATTENTIONS``.
        drop_path: The residual-branch dropout of the attention it replaces (kept as is).
        grid: Where the token grid comes from when the caller passes none (mmseg's ViT).
    """

    def __init__(self, attn: nn.Module, drop_path: nn.Module,
                 grid: Optional[TokenGrid] = None) -> None:
        super().__init__()
        self.attn = attn
        self.dropout_layer = drop_path
        self.grid = grid

    def forward(self, x: Tensor, hw_shape: Optional[Sequence[int]] = None,
                identity: Optional[Tensor] = None, **unused_kwargs) -> Tensor:
        if hw_shape is None:
            if self.grid is None or self.grid.hw_shape is None:
                raise RuntimeError(
                    'ResidualAttention: no hw_shape given and no token grid recorded'
                )
            hw_shape = self.grid.hw_shape
        identity = x if identity is None else identity
        return identity + self.dropout_layer(self.attn(x, hw_shape))
