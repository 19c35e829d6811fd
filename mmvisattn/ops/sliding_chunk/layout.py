"""Where each query chunk looks: the key slots of the sliding-chunk form (arXiv:2103.15358, App. C).

The zero-padded map is cut into ``w x w`` chunks; a chunk's queries share one list of key *slots*:
the ``G`` global tokens, then ``w^2`` per neighbour chunk the mode visits, in the official order
(-1,-1), (-1,0), (-1,1), (0,-1), (0,0), (0,1), (1,-1), (1,0), (1,1). Slots index a flat key table
``[globals, padded map, one zero row]``; the masking decides which a query may use. The reference
builds its mask independently.

Tables are cached per (map, window, mode, device), so a step reads nothing back; a neighbour drawn
on the device (:data:`DRAWN`) picks its tables by ``index_select``.
"""
from functools import lru_cache
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import float32_math
from ..utils.token_grid import from_windows, to_windows, window_grid

MASKINGS = ('chunk', 'exact', 'cyclic')
MODES = tuple(range(-1, 9))
DRAWN = tuple(range(1, 9))  # the modes random shifting draws from, one neighbour each
Mode = Union[int, Tensor]  # an int of MODES, or a 0-dim integer tensor holding one of DRAWN
NEIGHBOURS = tuple((dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1))
CENTRE = 4


def visited_neighbours(mode: int) -> Tuple[int, ...]:
    """Indices into :data:`NEIGHBOURS` that a chunk attends to in ``mode`` (-1, 0 or 1..8)."""
    if mode == 0:
        return tuple(range(9))
    if mode == -1:
        return (CENTRE,)
    return CENTRE, mode - 1 if mode <= 4 else mode


def is_drawn(mode: Mode) -> bool:
    """Whether ``mode`` is a neighbour drawn on the device (random shifting)."""
    return isinstance(mode, Tensor)


def pick_drawn(stacked: Tensor, mode: Tensor) -> Tensor:
    """The entry of drawn ``mode`` (1..8) of tables stacked over :data:`DRAWN`, picked on device."""
    return stacked.index_select(0, (mode - 1).view(1))[0]


def relative_index(window: int, offsets: Sequence[int]) -> Tensor:
    """``(w^2, len(offsets) * w^2)`` indices into the ``(4w-1)^2`` relative-position table."""
    inner = torch.arange(window)
    qx, qy = inner.repeat_interleave(window), inner.repeat(window)
    side = 4 * window - 1
    blocks = []
    for offset in offsets:
        dx, dy = NEIGHBOURS[offset]
        rel_x = qx[:, None] - (dx * window + qx[None, :]) + 2 * window - 1
        rel_y = qy[:, None] - (dy * window + qy[None, :]) + 2 * window - 1
        blocks.append(rel_x * side + rel_y)
    return torch.cat(blocks, dim=1)


@lru_cache(maxsize=64)
def _relative_index_on(window: int, mode: int, device: torch.device) -> Tensor:
    return relative_index(window, visited_neighbours(mode)).to(device)


@lru_cache(maxsize=16)
def _drawn_relative_index(window: int, device: torch.device) -> Tensor:
    return torch.stack([relative_index(window,
                                       visited_neighbours(mode)) for mode in DRAWN]).to(device)


def slot_tables(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str, mode: Mode,
                device: torch.device) -> Tuple[Tensor, Tensor]:
    """Key-table indices ``(C, S)`` and invalid-slot mask ``(C, 1 or w^2, S)`` of every chunk, on
    ``device`` (:func:`mode_slot_tables`; a drawn ``mode`` picks its tables on the device)."""
    if is_drawn(mode):
        index, invalid = _drawn_slot_tables(hw_shape, window, num_global, masking, device)
        return pick_drawn(index, mode), pick_drawn(invalid, mode)
    return mode_slot_tables(hw_shape, window, num_global, masking, mode, device)


@lru_cache(maxsize=16)
def _drawn_slot_tables(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str,
                       device: torch.device) -> Tuple[Tensor, Tensor]:
    tables = [mode_slot_tables(hw_shape, window, num_global, masking, mode,
                               torch.device('cpu')) for mode in DRAWN]
    return tuple(torch.stack(parts).to(device) for parts in zip(*tables))


