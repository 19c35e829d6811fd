"""Vision Longformer attention through PyTorch's FlexAttention (arXiv:2103.15358, Sec. 3.2, App. C,
D).

FlexAttention's blocks follow the sliding chunks: local tokens laid out chunk by chunk, each chunk
padded to ``P`` rows, the ``G`` global keys first in whole :data:`BLOCK` s; a query block visits the
global blocks and its chunks' visited neighbours (a block mask cached per layout; a drawn neighbour
picks among eight stacked ones on the device). Blocks are 128 rows as inductor's half-precision
Hopper defaults, tiles set in :data:`CUDA_TILES`. ``mask_mod`` keeps the pattern's pairs,
``score_mod`` adds the bias gathered per (query slot, neighbour, key slot). Global queries go
through :func:`mmvisattn.ops.sliding_chunk.global_rows`.

A key visited twice (cyclic wrapping on small grids) is refused, as the dense form does. On CPU
FlexAttention runs forward only, eagerly; on CUDA compiled per map size (static shapes).

Mixed precision: the inputs' dtype with scores, softmax and bias in float32 inside the kernel.
"""
import warnings
from functools import lru_cache
from importlib.util import find_spec
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.ops import sliding_chunk
from mmvisattn.ops.utils.token_grid import window_grid

HAS_FLEX = find_spec('torch.nn.attention.flex_attention') is not None
# Rows of a block of the block mask: the kernels' tiles (up to 128 rows, by head width, dtype and
# GPU: inductor's flex heuristics, whose backward has one default per case) must divide it
BLOCK = 128
# Shapes (map size x dtype x heads) compiled before dynamo's default limit of 8 would fall back to
# eager FlexAttention, which materialises every score of the layer
COMPILED_SHAPES = 64
# Kernel tiles on CUDA: 64-row forward tiles, 32x64 / 64x32 backward ones, two pipeline stages
CUDA_TILES = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_M1=32, BLOCK_N1=64, BLOCK_M2=64, BLOCK_N2=32,
                  num_stages=2)
NO_NEIGHBOUR = -1
KEYS_TWICE = ('a key is visited twice (cyclic wrapping on a grid of fewer than three chunks), '
              'which no single '
              "mask expresses; expected impl='torch'")


def flex_refusal(device: str, grad: bool, hw_shape: Tuple[int, int], window: int, masking: str,
                 mode) -> Optional[str]:
    """Why the flex path cannot run a call on ``device`` (with a gradient if ``grad``; ``mode`` an
    int or ``'drawn'``), or ``None``."""
    if not HAS_FLEX:
        return ('needs torch.nn.attention.flex_attention (PyTorch >= 2.5); torch '
                f'{torch.__version__} has none')
    if grad and device == 'cpu':
        return 'FlexAttention has no backward on CPU (forward only there; CUDA trains)'
    if not visits_keys_once(hw_shape, window, masking, mode):
        return KEYS_TWICE
    return None


