"""The reference: one full softmax attention over all ``G + h*w`` tokens with an explicit bias,
``-inf`` where the pattern forbids a pair (arXiv:2103.15358, App. C), built from token coordinates,
not the slot tables. A key in several visited chunks (cyclic wrapping on small grids) is seen by the
fast paths once per chunk, which equals one bias ``log(sum_copies exp(b))``.
"""
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..utils.amp import float32_math
from .pattern import visited_pairs


def _local_weights(hw_shape: Sequence[int], window: int, masking: str, mode: int,
                   table: Tensor) -> Tensor:
    """``(heads, N, N)`` sum of ``exp(bias)`` over visited chunks holding key ``j`` (0: none)."""
    tokens = hw_shape[0] * hw_shape[1]
    weights = table.new_zeros(table.shape[1], tokens, tokens)
    for match, rel in visited_pairs(hw_shape, window, masking, mode, table.device):
        bias = table[rel].permute(2, 0, 1)
        weights = weights + torch.where(match, bias.exp(), torch.zeros_like(bias))
    return weights


def dense_bias(hw_shape: Sequence[int], window: int, num_global: int, masking: str, mode: int,
               heads: int, rel_pos: Optional[Sequence[Optional[Tensor]]], like: Tensor) -> Tensor:
    """``(heads, G + N, G + N)`` additive bias with ``-inf`` on forbidden pairs."""
    side = 4 * window - 1
    table = (
        rel_pos[0]
        if rel_pos is not None and rel_pos[0] is not None
        else like.new_zeros(side * side, heads)
    )
    weights = _local_weights(hw_shape, window, masking, mode, table)
    local = torch.where(weights > 0, weights.clamp_min(1e-300).log(),
                        torch.full_like(weights, float('-inf')))
    if num_global == 0:
        return local
    tokens = local.shape[-1]
    if rel_pos is not None and rel_pos[1] is not None:
        to_global, from_global, among = rel_pos[1][1], rel_pos[1][0], rel_pos[2]
    else:
        to_global = from_global = like.new_zeros(heads, num_global)
        among = like.new_zeros(heads, num_global, num_global)
    top = torch.cat([among, from_global[..., None].expand(-1, -1, tokens)], dim=-1)
    bottom = torch.cat([to_global[:, None, :].expand(-1, tokens, -1), local], dim=-1)
    return torch.cat([top, bottom], dim=1)


@float32_math  # in float32 whatever the dtype (float64 stays)
def sliding_chunk_attention_reference(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int],
                                      window: int,
                                      num_global: int = 0, masking: str = 'chunk', mode: int = 0,
                                      rel_pos: Optional[Sequence[Optional[Tensor]]] = None,
                                      scale: Optional[float] = None) -> Tensor:
    """Same contract as :func:`mmvisattn.ops.sliding_chunk.sliding_chunk_attention`."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias = dense_bias(hw_shape, window, num_global, masking, mode, q.shape[1], rel_pos, q)
    scores = (q * scale) @ k.transpose(-1, -2) + bias
    return scores.softmax(dim=-1) @ v