class ChunkGroup(NamedTuple):
    """Chunks whose live slots are the same columns: border chunks lose the neighbours outside the
    map, so computing live columns only saves a third of the work on a 4x4 chunk grid."""
    chunks: Optional[Tensor]  # (c,) chunk numbers; None: every chunk, in order
    columns: Optional[Tensor]  # (s,) the live slot columns; None: all of them
    index: Tensor  # (c, s) table rows of the live slots
    invalid: Optional[Tensor]  # (c, 1 or w^2, s) masked slots among them; None: none is


# of the layout alone: torch.unique's data-dependent shapes break graphs
@torch.compiler.assume_constant_result
def chunk_groups(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str, mode: int,
                 device: torch.device) -> Tuple[ChunkGroup, ...]:
    """The chunks grouped by their live columns, found on the host from the layout alone and cached
    on ``device``."""
    return _chunk_groups(hw_shape, window, num_global, masking, mode, device)


@lru_cache(maxsize=64)
def _chunk_groups(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str, mode: int,
                  device: torch.device) -> Tuple[ChunkGroup, ...]:
    index, invalid = mode_slot_tables(hw_shape, window, num_global, masking, mode,
                                      torch.device('cpu'))
    dead = invalid.all(dim=1)
    patterns, group_of = torch.unique(dead, dim=0, return_inverse=True)
    groups = []
    for number, pattern in enumerate(patterns):
        chunks = (group_of == number).nonzero().squeeze(1)
        columns = (~pattern).nonzero().squeeze(1)
        masked = invalid.index_select(0, chunks).index_select(2, columns)
        groups.append(ChunkGroup(None if len(chunks) == len(dead) else chunks.to(device),
                                 None if len(columns) == dead.shape[1] else columns.to(device),
                                 index.index_select(0, chunks).index_select(1, columns).to(device),
                                 masked.to(device) if bool(masked.any()) else None))
    return tuple(groups)