def whole_blocks(rows: int) -> int:
    """``rows`` rounded up to a multiple of :data:`BLOCK`."""
    return -(-rows // BLOCK) * BLOCK


def chunk_rows(window: int) -> int:
    """``P``: rows a chunk's ``w^2`` tokens take, a power of two >= 16 up to 128, else 128 k."""
    tokens = window * window
    if tokens <= BLOCK:
        return max(16, 1 << (tokens - 1).bit_length())
    return whole_blocks(tokens)


def local_rows(grid: Tuple[int, int], window: int) -> int:
    """Rows of the chunk-major local sequence: the chunks' rows padded to whole blocks."""
    return whole_blocks(grid[0] * grid[1] * chunk_rows(window))


def neighbour_table(grid: Tuple[int, int], masking: str, mode: int) -> Optional[Tensor]:
    """Which visited neighbour holds a key chunk, by its offset from the query's: ``(3, 3)`` by
    ``offset + 1`` (``'cyclic'``: the grid modulo); :data:`NO_NEIGHBOUR` for none, ``None`` where
    two neighbours are one chunk."""
    shape = grid if masking == 'cyclic' else (3, 3)
    table = torch.full(shape, NO_NEIGHBOUR, dtype=torch.long)
    for neighbour in sliding_chunk.visited_neighbours(mode):
        dx, dy = sliding_chunk.NEIGHBOURS[neighbour]
        cell = (dx % shape[0], dy % shape[1]) if masking == 'cyclic' else (dx + 1, dy + 1)
        if table[cell] != NO_NEIGHBOUR:
            return None
        table[cell] = neighbour
    return table


def visits_keys_once(hw_shape: Tuple[int, int], window: int, masking: str, mode) -> bool:
    """Whether every allowed (query, key) pair is visited once (else flex refuses the layout)."""
    modes = sliding_chunk.DRAWN if mode == 'drawn' else (mode,)
    grid = window_grid(hw_shape, window)
    return all(neighbour_table(grid, masking, each) is not None for each in modes)


def _kv_blocks(grid: Tuple[int, int], window: int, num_global: int, masking: str,
               mode: int) -> Tuple[Tensor, Tensor]:
    """Visited key blocks per query block: counts ``(Q,)``, indices ``(Q, K)`` (unvisited 0)."""
    rows, cols = grid
    rows_per_chunk, global_blocks = chunk_rows(window), padded_globals(num_global) // BLOCK
    visited = _visited_chunks(grid, masking, mode)
    lists = []
    for block in range(local_rows(grid, window) // BLOCK):
        chunks = range(block * BLOCK // rows_per_chunk,
                       min(rows * cols, -(-(block + 1) * BLOCK // rows_per_chunk)))
        neighbours = {key_chunk for chunk in chunks for key_chunk in visited[chunk]}
        blocks = {global_blocks + row // BLOCK for chunk in neighbours
                  for row in range(chunk * rows_per_chunk, (chunk + 1) * rows_per_chunk,
                                   min(rows_per_chunk, BLOCK))}
        lists.append(list(range(global_blocks)) + sorted(blocks))
    # BlockMask wants a row as long as the key blocks
    width = global_blocks + local_rows(grid, window) // BLOCK
    counts = torch.tensor([len(blocks) for blocks in lists], dtype=torch.int32)
    indices = torch.tensor([blocks + [0] * (width - len(blocks)) for blocks in lists],
                           dtype=torch.int32)
    return counts, indices


def _visited_chunks(grid: Tuple[int, int], masking: str, mode: int) -> List[List[int]]:
    """The key chunks each query chunk visits in ``mode``
    (:func:`mmvisattn.ops.sliding_chunk.neighbour_chunk`)."""
    columns = [sliding_chunk.neighbour_chunk(grid, masking, neighbour)
               for neighbour in sliding_chunk.visited_neighbours(mode)]
    chunk_ids = torch.stack([key_rows * grid[1] + key_cols for key_rows, key_cols, _ in columns],
                            dim=1)
    inside = ~torch.stack([outside for _, _, outside in columns], dim=1)
    return [ids[keep].tolist() for ids, keep in zip(chunk_ids, inside)]


@lru_cache(maxsize=16)
def block_tables(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str, mode,
                 device: torch.device) -> Tuple[Tensor, Tensor, Tensor]:
    """Key-block counts ``(1, 1, Q)``, indices ``(1, 1, Q, K)`` and neighbour tables of ``mode``
    (``'drawn'``: the eight drawn modes' stacked, counts ``(8, 1, 1, Q)``), on ``device``."""
    grid = window_grid(hw_shape, window)
    modes = sliding_chunk.DRAWN if mode == 'drawn' else (mode,)
    parts = [_kv_blocks(grid, window, num_global, masking, each) for each in modes]
    counts = torch.stack([counts for counts, _ in parts])[:, None, None]
    indices = torch.stack([indices for _, indices in parts])[:, None, None]
    neighbours = torch.stack([neighbour_table(grid, masking, each) for each in modes])
    if mode != 'drawn':
        counts, indices, neighbours = counts[0], indices[0], neighbours[0]
    return counts.to(device), indices.to(device), neighbours.to(device)


def pattern_mods(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str,
                 neighbours: Tensor, bias: Optional[Tensor]) -> Tuple[Callable, Optional[Callable]]:
    """``mask_mod`` of the pattern on the chunk-major layout, and ``score_mod`` adding
    :func:`flex_bias` (``None`` without one)."""
    rows, cols = window_grid(hw_shape, window)
    rows_per_chunk, tokens, first_local = (chunk_rows(window), window * window,
                                           padded_globals(num_global),)
    local_entries = rows_per_chunk * len(sliding_chunk.NEIGHBOURS) * rows_per_chunk

    def place(query, key):
        """The key's neighbour index (or NO_NEIGHBOUR), the query's and key's slots and map
        coordinates."""
        query_chunk, key_local = query // rows_per_chunk, (key - first_local).clamp_min(0)
        key_chunk, key_slot = key_local // rows_per_chunk, key_local % rows_per_chunk
        query_slot = query % rows_per_chunk
        offset_x, offset_y = (key_chunk // cols - query_chunk // cols,
                              key_chunk % cols - query_chunk % cols)
        if masking == 'cyclic':
            neighbour = neighbours[offset_x % rows, offset_y % cols]
        else:
            near = (offset_x.abs() <= 1) & (offset_y.abs() <= 1)
            neighbour = torch.where(
                near,
                neighbours[(offset_x + 1).clamp(0, 2), (offset_y + 1).clamp(0, 2)],
                NO_NEIGHBOUR,
            )
        key_xy = (key_chunk // cols * window + key_slot // window,
                  key_chunk % cols * window + key_slot % window)
        query_xy = (query_chunk // cols * window + query_slot // window,
                    query_chunk % cols * window + query_slot % window)
        return neighbour, query_slot, key_slot, query_xy, key_xy

    def mask_mod(batch, head, query, key):
        neighbour, _, key_slot, query_xy, key_xy = place(query, key)
        local = (
            (key_slot < tokens)
            & (key_xy[0] < hw_shape[0])
            & (key_xy[1] < hw_shape[1])
            & (neighbour >= 0)
        )
        if masking == 'exact':
            local = (
                local
                & ((key_xy[0] - query_xy[0]).abs() <= window)
                & ((key_xy[1] - query_xy[1]).abs() <= window)
            )
        return torch.where(key >= first_local, local, key < num_global)

    def score_mod(score, batch, head, query, key):
        neighbour, query_slot, key_slot, _, _ = place(query, key)
        slot = (query_slot * len(sliding_chunk.NEIGHBOURS)
                + neighbour.clamp_min(0)) * rows_per_chunk + key_slot
        return score + bias[head, torch.where(key >= first_local, slot, local_entries + key)]

    return mask_mod, (score_mod if bias is not None else None)


def padded_globals(num_global: int) -> int:
    """Rows the global keys take ahead of the local ones: whole blocks."""
    return whole_blocks(num_global)


@lru_cache(maxsize=16)
def _all_relative_index(window: int, device: torch.device) -> Tensor:
    return sliding_chunk.relative_index(window,
                                        tuple(range(len(sliding_chunk.NEIGHBOURS)))).to(device)


def flex_bias(rel_pos: Optional[Sequence[Optional[Tensor]]], window: int, num_global: int,
              heads: int) -> Optional[Tensor]:
    """The bias as ``score_mod`` reads it, float32 ``(heads, P * 9 * P + G_padded)``, per (query
    slot, neighbour, key slot) then per global key (fewer colliding atomic adds than the table's);
    ``None`` without one."""
    if rel_pos is None or rel_pos[0] is None:
        return None
    table, tokens, rows_per_chunk = rel_pos[0].float(), window * window, chunk_rows(window)
    neighbours = len(sliding_chunk.NEIGHBOURS)
    slots = table[_all_relative_index(window, table.device).view(-1)].view(
        tokens, neighbours, tokens, heads
    )
    pad = rows_per_chunk - tokens
    local = F.pad(slots.permute(3, 0, 1, 2), (0, pad, 0, 0, 0, pad)).flatten(1)
    if num_global == 0:
        return local
    to_global = F.pad(rel_pos[1][1].float(), (0, padded_globals(num_global) - num_global))
    return torch.cat([local, to_global], dim=1)


def chunk_major(x: Tensor, hw_shape: Sequence[int], window: int, num_global: int,
                with_globals: bool) -> Tensor:
    """``(B, H, G + h*w, d)`` -> ``(B, H, [G_padded +] L, d)``: the map chunk by chunk, chunks
    padded to ``P`` rows, globals first if asked."""
    batch, heads, _, dims = x.shape
    chunks = sliding_chunk.to_chunks(x[:, :, num_global:], hw_shape, window)
    chunks = F.pad(chunks,
                   (0, 0, 0, chunk_rows(window) - window * window)).view(batch, heads, -1, dims)
    chunks = F.pad(chunks,
                   (0, 0, 0, local_rows(window_grid(hw_shape, window), window) - chunks.shape[2]))
    if not with_globals or num_global == 0:
        return chunks
    globals_ = F.pad(x[:, :, :num_global], (0, 0, 0, padded_globals(num_global) - num_global))
    return torch.cat([globals_, chunks], dim=2)


@lru_cache(maxsize=16)
def sequence_padding(hw_shape: Tuple[int, int], window: int, num_global: int,
                     device: torch.device) -> Tensor:
    """``(T,)``, true at the rows of the chunk-major key sequence that hold no token."""
    grid = window_grid(hw_shape, window)
    row = torch.arange(local_rows(grid, window))
    chunk, slot = row // chunk_rows(window), row % chunk_rows(window)
    x, y = chunk // grid[1] * window + slot // window, chunk % grid[1] * window + slot % window
    # past the last chunk: x >= h
    local = (slot >= window * window) | (x >= hw_shape[0]) | (y >= hw_shape[1])
    globals_ = torch.arange(padded_globals(num_global)) >= num_global
    return torch.cat([globals_, local]).to(device)


@lru_cache(maxsize=1)
def _compiled_flex() -> Callable:
    from torch.nn.attention.flex_attention import flex_attention
    # symbolic shapes leave the template no kernel choice
    return torch.compile(flex_attention, dynamic=False)


def run_flex(q: Tensor, k: Tensor, v: Tensor, score_mod: Optional[Callable], block_mask,
             scale: float) -> Tensor:
    """FlexAttention: traced inside a compiled graph, compiled on CUDA, eager forward on CPU."""
    from torch.nn.attention.flex_attention import flex_attention
    tiles = CUDA_TILES if q.device.type == 'cuda' else None
    if torch.compiler.is_compiling():
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                              kernel_options=tiles)
    if q.device.type == 'cuda':
        with torch._dynamo.config.patch(recompile_limit=COMPILED_SHAPES):
            return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                    scale=scale, kernel_options=tiles)
    with warnings.catch_warnings():  # eager on purpose: a forward on CPU, for inference and tests
        warnings.filterwarnings('ignore', message='.*flex_attention called without torch.compile')
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


@lru_cache(maxsize=16)
def _fixed_block_mask(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str,
                      mode: int, device: torch.device):
    counts, indices, neighbours = block_tables(hw_shape, window, num_global, masking, mode, device)
    return _block_mask(hw_shape, window, num_global, counts, indices, neighbours,
                       masking), neighbours


def _block_mask(hw_shape: Tuple[int, int], window: int, num_global: int, counts: Tensor,
                indices: Tensor, neighbours: Tensor, masking: str):
    from torch.nn.attention.flex_attention import BlockMask
    queries = local_rows(window_grid(hw_shape, window), window)
    mask_mod, _ = pattern_mods(hw_shape, window, num_global, masking, neighbours, None)
    return BlockMask.from_kv_blocks(counts, indices, BLOCK_SIZE=BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(queries, queries + padded_globals(num_global)))


def pattern_block_mask(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str,
                       mode: sliding_chunk.Mode, device: torch.device):
    """The block mask of the pattern and its neighbour table: cached for a fixed mode; for a drawn
    one, the drawn mode's tables picked on the device (nothing read back)."""
    if not sliding_chunk.is_drawn(mode):
        return _fixed_block_mask(hw_shape, window, num_global, masking, mode, device)
    counts, indices, neighbours = (
        sliding_chunk.pick_drawn(table, mode)
        for table in block_tables(hw_shape, window, num_global, masking, 'drawn', device)
    )
    return _block_mask(hw_shape, window, num_global, counts, indices, neighbours,
                       masking), neighbours


def sliding_chunk_attention_flex(q: Tensor, k: Tensor, v: Tensor, hw_shape: Tuple[int, int],
                                 window: int,
                                 num_global: int, masking: str, mode: sliding_chunk.Mode,
                                 rel_pos: Optional[Sequence[Optional[Tensor]]],
                                 scale: float) -> Tensor:
    """Same contract as :func:`mmvisattn.ops.sliding_chunk.sliding_chunk_attention` (arguments
    checked there); refused in one line where :func:`flex_refusal` says why."""
    reason = flex_refusal(q.device.type, torch.is_grad_enabled() and q.requires_grad, hw_shape,
                          window, masking, 'drawn' if sliding_chunk.is_drawn(mode) else mode)
    if reason is not None:
        raise ValueError(f'sliding_chunk_attention_flex: {reason}')
    batch, heads = q.shape[:2]
    block_mask, neighbours = pattern_block_mask(hw_shape, window, num_global, masking, mode,
                                                q.device)
    bias = flex_bias(rel_pos, window, num_global, heads)
    _, score_mod = pattern_mods(hw_shape, window, num_global, masking, neighbours, bias)
    keys = chunk_major(k, hw_shape, window, num_global, with_globals=True)
    values = chunk_major(v, hw_shape, window, num_global, with_globals=True)
    out = run_flex(chunk_major(q, hw_shape, window, num_global, with_globals=False), keys, values,
                   score_mod, block_mask, scale)
    rows, cols = window_grid(hw_shape, window)
    rows_per_chunk, tokens = chunk_rows(window), window * window
    chunks = out[:, :, : rows * cols * rows_per_chunk].reshape(
        batch * heads, rows * cols, rows_per_chunk, -1
    )
    local = sliding_chunk.from_chunks(chunks[:, :, :tokens], batch, hw_shape, window)
    if num_global == 0:
        return local
    glob = sliding_chunk.global_rows(q[:, :, :num_global] * scale, keys, values, rel_pos,
                       sequence_padding(hw_shape, window, num_global, q.device))
    return torch.cat([glob.to(local.dtype), local], dim=2)
