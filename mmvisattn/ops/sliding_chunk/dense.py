"""Vision Longformer attention in dense form, for maps no larger than a query's window
(arXiv:2103.15358, App. C): one SDPA call over all ``G + N`` tokens with an additive bias (each
allowed pair's relative-position bias, ``-inf`` elsewhere) gathered by a cached index of the pattern
(:func:`.pattern.visited_pairs`). :func:`dense_is_faster` is the CPU crossover ``auto`` follows; a
layout visiting a key twice has no single bias per pair (:func:`visits_once`). Float32 arithmetic,
autocast off."""
from functools import lru_cache
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import autocast_off, float32_math
from ..utils.token_grid import window_grid
from ..utils.tracing import apply_function
from .layout import neighbour_chunk, visited_neighbours
from .pattern import visited_pairs

# Tokens per slot of a query up to which the dense form is faster than the C++ sliding chunks on CPU
DENSE_SHARE = 0.8


def query_slots(window: int, num_global: int, mode: int) -> int:
    """``S``: a local query's key slots in ``mode`` (the globals and ``w^2`` per visited chunk)."""
    return num_global + len(visited_neighbours(mode)) * window * window


def dense_is_faster(hw_shape: Sequence[int], window: int, num_global: int, mode: int) -> bool:
    """Whether the dense form beats the sliding chunks on CPU: the map holds at
    most :data:`DENSE_SHARE` of a query's slots."""
    return num_global + hw_shape[0] * hw_shape[1] <= DENSE_SHARE * query_slots(
        window, num_global, mode
    )


# of the layout alone; a tensor read back would break torch.compile's graph
@torch.compiler.assume_constant_result
def visits_once(hw_shape: Tuple[int, int], window: int, masking: str, mode: int) -> bool:
    """Whether the layout visits every allowed key of a local query once (cyclic wrapping on a grid
    of fewer than three chunks visits some twice)."""
    return _visits_once(hw_shape, window, masking, mode)


@lru_cache(maxsize=16)
def _visits_once(hw_shape: Tuple[int, int], window: int, masking: str, mode: int) -> bool:
    """Whether every chunk's visited neighbour chunks are distinct, on the chunk grid: every chunk
    holds a token of the map, so a repeated chunk is a repeated key."""
    grid = window_grid(hw_shape, window)
    chunks = []
    for offset in visited_neighbours(mode):
        rows, cols, outside = neighbour_chunk(grid, masking, offset)
        # each outside one its own
        chunks.append(torch.where(outside, -1 - offset, rows * grid[1] + cols))
    ordered = torch.stack(chunks, dim=1).sort(dim=1).values
    return bool((ordered[:, 1:] != ordered[:, :-1]).all())


@lru_cache(maxsize=16)
def pair_index(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str, mode: int,
               device: torch.device) -> Tensor:
    """``(G + N, G + N)`` position of every pair's bias in a head's row of :func:`bias_rows`, for a
    layout that :func:`visits_once`. Cached: a map size recurs in every layer and every step."""
    tokens, side = hw_shape[0] * hw_shape[1], 4 * window - 1
    forbidden = side * side + 2 * num_global + num_global ** 2 + 1
    local = torch.full((tokens, tokens), forbidden, dtype=torch.long, device=device)
    for match, rel in visited_pairs(hw_shape, window, masking, mode, device):
        local = torch.where(match, rel, local)
    if num_global == 0:
        return local
    glob = torch.arange(num_global, device=device)
    from_global = (side * side + glob)[:, None].expand(-1, tokens)
    to_global = (side * side + num_global + glob)[None].expand(tokens, -1)
    among = side * side + 2 * num_global + glob[:, None] * num_global + glob[None]
    return torch.cat([torch.cat([among, from_global], dim=1), torch.cat([to_global, local], dim=1)])


def bias_rows(rel_pos: Optional[Sequence[Optional[Tensor]]], window: int, num_global: int,
              heads: int, like: Tensor) -> Tensor:
    """``(heads, E)``: each head's local table, global-to-local, local-to-global and
    global-to-global biases, then ``0`` and ``-inf``."""
    side = 4 * window - 1
    table = like.new_zeros(heads,
                           side * side) if rel_pos is None or rel_pos[0] is None else rel_pos[0].t()
    if rel_pos is not None and rel_pos[1] is not None:
        glob = [rel_pos[1][0], rel_pos[1][1], rel_pos[2].reshape(heads, -1)]
    else:
        glob = [like.new_zeros(heads, 2 * num_global + num_global ** 2)]
    ends = like.new_tensor([0.0, float('-inf')]).expand(heads, 2)
    return torch.cat([table.to(like.dtype), *(g.to(like.dtype) for g in glob), ends], dim=1)


class GatherBias(torch.autograd.Function):
    """``rows[:, index]`` whose backward adds the gradients back by one ``index_add_`` (cheaper on
    CPU than indexing's ``index_put_``). Autocast off; a gather keeps its dtype."""

    @staticmethod
    @autocast_off
    def forward(ctx, rows: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.width = rows.shape[1]
        return rows.index_select(1, index.view(-1)).view(rows.shape[0], *index.shape)

    @staticmethod
    @autocast_off
    def backward(ctx, grad: Tensor) -> Tuple[Tensor, None]:
        index, = ctx.saved_tensors
        heads = grad.shape[0]
        flat = (index.view(1, -1)
                + torch.arange(heads, device=grad.device)[:, None] * ctx.width).view(-1)
        return grad.new_zeros(heads * ctx.width).index_add_(0, flat, grad.reshape(-1)).view(
            heads, -1
        ), None


@float32_math  # half logits of large inputs overflow before the softmax
def sliding_chunk_attention_dense(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int],
                                  window: int, num_global: int, masking: str, mode: int,
                                  rel_pos: Optional[Sequence[Optional[Tensor]]],
                                  scale: float) -> Tensor:
    """Same contract as :func:`mmvisattn.ops.sliding_chunk.sliding_chunk_attention`, for a layout
    that :func:`visits_once` and a mode that is not drawn."""
    index = pair_index(tuple(hw_shape), window, num_global, masking, mode, q.device)
    bias = apply_function(GatherBias, bias_rows(rel_pos, window, num_global, q.shape[1], q), index)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