def chunk_coordinates(grid: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
    """``(C,)`` row and column of every chunk of the ``(rows, cols)`` chunk grid, row-major."""
    rows, cols = grid
    return torch.arange(rows).repeat_interleave(cols), torch.arange(cols).repeat(rows)


def neighbour_chunk(grid: Tuple[int, int], masking: str,
                    neighbour: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(C,)`` row and column of every chunk's ``neighbour`` (an index into :data:`NEIGHBOURS`),
    wrapped around the grid for ``'cyclic'``, and whether it lies outside the grid (never, when
    wrapped)."""
    rows, cols = grid
    chunk_rows, chunk_cols = chunk_coordinates(grid)
    dx, dy = NEIGHBOURS[neighbour]
    key_rows, key_cols = chunk_rows + dx, chunk_cols + dy
    if masking == 'cyclic':
        return key_rows % rows, key_cols % cols, torch.zeros_like(key_rows, dtype=torch.bool)
    return (key_rows, key_cols,
            (key_rows < 0) | (key_rows >= rows) | (key_cols < 0) | (key_cols >= cols),)


@lru_cache(maxsize=64)
def mode_slot_tables(hw_shape: Tuple[int, int], window: int, num_global: int, masking: str,
                     mode: int, device: torch.device) -> Tuple[Tensor, Tensor]:
    """Key-table indices ``(C, S)`` and invalid-slot mask ``(C, 1 or w^2, S)`` of every chunk, ``S =
    G + len(visited) * w^2``, masked slots at the zero row. ``'chunk'`` drops neighbours outside the
    grid and padding, ``'cyclic'`` wraps the grid, ``'exact'`` also drops keys farther than ``w``
    along either axis.
    """
    height, width = hw_shape
    rows, cols = window_grid(hw_shape, window)
    padded = rows * window * cols * window
    inner = torch.arange(window)
    kx, ky = inner.repeat_interleave(window), inner.repeat(window)
    cx, cy = (coordinate[:, None, None] for coordinate in chunk_coordinates((rows, cols)))
    indices, invalid = [], []
    for offset in visited_neighbours(mode):
        key_cx, key_cy, outside = neighbour_chunk((rows, cols), masking, offset)
        key_cx, key_cy, outside = (
            key_cx[:, None, None],
            key_cy[:, None, None],
            outside[:, None, None],
        )
        key_x, key_y = key_cx * window + kx, key_cy * window + ky  # (C, 1, w^2)
        bad = outside | (key_x >= height) | (key_y >= width)
        indices.append(torch.where(bad, padded, key_x * cols * window + key_y)[:, 0] + num_global)
        if masking == 'exact':
            query_x = (cx * window + kx).transpose(1, 2)  # (C, w^2, 1)
            query_y = (cy * window + ky).transpose(1, 2)
            bad = bad | ((key_x - query_x).abs() > window) | ((key_y - query_y).abs() > window)
        invalid.append(bad)
    invalid = torch.cat(invalid, dim=-1)
    invalid = F.pad(invalid, (num_global, 0), value=False)
    glob = torch.arange(num_global).expand(rows * cols, -1)
    index = torch.cat([glob, torch.cat(indices, dim=-1)], dim=-1)
    return index.to(device), invalid.to(device)


def to_chunks(x: Tensor, hw_shape: Sequence[int], window: int) -> Tensor:
    """``(B, H, h*w, d)`` local tokens -> ``(B*H, C, w^2, d)`` zero-padded chunks."""
    return to_windows(x.flatten(0, 1), hw_shape, window)


def from_chunks(x: Tensor, batch: int, hw_shape: Sequence[int], window: int) -> Tensor:
    """Inverse of :func:`to_chunks`: ``(B*H, C, w^2, d)`` -> ``(B, H, h*w, d)``, padding cropped."""
    return from_windows(x, hw_shape,
                        window).reshape(batch, -1, hw_shape[0] * hw_shape[1], x.shape[-1])


def key_table(x: Tensor, hw_shape: Sequence[int], window: int, num_global: int) -> Tensor:
    """``(B, H, G + h*w, d)`` -> ``(B*H, G + padded + 1, d)``: globals, padded map, zero row."""
    batch, heads, _, dims = x.shape
    local = to_chunks(x[:, :, num_global:], hw_shape, window)
    rows, cols = window_grid(hw_shape, window)
    local = local.view(batch * heads, rows, cols, window, window, dims).transpose(2, 3)
    parts = [x[:, :, :num_global].reshape(batch * heads, num_global, dims),
             local.reshape(batch * heads, -1, dims), x.new_zeros(batch * heads, 1, dims)]
    return torch.cat(parts, dim=1)


def slot_bias(rel_pos: Optional[Sequence[Optional[Tensor]]], window: int, num_global: int,
              mode: Mode, heads: int) -> Optional[Tensor]:
    """``(heads, w^2, S)`` relative-position bias of the local queries' slots, or ``None``."""
    if rel_pos is None or rel_pos[0] is None:
        return None
    table, local_to_global = rel_pos[0], rel_pos[1]
    if is_drawn(mode):
        index = pick_drawn(_drawn_relative_index(window, table.device), mode)
    else:
        index = _relative_index_on(window, mode, table.device)
    local = table[index.view(-1)].view(window * window, -1, heads).permute(2, 0, 1)
    if num_global == 0:
        return local
    to_global = local_to_global[1][:, None, :].expand(-1, window * window, -1)
    return torch.cat([to_global, local], dim=-1)


@lru_cache(maxsize=64)
def table_padding(hw_shape: Tuple[int, int], window: int, num_global: int,
                  device: torch.device) -> Tensor:
    """``(T,)``, true at the rows of :func:`key_table` that hold no token: the map's zero padding
    and the closing zero row."""
    rows, cols = window_grid(hw_shape, window)
    outside = (torch.arange(rows * window)[:, None] >= hw_shape[0]) | (
        torch.arange(cols * window) >= hw_shape[1]
    )
    return torch.cat([outside.new_zeros(num_global), outside.flatten(),
                      outside.new_ones(1)]).to(device)


@float32_math  # half logits of large inputs overflow before the softmax
def global_rows(q_global: Tensor, k: Tensor, v: Tensor,
                rel_pos: Optional[Sequence[Optional[Tensor]]],
                padding: Optional[Tensor] = None) -> Tensor:
    """The ``G`` scaled global queries ``(B, H, G, d)`` attend to every token of ``k``, ``v``
    (globals first, the rest in any order, ``padding`` marking empty rows: :func:`table_padding`) ->
    ``(B, H, G, d)``.
    """
    scores = q_global @ k.transpose(-1, -2)
    if rel_pos is not None and rel_pos[1] is not None:
        tokens = k.shape[2] - q_global.shape[2]
        bias = torch.cat([rel_pos[2], rel_pos[1][0][..., None].expand(-1, -1, tokens)], dim=-1)
        scores = scores + bias
    if padding is not None:
        scores = scores.masked_fill(padding, float('-inf'))
    return scores.softmax(dim=-1) @ v
