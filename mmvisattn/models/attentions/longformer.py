"""Vision Longformer attention, "Multi-Scale Vision Longformer" (arXiv:2103.15358, Sec. 3.2, Eq. 3,
App. C, D): local queries attend to the global tokens and to a 2-D window around them, global
queries attend to every token, with relative-position bias for local-local, global-local and
global-global pairs."""
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

from mmvisattn.ops.sliding_chunk import (
    IMPLS,
    check_masking,
    check_window,
    dense_bias,
    global_rows,
    sliding_chunk_attention,
)
from mmvisattn.registry import ATTENTIONS

from ..layers.weight_init import init_embedding
from .base import BaseAttention

RANDOM_SHIFT_MODES = (-1, 0, 1)  # own chunk only, all neighbours, random shifting


@ATTENTIONS.register_module()
class LongformerAttention(BaseAttention):
    """Sliding-chunk local attention with global tokens (the ViL attention), through
    :func:`mmvisattn.ops.sliding_chunk.sliding_chunk_attention`. Parameter names follow the official
    ``Long2DSCSelfAttention`` (``query``, ``kv``, ``proj``, their ``*_global`` copies when global
    weights are not shared, ``local_relative_position_bias_table``, ``g2l_relative_position_bias``,
    ``g2g_relative_position_bias``).

    Args:
        embed_dims: Channels ``C``.
        num_heads: Heads.
        window: Chunk side ``w``; each query sees a window of at least ``2w+1`` (Table 15:
            ``15 = 2*7+1``).
        num_extra_tokens: Global tokens ``G`` in front of the map (a backbone's global or class
            tokens).
        masking: ``'chunk'`` (default, sliding chunk without padding), ``'exact'`` or ``'cyclic'``
            (App. C).
        mode: 0 all eight neighbour chunks, -1 own chunk only, 1 random shifting (App. D: each
            training step draws a neighbour, evaluation uses all eight; ``ViLRandomShiftHook``
            switches it to 0 late).
        rel_pos: Learn relative-position biases (the ``ViL-*-RPB`` models).
        share_global_weights: Global queries use the local projections (as the detection models).
        qkv_bias: Bias of the query / key-value projections.
        attn_drop: Must be 0: the op fuses the softmax with the value product.
        proj_drop: Dropout after the output projection.
        impl: Backend of the op, one of :data:`mmvisattn.ops.sliding_chunk.IMPLS`.
        init_cfg: mmengine initialisation config.
    """

    complexity = 'linear'
    impls = IMPLS
    extra_tokens = ('its global tokens: they attend to every token, and every token attends to '
                    'them besides its window')
    attn_drop_unsupported = 'the sliding-chunk op never holds the attention weights'

    def __init__(self, embed_dims: int, num_heads: int, window: int = 7, num_extra_tokens: int = 0,
                 masking: str = 'chunk', mode: int = 0, rel_pos: bool = True,
                 share_global_weights: bool = True,
                 qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 impl: str = 'auto', init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, num_extra_tokens, init_cfg=init_cfg)
        self.check_attn_drop(attn_drop)
        self.window = check_window(window, type(self).__name__)
        check_masking(masking, 'LongformerAttention')
        self.masking = masking
        self.mode = mode
        self.impl = self.check_impl(impl)
        self.query = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.share_global_weights = share_global_weights or num_extra_tokens == 0
        if not self.share_global_weights:
            self.query_global = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
            self.kv_global = nn.Linear(embed_dims, 2 * embed_dims, bias=qkv_bias)
            self.proj_global = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rel_pos = rel_pos
        if rel_pos:
            side = 4 * self.window - 1
            self.local_relative_position_bias_table = nn.Parameter(
                torch.zeros(side * side, num_heads)
            )
            init_embedding(self.local_relative_position_bias_table)
            if num_extra_tokens:
                self.g2l_relative_position_bias = nn.Parameter(
                    torch.zeros(2, num_heads, num_extra_tokens)
                )
                self.g2g_relative_position_bias = nn.Parameter(
                    torch.zeros(num_heads, num_extra_tokens, num_extra_tokens))
                init_embedding(self.g2l_relative_position_bias)
                init_embedding(self.g2g_relative_position_bias)

    @property
    def mode(self) -> int:
        return self._mode

    @mode.setter
    def mode(self, mode: int) -> None:
        if isinstance(mode, bool) or mode not in RANDOM_SHIFT_MODES:
            raise ValueError(f'LongformerAttention: mode={mode!r}; expected one of '
                             f'{RANDOM_SHIFT_MODES} '
                             '(-1 own chunk, 0 all neighbours, 1 random shifting)')
        self._mode = mode

    def step_mode(self, device: torch.device) -> Union[int, Tensor]:
        """This call's op mode: in random-shifting training a neighbour 1..8 drawn on ``device`` and
        never read back, so every draw runs the same graph."""
        if self._mode == 1:
            return torch.randint(1, 9, (), device=device) if self.training else 0
        return self._mode

    def bias_tables(self):
        if not self.rel_pos:
            return None
        if not self.num_extra_tokens:
            return self.local_relative_position_bias_table, None, None
        return (self.local_relative_position_bias_table, self.g2l_relative_position_bias,
                self.g2g_relative_position_bias)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        hw_shape = self.check_tokens(x, hw_shape)
        num_global = self.num_extra_tokens
        q = self.split_heads(self.query(x))
        k, v = (self.split_heads(t) for t in self.kv(x).chunk(2, dim=-1))
        rel_pos = self.bias_tables()
        out = sliding_chunk_attention(q, k, v, hw_shape, self.window, num_global, self.masking,
                                      self.step_mode(x.device), rel_pos, impl=self.impl)
        if self.share_global_weights:
            return self.proj_drop(self.proj(self.merge_heads(out)))
        # separate global projections: the global rows are recomputed with them (G x N, cheap)
        local = self.proj(self.merge_heads(out[:, :, num_global:]))
        q_glob = self.split_heads(self.query_global(x[:, :num_global])) * self.head_dims ** -0.5
        k_glob, v_glob = (self.split_heads(t) for t in self.kv_global(x).chunk(2, dim=-1))
        glob = self.proj_global(self.merge_heads(global_rows(q_glob, k_glob, v_glob, rel_pos)))
        return self.proj_drop(torch.cat([glob, local], dim=1))

    @torch.no_grad()
    def attention_maps(self, x: Tensor, hw_shape: Sequence[int],
                       query: Tuple[int, int]) -> Dict[str, Tensor]:
        """The attention-map protocol (``visualize_attention.py``): the weights the token at ``query
        = (row, col)`` of the first image gives the map, ``(heads, H, W)`` (the rest goes to the
        global tokens)."""
        height, width = self.check_tokens(x, hw_shape)
        num_global = self.num_extra_tokens
        row = num_global + query[0] * width + query[1]
        q = self.split_heads(self.query(x[:1, row:row + 1])) * self.head_dims ** -0.5
        k = self.split_heads(self.kv(x[:1]).chunk(2, dim=-1)[0])
        mode = 0 if self._mode == 1 else self._mode
        bias = dense_bias((height, width), self.window, num_global, self.masking, mode,
                          self.num_heads, self.bias_tables(), q)[:, row]
        weights = ((q @ k.transpose(-1, -2))[0, :, 0] + bias).softmax(dim=-1)
        return dict(attention=weights[:, num_global:].reshape(-1, height, width))
